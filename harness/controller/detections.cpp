// The judge's detections: the stack's detect and decision events of every rank merged into one
// detection per (step, detector), attributed to ranks, ordered, and the first one after the first
// fault given its latencies.
#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "harness/common/cause.h"
#include "harness/controller/judge_internal.h"

namespace nanchaos::harness {
namespace {

using results::Detection;
using Key = std::pair<int64_t, std::string>;  // (step, detector)

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// What the events of every rank add up to, before ordering and attribution.
struct Ledger {
  std::map<Key, Detection> by_step;
  std::map<int64_t, int64_t> first_detect_t, last_decision_t;  // step -> us
  // External jobs: a detection's earliest report (us), and the step's action as the job's stack
  // decided it.
  std::map<Key, int64_t> earliest_t;
  std::map<int64_t, std::string> stack_action;
};

// External jobs: the job's stack (report_detection, source "stack") and what the agent saw it do
// (observed:*, source "observed") are detections, one per (step, detector), accumulating ranks
// like local decisions; a stack `decision` only sets that step's action. Raising ranks of
// observed:exception are kept for the flight-recorder attribution (attribute_external).
void add_external(int r, const StackEvent& ev, Ledger& l) {
  if (const auto* dec = std::get_if<DecisionEvent>(&ev)) {
    if (dec->source != "stack") return;
    l.last_decision_t[dec->step] = std::max(l.last_decision_t[dec->step], dec->t_us);
    l.stack_action[dec->step] = dec->action;
    return;
  }
  const auto& e = std::get<DetectEvent>(ev);
  if (e.source != "stack" && e.source != "observed") return;
  const Key key{e.step, e.detector};
  auto [it, fresh] = l.by_step.try_emplace(key);
  Detection& d = it->second;
  if (fresh) {
    d.detector = key.second;
    d.step = e.step;
    l.earliest_t[key] = e.t_us;
  } else {
    l.earliest_t[key] = std::min(l.earliest_t[key], e.t_us);
  }
  if (d.layer.empty()) d.layer = e.layer;
  if (d.cause.empty()) d.cause = e.cause;
  if (!contains(d.ranks, r)) d.ranks.push_back(r);
}

// The built-in stack: consensus decisions are identical on every rank, so one is kept per step
// (lowest rank); local decisions (no consensus) and watchdog expiries are per rank and merged per
// step.
void add_builtin(int r, const StackEvent& ev, const std::vector<int64_t>& absent, Ledger& l) {
  const auto* det = std::get_if<DetectEvent>(&ev);
  const auto* dec = std::get_if<DecisionEvent>(&ev);
  const bool watchdog = det && det->detector == "watchdog";
  if (!dec && !watchdog) return;
  const int64_t step = dec ? dec->step : det->step;
  if (dec) l.last_decision_t[step] = std::max(l.last_decision_t[step], dec->t_us);
  const bool local = watchdog || dec->local;
  const Key key{step, dec ? dec->detector : det->detector};
  if (auto found = l.by_step.find(key); found != l.by_step.end()) {
    auto& rk = found->second.ranks;
    if (local && !watchdog && !contains(rk, r)) rk.push_back(r);
    return;
  }
  Detection d;
  d.detector = key.second;
  d.step = step;
  if (watchdog) {
    d.layer = det->layer;
    d.cause = det->cause;
    d.action = "abort";
    d.ranks = absent;  // the flight-recorder answer: who never entered collective #k
  } else {
    d.layer = dec->layer;
    d.cause = dec->cause;
    d.action = dec->action;
    d.transient = dec->transient;
    d.ranks = dec->ranks;
  }
  l.by_step.emplace(key, d);
}

// Every rank's stack events into the ledger.
Ledger collect(const Scenario& s, const std::vector<RankEvidence>& logs,
               const std::vector<int64_t>& absent) {
  Ledger l;
  for (int r = 0; r < int(logs.size()); ++r) {
    for (const auto& ev : logs[size_t(r)].stack_events) {
      const auto* det = std::get_if<DetectEvent>(&ev);
      if (det) {
        auto it = l.first_detect_t.find(det->step);
        if (it == l.first_detect_t.end() || det->t_us < it->second) {
          l.first_detect_t[det->step] = det->t_us;
        }
      }
      const bool sourced =
          det ? det->source.has_value() : std::get<DecisionEvent>(ev).source.has_value();
      if (s.job.external() && sourced) {
        add_external(r, ev, l);
      } else {
        add_builtin(r, ev, absent, l);
      }
    }
  }
  return l;
}

// What only the blamed rank knows (e.g. the backward op anomaly mode named) is in its own detect
// event.
void fill_layer(const std::vector<RankEvidence>& logs, Detection& d) {
  if (!d.layer.empty() || d.ranks.empty() || d.ranks[0] < 0 || d.ranks[0] >= int64_t(logs.size()))
    return;
  for (const auto& ev : logs[size_t(d.ranks[0])].stack_events) {
    const auto* e = std::get_if<DetectEvent>(&ev);
    if (e && e->step == d.step && e->detector == d.detector && !e->layer.empty()) {
      d.layer = e->layer;
      return;
    }
  }
}

// observed:exception: the rank whose own process-group timeout fired is not the culprit; the
// one that stopped (absent from collective #k) is.
void attribute_exception(const std::vector<RankEvidence>& logs, const JobResult& job,
                         const Postmortem& pm, int64_t raised_t, Detection& d) {
  const std::vector<int64_t>& absent = pm.absent;
  std::vector<int64_t> both;
  for (int64_t r : d.ranks) {
    if (contains(absent, r)) both.push_back(r);
  }
  if (!both.empty()) {
    d.ranks = both;
    // An absent rank that raised only after a peer had given up on it (the peer's wait in the
    // gap collective failed first: a SIGTERM handler's last collective, a closed connection)
    // was stalled, not failing on its own: cause hang.
    int64_t gave_up = std::numeric_limits<int64_t>::max();
    for (const auto& l : logs) {
      if (auto f = l.coll_failed_t.find(pm.first_gap_seq); f != l.coll_failed_t.end())
        gave_up = std::min(gave_up, f->second);
    }
    const bool after = std::all_of(both.begin(), both.end(), [&](int64_t r) {
      for (const auto& ev : logs[size_t(r)].stack_events) {
        const auto* e = std::get_if<DetectEvent>(&ev);
        if (e && e->detector == d.detector && e->step == d.step) return e->t_us > gave_up;
      }
      return false;
    });
    if (after) d.cause = to_string(Cause::kHang);
    return;
  }
  // The absent ranks are the culprits: those that died (a process watch saw them gone, with no
  // exit record, before the raising rank's exception or before the raising rank's own process
  // went) failed; the others hung (a hung rank is torn down only after its peers gave up).
  int64_t raiser_gone = std::numeric_limits<int64_t>::max();
  for (int64_t r : d.ranks) {
    if (auto g = job.rank_gone_us.find(int(r)); g != job.rank_gone_us.end())
      raiser_gone = std::min(raiser_gone, g->second);
  }
  std::vector<int64_t> gone;
  for (int64_t r : absent) {
    const auto& l = logs[size_t(r)];
    if (l.exit_code) continue;
    auto g = job.rank_gone_us.find(int(r));
    const bool went_first =
        g != job.rank_gone_us.end() && (g->second < raised_t || g->second < raiser_gone);
    if (went_first) gone.push_back(r);
  }
  d.ranks = gone.empty() ? absent : gone;
  d.cause = gone.empty() ? to_string(Cause::kHang) : to_string(Cause::kRankFailure);
}

// External jobs: the stack's action per step, the flight-recorder attribution, and the order.
void attribute_external(const std::vector<RankEvidence>& logs, const JobResult& job,
                        const Postmortem& pm, Ledger& l, std::vector<Detection>& dets) {
  const std::vector<int64_t>& absent = pm.absent;
  for (auto& d : dets) {
    if (auto a = l.stack_action.find(d.step); a != l.stack_action.end()) d.action = a->second;
    if (d.detector == "observed:exception" && !absent.empty()) {
      attribute_exception(logs, job, pm, l.earliest_t[{d.step, d.detector}], d);
    }
    // The job's own watchdog (a stack detection with cause `hang`) fires on the ranks that
    // waited; the ranks absent from the collective are the hung ones (DESIGN.md: rank = the
    // absent ones), as for the built-in watchdog.
    if (d.detector != "observed:exception" && d.cause == to_string(Cause::kHang) &&
        !absent.empty()) {
      const bool reporter_absent = std::any_of(d.ranks.begin(), d.ranks.end(),
                                               [&](int64_t r) { return contains(absent, r); });
      if (!reporter_absent) d.ranks = absent;
    }
  }
  // Within an iteration the stack's own report comes first: observed:* are the agent's reading
  // of what the stack did, written when the iteration ended (or the process raised), and a peer
  // that finished the iteration sooner must not win the race against the rank whose check
  // fired. Then by time.
  auto order = [&](const Detection& d) {
    const bool observed = d.detector.rfind("observed:", 0) == 0;
    return std::make_tuple(d.step, observed, l.earliest_t[{d.step, d.detector}]);
  };
  std::stable_sort(dets.begin(), dets.end(),
                   [&](const Detection& a, const Detection& b) { return order(a) < order(b); });
}

// The earliest evidence first (../shared/SCENARIO_FORMAT.md "Modern PyTorch jobs"): ranks that
// entered one collective number at different steps, ops or sizes, visible before any detection
// was reported, are the first detection: `collective_mismatch`, the ranks that diverged, the
// step of the divergence. It is the flight recorder's reading, not the stack's word: campaigns
// count it beside the stack's detections (results/campaign.cpp), never as one.
void add_collective_mismatch(const Postmortem& pm, Ledger& l, std::vector<Detection>& dets) {
  if (!pm.mismatch || pm.mismatch_ranks.empty()) return;
  for (const auto& d : dets) {
    const auto t = l.earliest_t.find({d.step, d.detector});
    if (d.step < pm.mismatch_step) return;  // an earlier step's detection came first
    if (t != l.earliest_t.end() && t->second <= pm.mismatch_t_us) return;
  }
  Detection m;
  m.detector = "collective_mismatch";
  m.ranks = pm.mismatch_ranks;
  m.step = pm.mismatch_step;
  l.earliest_t[{m.step, m.detector}] = pm.mismatch_t_us;
  l.first_detect_t[m.step] =
      std::min(l.first_detect_t.count(m.step) ? l.first_detect_t[m.step] : pm.mismatch_t_us,
               pm.mismatch_t_us);
  dets.insert(dets.begin(), m);
}

}  // namespace

int64_t judge_detections(const Scenario& s, const std::vector<RankEvidence>& logs,
                         const JobResult& job, const Postmortem& pm,
                         std::optional<int64_t> first_fault_step,
                         std::optional<int64_t> first_inject_t, results::ScenarioResult& res) {
  const std::vector<int64_t>& absent = pm.absent;
  Ledger l = collect(s, logs, absent);
  for (auto& [key, d] : l.by_step) {
    std::sort(d.ranks.begin(), d.ranks.end());
    fill_layer(logs, d);
    res.detections.push_back(d);
  }
  if (s.job.external()) {
    attribute_external(logs, job, pm, l, res.detections);
    add_collective_mismatch(pm, l, res.detections);
  } else {
    std::stable_sort(res.detections.begin(), res.detections.end(),
                     [](const Detection& a, const Detection& b) { return a.step < b.step; });
  }
  int64_t false_positives = 0;
  for (auto& d : res.detections) {
    if (!first_fault_step || d.step < *first_fault_step) {
      // The flight recorder's reading is no false positive of the stack.
      if (d.detector != "collective_mismatch") ++false_positives;
      continue;
    }
    if (res.first_detection) continue;
    d.latency_steps = d.step - *first_fault_step;
    const auto detect_t = l.first_detect_t.find(d.step);
    if (first_inject_t && detect_t != l.first_detect_t.end()) {
      d.latency_ms = double(detect_t->second - *first_inject_t) / 1000.0;
    }
    const auto decision_t = l.last_decision_t.find(d.step);
    if (detect_t != l.first_detect_t.end() && decision_t != l.last_decision_t.end()) {
      d.decision_us = double(decision_t->second - detect_t->second);
    }
    res.first_detection = d;
  }
  return false_positives;
}

}  // namespace nanchaos::harness
