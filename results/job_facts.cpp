// The job facts' wire format (job_facts.h). Each key is written with the JSON type it has always
// had (a double stays a double at 0, a rank map is keyed by the rank as a string), so report.json
// reads the same as before these were structs.
#include "results/job_facts.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "harness/common/percentile.h"

namespace nanchaos::results {
namespace {

using json = nlohmann::json;

template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json str_or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

template <class T>
json by_rank(const std::map<int64_t, T>& m) {
  json out = json::object();
  for (const auto& [rank, v] : m) out[std::to_string(rank)] = v;
  return out;
}

// A key absent or null keeps `v` as it is (a report from before the key existed).
template <class T>
void read(const json& j, const char* key, T& v) {
  auto it = j.find(key);
  if (it != j.end() && !it->is_null()) it->get_to(v);
}

template <class T>
void read(const json& j, const char* key, std::optional<T>& v) {
  auto it = j.find(key);
  if (it != j.end() && !it->is_null()) v = it->get<T>();
}

void read_str(const json& j, const char* key, std::string& v) {
  auto it = j.find(key);
  if (it != j.end() && it->is_string()) v = it->get<std::string>();
}

template <class T>
void read_by_rank(const json& j, const char* key, std::map<int64_t, T>& m) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_object()) return;
  for (const auto& [rank, v] : it->items()) m[std::stoll(rank)] = v.template get<T>();
}

bool has_any(const json& scenario, std::initializer_list<const char*> keys) {
  if (!scenario.is_object()) return false;
  for (const char* k : keys) {
    if (scenario.contains(k)) return true;
  }
  return false;
}

}  // namespace

void to_json(json& j, const LastCollective& v) {
  j = {{"seq", v.seq}, {"name", v.name}, {"step", v.step}, {"left", v.left}};
}
void from_json(const json& j, LastCollective& v) {
  read(j, "seq", v.seq);
  read_str(j, "name", v.name);
  read(j, "step", v.step);
  read(j, "left", v.left);
}

void to_json(json& j, const CollectiveMismatch& v) {
  json ranks = json::array();
  for (const auto& e : v.ranks) {
    ranks.push_back({{"rank", e.rank}, {"step", e.step}, {"name", e.name}});
    if (e.count) ranks.back()["count"] = *e.count;
  }
  j = {{"seq", v.seq}, {"ranks", ranks}, {"diverged", v.diverged}, {"step", v.step}};
}
void from_json(const json& j, CollectiveMismatch& v) {
  read(j, "seq", v.seq);
  if (auto it = j.find("ranks"); it != j.end() && it->is_array()) {
    for (const auto& e : *it) {
      MismatchEntry m;
      read(e, "rank", m.rank);
      read(e, "step", m.step);
      read_str(e, "name", m.name);
      read(e, "count", m.count);
      v.ranks.push_back(std::move(m));
    }
  }
  read(j, "diverged", v.diverged);
  read(j, "step", v.step);
}

void to_json(json& j, const Memory& v) {
  j = {{"source", "VmHWM"},
       {"ranks_measured", v.ranks_measured},
       {"per_rank_max_mib", v.per_rank_max_mib},
       {"per_rank_mean_mib", v.per_rank_mean_mib},
       {"total_mib", v.total_mib},
       {"per_rank_mib", by_rank(v.per_rank_mib)},
       {"measured_by", by_rank(v.measured_by)}};
}
void from_json(const json& j, Memory& v) {
  read(j, "ranks_measured", v.ranks_measured);
  read(j, "per_rank_max_mib", v.per_rank_max_mib);
  read(j, "per_rank_mean_mib", v.per_rank_mean_mib);
  read(j, "total_mib", v.total_mib);
  read_by_rank(j, "per_rank_mib", v.per_rank_mib);
  read_by_rank(j, "measured_by", v.measured_by);
}

