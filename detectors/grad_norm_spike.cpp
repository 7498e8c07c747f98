// Detector `grad_norm_spike`: flags a gradient-norm z-score spike over a window of recent steps.
#include "detectors/detector.h"
#include "detectors/spike.h"
#include "harness/common/cause.h"
#include "harness/scenario/detector_registry.h"
#include "harness/scenario/key_builder.h"

namespace nanchaos::detect {

using harness::Cause;
namespace {

// Local gradient-norm spike, from the fused scan's fp64 squared norm (no extra pass). The layer
// is the parameter whose own squared norm (the scan's per-tensor sums) rose the most against its
// history (SCENARIO_FORMAT.md "More detectors and recovery"); the finding's code is its index in
// backward order, -1 when unknown. A global norm alone names nothing (torchtitan 766). A spike
// that one parameter holds (spike.h ParamNormHistory::concentrated) is cause `gradient` there.
class GradNormSpikeDetector final : public DetectorImpl<GradNormSpikeDetector> {
 public:
  explicit GradNormSpikeDetector(const harness::StackConfig& s)
      : DetectorImpl("grad_norm_spike"),
        window_(s.detectors.params.get_int("spike_window"),
                s.detectors.params.get_float("spike_zscore")),
        per_param_(s.detectors.params.get_int("spike_window")) {}
  Hook hook() const override { return Hook::kGradients; }
  std::optional<Finding> check(const StepView& v) override {
    const harness::ScanStats& g = *v.grad_stats;
    if (g.any_nonfinite()) return std::nullopt;  // the grad check owns it
    if (window_.test_and_add(std::sqrt(g.sq_norm)) > 0) {
      const int idx = per_param_.most_risen(g.sq_norms);
      std::string layer;
      if (idx >= 0 && v.grad_names && size_t(idx) < v.grad_names->size()) {
        layer = (*v.grad_names)[size_t(idx)];
      }
      // One parameter's spike is a corrupted gradient there (code -(idx + 2)), not an explosion.
      if (per_param_.concentrated(g.sq_norms, idx))
        return Finding{layer, to_string(Cause::kGradient), -(idx + 2)};
      return Finding{layer, to_string(Cause::kGradientExplosion), idx};
    }
    per_param_.add(g.sq_norms);  // a spike stays out of the history, as in SpikeWindow
    return std::nullopt;
  }

 private:
  SpikeWindow window_;
  ParamNormHistory per_param_;
};

using harness::AttributionNames;
using harness::Decision;
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
  info.make = [](const harness::StackConfig& s) -> std::unique_ptr<Detector> {
    return std::make_unique<GradNormSpikeDetector>(s);
  };
  info.order = 80;
  info.column = harness::kGradIdx;  // only on finite gradients: never overlaps grad's index
  info.attribute = [](const double* row, const AttributionNames& n, Decision* d) {
    // A blow-up before any non-finite value, with the parameter whose norm rose the most on that
    // rank (-1: none known); a code <= -2 is a spike held by that one parameter (index
    // -(code + 2)): a corrupted gradient (ParamNormHistory::concentrated).
    const double code = row[harness::kGradIdx];
    d->cause = code <= -2 ? to_string(Cause::kGradient) : to_string(Cause::kGradientExplosion);
    d->layer = harness::name_at(n.backward, code <= -2 ? -(code + 2) : code);
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(grad_norm_spike, grad_norm_spike_detector());

}  // namespace nanchaos::detect
