// Detector `loss_scale`: GradScaler found_inf; the scaler probing its range after a growth is a
// scale_backoff, not a detection. Keys only for now; the detector lands in this file.
#include "harness/registry.h"

namespace nanchaos::detect {
namespace {

using harness::DetectorInfo;

DetectorInfo loss_scale_detector() {
  DetectorInfo info;
  info.name = "loss_scale";
  info.doc =
      "GradScaler found_inf; the scaler probing its range after a growth is a scale_backoff, not a "
      "detection";
  info.not_implemented = "loss scaler (issue 5)";
  info.make = nullptr;
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(loss_scale, loss_scale_detector());

}  // namespace nanchaos::detect