void to_json(json& j, const RankStepTime& v) {
  json own = json::object();
  for (size_t k = 0; k < v.own_p50_us.size(); ++k) own[harness::kPhaseKeys[k]] = v.own_p50_us[k];
  j = {{"rank", v.rank},
       {"steps", v.steps},
       {"own_p50_us", std::move(own)},
       {"own_total_p50_us", v.own_total_p50_us},
       {"wait_p50_us", v.wait_p50_us},
       {"run_delay_p50_us", opt(v.run_delay_p50_us)},
       {"score_p50", v.score_p50},
       {"score_max", v.score_max},
       {"slow_steps", v.slow_steps}};
}
void from_json(const json& j, RankStepTime& v) {
  read(j, "rank", v.rank);
  read(j, "steps", v.steps);
  if (auto it = j.find("own_p50_us"); it != j.end() && it->is_object()) {
    for (size_t k = 0; k < v.own_p50_us.size(); ++k)
      read(*it, harness::kPhaseKeys[k], v.own_p50_us[k]);
  }
  read(j, "own_total_p50_us", v.own_total_p50_us);
  read(j, "wait_p50_us", v.wait_p50_us);
  read(j, "run_delay_p50_us", v.run_delay_p50_us);
  read(j, "score_p50", v.score_p50);
  read(j, "score_max", v.score_max);
  read(j, "slow_steps", v.slow_steps);
}

namespace {

using PhasesByStep = std::map<int64_t, harness::StepEndEvent::Phases>;

// The reporting ranks, the steps every one of them logged, and each rank's score at each of
// those steps: what the table and the per-step series are both made of.
struct Scored {
  std::vector<size_t> ranks;                // ranks with any phase times
  std::vector<int64_t> steps;               // logged by all of them, in step order
  std::vector<std::vector<double>> scores;  // [index in ranks][index in steps]
};

double own_total(const harness::StepEndEvent::Phases& p) {
  double t = 0;
  for (int64_t v : p.own_us) t += double(std::max<int64_t>(v, 0));
  return t;
}

Scored score_steps(const std::vector<PhasesByStep>& by_rank) {
  Scored s;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (!by_rank[r].empty()) s.ranks.push_back(r);
  }
  if (s.ranks.empty()) return s;
  // The steps every reporting rank logged: a score compares ranks at the same step.
  for (const auto& [step, p] : by_rank[s.ranks.front()]) {
    bool everywhere = true;
    for (size_t r : s.ranks) everywhere = everywhere && by_rank[r].count(step);
    if (everywhere) s.steps.push_back(step);
  }
  s.scores.resize(s.ranks.size());
  for (int64_t step : s.steps) {
    std::vector<double> totals;
    for (size_t r : s.ranks) totals.push_back(own_total(by_rank[r].at(step)));
    const double median = nanchaos::percentile(totals, 50);
    for (size_t i = 0; i < s.ranks.size(); ++i) {
      s.scores[i].push_back(median > 0 ? totals[i] / median : 1.0);
    }
  }
  return s;
}

}  // namespace

std::vector<RankStepTime> rank_step_times(const std::vector<PhasesByStep>& by_rank) {
  using Phases = harness::StepEndEvent::Phases;
  const Scored sc = score_steps(by_rank);
  std::vector<RankStepTime> out;
  for (size_t i = 0; i < sc.ranks.size(); ++i) {
    RankStepTime row;
    row.rank = int64_t(sc.ranks[i]);
    row.steps = int64_t(sc.steps.size());
    if (sc.steps.empty()) {
      out.push_back(row);
      continue;
    }
    std::array<std::vector<double>, 4> own;
    std::vector<double> totals, waits, delays;
    for (int64_t step : sc.steps) {
      const Phases& p = by_rank[sc.ranks[i]].at(step);
      for (size_t k = 0; k < own.size(); ++k) own[k].push_back(double(p.own_us[k]));
      totals.push_back(own_total(p));
      waits.push_back(double(p.wait_us));
      if (p.run_delay_us) delays.push_back(double(*p.run_delay_us));
    }
    const std::vector<double>& scores = sc.scores[i];
    for (size_t k = 0; k < own.size(); ++k) row.own_p50_us[k] = nanchaos::percentile(own[k], 50);
    row.own_total_p50_us = nanchaos::percentile(totals, 50);
    row.wait_p50_us = nanchaos::percentile(waits, 50);
    if (!delays.empty()) row.run_delay_p50_us = nanchaos::percentile(delays, 50);
    row.score_p50 = nanchaos::percentile(scores, 50);
    row.score_max = *std::max_element(scores.begin(), scores.end());
    row.slow_steps =
        std::count_if(scores.begin(), scores.end(), [](double x) { return x > kSlowScore; });
    out.push_back(row);
  }
  return out;
}

