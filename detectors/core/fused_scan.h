// Fused gradient scan: the always-on detection pass that rides on the all-reduce packing.
//
// Each gradient byte is read exactly once, in the loop that packs the gradients into the
// all-reduce buffer; the same loop computes per-tensor non-finite flags, the squared L2 norm (in
// double) and max |x|. When the gradients already live in the all-reduce buffer (DDP's
// `gradient_as_bucket_view`: every gradient a view into one flat fp32 bucket) and the wire is fp32
// with no pre-division, nothing needs packing: `scan` is then a pure read pass over the bucket and
// `scale_and_scan` the in-place post-reduce pass (x *= 1/world plus the same checks). There is no
// per-tensor `isfinite(g).all().item()` (a kernel and a host sync per parameter) anywhere on the
// clean path; see DESIGN.md "Performance principles".
//
// Torch-free: callers pass raw pointers (`tensor.data_ptr<float>()`, `numel()`), so the scan can be
// tested and benchmarked without LibTorch.
//
// Contract:
//   - All functions are pure computations on caller-owned memory; they do not allocate except to
//     size `ScanStats::nonfinite`, never block and never throw. Any thread may call them; calls on
//     disjoint buffers may run concurrently.
//   - Input spans must not overlap the output buffer (scale_and_scan works in place on its spans;
//     its spans must not overlap each other). Spans with n == 0 are allowed (data may be null
//     then).
//   - Every function computes its stats with the same chunked kernel, so the same fp32 values give
//     bit-identical ScanStats whichever function scanned them (e.g. scan(grads) ==
//     pack_and_scan(grads, ...) stats; scale_and_scan(g, s) == unpack_and_scan(concat(g), kFp32,
//     s, ...) stats and outputs).
//   - Buffers need no particular alignment.
//
// Example (pre-division by world size, fp16 wire):
//   std::vector<ConstSpan> grads = {{w.data_ptr<float>(), w.numel()}, ...};
//   std::vector<uint16_t> wire(total);
//   ScanStats pre;
//   pack_and_scan(grads, wire.data(), WireType::kFp16, 1.0f / world, &pre);
//   if (pre.any_nonfinite()) report(pre.first_nonfinite);
//   ... all-reduce `wire` with wire_sum as the reduction ...
//   ScanStats post;
//   unpack_and_scan(wire.data(), WireType::kFp16, 1.0f, outs, &post);
//
// Example (gradients as views of the fp32 bucket, post-division):
//   ScanStats pre;
//   scan(grads, &pre);                       // reads the bucket once, writes nothing
//   ... all-reduce the bucket (sum) in place ...
//   ScanStats post;
//   scale_and_scan(mut_grads, 1.0f / world, &post);
//
// Caveats: flags, norm and max of pack_and_scan describe the ORIGINAL fp32 gradients; an overflow
// created by the scale or the fp16 conversion only shows up in the post-reduce scan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "harness/common/wire.h"

namespace nanchaos::harness {

/// Result of one scan over a list of tensors.
struct ScanStats {
  /// One entry per tensor: 1 if the tensor holds a NaN or ±inf, else 0.
  std::vector<uint8_t> nonfinite;
  /// Lowest index of a flagged tensor, -1 if none.
  int first_nonfinite = -1;
  /// Sum of squares over the finite elements, accumulated in double (each square of an fp32 value
  /// is exact in double, so 3e38^2 is representable).
  double sq_norm = 0;
  /// One entry per tensor (same order as `nonfinite`): the sum of squares of that tensor's
  /// finite elements, in double. sq_norm is their sum in tensor order. Costs one double per
  /// tensor; `grad_norm_spike` keeps a per-parameter history of these to name the parameter.
  std::vector<double> sq_norms;
  /// Max |x| over the finite elements (0 if there are none).
  float max_abs = 0;

  bool any_nonfinite() const { return first_nonfinite >= 0; }
};

struct ConstSpan {
  const float* data;
  size_t n;
};

struct MutSpan {
  float* data;
  size_t n;
};

/// Packs `grads` back to back into `out` (sum of n elements of `wire` type), each element
/// multiplied by `scale` first (1/world for pre-division, 1 otherwise), and scans the ORIGINAL fp32
/// values into `*stats`. With fp32 wire and scale == 1 the copy is bit-exact (NaN payloads
/// included). fp16 / bf16 conversion rounds to nearest even, overflows to ±inf (65519.99 -> 65504,
/// 65520 -> inf) and keeps NaN a NaN (quiet, sign kept).
void pack_and_scan(const std::vector<ConstSpan>& grads, void* out, WireType wire, float scale,
                   ScanStats* stats);

/// The reverse after the all-reduce: converts `in` (wire type) to fp32, multiplies by `scale`
/// (1/world for post-division, 1 otherwise) and writes the values into `out` tensor by tensor; the
/// same pass fills `*stats` from the OUTPUT values (the post-reduce detector).
void unpack_and_scan(const void* in, WireType wire, float scale, const std::vector<MutSpan>& out,
                     ScanStats* stats);

/// Scans `grads` in place (no copy): the fp32 path when the gradients already live in the
/// all-reduce bucket. Same flags/norm/max as pack_and_scan (bit-identical stats for the same
/// values); reads each byte once and writes nothing.
void scan(const std::vector<ConstSpan>& grads, ScanStats* stats);

/// In place after an fp32 all-reduce: x *= scale for every element, flags non-finite (of the
/// scaled values) per tensor, fp64 sq_norm and max_abs of the finite outputs, in one pass. Values
/// and stats are bit-identical to unpack_and_scan of the same values with fp32 wire and the same
/// scale. scale == 1 leaves the memory untouched (a pure read, NaN payloads kept, like the
/// bit-exact copy of unpack_and_scan); otherwise an overflow created by the scale (scale > 1) is
/// flagged, and NaNs come out quiet as from any fp32 multiply.
void scale_and_scan(const std::vector<MutSpan>& grads, float scale, ScanStats* stats);

}  // namespace nanchaos::harness
