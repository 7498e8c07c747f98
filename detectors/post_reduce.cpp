// Detector `post_reduce`: flags a non-finite reduced gradient buffer (identical on all ranks).
// The detector and its keys live here.

#include "detectors/detector.h"
#include "harness/common/cause.h"
#include "harness/scenario/detector_registry.h"

namespace nanchaos::detect {

using harness::Cause;
namespace {

// Scans the reduced buffer while unpacking it (detectors/core/fused_scan.h). Caveat: relies on the
// reduced buffer being identical on every rank (an all-reduce's contract), so its decision needs
// no second consensus round.
class PostReduceDetector final : public DetectorImpl<PostReduceDetector> {
 public:
  PostReduceDetector() : DetectorImpl("post_reduce") {}
  Hook hook() const override { return Hook::kPostReduce; }
  std::optional<Finding> check(const StepView& v) override {
    const auto& st = *v.reduce_stats;
    if (!st.any_nonfinite()) return std::nullopt;
    // Every rank was clean before the all-reduce (else the consensus would have acted). If the
    // largest contribution times the world size can leave the wire type's range, the SUM itself
    // overflowed; otherwise the bytes were corrupted on the way.
    double wire_max = 3.4028234663852886e38;
    if (v.wire == harness::WireType::kFp16) wire_max = 65504.0;
    if (v.wire == harness::WireType::kBf16) wire_max = 3.3895313892515355e38;
    const bool overflow = v.global_max_abs * double(v.world) > wire_max;
    return Finding{v.grad_names->at(size_t(st.first_nonfinite)),
                   overflow ? to_string(Cause::kReduceOverflow) : to_string(Cause::kCommCorruption),
                   st.first_nonfinite};
  }
};

using harness::DetectorInfo;

DetectorInfo post_reduce_detector() {
  DetectorInfo info;
  info.name = "post_reduce";
  info.doc = "flags a non-finite reduced gradient buffer (identical on all ranks)";
  info.make = [](const harness::StackConfig& s) -> std::unique_ptr<Detector> {
    return std::make_unique<PostReduceDetector>();
  };
  info.order = 100;  // the reduced buffer, after the gradient all-reduce
  info.presets = harness::kPresetDefault;
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(post_reduce, post_reduce_detector());

}  // namespace nanchaos::detect
