// Detector `grad_norm_spike`: flags a gradient-norm z-score spike over a window of recent steps.
#include "detectors/detector.h"
#include "detectors/spike.h"
#include "harness/registry.h"
#include "harness/scenario_schema.h"

namespace nanchaos::detect {
namespace {

// Local gradient-norm spike, from the fused scan's fp64 squared norm (no extra pass).
class GradNormSpikeDetector final : public Detector {
 public:
  explicit GradNormSpikeDetector(const harness::Scenario& s)
      : Detector("grad_norm_spike"), window_(s.detectors.spike_window, s.detectors.spike_zscore) {}
  Hook hook() const override { return Hook::kGradients; }
  std::optional<Finding> check(const StepView& v) override {
    if (v.grad_stats->any_nonfinite()) return std::nullopt;  // the grad check owns it
    if (window_.test_and_add(std::sqrt(v.grad_stats->sq_norm)) > 0) {
      return Finding{"", "gradient_explosion", 0};
    }
    return std::nullopt;
  }

 private:
  SpikeWindow window_;
};

using harness::DetectorInfo;
using harness::Key;
using harness::KeyType;

DetectorInfo grad_norm_spike_detector() {
  DetectorInfo info;
  info.name = "grad_norm_spike";
  info.doc = "flags a gradient-norm z-score spike over a window of recent steps";
  info.keys = {
      Key("spike_window", KeyType::kInt, "grad_norm_spike, loss_spike: steps of history")
          .def(20)
          .min(2),
      Key("spike_zscore", KeyType::kFloat, "grad_norm_spike, loss_spike: z-score threshold")
          .def(6.0)
          .above(0),
  };
  info.not_implemented = "";
  info.make = [](const harness::Scenario& s) -> std::unique_ptr<Detector> {
    return std::make_unique<GradNormSpikeDetector>(s);
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(grad_norm_spike, grad_norm_spike_detector());

}  // namespace nanchaos::detect