std::optional<StepScores> step_scores(const std::vector<PhasesByStep>& by_rank, size_t max_points) {
  if (max_points == 0) throw std::invalid_argument("step_scores: max_points must be >= 1");
  const Scored sc = score_steps(by_rank);
  if (sc.steps.empty()) return std::nullopt;
  StepScores out;
  const size_t n = sc.steps.size();
  const size_t stride = (n + max_points - 1) / max_points;
  out.stride = int64_t(stride);
  for (size_t b = 0; b < n; b += stride) out.steps.push_back(sc.steps[b]);
  for (size_t i = 0; i < sc.ranks.size(); ++i) {
    out.ranks.push_back(int64_t(sc.ranks[i]));
    std::vector<double> points;
    for (size_t b = 0; b < n; b += stride) {
      const auto first = sc.scores[i].begin() + std::ptrdiff_t(b);
      const double top = *std::max_element(first, first + std::ptrdiff_t(std::min(stride, n - b)));
      points.push_back(std::round(top * 1000.0) / 1000.0);
    }
    out.score.push_back(std::move(points));
  }
  return out;
}

void to_json(json& j, const StepScores& v) {
  j = {{"stride", v.stride}, {"steps", v.steps}, {"ranks", v.ranks}, {"score", v.score}};
}
void from_json(const json& j, StepScores& v) {
  read(j, "stride", v.stride);
  read(j, "steps", v.steps);
  read(j, "ranks", v.ranks);
  read(j, "score", v.score);
}

void to_json(json& j, const LauncherExitFacts& v) {
  j = {{"status", v.status},
       {"signal", str_or_null(v.signal)},
       {"after_ranks_exited", v.after_ranks_exited},
       {"counted", v.counted},
       {"note", str_or_null(v.note)}};
}
void from_json(const json& j, LauncherExitFacts& v) {
  read(j, "status", v.status);
  read_str(j, "signal", v.signal);
  read(j, "after_ranks_exited", v.after_ranks_exited);
  read(j, "counted", v.counted);
  read_str(j, "note", v.note);
}

void to_json(json& j, const ClockOffset& v) {
  j = {{"host", v.host}, {"applied_shift_us", opt(v.applied_shift_us)}};
  if (v.error) {
    j["error"] = *v.error;
  } else {
    j["offset_us"] = v.offset_us;
    j["rtt_us"] = v.rtt_us;
    j["samples"] = v.samples;
  }
}
void from_json(const json& j, ClockOffset& v) {
  read_str(j, "host", v.host);
  read(j, "applied_shift_us", v.applied_shift_us);
  read(j, "error", v.error);
  read(j, "offset_us", v.offset_us);
  read(j, "rtt_us", v.rtt_us);
  read(j, "samples", v.samples);
}

