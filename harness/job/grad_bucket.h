// GradBucket: a built-in job's gradients as views into one flat fp32 bucket, in backward order
// (DDP's gradient_as_bucket_view), and the gradient all-reduce's wire buffer.
//
// With an fp32 wire and post-division the bucket IS the all-reduce buffer, so the always-on
// check is one read pass with no pack copy. Otherwise the scan also casts (fp16/bf16 wire) and
// pre-divides (grad_predivide: x 1/world before the SUM) into a separate wire buffer, host memory
// on the CPU path, a device tensor on CUDA. The scans are the fused ones of
// detectors/core/fused_scan.h (CPU) and cuda_scan.h (one launch, one host sync).
// Thread-safety: the rank's one thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "detectors/core/cuda_scan.h"
#include "detectors/core/fused_scan.h"
#include "harness/common/dtype.h"
#include "harness/common/wire.h"

namespace nanchaos::harness {

class GradBucket {
 public:
  /// Makes every parameter's gradient a view into the bucket. `params`: backward order, fp32,
  /// on `device`. `wire`: the all-reduce's element type; `predivide`: scale by 1/world before
  /// the SUM instead of after.
  GradBucket(const std::vector<torch::Tensor>& params, DType wire, bool predivide, int world,
             torch::Device device);
  ~GradBucket();

  WireType wire() const { return wire_; }
  /// The wire's element type for the communicator.
  DType elem() const;
  size_t count() const { return size_t(bucket_.numel()); }
  /// x 1/world before the SUM (grad_predivide), else 1.
  float pre_scale() const { return pre_scale_; }

  /// Zeroes the bucket; never Optimizer::zero_grad, which may reset grads to undefined (2.x).
  void zero() { bucket_.zero_(); }
  /// Backward accumulates into a defined grad in place; should a LibTorch version ever replace
  /// a parameter's grad tensor, copies it back into the bucket and re-aliases it.
  void realias();

  /// The local scan (and the cast / pre-divide into the wire buffer when not in place).
  /// `needed` false on the CPU in-place path skips the read: preset `none` is plain training.
  ScanStats scan_local(bool needed);
  /// A read-only scan of the local gradients (the replay's): never writes the wire buffer, so
  /// the step's packed send buffer survives a replay.
  ScanStats scan_only();
  /// The send buffer (a host pointer on the CPU path, a device pointer on CUDA). `edit(buf,
  /// count, wire)` may change it first (the `comm` fault); with `stage` (CUDA) it edits a host
  /// copy that is then copied back.
  void* send_buffer(const std::function<void(void*, size_t, WireType)>& edit, bool stage);
  /// After the SUM: back into fp32 gradients, x 1/world unless pre-divided and / `loss_scale`
  /// (1 without a scaler), fused with the scan of the reduced values.
  ScanStats scan_reduced(double loss_scale);

 private:
  std::vector<ConstSpan> grad_spans() const;  // every parameter's gradient, backward order

  std::vector<torch::Tensor> params_;  // backward order
  torch::Tensor bucket_;               // every gradient, flat, backward order
  WireType wire_ = WireType::kFp32;
  bool in_place_ = true;
  bool predivide_ = false;
  int world_ = 1;
  float pre_scale_ = 1.0f;
  bool cuda_ = false;
  std::vector<uint8_t> wire_buf_;  // cast / pre-divided send buffer (CPU, not in place)
  torch::Tensor wire_t_;           // the same on the device (CUDA)
  std::unique_ptr<CudaScanner> gpu_scan_;
};

}  // namespace nanchaos::harness
