// Detector `straggler`: flags a rank whose own step time stays above straggler_factor x the
// ranks' median for straggler_steps consecutive steps, naming the phase that grew
// (SCENARIO_FORMAT.md "Slow ranks and finite silent data corruption").
#include "detectors/core/straggler.h"

#include <algorithm>

#include "detectors/detector.h"
#include "harness/common/cause.h"
#include "harness/scenario/detector_registry.h"
#include "harness/scenario/key_builder.h"

namespace nanchaos::detect {

using harness::Cause;
namespace {

// Input: every rank's own time per phase of the previous step (harness/job/phase_clock.h: wall
// time minus collective waits and run-queue delay), which ride on the consensus summary, so
// every rank runs the same statistic (detectors/core/straggler.h) on the same numbers and
// derives the same finding; no extra collective. A rank is reported once per slow spell (when
// it becomes flagged); it is reported again only after it was back to usual.
// Caveats: the times of step t travel in step t+1's consensus, so a rank slow from step s is
// named at step s + straggler_steps at the earliest; without consensus (preset `naive`) no times
// travel and the detector sees nothing. What it names changes no number: its decisions take no
// recovery action (DetectorInfo::report_only).
class StragglerDetector final : public DetectorImpl<StragglerDetector> {
 public:
  explicit StragglerDetector(const harness::StragglerParams& p)
      : DetectorImpl("straggler"), tracker_(p) {}
  Hook hook() const override { return Hook::kConsensus; }
  std::optional<Finding> check(const StepView& v) override {
    const std::vector<harness::StragglerFlag> flags = tracker_.observe(*v.rank_phase_us);
    std::vector<int64_t> now;
    const harness::StragglerFlag* first_new = nullptr;
    Finding f;
    for (const auto& fl : flags) {
      now.push_back(fl.rank);
      if (std::find(flagged_.begin(), flagged_.end(), fl.rank) != flagged_.end()) continue;
      f.ranks.push_back(fl.rank);
      if (!first_new) first_new = &fl;
    }
    flagged_ = std::move(now);
    if (!first_new) return std::nullopt;
    f.layer = harness::phase_name(first_new->phase);
    f.cause = to_string(Cause::kStraggler);
    f.code = int(first_new->rank);
    return f;
  }

 private:
  harness::StragglerTracker tracker_;
  std::vector<int64_t> flagged_;  // ranks flagged at the last step
};

using harness::DetectorInfo;
using harness::Key;
using harness::KeyType;

DetectorInfo straggler_detector() {
  DetectorInfo info;
  info.name = "straggler";
  info.doc =
      "flags a rank whose own step time (collective waits and run-queue delay taken out) stays "
      "above straggler_factor x the ranks' median for straggler_steps steps; layer = the phase "
      "that grew";
  info.keys = {
      Key("straggler_factor", KeyType::kFloat,
          "straggler: a rank is slow at a step when its own time exceeds this x the ranks' median; "
          "at most 100 (a larger factor, or inf, would turn the detector off without saying so: "
          "leave straggler out of [detectors] enabled for that)")
          .def(1.5)
          .above(1)
          .max(100),
      Key("straggler_steps", KeyType::kInt,
          "straggler: slow steps in a row before the rank is flagged")
          .def(3)
          .min(1),
  };
  info.make = [](const harness::StackConfig& s) -> std::unique_ptr<Detector> {
    harness::StragglerParams p;
    p.factor = s.detectors.params.get_float("straggler_factor");
    p.consecutive = s.detectors.params.get_int("straggler_steps");
    return std::make_unique<StragglerDetector>(p);
  };
  info.order =
      97;  // after sdc (95): the consensus summary, before the gradient all-reduce's post_reduce
  info.presets = harness::kPresetDefault;
  info.refined_by_replay = false;  // a replay re-runs numbers, not time
  info.report_only = true;
  return info;
}

}  // namespace

NANCHAOS_REGISTER_DETECTOR(straggler, straggler_detector());

}  // namespace nanchaos::detect
