// Build without CUDA or NCCL: the GPU entry points exist and say so.
#include <stdexcept>
#include <string>

#include "harness/cuda_scan.h"
#include "harness/nccl_communicator.h"

namespace nanchaos::harness {
namespace {
[[noreturn]] void not_built(const char* what) {
  throw std::runtime_error(
      std::string(what) + ": not implemented in this build (nanchaos was built without CUDA/NCCL)");
}
}  // namespace

struct CudaScanner::Impl {};
CudaScanner::CudaScanner() { not_built("CudaScanner"); }
CudaScanner::~CudaScanner() = default;
void CudaScanner::scan(const std::vector<ConstSpan>&, void*, ScanStats*) {
  not_built("CudaScanner::scan");
}
void CudaScanner::scale_and_scan(const std::vector<MutSpan>&, float, void*, ScanStats*) {
  not_built("CudaScanner::scale_and_scan");
}
int cuda_device_count(std::string* why) {
  if (why) *why = "nanchaos was built without CUDA/NCCL";
  return 0;
}
void cuda_set_device(int) { not_built("cuda_set_device"); }
void cuda_enqueue_spin(void*, int64_t) { not_built("cuda_enqueue_spin"); }
void cuda_release_spins() {}
std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions&) {
  not_built("the NCCL communicator");
}

}  // namespace nanchaos::harness
