// Detector `loss`: flags a non-finite local loss.
// The detector and its keys live here.
#include <cmath>

#include "detectors/detector.h"
#include "harness/registry.h"

namespace nanchaos::detect {
namespace {

class LossDetector final : public Detector {
 public:
  LossDetector() : Detector("loss") {}
  Hook hook() const override { return Hook::kLoss; }
  std::optional<Finding> check(const StepView& v) override {
    if (std::isfinite(v.loss->item<double>())) return std::nullopt;
    // Attribution (DESIGN.md): finite logits and a non-finite loss is the loss math's fault;
    // non-finite logits mean an activation went first (the replay localizes it).
    const bool logits_finite = torch::isfinite(*v.logits).all().item<bool>();
    if (logits_finite) return Finding{"loss", "loss_math", 1};
    return Finding{"", "activation", 0};
  }
};

using harness::DetectorInfo;

DetectorInfo loss_detector() {
  DetectorInfo info;
  info.name = "loss";
  info.doc = "flags a non-finite local loss";
  info.not_implemented = "";
  info.make = [](const harness::Scenario& s) -> std::unique_ptr<Detector> {
    return std::make_unique<LossDetector>();
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(loss, loss_detector());

}  // namespace nanchaos::detect
