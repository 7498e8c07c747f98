// Detector `watchdog`: flags a collective that passes its deadline.
// Keys only for now; the detector lands in this file.
#include "harness/registry.h"
#include "harness/scenario_schema.h"

namespace nanchaos::detect {
namespace {

using harness::DetectorInfo;
using harness::Key;
using harness::KeyType;

DetectorInfo watchdog_detector() {
  DetectorInfo info;
  info.name = "watchdog";
  info.doc = "flags a collective that passes its deadline";
  info.keys = {
      Key("collective_timeout_ms", KeyType::kInt, "the watchdog's deadline for any collective")
          .def(10000)
          .min(1),
  };
  info.not_implemented = "optional: watchdog (issue 3)";
  info.make = nullptr;
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(watchdog, watchdog_detector());

}  // namespace nanchaos::detect
