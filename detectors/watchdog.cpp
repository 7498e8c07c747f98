// Detector `watchdog`: flags a collective that passes its deadline.
#include "detectors/detector.h"
#include "harness/scenario/detector_registry.h"
#include "harness/scenario/key_builder.h"

namespace nanchaos::detect {
namespace {

// The watchdog has no per-step check: enabling it gives every collective a deadline of
// collective_timeout_ms (harness/comm/communicator.h Work::wait). On expiry the runner logs a
// `watchdog` detection naming the collective (sequence number, name), then takes the whole job down
// with MPI_Abort (exit code 4), as NCCL's watchdog ends a hang with ncclCommAbort. Caveat: the
// detection is local to the ranks that waited; who was absent is the controller's post-mortem (the
// flight-recorder comparison of collective sequence numbers).
class WatchdogDetector final : public DetectorImpl<WatchdogDetector> {
 public:
  WatchdogDetector() : DetectorImpl("watchdog") {}
  Hook hook() const override { return Hook::kCollective; }
  std::optional<Finding> check(const StepView&) override { return std::nullopt; }
};

using harness::DetectorInfo;
using harness::Key;
using harness::KeyType;

DetectorInfo watchdog_detector() {
  DetectorInfo info;
  info.name = "watchdog";
  info.doc = "flags a collective that passes its deadline";
  info.keys = {
      Key("collective_timeout_ms", KeyType::kInt, "the watchdog's deadline for any collective")
          .def(harness::kDefaultCollectiveTimeoutMs)
          .min(1),
  };
  info.make = [](const harness::StackConfig&) -> std::unique_ptr<Detector> {
    return std::make_unique<WatchdogDetector>();
  };
  info.order = 110;  // the collective deadline (its detection aborts the job; no attribution)
  info.presets = harness::kPresetDefault;
  info.arms_collective_deadline = true;
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(watchdog, watchdog_detector());

}  // namespace nanchaos::detect
