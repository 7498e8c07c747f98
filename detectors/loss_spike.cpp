// Detector `loss_spike`: flags a loss z-score spike over a window of recent steps (uses
// spike_window, spike_zscore).
#include "detectors/detector.h"
#include "detectors/spike.h"
#include "harness/common/cause.h"
#include "harness/scenario/detector_registry.h"

namespace nanchaos::detect {

using harness::Cause;
namespace {

class LossSpikeDetector final : public DetectorImpl<LossSpikeDetector> {
 public:
  explicit LossSpikeDetector(const harness::StackConfig& s)
      : DetectorImpl("loss_spike"),
        window_(s.detectors.params.get_int("spike_window"),
                s.detectors.params.get_float("spike_zscore")) {}
  Hook hook() const override { return Hook::kLoss; }
  std::optional<Finding> check(const StepView& v) override {
    if (window_.test_and_add(v.loss->item<double>()) > 0) {
      return Finding{"loss", to_string(Cause::kGradientExplosion), 0};
    }
    return std::nullopt;
  }

 private:
  SpikeWindow window_;
};

using harness::AttributionNames;
using harness::Decision;
using harness::DetectorInfo;

DetectorInfo loss_spike_detector() {
  DetectorInfo info;
  info.name = "loss_spike";
  info.doc =
      "flags a loss z-score spike over a window of recent steps (uses spike_window, spike_zscore)";
  info.make = [](const harness::StackConfig& s) -> std::unique_ptr<Detector> {
    return std::make_unique<LossSpikeDetector>(s);
  };
  info.order = 60;
  info.attribute = [](const double*, const AttributionNames&, Decision* d) {
    d->cause = to_string(
        Cause::kGradientExplosion);  // a blow-up seen before any non-finite value (DESIGN.md)
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(loss_spike, loss_spike_detector());

}  // namespace nanchaos::detect
