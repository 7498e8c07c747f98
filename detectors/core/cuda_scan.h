// Fused gradient scan on the GPU: the CUDA counterpart of fused_scan.h's `scan` and
// `scale_and_scan`, as one multi-tensor pass.
//
// The host cuts every tensor into chunks of at most `chunk_elems` elements (plan_scan_chunks, a
// pure function tested on CPU); one kernel launch walks the whole chunk table, so a step costs one
// memset of the result block, one launch, one async copy of the result block to pinned host
// memory and one stream sync, whatever the number of tensors (no per-tensor
// `isfinite(g).all().item()`, which is a launch and a host sync per parameter).
//
// Results contract (mirrors fused_scan.h): per-tensor non-finite flags (NaN or +-inf), the lowest
// flagged index, max |x| over the finite elements, exact; the squared L2 norm of the finite
// elements accumulated in double, equal to the CPU scan's up to double rounding (the summation
// order differs: per thread, then per block, then atomically across blocks).
//
// Torch-free: callers pass raw device pointers (`tensor.data_ptr<float>()` of CUDA fp32
// tensors) and the CUDA stream as an opaque pointer (`nullptr` = the legacy default stream,
// LibTorch's default current stream). Device functions exist only when NANCHAOS_WITH_CUDA; in a
// build without CUDA they throw std::runtime_error("... not built with CUDA").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "detectors/core/fused_scan.h"

namespace nanchaos::harness {

/// One work item of the multi-tensor scan: elements [begin, begin + n) of tensor `tensor`.
struct ScanChunk {
  uint32_t tensor;
  uint64_t begin;  ///< element offset inside the tensor
  uint32_t n;      ///< 1 .. chunk_elems elements
  bool operator==(const ScanChunk& o) const {
    return tensor == o.tensor && begin == o.begin && n == o.n;
  }
};

/// Cuts tensors of `sizes` elements into chunks of at most `chunk_elems` (> 0) elements, tensor
/// by tensor, in order; empty tensors get no chunk. Every element is covered exactly once.
/// Throws std::invalid_argument when chunk_elems is 0 or above 2^31, or when there are more than
/// 2^32 - 1 tensors.
std::vector<ScanChunk> plan_scan_chunks(const std::vector<size_t>& sizes, size_t chunk_elems);

/// Elements per chunk used by CudaScanner: 16 Ki floats (64 KiB), so a 36 MB gradient set gives
/// ~550 blocks, enough to fill an H200's 132 SMs several times.
inline constexpr size_t kCudaScanChunk = size_t(1) << 14;

/// The multi-tensor scanner. Keeps the chunk table on the device (rebuilt only when the list of
/// (pointer, size) changes, as with gradients that are views of one bucket) and a pinned result
/// block. Not thread-safe; one per rank. Constructor and methods throw std::runtime_error with
/// the CUDA error string.
class CudaScanner {
 public:
  CudaScanner();
  ~CudaScanner();
  CudaScanner(const CudaScanner&) = delete;
  CudaScanner& operator=(const CudaScanner&) = delete;

  /// Read-only scan of fp32 device tensors `grads` (device pointers), enqueued on `stream`;
  /// returns after the one host sync with `*stats` filled.
  void scan(const std::vector<ConstSpan>& grads, void* stream, ScanStats* stats);

  /// In place: x *= scale on every element (skipped when scale == 1: a pure read), then the same
  /// stats of the scaled values, as fused_scan.h's scale_and_scan.
  void scale_and_scan(const std::vector<MutSpan>& grads, float scale, void* stream,
                      ScanStats* stats);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanchaos::harness
