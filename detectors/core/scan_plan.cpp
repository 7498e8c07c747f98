// Host-side planning of the multi-tensor CUDA scan (torch-free, CUDA-free: tested on CPU).
#include <limits>
#include <stdexcept>
#include <string>

#include "detectors/core/cuda_scan.h"

namespace nanchaos::harness {

std::vector<ScanChunk> plan_scan_chunks(const std::vector<size_t>& sizes, size_t chunk_elems) {
  if (chunk_elems == 0 || chunk_elems > (size_t(1) << 31)) {
    throw std::invalid_argument("plan_scan_chunks: chunk_elems must be in 1 .. 2^31, got " +
                                std::to_string(chunk_elems));
  }
  if (sizes.size() > std::numeric_limits<uint32_t>::max()) {
    throw std::invalid_argument("plan_scan_chunks: more than 2^32 - 1 tensors");
  }
  size_t total = 0;
  for (size_t n : sizes) total += (n + chunk_elems - 1) / chunk_elems;
  std::vector<ScanChunk> out;
  out.reserve(total);
  for (size_t t = 0; t < sizes.size(); ++t) {
    for (size_t b = 0; b < sizes[t]; b += chunk_elems) {
      const size_t n = sizes[t] - b < chunk_elems ? sizes[t] - b : chunk_elems;
      out.push_back({uint32_t(t), uint64_t(b), uint32_t(n)});
    }
  }
  return out;
}

}  // namespace nanchaos::harness
