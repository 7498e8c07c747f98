// Build without CUDA or NCCL: the device entry points exist and say so.
#include <stdexcept>
#include <string>

#include "harness/common/cuda_device.h"

namespace nanchaos::harness {

void gpu_not_built(const char* what) {
  throw std::runtime_error(
      std::string(what) + ": not implemented in this build (nanchaos was built without CUDA/NCCL)");
}

int cuda_device_count(std::string* why) {
  if (why) *why = "nanchaos was built without CUDA/NCCL";
  return 0;
}
void cuda_set_device(int) { gpu_not_built("cuda_set_device"); }
void cuda_enqueue_spin(void*, int64_t) { gpu_not_built("cuda_enqueue_spin"); }
void cuda_release_spins() {}

}  // namespace nanchaos::harness
