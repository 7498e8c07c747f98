// The launches of a job that [job] restarts relaunched, judged from their evidence: how each
// ended, the step each resumed from and the checkpoint it loaded, and what each restart cost
// (docs/scenario-format.md "Recovery by restart"). Pure, like the rest of the judge: the times
// are the events' (the controller's timeline) and the launcher's exit states.
#include <fmt/format.h>

#include <algorithm>

#include "harness/controller/judge.h"
#include "harness/controller/judge_internal.h"
#include "harness/scenario/registry.h"

namespace nanchaos::harness {
namespace {

using results::Outcome;

std::optional<double> ms_between(std::optional<int64_t> from_us, std::optional<int64_t> to_us) {
  if (!from_us || !to_us) return std::nullopt;
  return double(*to_us - *from_us) / 1000.0;
}

// The latest of one time per rank, when every rank has one (the launch's phase is over only
// when the last rank is through it).
template <typename Get>
std::optional<int64_t> last_of_all(const std::vector<RankEvidence>& ranks, Get get) {
  std::optional<int64_t> last;
  for (const auto& r : ranks) {
    const std::optional<int64_t> t = get(r);
    if (!t) return std::nullopt;
    last = std::max(last.value_or(*t), *t);
  }
  return last;
}

// When the launch began to fail: the crash (its fault's injection, else the first rank gone),
// the abort decision (the first abort), the hang's deadline ([job] timeout_ms).
// The checkpoint a rank resumed from: the last one it loaded before it completed its first step.
// A validating loader loads and rejects newer ones first (a NaN, a bad digest); a load after
// training began (a best model reloaded at the end) is no resume.
const CheckpointEvent* resume_load(const RankEvidence& r) {
  const CheckpointEvent* out = nullptr;
  for (const auto& c : r.ckpt_loads) {
    if (r.first_step_end_t && c.t_us > *r.first_step_end_t) break;
    out = &c;
  }
  return out;
}

std::optional<int64_t> failing_t(const Scenario& s, const LaunchView& l, Outcome outcome) {
  if (outcome == Outcome::kHung) return l.job->t0_us + s.job.timeout_ms * 1000;
  std::optional<int64_t> t;
  auto earliest = [&t](int64_t v) { t = std::min(t.value_or(v), v); };
  if (outcome == Outcome::kAborted) {
    for (const auto& r : *l.ranks) {
      if (r.abort && r.abort->t_us) earliest(*r.abort->t_us);
    }
    if (t) return t;
  }
  for (const auto& r : *l.ranks) {
    for (const auto& inj : r.injections) {
      const FaultKindInfo* info = find_fault_kind(inj.kind);
      if (info && info->fails_at_injection) earliest(inj.t_us);
    }
  }
  if (t) return t;
  for (const auto& [rank, gone] : ranks_gone_us(*l.ranks, *l.job)) earliest(gone);
  if (t) return t;
  return l.job->t_end_us;
}

}  // namespace

std::optional<int64_t> resumed_from_step(const std::vector<LaunchView>& launches, size_t k) {
  const auto& ranks = *launches[k].ranks;
  // The load's own record first (the object's step), then the step the agent had counted when
  // that path was saved in an earlier launch, then the first step the launch ran.
  std::optional<CheckpointEvent> load;
  for (const auto& r : ranks) {
    if (const CheckpointEvent* c = resume_load(r)) {
      load = *c;
      break;
    }
  }
  if (load && load->step) return load->step;
  if (load) {
    std::optional<int64_t> saved;
    for (size_t e = 0; e < k; ++e) {
      for (const auto& r : *launches[e].ranks) {
        for (const auto& save : r.ckpt_saves) {
          if (save.path == load->path && save.agent_step) saved = save.agent_step;
        }
      }
    }
    if (saved) return saved;
  }
  if (!load && k == 0) return std::nullopt;  // a first launch that loaded nothing resumed nothing
  std::optional<int64_t> first;
  for (const auto& r : ranks) {
    if (r.first_step) first = std::min(first.value_or(*r.first_step), *r.first_step);
  }
  return first;
}

LaunchesJudged judge_launches(const Scenario& s, const std::vector<LaunchView>& launches) {
  LaunchesJudged out;
  if (launches.empty()) return out;
  const int64_t t0 = launches.front().job->t0_us;
  std::vector<Outcome> outcomes;
  for (size_t k = 0; k < launches.size(); ++k) {
    const LaunchView& l = launches[k];
    const Outcome outcome = launch_outcome(*l.ranks, *l.job);
    outcomes.push_back(outcome);
    const std::optional<int64_t> resumed = resumed_from_step(launches, k);
    if (k + 1 == launches.size()) out.last_resumed_from_step = resumed;
    results::Launch launch;
    launch.launch = int64_t(k);
    launch.start_ms = double(l.job->t0_us - t0) / 1000.0;
    launch.end_ms = double(l.job->t_end_us - t0) / 1000.0;
    launch.outcome = to_string(outcome);
    launch.resumed_from_step = resumed;
    for (const auto& r : *l.ranks) {
      const CheckpointEvent* c = resume_load(r);
      if (c == nullptr) continue;
      launch.checkpoint_loaded = results::Launch::Checkpoint{c->path, c->step, ""};
      break;
    }
    for (const auto& r : *l.ranks) {
      if (r.ckpt_rejects.empty()) continue;
      for (const auto& c : r.ckpt_rejects) {
        launch.checkpoints_rejected.push_back({c.path, c.step, c.why});
      }
      break;
    }
    for (const auto& r : *l.ranks)
      launch.steps_reached = std::max(launch.steps_reached, r.steps_done);
    out.launches.push_back(std::move(launch));
  }
  // One restart per launch after the first: from the failure of launch k-1 to the first step
  // launch k completed, in consecutive phases that add up to resume_ms.
  for (size_t k = 1; k < launches.size(); ++k) {
    const LaunchView& prev = launches[k - 1];
    const LaunchView& next = launches[k];
    const std::optional<int64_t> failed = failing_t(s, prev, outcomes[k - 1]);
    std::optional<int64_t> decided;
    for (const auto& [rank, gone] : ranks_gone_us(*prev.ranks, *prev.job)) {
      decided = std::min(decided.value_or(gone), gone);
    }
    if (!decided) decided = prev.job->t_end_us;
    decided = std::max(*decided, *failed);
    const int64_t gone =
        std::max(*decided, prev.job->t_gone_us ? prev.job->t_gone_us : prev.job->t_end_us);
    const auto attached = last_of_all(*next.ranks, [](const RankEvidence& r) { return r.start_t; });
    std::optional<int64_t> loaded;
    for (const auto& r : *next.ranks) {
      if (const CheckpointEvent* c = resume_load(r)) {
        loaded = std::max(loaded.value_or(c->t_us), c->t_us);
      }
    }
    const auto first_step =
        last_of_all(*next.ranks, [](const RankEvidence& r) { return r.first_step_end_t; });
    results::Restart restart;
    restart.after_launch = int64_t(k - 1);
    restart.cause = to_string(outcomes[k - 1]);
    restart.failed_ms = double(*failed - t0) / 1000.0;
    restart.resume_ms = ms_between(failed, first_step);
    // The bound is on every restart: one that never resumed has no latency to meet it.
    if (k == 1 || out.resume_ms_max) {
      out.resume_ms_max =
          restart.resume_ms
              ? std::optional(std::max(out.resume_ms_max.value_or(0.0), *restart.resume_ms))
              : std::nullopt;
    }
    // The contract's (last step reached before the failure) - (resumed step): steps_reached is
    // the step the failed launch was on (a crash at step 25 reached 25), so a resume from 20
    // lost 5.
    const std::optional<int64_t> resumed = out.launches[k].resumed_from_step;
    if (resumed) {
      restart.steps_lost = std::max<int64_t>(0, out.launches[k - 1].steps_reached - *resumed);
    }
    out.steps_lost = out.steps_lost && restart.steps_lost
                         ? std::optional(*out.steps_lost + *restart.steps_lost)
                         : std::nullopt;
    restart.detect_ms = ms_between(failed, decided);
    restart.teardown_ms = ms_between(decided, gone);
    restart.relaunch_ms = ms_between(gone, attached);
    if (loaded) restart.load_ms = ms_between(attached, loaded);
    restart.first_step_ms = ms_between(loaded ? loaded : attached, first_step);
    for (const auto& r : *next.ranks) {
      if (r.import_ms) restart.import_ms = std::max(restart.import_ms.value_or(0.0), *r.import_ms);
    }
    out.restarts.push_back(std::move(restart));
  }
  return out;
}

}  // namespace nanchaos::harness
