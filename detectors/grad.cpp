// Detector `grad`: flags non-finite local gradients in the fused pass that packs the all-reduce
// buffer. The detector and its keys live here.

#include "detectors/detector.h"
#include "harness/common/cause.h"
#include "harness/scenario/detector_registry.h"

namespace nanchaos::detect {

using harness::Cause;
namespace {

// Reads the fused pack-and-scan's flags (detectors/core/fused_scan.h): no extra pass over
// gradients.
class GradDetector final : public DetectorImpl<GradDetector> {
 public:
  GradDetector() : DetectorImpl("grad") {}
  Hook hook() const override { return Hook::kGradients; }
  std::optional<Finding> check(const StepView& v) override {
    const auto& st = *v.grad_stats;
    if (!st.any_nonfinite()) return std::nullopt;
    // Layer: the first parameter in backward order with a non-finite gradient.
    return Finding{v.grad_names->at(size_t(st.first_nonfinite)), to_string(Cause::kGradient),
                   st.first_nonfinite};
  }
};

using harness::AttributionNames;
using harness::Decision;
using harness::DetectorInfo;

DetectorInfo grad_detector() {
  DetectorInfo info;
  info.name = "grad";
  info.doc = "flags non-finite local gradients in the fused pass that packs the all-reduce buffer";
  info.make = [](const harness::StackConfig& s) -> std::unique_ptr<Detector> {
    return std::make_unique<GradDetector>();
  };
  info.order = 70;  // the fused gradient scan
  info.presets = harness::kPresetDefault | harness::kPresetNaive;
  info.column = harness::kGradIdx;
  info.replay = true;     // the replay's reproduced test
  info.found_inf = true;  // under fp16 a non-finite gradient is the scaler's found_inf
  info.attribute = [](const double* row, const AttributionNames& n, Decision* d) {
    d->cause = to_string(Cause::kGradient);
    d->layer = n.backward.at(size_t(row[harness::kGradIdx]));
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(grad, grad_detector());

}  // namespace nanchaos::detect
