// Build without CUDA or NCCL: the CUDA scanner exists and says so.
#include "detectors/core/cuda_scan.h"
#include "harness/common/cuda_device.h"

namespace nanchaos::harness {

struct CudaScanner::Impl {};
CudaScanner::CudaScanner() { gpu_not_built("CudaScanner"); }
CudaScanner::~CudaScanner() = default;
void CudaScanner::scan(const std::vector<ConstSpan>&, void*, ScanStats*) {
  gpu_not_built("CudaScanner::scan");
}
void CudaScanner::scale_and_scan(const std::vector<MutSpan>&, float, void*, ScanStats*) {
  gpu_not_built("CudaScanner::scale_and_scan");
}

}  // namespace nanchaos::harness
