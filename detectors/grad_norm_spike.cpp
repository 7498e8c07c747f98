// Detector `grad_norm_spike`: flags a gradient-norm z-score spike over a window of recent steps.
// Keys only for now; the detector lands in this file.
#include "harness/registry.h"
#include "harness/scenario_schema.h"

namespace nanchaos::detect {
namespace {

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
  info.not_implemented = "spike detectors (issue 4)";
  info.make = nullptr;
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(grad_norm_spike, grad_norm_spike_detector());

}  // namespace nanchaos::detect
