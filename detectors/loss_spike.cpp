// Detector `loss_spike`: flags a loss z-score spike over a window of recent steps (uses
// spike_window, spike_zscore). Keys only for now; the detector lands in this file.
#include "harness/registry.h"

namespace nanchaos::detect {
namespace {

using harness::DetectorInfo;

DetectorInfo loss_spike_detector() {
  DetectorInfo info;
  info.name = "loss_spike";
  info.doc =
      "flags a loss z-score spike over a window of recent steps (uses spike_window, spike_zscore)";
  info.not_implemented = "spike detectors (issue 4)";
  info.make = nullptr;
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(loss_spike, loss_spike_detector());

}  // namespace nanchaos::detect
