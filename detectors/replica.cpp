// Detector `replica`: every `replica_every` steps the ranks compare a digest of their parameters,
// buffers, optimizer state and training state (SCENARIO_FORMAT.md "More detectors and
// recovery"); the ranks outside the majority are flagged, with the cause read from which
// digests differ (detectors/core/replica.h classify_divergence: `replica_divergence`,
// `parameter` with the first differing tensor as the layer, or `gradient_explosion`). The only
// detector that sees finite silent corruption. The exchange is the runner's (two int64 all-gathers,
// the second only on a divergence); the vote is detectors/core/replica.h. Cost: one pass over the
// state every replica_every steps (bench/README.md gives the measured ratio).
#include "detectors/core/replica.h"

#include "detectors/detector.h"
#include "harness/scenario/detector_registry.h"
#include "harness/scenario/key_builder.h"

namespace nanchaos::detect {
namespace {

// The layer a divergence names: the first differing tensor (for a drift or a scaled update, the
// first of many: where a reader starts, not a cause).
std::string layer_of(const harness::Divergence& d, const std::vector<std::string>& names) {
  return harness::name_at(names, d.first);
}

class ReplicaDetector final : public DetectorImpl<ReplicaDetector> {
 public:
  explicit ReplicaDetector(int64_t every) : DetectorImpl("replica"), every_(every) {}
  Hook hook() const override { return Hook::kReplica; }
  // Not at step 0: the replicas start from one seed; the first check follows `every` updates.
  bool due(int64_t step) const override { return step > 0 && step % every_ == 0; }
  std::optional<Finding> check(const StepView& v) override {
    const harness::ReplicaVote vote = harness::replica_vote(*v.replica_combined);
    if (!vote.diverged) return std::nullopt;
    if (std::find(vote.minority.begin(), vote.minority.end(), v.rank) == vote.minority.end()) {
      return std::nullopt;  // this rank holds the majority's state
    }
    const harness::Divergence d = harness::classify_divergence(
        *v.replica_per_tensor, v.replica_names->size(), v.replica_params, v.rank, vote.source);
    return Finding{layer_of(d, *v.replica_names), to_string(harness::divergence_cause(d.kind)),
                   harness::divergence_code(d)};
  }

 private:
  int64_t every_;
};

using harness::AttributionNames;
using harness::Decision;
using harness::DetectorInfo;
using harness::Key;
using harness::KeyType;

DetectorInfo replica_detector() {
  DetectorInfo info;
  info.name = "replica";
  info.doc =
      "every replica_every steps, flags the ranks whose digest of parameters, buffers and "
      "optimizer state differs from the majority's";
  info.keys = {
      Key("replica_every", KeyType::kInt,
          "replica: steps between cross-replica digest checks (parameters, buffers, optimizer "
          "state)")
          .def(10)
          .min(1),
  };
  info.make = [](const harness::StackConfig& s) -> std::unique_ptr<Detector> {
    return std::make_unique<ReplicaDetector>(s.detectors.params.get_int("replica_every"));
  };
  info.order = 20;                         // step start, after param: the cross-replica digest
  info.presets = harness::kPresetDefault;  // at its measured cost (bench/README.md)
  info.column = harness::kReplicaIdx;
  info.refined_by_replay = false;  // the divergence built up over earlier steps
  info.ranks_by_vote = true;       // the minority of the digest vote; resync applies
  info.attribute = [](const double* row, const AttributionNames& n, Decision* d) {
    // A replica whose digest differs from the majority's (replica.h classify_divergence):
    // drifted training state, a corrupted weight, or one update with a different step size.
    const harness::Divergence div = harness::divergence_from_code(row[harness::kReplicaIdx]);
    d->cause = to_string(harness::divergence_cause(div.kind));
    d->layer = layer_of(div, n.replica);
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(replica, replica_detector());

}  // namespace nanchaos::detect
