// Detector `loss`: flags a non-finite local loss.
// The detector and its keys live here.
#include <cmath>

#include "detectors/detector.h"
#include "harness/common/cause.h"
#include "harness/scenario/detector_registry.h"

namespace nanchaos::detect {

using harness::Cause;
namespace {

class LossDetector final : public DetectorImpl<LossDetector> {
 public:
  LossDetector() : DetectorImpl("loss") {}
  Hook hook() const override { return Hook::kLoss; }
  std::optional<Finding> check(const StepView& v) override {
    if (std::isfinite(v.loss->item<double>())) return std::nullopt;
    // Attribution (DESIGN.md): finite logits and a non-finite loss is the loss math's fault;
    // non-finite logits mean an activation went first (the replay localizes it).
    const bool logits_finite = torch::isfinite(*v.logits).all().item<bool>();
    if (logits_finite) return Finding{"loss", to_string(Cause::kLossMath), 1};
    return Finding{"", to_string(Cause::kActivation), 0};
  }
};

using harness::AttributionNames;
using harness::Decision;
using harness::DetectorInfo;

DetectorInfo loss_detector() {
  DetectorInfo info;
  info.name = "loss";
  info.doc = "flags a non-finite local loss";
  info.make = [](const harness::StackConfig& s) -> std::unique_ptr<Detector> {
    return std::make_unique<LossDetector>();
  };
  info.order = 50;
  info.presets = harness::kPresetDefault | harness::kPresetNaive;
  info.column = harness::kLogitsFinite;
  info.replay = true;          // the replay's reproduced test
  info.localizes_loss = true;  // code 0: non-finite logits
  info.attribute = [](const double* row, const AttributionNames& n, Decision* d) {
    const bool logits_finite = row[harness::kLogitsFinite] > 0.5;
    d->cause = logits_finite ? to_string(Cause::kLossMath) : to_string(Cause::kActivation);
    d->layer = logits_finite ? "loss" : "";
    // Non-finite logits: the first module whose output went non-finite (the runner's always-on
    // localization), and whether the half rounding made it so (DESIGN.md fp16_overflow).
    const double idx = row[harness::kModuleIdx];
    if (!logits_finite && idx >= 0 && size_t(idx) < n.modules.size()) {
      d->layer = n.modules[size_t(idx)];
      if (row[harness::kModuleOverflow] > 0.5) d->cause = to_string(Cause::kFp16Overflow);
    }
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(loss, loss_detector());

}  // namespace nanchaos::detect
