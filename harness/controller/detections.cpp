// The judge's detections: the stack's detect and decision events of every rank merged into one
// detection per (step, detector), attributed to ranks, ordered, and the first one after the first
// fault given its latencies.
#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "harness/controller/judge_internal.h"

namespace nanchaos::harness {

using nlohmann::json;
using results::Detection;

int64_t judge_detections(const Scenario& s, const std::vector<RankEvidence>& logs,
                         const JobResult& job, const std::vector<int64_t>& absent,
                         std::optional<int64_t> first_fault_step,
                         std::optional<int64_t> first_inject_t, results::ScenarioResult& res) {
  const int world = int(logs.size());
  // Consensus decisions are identical on every rank: keep one per step (lowest rank). Local
  // decisions (no consensus) and watchdog expiries are per rank and merged per step.
  std::map<std::pair<int64_t, std::string>, Detection> by_step;
  std::map<int64_t, int64_t> first_detect_t, last_decision_t;
  // External jobs: the job's stack (report_detection, source "stack") and what the agent saw it
  // do (observed:*, source "observed") are detections, one per (step, detector), accumulating
  // ranks like local decisions; a stack `decision` only sets that step's action. Raising ranks of
  // observed:exception are kept for the flight-recorder attribution below.
  std::map<std::pair<int64_t, std::string>, int64_t> earliest_t;
  std::map<int64_t, std::string> stack_action;
  auto external_evidence = [&](int r, const json& e) {
    const std::string ev = e.value("ev", "");
    const std::string source = e.value("source", "");
    const int64_t step = int_field(e, "step", -1);
    const int64_t t = int_field(e, "t_us", 0);
    if (ev == "decision") {
      if (source != "stack") return;
      last_decision_t[step] = std::max(last_decision_t[step], t);
      stack_action[step] = e.value("action", "");
      return;
    }
    if (source != "stack" && source != "observed") return;
    auto key = std::make_pair(step, e.value("detector", ""));
    auto [it, fresh] = by_step.try_emplace(key);
    Detection& d = it->second;
    if (fresh) {
      d.detector = key.second;
      d.step = step;
      earliest_t[key] = t;
    } else {
      earliest_t[key] = std::min(earliest_t[key], t);
    }
    if (d.layer.empty()) d.layer = e.value("layer", "");
    if (d.cause.empty()) d.cause = e.value("cause", "");
    if (std::find(d.ranks.begin(), d.ranks.end(), r) == d.ranks.end()) d.ranks.push_back(r);
  };
  for (int r = 0; r < world; ++r) {
    for (const auto& e : logs[r].events) {
      const std::string ev = e.value("ev", "");
      const int64_t step = int_field(e, "step", -1);
      const int64_t t = int_field(e, "t_us", 0);
      if (ev == "detect") {
        auto it = first_detect_t.find(step);
        if (it == first_detect_t.end() || t < it->second) first_detect_t[step] = t;
      }
      const bool watchdog = ev == "detect" && e.value("detector", "") == "watchdog";
      if (s.job.external() && (ev == "detect" || ev == "decision") && e.contains("source")) {
        external_evidence(r, e);
        continue;
      }
      if (ev != "decision" && !watchdog) continue;
      if (ev == "decision") last_decision_t[step] = std::max(last_decision_t[step], t);
      const bool local = watchdog || e.value("local", false);
      auto key = std::make_pair(step, e.value("detector", ""));
      auto found = by_step.find(key);
      if (found != by_step.end()) {
        if (local) {
          auto& rk = found->second.ranks;
          if (!watchdog && std::find(rk.begin(), rk.end(), r) == rk.end()) rk.push_back(r);
        }
        continue;
      }
      Detection d;
      d.detector = e.value("detector", "");
      d.step = step;
      d.layer = e.value("layer", "");
      d.cause = e.value("cause", "");
      d.action = watchdog ? "abort" : e.value("action", "");
      if (e.contains("transient") && e["transient"].is_boolean())
        d.transient = e["transient"].get<bool>();
      if (watchdog) {
        d.ranks = absent;  // the flight-recorder answer: who never entered collective #k
      } else if (e.contains("ranks") && e["ranks"].is_array()) {
        for (const auto& x : e["ranks"]) d.ranks.push_back(x.get<int64_t>());
      }
      by_step.emplace(key, d);
    }
  }
  for (auto& [key, d] : by_step) {
    std::sort(d.ranks.begin(), d.ranks.end());
    // What only the blamed rank knows (e.g. the backward op anomaly mode named) is in its own
    // detect event.
    if (d.layer.empty() && !d.ranks.empty() && d.ranks[0] < world) {
      for (const auto& e : logs[size_t(d.ranks[0])].events) {
        if (e.value("ev", "") == "detect" && int_field(e, "step", -1) == d.step &&
            e.value("detector", "") == d.detector && !e.value("layer", "").empty()) {
          d.layer = e.value("layer", "");
          break;
        }
      }
    }
    res.detections.push_back(d);
  }
  if (s.job.external()) {
    for (auto& d : res.detections) {
      if (auto a = stack_action.find(d.step); a != stack_action.end()) d.action = a->second;
      // The rank whose own process-group timeout fired is not the culprit; the one that stopped
      // (absent from collective #k) is.
      if (d.detector == "observed:exception" && !absent.empty()) {
        std::vector<int64_t> both;
        for (int64_t r : d.ranks) {
          if (std::find(absent.begin(), absent.end(), r) != absent.end()) both.push_back(r);
        }
        if (both.empty()) {
          // The absent ranks are the culprits: those that died (their last words are a `crash`
          // injection, or the controller saw their process gone, with no exit record, before the
          // raising rank's exception or before the raising rank's own process went) failed; the
          // others hung (a hung rank is torn down only after its peers gave up).
          const int64_t raised_t = earliest_t[{d.step, d.detector}];
          int64_t raiser_gone = std::numeric_limits<int64_t>::max();
          for (int64_t r : d.ranks) {
            if (auto g = job.rank_gone_us.find(int(r)); g != job.rank_gone_us.end())
              raiser_gone = std::min(raiser_gone, g->second);
          }
          std::vector<int64_t> gone;
          for (int64_t r : absent) {
            const auto& l = logs[size_t(r)];
            if (l.exit_code) continue;
            const bool crashed = l.last_words_crash;
            auto g = job.rank_gone_us.find(int(r));
            const bool went_first =
                g != job.rank_gone_us.end() && (g->second < raised_t || g->second < raiser_gone);
            if (crashed || went_first) gone.push_back(r);
          }
          d.ranks = gone.empty() ? absent : gone;
          d.cause = gone.empty() ? "hang" : "rank_failure";
        } else {
          d.ranks = both;
        }
      }
      // The job's own watchdog (a stack detection with cause `hang`) fires on the ranks that
      // waited; the ranks absent from the collective are the hung ones (DESIGN.md: rank = the
      // absent ones), as for the built-in watchdog.
      if (d.detector != "observed:exception" && d.cause == "hang" && !absent.empty()) {
        const bool reporter_absent = std::any_of(d.ranks.begin(), d.ranks.end(), [&](int64_t r) {
          return std::find(absent.begin(), absent.end(), r) != absent.end();
        });
        if (!reporter_absent) d.ranks = absent;
      }
    }
    // Within an iteration the stack's own report comes first: observed:* are the agent's reading
    // of what the stack did, written when the iteration ended (or the process raised), and a peer
    // that finished the iteration sooner must not win the race against the rank whose check
    // fired. Then by time.
    auto order = [&](const Detection& d) {
      const bool observed = d.detector.rfind("observed:", 0) == 0;
      return std::make_tuple(d.step, observed, earliest_t[{d.step, d.detector}]);
    };
    std::stable_sort(res.detections.begin(), res.detections.end(),
                     [&](const Detection& a, const Detection& b) { return order(a) < order(b); });
  } else {
    std::stable_sort(res.detections.begin(), res.detections.end(),
                     [](const Detection& a, const Detection& b) { return a.step < b.step; });
  }
  int64_t false_positives = 0;
  for (auto& d : res.detections) {
    if (!first_fault_step || d.step < *first_fault_step) {
      ++false_positives;
      continue;
    }
    if (!res.first_detection) {
      d.latency_steps = d.step - *first_fault_step;
      if (first_inject_t && first_detect_t.count(d.step)) {
        d.latency_ms = double(first_detect_t[d.step] - *first_inject_t) / 1000.0;
      }
      if (first_detect_t.count(d.step) && last_decision_t.count(d.step)) {
        d.decision_us = double(last_decision_t[d.step] - first_detect_t[d.step]);
      }
      res.first_detection = d;
    }
  }
  return false_positives;
}

}  // namespace nanchaos::harness