void to_json(json& j, const Launch& v) {
  json loaded = nullptr;
  if (v.checkpoint_loaded) {
    loaded = {{"path", v.checkpoint_loaded->path}, {"step", opt(v.checkpoint_loaded->step)}};
  }
  json rejected = json::array();
  for (const auto& c : v.checkpoints_rejected) {
    rejected.push_back({{"path", c.path}, {"step", opt(c.step)}, {"why", c.why}});
  }
  j = {{"launch", v.launch},
       {"start_ms", v.start_ms},
       {"end_ms", v.end_ms},
       {"outcome", v.outcome},
       {"resumed_from_step", opt(v.resumed_from_step)},
       {"checkpoint_loaded", loaded},
       {"checkpoints_rejected", rejected},
       {"steps_reached", v.steps_reached}};
}
void from_json(const json& j, Launch& v) {
  read(j, "launch", v.launch);
  read(j, "start_ms", v.start_ms);
  read(j, "end_ms", v.end_ms);
  read_str(j, "outcome", v.outcome);
  read(j, "resumed_from_step", v.resumed_from_step);
  if (auto it = j.find("checkpoint_loaded"); it != j.end() && it->is_object()) {
    Launch::Checkpoint c;
    read_str(*it, "path", c.path);
    read(*it, "step", c.step);
    v.checkpoint_loaded = c;
  }
  if (auto it = j.find("checkpoints_rejected"); it != j.end() && it->is_array()) {
    for (const auto& r : *it) {
      Launch::Checkpoint c;
      read_str(r, "path", c.path);
      read(r, "step", c.step);
      read_str(r, "why", c.why);
      v.checkpoints_rejected.push_back(c);
    }
  }
  read(j, "steps_reached", v.steps_reached);
}

void to_json(json& j, const Restart& v) {
  j = {{"after_launch", v.after_launch},
       {"cause", v.cause},
       {"failed_ms", v.failed_ms},
       {"resume_ms", opt(v.resume_ms)},
       {"detect_ms", opt(v.detect_ms)},
       {"teardown_ms", opt(v.teardown_ms)},
       {"relaunch_ms", opt(v.relaunch_ms)},
       {"load_ms", opt(v.load_ms)},
       {"first_step_ms", opt(v.first_step_ms)},
       {"import_ms", opt(v.import_ms)},
       {"steps_lost", opt(v.steps_lost)}};
}
void from_json(const json& j, Restart& v) {
  read(j, "after_launch", v.after_launch);
  read_str(j, "cause", v.cause);
  read(j, "failed_ms", v.failed_ms);
  read(j, "resume_ms", v.resume_ms);
  read(j, "detect_ms", v.detect_ms);
  read(j, "teardown_ms", v.teardown_ms);
  read(j, "relaunch_ms", v.relaunch_ms);
  read(j, "load_ms", v.load_ms);
  read(j, "first_step_ms", v.first_step_ms);
  read(j, "import_ms", v.import_ms);
  read(j, "steps_lost", v.steps_lost);
}

void write_facts(const JobFacts& f, json& s) {
  const PostMortem& pm = f.postmortem;
  s["postmortem"] =
      pm.blame ? json{{"ranks", pm.blame->ranks}, {"cause", pm.blame->cause}} : json(nullptr);
  json last = json::object();
  for (const auto& [rank, c] : pm.last_collective) last[std::to_string(rank)] = opt(c);
  s["last_collective"] = std::move(last);
  s["collective_mismatch"] = opt(pm.collective_mismatch);
  s["absent_ranks"] = pm.absent_ranks;
  s["first_gap_collective"] = opt(pm.first_gap_collective);
  s["dead_ranks"] = pm.dead_ranks;
  s["deadlock"] = pm.deadlock;
  s["longest_collective_wait_ms"] = pm.longest_collective_wait_ms;
  s["abort_latency_ms"] = opt(f.abort_latency_ms);
  s["false_positives"] = f.false_positives;
  s["consistent"] = opt(f.consistent);
  s["recovered"] = f.recovered;
  s["launcher_exit_code"] = f.launcher_exit_code;
  s["launcher_exit"] = f.launcher_exit;
  s["orphans_killed"] = f.orphans_killed;
  s["memory"] = opt(f.memory);
  s["clock_offsets"] = f.clock_offsets.empty() ? json(nullptr) : by_rank(f.clock_offsets);
  s["remote_ranks"] = f.remote_ranks;
  if (f.launches) s["launches"] = *f.launches;
  if (f.restarts) s["restarts"] = *f.restarts;
  if (!f.step_times.empty()) s["step_times"] = f.step_times;
  if (f.step_scores) s["step_scores"] = *f.step_scores;
}

