// Detector `activation`: probes module outputs for the first non-finite value.
#include "detectors/detector.h"
#include "harness/common/cause.h"
#include "harness/scenario/detector_registry.h"

namespace nanchaos::detect {

using harness::Cause;
namespace {

// Checks every named module's output in forward order (one reduction and host sync per module:
// costly, so only in `full` or when enabled explicitly; the default stack gets the same answer
// from the replay after a detection). Names the first module whose output is non-finite; its
// input, the previous module's output, was finite by construction of the forward order.
class ActivationDetector final : public DetectorImpl<ActivationDetector> {
 public:
  ActivationDetector() : DetectorImpl("activation") {}
  Hook hook() const override { return Hook::kLoss; }
  void reset() override {
    first_bad_.clear();
    first_idx_ = -1;
    seen_ = 0;
  }
  void on_activation(const std::string& module, const torch::Tensor& out) override {
    if (first_idx_ < 0 && !torch::isfinite(out).all().item<bool>()) {
      first_bad_ = module;
      first_idx_ = seen_;
    }
    ++seen_;
  }
  std::optional<Finding> check(const StepView& v) override {
    if (first_idx_ < 0) return std::nullopt;
    return Finding{first_bad_, to_string(Cause::kActivation), module_index(v, first_bad_)};
  }

 private:
  static int module_index(const StepView& v, const std::string& name) {
    const auto& names = *v.module_names;
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return int(i);
    return -1;
  }
  std::string first_bad_;
  int first_idx_ = -1;
  int seen_ = 0;
};

using harness::AttributionNames;
using harness::Decision;
using harness::DetectorInfo;

DetectorInfo activation_detector() {
  DetectorInfo info;
  info.name = "activation";
  info.doc = "probes module outputs for the first non-finite value";
  info.make = [](const harness::StackConfig& s) -> std::unique_ptr<Detector> {
    return std::make_unique<ActivationDetector>();
  };
  info.order = 40;  // module outputs, read once the loss exists
  info.column = harness::kModuleIdx;
  info.replay = true;  // the replay's reproduced test
  info.attribute = [](const double* row, const AttributionNames& n, Decision* d) {
    d->cause = row[harness::kModuleOverflow] > 0.5 ? to_string(Cause::kFp16Overflow)
                                                   : to_string(Cause::kActivation);
    d->layer = harness::name_at(n.modules, row[harness::kModuleIdx]);
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(activation, activation_detector());

}  // namespace nanchaos::detect
