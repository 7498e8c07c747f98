// Detector `batch`: flags a non-finite input or label, or a finite input beyond max_abs, as the
// model receives the batch. The detector and its keys live here.
#include <cmath>

#include "detectors/detector.h"
#include "harness/common/cause.h"
#include "harness/scenario/detector_registry.h"
#include "harness/scenario/key_builder.h"

namespace nanchaos::detect {

using harness::Cause;
namespace {

// Checks the batch as the model receives it (after normalize_inputs). Caveat: a few small
// reductions over the batch per step; the batch is small next to the gradients.
class BatchDetector final : public DetectorImpl<BatchDetector> {
 public:
  explicit BatchDetector(const harness::StackConfig& s)
      : DetectorImpl("batch"), max_abs_(s.detectors.params.get_float("max_abs")) {
    classes_ =
        s.job.workload == harness::WorkloadKind::kMlp ? s.workload.classes : s.workload.vocab;
  }
  Hook hook() const override { return Hook::kBatch; }
  std::optional<Finding> check(const StepView& v) override {
    const auto& b = *v.batch;
    if (b.inputs.is_floating_point()) {
      if (!torch::isfinite(b.inputs).all().item<bool>() ||
          b.inputs.abs().max().item<double>() > max_abs_) {
        return Finding{"inputs", to_string(Cause::kData), 0};
      }
    }
    if (b.labels.is_floating_point()) {
      if (!torch::isfinite(b.labels).all().item<bool>())
        return Finding{"labels", to_string(Cause::kData), 1};
    } else if (b.labels.numel() > 0 &&
               (b.labels.min().item<int64_t>() < 0 || b.labels.max().item<int64_t>() >= classes_)) {
      return Finding{"labels", to_string(Cause::kData), 1};
    }
    // A batch with no valid target token makes a loss averaged over valid tokens 0/0.
    if (b.mask.defined() && b.mask.sum().item<double>() == 0.0)
      return Finding{"labels", to_string(Cause::kData), 1};
    return std::nullopt;
  }

 private:
  double max_abs_;
  int64_t classes_;
};

using harness::AttributionNames;
using harness::Decision;
using harness::DetectorInfo;
using harness::Key;
using harness::KeyType;

DetectorInfo batch_detector() {
  DetectorInfo info;
  info.name = "batch";
  info.doc =
      "flags a non-finite input or label, or a finite input beyond max_abs, as the model receives "
      "the batch";
  info.keys = {
      Key("max_abs", KeyType::kFloat, "a finite input beyond this magnitude is flagged")
          .def(1e6)
          .above(0),
  };
  info.make = [](const harness::StackConfig& s) -> std::unique_ptr<Detector> {
    return std::make_unique<BatchDetector>(s);
  };
  info.order = 30;  // the batch as the model receives it
  info.presets = harness::kPresetDefault;
  info.column = harness::kBatchField;
  info.replay = true;             // the replay's reproduced test
  info.refined_to_layer = false;  // the inputs or labels are the origin
  info.attribute = [](const double* row, const AttributionNames&, Decision* d) {
    d->cause = to_string(Cause::kData);
    d->layer = row[harness::kBatchField] > 0.5 ? "labels" : "inputs";
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(batch, batch_detector());

}  // namespace nanchaos::detect
