// Detector `param`: flags non-finite parameters at step start.
// The detector and its keys live here.
#include <cmath>

#include "detectors/detector.h"
#include "harness/common/cause.h"
#include "harness/scenario/detector_registry.h"

namespace nanchaos::detect {

using harness::Cause;
namespace {

// Scans every parameter at step start (one pass over the weights; in the `full` preset only).
class ParamDetector final : public DetectorImpl<ParamDetector> {
 public:
  ParamDetector() : DetectorImpl("param") {}
  Hook hook() const override { return Hook::kStepStart; }
  std::optional<Finding> check(const StepView& v) override {
    const auto& params = *v.params;
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].is_cuda()) {  // full preset only: one reduction + sync per tensor is fine
        if (!torch::isfinite(params[i]).all().item<bool>()) {
          return Finding{v.grad_names->at(i), to_string(Cause::kParameter), int(i)};
        }
        continue;
      }
      const float* d = params[i].data_ptr<float>();
      const int64_t n = params[i].numel();
      bool bad = false;
      for (int64_t j = 0; j < n; ++j) bad |= !std::isfinite(d[j]);
      if (bad) return Finding{v.grad_names->at(i), to_string(Cause::kParameter), int(i)};
    }
    return std::nullopt;
  }
};

using harness::AttributionNames;
using harness::Decision;
using harness::DetectorInfo;

DetectorInfo param_detector() {
  DetectorInfo info;
  info.name = "param";
  info.doc = "flags non-finite parameters at step start";
  info.make = [](const harness::StackConfig& s) -> std::unique_ptr<Detector> {
    return std::make_unique<ParamDetector>();
  };
  info.order = 10;  // step start: the parameters the step begins from
  info.column = harness::kParamIdx;
  info.replay = true;  // the replay's reproduced test, and its parameter attribution
  info.attribute = [](const double* row, const AttributionNames& n, Decision* d) {
    d->cause = to_string(Cause::kParameter);
    d->layer = n.backward.at(size_t(row[harness::kParamIdx]));
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(param, param_detector());

}  // namespace nanchaos::detect
