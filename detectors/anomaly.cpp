// Detector `anomaly`: autograd anomaly mode in the replay: names the op that produced the first
// NaN. Keys only for now; the detector lands in this file.
#include "harness/registry.h"

namespace nanchaos::detect {
namespace {

using harness::DetectorInfo;

DetectorInfo anomaly_detector() {
  DetectorInfo info;
  info.name = "anomaly";
  info.doc = "autograd anomaly mode in the replay: names the op that produced the first NaN";
  info.not_implemented = "anomaly mode (issue 4)";
  info.make = nullptr;
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(anomaly, anomaly_detector());

}  // namespace nanchaos::detect
