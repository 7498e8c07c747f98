// Detector `anomaly`: autograd anomaly mode in the replay: names the op that produced the first
// NaN.
#include "detectors/detector.h"
#include "harness/common/cause.h"
#include "harness/scenario/detector_registry.h"

namespace nanchaos::detect {

using harness::Cause;
namespace {

// LibTorch's anomaly mode, always on: every backward op checks its outputs and the first one that
// returns NaN raises, naming itself ("Function 'MulBackward0' returned nan values in its 0th
// output"). The runner turns on the mode, catches the error around backward and hands the message
// here. Costly (PyTorch documents it as a debugging tool); the reports compare it against the
// default stack.
class AnomalyDetector final : public DetectorImpl<AnomalyDetector> {
 public:
  AnomalyDetector() : DetectorImpl("anomaly") {}
  Hook hook() const override { return Hook::kGradients; }
  bool wants_anomaly_mode() const override { return true; }
  std::optional<Finding> check(const StepView& v) override {
    if (v.anomaly_message == nullptr || v.anomaly_message->empty()) return std::nullopt;
    return Finding{backward_op(*v.anomaly_message), to_string(Cause::kGradient), 0};
  }
};

using harness::AttributionNames;
using harness::Decision;
using harness::DetectorInfo;

DetectorInfo anomaly_detector() {
  DetectorInfo info;
  info.name = "anomaly";
  info.doc = "autograd anomaly mode in the replay: names the op that produced the first NaN";
  info.make = [](const harness::StackConfig& s) -> std::unique_ptr<Detector> {
    return std::make_unique<AnomalyDetector>();
  };
  info.order = 120;    // anomaly mode's error, last: the replay's costly check
  info.replay = true;  // the replay's reproduced test
  info.attribute = [](const double*, const AttributionNames&, Decision* d) {
    d->cause = to_string(Cause::kGradient);  // the op name is in the blamed rank's own detect event
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(anomaly, anomaly_detector());

}  // namespace nanchaos::detect
