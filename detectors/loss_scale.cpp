// Detector `loss_scale`: GradScaler found_inf; the scaler probing its range after a growth is a
// scale_backoff, not a detection.
#include "detectors/detector.h"
#include "harness/common/cause.h"
#include "harness/scenario/detector_registry.h"

namespace nanchaos::detect {

using harness::Cause;
namespace {

// GradScaler's found_inf: any non-finite value in this rank's scaled gradients (read from the fused
// scan's flags, no extra pass). The runner's loss scaler decides from the consensus whether a
// found_inf is the scaler probing its range after a growth (logged as scale_backoff, not a
// detection) or a detection (DESIGN.md: found_inf with every activation finite is fp16_overflow).
class LossScaleDetector final : public DetectorImpl<LossScaleDetector> {
 public:
  LossScaleDetector() : DetectorImpl("loss_scale") {}
  Hook hook() const override { return Hook::kGradients; }
  std::optional<Finding> check(const StepView& v) override {
    if (!v.grad_stats->any_nonfinite()) return std::nullopt;
    return Finding{v.grad_names->at(size_t(v.grad_stats->first_nonfinite)),
                   to_string(Cause::kFp16Overflow), v.grad_stats->first_nonfinite};
  }
};

using harness::AttributionNames;
using harness::Decision;
using harness::DetectorInfo;

DetectorInfo loss_scale_detector() {
  DetectorInfo info;
  info.name = "loss_scale";
  info.doc =
      "GradScaler found_inf; the scaler probing its range after a growth is a scale_backoff, not a "
      "detection";
  info.make = [](const harness::StackConfig&) -> std::unique_ptr<Detector> {
    return std::make_unique<LossScaleDetector>();
  };
  info.order = 90;
  info.presets = harness::kPresetDefault;
  info.preset_fp16_only = true;  // bf16 has fp32's exponent range: only fp16 needs a scaler
  info.column = harness::kGradIdx;
  info.found_inf = true;
  info.reports_found_inf = true;  // a grad decision under fp16 is the scaler's found_inf
  info.attribute = [](const double* row, const AttributionNames& n, Decision* d) {
    // found_inf (DESIGN.md): with every activation finite, an fp16 overflow in backward.
    d->cause = to_string(Cause::kFp16Overflow);
    d->layer = n.backward.at(size_t(row[harness::kGradIdx]));
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(loss_scale, loss_scale_detector());

}  // namespace nanchaos::detect
