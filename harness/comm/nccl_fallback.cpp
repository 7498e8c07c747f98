// Build without CUDA or NCCL: the NCCL engine's factory exists and says so.
#include "harness/comm/nccl_communicator.h"
#include "harness/common/cuda_device.h"

namespace nanchaos::harness {

std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions&) {
  gpu_not_built("the NCCL communicator");
}

}  // namespace nanchaos::harness
