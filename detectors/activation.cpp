// Detector `activation`: probes module outputs for the first non-finite value.
// Keys only for now; the detector lands in this file.
#include "harness/registry.h"

namespace nanchaos::detect {
namespace {

using harness::DetectorInfo;

DetectorInfo activation_detector() {
  DetectorInfo info;
  info.name = "activation";
  info.doc = "probes module outputs for the first non-finite value";
  info.not_implemented = "activation probes (issue 4)";
  info.make = nullptr;
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(activation, activation_detector());

}  // namespace nanchaos::detect