void write_facts(const ControllerFacts& f, json& s) {
  s["job_start_us"] = f.job_start_us;
  s["orphans_left"] = f.orphans_left;
  s["controller"] = {{"vm_rss_kib", f.vm_rss_kib}, {"vm_hwm_kib", f.vm_hwm_kib}, {"fds", f.fds}};
}

void write_facts(const Interpreter& f, json& s) {
  s["python"] = f.python;
  s["torch"] = f.torch;
  if (f.packages) s["python_packages"] = *f.packages;
}

std::optional<JobFacts> read_job_facts(const json& s) {
  if (!has_any(s, {"postmortem", "last_collective", "dead_ranks", "memory", "launcher_exit"})) {
    return std::nullopt;
  }
  JobFacts f;
  PostMortem& pm = f.postmortem;
  if (auto it = s.find("postmortem"); it != s.end() && it->is_object()) {
    Blame b;
    read(*it, "ranks", b.ranks);
    read_str(*it, "cause", b.cause);
    pm.blame = b;
  }
  if (auto it = s.find("last_collective"); it != s.end() && it->is_object()) {
    for (const auto& [rank, c] : it->items()) {
      auto& last = pm.last_collective[std::stoll(rank)];
      if (c.is_object()) last = c.get<LastCollective>();
    }
  }
  read(s, "collective_mismatch", pm.collective_mismatch);
  read(s, "absent_ranks", pm.absent_ranks);
  read(s, "first_gap_collective", pm.first_gap_collective);
  read(s, "dead_ranks", pm.dead_ranks);
  read(s, "deadlock", pm.deadlock);
  read(s, "longest_collective_wait_ms", pm.longest_collective_wait_ms);
  read(s, "abort_latency_ms", f.abort_latency_ms);
  read(s, "false_positives", f.false_positives);
  read(s, "consistent", f.consistent);
  read(s, "recovered", f.recovered);
  read(s, "launcher_exit_code", f.launcher_exit_code);
  read(s, "launcher_exit", f.launcher_exit);
  read(s, "orphans_killed", f.orphans_killed);
  read(s, "memory", f.memory);
  read_by_rank(s, "clock_offsets", f.clock_offsets);
  read(s, "remote_ranks", f.remote_ranks);
  read(s, "launches", f.launches);
  read(s, "restarts", f.restarts);
  read(s, "step_times", f.step_times);
  read(s, "step_scores", f.step_scores);
  return f;
}

std::optional<ControllerFacts> read_controller_facts(const json& s) {
  if (!has_any(s, {"job_start_us", "orphans_left", "controller"})) return std::nullopt;
  ControllerFacts f;
  read(s, "job_start_us", f.job_start_us);
  read(s, "orphans_left", f.orphans_left);
  if (auto it = s.find("controller"); it != s.end() && it->is_object()) {
    read(*it, "vm_rss_kib", f.vm_rss_kib);
    read(*it, "vm_hwm_kib", f.vm_hwm_kib);
    read(*it, "fds", f.fds);
  }
  return f;
}

std::optional<Interpreter> read_interpreter(const json& s) {
  if (!has_any(s, {"python", "torch"})) return std::nullopt;
  Interpreter f;
  read_str(s, "python", f.python);
  read_str(s, "torch", f.torch);
  read(s, "python_packages", f.packages);
  return f;
}

}  // namespace nanchaos::results
