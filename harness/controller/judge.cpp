// Judging a job from evidence only: the per-rank event logs and how the processes ended.
#include "harness/controller/judge.h"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "harness/evidence/clock_sync.h"
#include "harness/evidence/events.h"
#include "harness/scenario/keys.h"
#include "harness/scenario/scenario_schema.h"

namespace nanchaos::harness {
namespace {

using nlohmann::json;
using results::Check;
using results::Detection;

// An integer field of an event, or `def` when absent or null. A float is accepted when it fits:
// nlohmann's value<int64_t>() of 2e120 is undefined behaviour (found by nanchaos_fuzz_report).
// Other types throw json::type_error as value() does (judge() turns that into an error verdict).
int64_t int_field(const json& e, const char* key, int64_t def) {
  auto it = e.find(key);
  if (it == e.end() || it->is_null()) return def;
  if (it->is_number_float()) {
    const double d = it->get<double>();
    return std::isfinite(d) && d >= -9.2e18 && d <= 9.2e18 ? int64_t(d) : def;
  }
  return e.value(key, def);
}

struct RankLog {
  std::vector<json> events;
  bool started = false;
  bool agent = false;                       // external: the agent's bootstrap loaded (`agent`)
  std::optional<std::string> attach_error;  // external: the agent's first attach_error reason
  bool has_final = false;
  json final_ev;
  std::optional<json> abort_ev;
  std::optional<int> exit_code;
  std::optional<int64_t> vm_hwm_kib;  // peak RSS the rank logged in its exit event
  int64_t last_t = 0;
  int64_t steps_done = 0;                  // highest step_end step + 1
  std::map<int64_t, std::string> actions;  // step -> update/skip/early_return
  std::map<int64_t, json> coll_enter;      // seq -> event
  std::set<int64_t> coll_left;
  std::map<int64_t, int64_t> coll_failed_t;  // external: seq -> t_us of a leave with an error
  std::optional<std::string> exception;      // external: the first uncaught exception's text
  json start_ev;  // external: the modules (and probes that ran) and parameters the agent found
  std::optional<json> log_error;       // the log could not grow: events after it were lost
  std::optional<int64_t> log_dropped;  // how many (written when the rank closed its log)
  std::string host;                    // from its first event
  json clock;                          // its `clock` event (null: none)
  std::optional<int64_t> shift_us;     // added to its t_us (a rank on another host)
};

// A rank on another host than the controller writes times on that host's CLOCK_MONOTONIC: move
// them onto the controller's with the offset it measured at start (clock_sync.h). Ranks on the
// controller's host share its clock and are left as they are (the measurement would only add its
// own error, up to rtt/2). A remote rank with no usable `clock` event keeps its times (and
// clock_offsets says so).
void place_on_controller_timeline(std::vector<json>& events, const JobResult& job,
                                  std::string& host, json& clock, std::optional<int64_t>& shift) {
  for (const auto& e : events) {
    const std::string ev = e.value("ev", "");
    if (host.empty() && (ev == "launch" || ev == "start")) host = e.value("host", std::string());
    if (ev == "clock" && clock.is_null()) clock = e;
  }
  if (job.host.empty() || host.empty() || host == job.host) return;
  shift = timeline_shift_us(clock, job.real_minus_mono_us);
  if (!shift) return;
  for (auto& e : events) {
    if (e.contains("t_us") && e["t_us"].is_number_integer()) {
      e["t_us"] = e["t_us"].get<int64_t>() + *shift;
    }
  }
}

// report.json `clock_offsets`: per rank that logged a `clock` event, what it measured and the
// shift the judge applied (null: its events were left on their own clock).
json clock_offsets_json(const std::vector<RankLog>& logs) {
  json out = json::object();
  for (size_t r = 0; r < logs.size(); ++r) {
    const auto& c = logs[r].clock;
    if (!c.is_object()) continue;
    json one = {{"host", logs[r].host},
                {"applied_shift_us", logs[r].shift_us ? json(*logs[r].shift_us) : json(nullptr)}};
    if (c.contains("error")) {
      one["error"] = c["error"];
    } else {
      one["offset_us"] = c.value("offset_us", int64_t(0));
      one["rtt_us"] = c.value("rtt_us", int64_t(0));
      one["samples"] = c.value("samples", 0);
    }
    out[std::to_string(r)] = one;
  }
  return out.empty() ? json(nullptr) : out;
}

// A rank the controller could not pid-watch (on another host) whose last event is a `crash`
// injection: it died there.
bool died_by_crash_fault(const RankLog& l) {
  return !l.events.empty() && l.events.back().value("ev", "") == "inject" &&
         l.events.back().value("kind", "") == "crash";
}

RankLog read_rank(const std::string& run_dir, int rank, const JobResult& job) {
  RankLog r;
  r.events = read_events(fmt::format("{}/events/rank-{}.jsonl", run_dir, rank));
  place_on_controller_timeline(r.events, job, r.host, r.clock, r.shift_us);
  for (const auto& e : r.events) {
    const std::string ev = e.value("ev", "");
    r.last_t = std::max<int64_t>(r.last_t, int_field(e, "t_us", 0));
    if (ev == "start") {
      r.started = true;
      r.start_ev = e;
    } else if (ev == "probe" && r.start_ev.is_object()) {
      r.start_ev["modules"].push_back(e.value("name", ""));  // a probe is a module to target
    } else if (ev == "exception" && !r.exception)
      r.exception = e.value("message", std::string("an exception"));
    else if (ev == "agent")
      r.agent = true;
    else if (ev == "log_error" && !r.log_error)
      r.log_error = e;
    else if (ev == "log_dropped")
      r.log_dropped = int_field(e, "count", 0);
    else if (ev == "attach_error" && !r.attach_error)
      r.attach_error = e.value("reason", std::string("attach_error"));
    else if (ev == "final") {
      r.has_final = true;
      r.final_ev = e;
    } else if (ev == "abort")
      r.abort_ev = e;
    else if (ev == "exit") {
      r.exit_code = int(int_field(e, "code", -1));
      if (e.contains("vm_hwm_kib")) r.vm_hwm_kib = int_field(e, "vm_hwm_kib", 0);
    } else if (ev == "step_end") {
      const int64_t st = int_field(e, "step", 0);
      r.steps_done = std::max(r.steps_done, st + 1);
      r.actions[st] = e.value("action", "");
    } else if (ev == "coll_enter")
      r.coll_enter[int_field(e, "seq", 0)] = e;
    else if (ev == "coll_leave") {
      r.coll_left.insert(int_field(e, "seq", 0));
      if (e.value("status", "ok") == "error")
        r.coll_failed_t[int_field(e, "seq", 0)] = int_field(e, "t_us", 0);
    }
  }
  return r;
}

std::string last_nonempty_line(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string last;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last;
}

// Why an external job's rank never got to `start` (docs/scenario-format.md "External jobs").
std::string external_setup_error(const std::vector<RankLog>& logs, const JobResult& job,
                                 const std::string& run_dir) {
  const std::string tail = last_nonempty_line(run_dir + "/ranks.log");
  const std::string exited = fmt::format("; launcher exit status {}", job.exit_code) +
                             (tail.empty() ? "" : "; last line of ranks.log: " + tail);
  for (size_t r = 0; r < logs.size(); ++r) {
    if (logs[r].attach_error) return fmt::format("rank {}: {}", r, *logs[r].attach_error);
  }
  if (!job.attach_failure.empty()) return job.attach_failure + exited;
  for (size_t r = 0; r < logs.size(); ++r) {
    if (!logs[r].agent) {
      return fmt::format(
                 "rank {}: the nanchaos agent never loaded (no `agent` event): the command is not "
                 "a Python program or its interpreter did not run the bootstrap",
                 r) +
             exited;
    }
  }
  for (size_t r = 0; r < logs.size(); ++r) {
    if (!logs[r].started && logs[r].exception) {
      return fmt::format("rank {}: the job raised before the agent attached to a model: {}", r,
                         *logs[r].exception);
    }
  }
  for (size_t r = 0; r < logs.size(); ++r) {
    if (!logs[r].started) {
      return fmt::format(
                 "rank {}: the agent loaded but never attached to a model (no "
                 "DistributedDataParallel and no optimizer created)",
                 r) +
             exited;
    }
  }
  return "";
}

// Why a target may have matched nothing. For an external job rank 0's `start` lists the model's
// modules and parameters: a target none of them matches gets the nearest name (the DDP
// `module.` prefix is the classic slip); otherwise the generic advice.
std::string target_hint(const std::string& target, const json& start) {
  const std::string generic = "check the name with `nanchaos targets`";
  const auto colon = target.find(':');
  if (!start.is_object() || colon == std::string::npos) return generic;
  const std::string where = target.substr(0, colon), pattern = target.substr(colon + 1);
  const char* list = where == "activation" ? "modules" : "parameters";
  std::vector<std::string> names;
  for (const auto& n : start.value(list, json::array())) {
    if (n.is_string()) names.push_back(n.get<std::string>());
  }
  if (names.empty()) return generic;
  for (const auto& n : names) {
    if (match_target(pattern, n)) return generic;  // it matched: the module never ran in training
  }
  const std::string near = nearest(pattern, names);
  return fmt::format("it matches no {} of the model{}; `nanchaos targets` lists them",
                     where == "activation" ? "module (nor a probe that ran)" : "parameter",
                     near.empty() ? "" : fmt::format(" (did you mean {}:{}?)", where, near));
}

// What the ranks of a job that crashed or hung said last, for a failed `outcome` check: the first
// uncaught exception (external jobs), the ranks that ended with no exit record, how the launcher
// ended.
std::string last_words(const std::vector<RankLog>& logs, const JobResult& job) {
  std::vector<std::string> said;
  for (size_t r = 0; r < logs.size(); ++r) {
    if (logs[r].exception) said.push_back(fmt::format("rank {} raised {}", r, *logs[r].exception));
  }
  std::vector<size_t> silent;
  for (size_t r = 0; r < logs.size(); ++r) {
    if (logs[r].started && !logs[r].exit_code && !logs[r].abort_ev) silent.push_back(r);
  }
  if (!silent.empty()) {
    said.push_back(fmt::format("rank(s) {} ended with no exit record", fmt::join(silent, ", ")));
  }
  if (job.timed_out) {
    said.push_back("the harness killed the job at [job].timeout_ms");
  } else if (job.exit_code > 128) {
    said.push_back(fmt::format("launcher exit status {} (signal {}: {})", job.exit_code,
                               job.exit_code - 128, strsignal(job.exit_code - 128)));
  } else {
    said.push_back(fmt::format("launcher exit status {}", job.exit_code));
  }
  return fmt::format("{}", fmt::join(said, "; "));
}

std::string first_error_line(const std::string& log_path) {
  std::ifstream in(log_path);
  for (std::string line; std::getline(in, line);) {
    if (line.find("error:") != std::string::npos) return line;
  }
  return "";
}

json ranks_json(const std::vector<int64_t>& r) {
  if (r.empty()) return nullptr;
  if (r.size() == 1) return r[0];
  return r;
}

bool finite_json(const json& j) { return j.is_number() && std::isfinite(j.get<double>()); }

// Per-rank peak memory (VmHWM, proc_status.h): the rank's own exit-event figure, else the
// controller's last sample of its /proc status (ranks on its host only). `measured_by` says which
// for each rank: "exit_event", "controller_sample", or why none ("remote, no exit event": a rank
// on another host that did not reach its exit record). Null when no rank could be measured.
json memory_json(const std::vector<RankLog>& logs, const JobResult& job) {
  json per_rank = json::object(), measured_by = json::object();
  double max_mib = 0, total_mib = 0;
  for (size_t r = 0; r < logs.size(); ++r) {
    int64_t kib = logs[r].vm_hwm_kib.value_or(0);
    std::string how = kib > 0 ? "exit_event" : "";
    if (auto it = job.rank_vm_hwm_kib.find(int(r)); it != job.rank_vm_hwm_kib.end()) {
      if (it->second > kib) how = "controller_sample";
      kib = std::max(kib, it->second);
    }
    if (how.empty()) {
      how = job.remote_ranks.count(int(r)) ? "none (remote, no exit event)" : "none";
    }
    measured_by[std::to_string(r)] = how;
    if (kib <= 0) continue;
    const double mib = double(kib) / 1024.0;
    per_rank[std::to_string(r)] = std::round(mib * 10) / 10;
    max_mib = std::max(max_mib, mib);
    total_mib += mib;
  }
  if (per_rank.empty()) return nullptr;
  const auto n = per_rank.size();
  auto round1 = [](double v) { return std::round(v * 10) / 10; };
  return {{"source", "VmHWM"},
          {"ranks_measured", n},
          {"per_rank_max_mib", round1(max_mib)},
          {"per_rank_mean_mib", round1(total_mib / double(n))},
          {"total_mib", round1(total_mib)},
          {"per_rank_mib", per_rank},
          {"measured_by", measured_by}};
}

}  // namespace

namespace {

// Below this much free space in the run folder, a rank log without an exit record is taken as
// evidence lost to a full disk rather than a crash: a 256-KiB block (events.h) cannot be had.
constexpr uint64_t kMinFreeBytes = uint64_t(256) << 10;

// Why the evidence of a job is incomplete ("" when it is not): a rank's log that could not grow
// (its own log_error, events/h), or a run folder on a filesystem with no room left while a
// rank's log lacks its exit record (a log that could not even be created, an agent's writes
// refused before any reserve existed). Adds the dropped-event count to `dropped`.
std::string evidence_lost(const std::vector<RankLog>& logs, const std::string& run_dir,
                          int64_t& dropped) {
  std::string why;
  for (size_t r = 0; r < logs.size(); ++r) {
    const auto& l = logs[r];
    if (!l.log_error) continue;
    if (l.log_dropped) dropped += *l.log_dropped;
    if (!why.empty()) continue;  // name the first rank; count them all
    const json& e = *l.log_error;
    why = fmt::format("evidence lost: rank {}: cannot grow its event log {}: {} (errno {}, {}); {}",
                      r, e.value("path", std::string("?")), e.value("error", std::string("?")),
                      int_field(e, "errno", 0), e.value("op", std::string("?")),
                      l.log_dropped ? fmt::format("{} later event(s) dropped", *l.log_dropped)
                                    : std::string("later events dropped (count unknown: the rank "
                                                  "did not close its log)"));
  }
  if (!why.empty()) return why;
  bool incomplete = false;
  for (const auto& l : logs) incomplete = incomplete || !l.exit_code;
  struct statvfs fs {};
  if (incomplete && statvfs(run_dir.c_str(), &fs) == 0 &&
      uint64_t(fs.f_bavail) * fs.f_frsize < kMinFreeBytes) {
    return fmt::format(
        "evidence lost: the filesystem of {} is full ({} bytes free) and a rank's event log has "
        "no exit record",
        run_dir, uint64_t(fs.f_bavail) * fs.f_frsize);
  }
  return "";
}

results::ScenarioResult judge_logs(const Scenario& s, const std::string& run_dir,
                                   const JobResult& job) {
  results::ScenarioResult res = result_for(s, run_dir);
  res.wall_ms = double(job.t_end_us - job.t0_us) / 1000.0;
  const int world = int(s.job.ranks);
  std::vector<RankLog> logs;
  for (int r = 0; r < world; ++r) logs.push_back(read_rank(run_dir, r, job));
  const double t0 = double(job.t0_us);
  auto ms_since_start = [&](int64_t t) { return (double(t) - t0) / 1000.0; };

  // --- How the job ended ---------------------------------------------------------------------
  bool all_final = true, any_abort = false, all_exit0 = true;
  for (const auto& l : logs) {
    all_final = all_final && l.has_final;
    any_abort = any_abort || l.abort_ev.has_value();
    all_exit0 = all_exit0 && l.exit_code && *l.exit_code == 0;
  }
  if (job.timed_out)
    res.outcome = "hung";
  else if (all_final && all_exit0 && !any_abort && job.exit_code == 0)
    res.outcome = "completed";
  else if (any_abort)
    res.outcome = "aborted";
  else
    res.outcome = "crashed";

  // --- Injections ----------------------------------------------------------------------------
  std::optional<int64_t> first_fault_step;
  std::optional<int64_t> first_inject_t;
  std::set<int> fired;
  for (int r = 0; r < world; ++r) {
    for (const auto& e : logs[r].events) {
      if (e.value("ev", "") != "inject") continue;
      results::Injection inj;
      inj.fault = int(int_field(e, "fault", 0));
      inj.kind = e.value("kind", "");
      inj.rank = r;
      inj.step = int_field(e, "step", 0);
      inj.target = e.value("target", "");
      inj.t_ms = ms_since_start(int_field(e, "t_us", 0));
      inj.replay = e.value("replay", false);
      fired.insert(inj.fault);
      if (!first_fault_step || inj.step < *first_fault_step) first_fault_step = inj.step;
      const int64_t t = int_field(e, "t_us", 0);
      if (!first_inject_t || t < *first_inject_t) first_inject_t = t;
      res.injections.push_back(inj);
    }
  }
  std::sort(res.injections.begin(), res.injections.end(),
            [](const auto& a, const auto& b) { return a.t_ms < b.t_ms; });

  // --- Post-mortem: collectives each rank was in, absent and dead ranks ------------------------
  json last_coll = json::object();
  int64_t first_gap_seq = -1;
  std::vector<int64_t> absent;
  {
    // Only sequence numbers some rank entered can be a gap (one no rank entered is not): walking
    // 0..max seq instead hung on a corrupted `"seq": 1e15` (found by nanchaos_fuzz_report).
    std::set<int64_t> seqs;
    for (const auto& l : logs) {
      for (const auto& entry : l.coll_enter) {
        if (entry.first >= 0) seqs.insert(entry.first);
      }
    }
    for (int64_t k : seqs) {
      std::vector<int64_t> missing;
      for (int r = 0; r < world; ++r) {
        if (!logs[r].coll_enter.count(k)) missing.push_back(r);
      }
      if (!missing.empty() && int(missing.size()) < world) {
        first_gap_seq = k;
        absent = missing;
        break;
      }
    }
    for (int r = 0; r < world; ++r) {
      const auto& l = logs[r];
      if (l.coll_enter.empty()) {
        last_coll[std::to_string(r)] = nullptr;
        continue;
      }
      const auto& [seq, e] = *l.coll_enter.rbegin();
      last_coll[std::to_string(r)] = {{"seq", seq},
                                      {"name", e.value("name", "")},
                                      {"step", int_field(e, "step", 0)},
                                      {"left", l.coll_left.count(seq) > 0}};
    }
  }
  // Sequence mismatch: the same collective number entered at different steps or names.
  json mismatch = nullptr;
  for (int64_t k = 0; mismatch.is_null(); ++k) {
    std::set<std::pair<int64_t, std::string>> seen;
    bool any = false;
    for (const auto& l : logs) {
      auto it = l.coll_enter.find(k);
      if (it == l.coll_enter.end()) continue;
      any = true;
      seen.insert({int_field(it->second, "step", 0), it->second.value("name", "")});
    }
    if (!any) break;
    if (seen.size() > 1) {
      json ranks = json::array();
      for (int r = 0; r < world; ++r) {
        auto it = logs[r].coll_enter.find(k);
        if (it != logs[r].coll_enter.end()) {
          ranks.push_back({{"rank", r},
                           {"step", int_field(it->second, "step", 0)},
                           {"name", it->second.value("name", "")}});
        }
      }
      mismatch = {{"seq", k}, {"ranks", ranks}};
    }
  }
  // Dead ranks (crashed jobs): the ones that left no exit or abort record and whose process the
  // controller saw disappear first. When every process vanished within one poll (the launcher tore
  // the job down at once), the flight-recorder evidence decides: the dead are those absent from
  // collective #k.
  std::vector<int64_t> dead;
  if (res.outcome == "crashed") {
    std::vector<int64_t> silent;
    for (int r = 0; r < world; ++r) {
      if (logs[r].started && !logs[r].exit_code && !logs[r].abort_ev) silent.push_back(r);
    }
    int64_t earliest = std::numeric_limits<int64_t>::max();
    for (int64_t r : silent) {
      auto it = job.rank_gone_us.find(int(r));
      if (it != job.rank_gone_us.end()) earliest = std::min(earliest, it->second);
    }
    constexpr int64_t kPollSlackUs = 5000;
    // Remote ranks have no pid watch: a crash fault as their last words says who died; without
    // one, they count as gone with the first (the collective record below narrows it down).
    std::vector<int64_t> remote_crashed;
    for (int64_t r : silent) {
      if (job.remote_ranks.count(int(r)) && died_by_crash_fault(logs[size_t(r)]))
        remote_crashed.push_back(r);
    }
    for (int64_t r : silent) {
      auto it = job.rank_gone_us.find(int(r));
      if (it == job.rank_gone_us.end() || it->second <= earliest + kPollSlackUs) dead.push_back(r);
    }
    if (!remote_crashed.empty()) dead = remote_crashed;
    if (dead.size() > 1 && !absent.empty()) {
      std::vector<int64_t> both;
      for (int64_t r : dead) {
        if (std::find(absent.begin(), absent.end(), r) != absent.end()) both.push_back(r);
      }
      if (!both.empty()) dead = both;
    }
  } else if (res.outcome == "aborted") {
    // The watchdog can beat the launcher's teardown of a dead rank (a short
    // collective_timeout_ms): the survivors abort, and the dead are the silent ranks (no exit or
    // abort record) whose process was gone before the first rank logged its abort.
    int64_t first_abort = std::numeric_limits<int64_t>::max();
    for (int r = 0; r < world; ++r) {
      if (logs[r].abort_ev)
        first_abort = std::min(first_abort, logs[r].abort_ev->value("t_us", first_abort));
    }
    constexpr int64_t kPollUs = 10000;  // the controller's pid watch polls every 10 ms
    for (int r = 0; r < world; ++r) {
      if (!logs[r].started || logs[r].exit_code || logs[r].abort_ev) continue;
      auto it = job.rank_gone_us.find(r);
      if (it != job.rank_gone_us.end() && it->second + kPollUs < first_abort) {
        dead.push_back(r);
      } else if (job.remote_ranks.count(r) && died_by_crash_fault(logs[size_t(r)])) {
        dead.push_back(r);  // not pid-watched (another host): its last words decide
      }
    }
  }
  // Deadlock: some rank waited in a collective past collective_timeout_ms + 1 s.
  bool deadlock = false;
  double longest_wait_ms = 0;
  for (const auto& l : logs) {
    for (const auto& [seq, e] : l.coll_enter) {
      // An external job's collective that ended in an error (its process-group timeout fired,
      // the peer's connection closed) was a wait as long as it lasted.
      const auto failed = l.coll_failed_t.find(seq);
      if (l.coll_left.count(seq) && (!s.job.external() || failed == l.coll_failed_t.end()))
        continue;
      const int64_t end = l.coll_left.count(seq) ? failed->second
                          : l.exit_code          ? l.last_t
                                                 : job.t_end_us;
      const double waited = double(end - int_field(e, "t_us", 0)) / 1000.0;
      longest_wait_ms = std::max(longest_wait_ms, waited);
      if (waited > double(s.detectors.collective_timeout_ms) + 1000.0) deadlock = true;
    }
  }

  // --- Detections ----------------------------------------------------------------------------
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
            const bool crashed = !l.events.empty() && l.events.back().value("ev", "") == "inject" &&
                                 l.events.back().value("kind", "") == "crash";
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

  // --- End state -----------------------------------------------------------------------------
  int64_t steps_completed = std::numeric_limits<int64_t>::max();
  for (const auto& l : logs) steps_completed = std::min(steps_completed, l.steps_done);
  res.steps_completed = world > 0 ? steps_completed : 0;
  bool eval_finite = all_final, params_finite = all_final, diverged = false;
  std::optional<bool> consistent;
  if (all_final) {
    // value(), not operator[]: a const json's [] on a missing key is undefined behaviour (a
    // `final` event without eval_loss read freed memory; found by nanchaos_fuzz_report).
    const json& f0 = logs[0].final_ev;
    const json eval0 = f0.value("eval_loss", json()),
               initial0 = f0.value("initial_eval_loss", json());
    if (finite_json(eval0))
      res.final_loss = eval0.get<double>();
    else
      res.final_loss = std::numeric_limits<double>::quiet_NaN();
    bool same = true;
    for (const auto& l : logs) {
      eval_finite = eval_finite && finite_json(l.final_ev.value("eval_loss", json()));
      params_finite = params_finite && l.final_ev.value("params_finite", false);
      same = same && l.final_ev.value("params_hash", "") == f0.value("params_hash", "") &&
             l.final_ev.value("optim_hash", "") == f0.value("optim_hash", "") &&
             l.final_ev.value("loss_scale", json()) == f0.value("loss_scale", json()) &&
             l.actions == logs[0].actions;
    }
    consistent = same;
    if (eval_finite && finite_json(initial0)) {
      diverged = *res.final_loss > 1.5 * initial0.get<double>();
    }
  }
  const bool recovered = res.outcome == "completed" && res.steps_completed == s.job.steps &&
                         eval_finite && params_finite;
  const bool detected = res.first_detection.has_value();

  if (!s.faults.empty()) {
    if (res.outcome == "hung" || deadlock)
      res.fault_outcome = "hang";
    else if (detected)
      res.fault_outcome = recovered ? "detected_recovered" : "detected_unrecovered";
    else if (!recovered || diverged || (consistent && !*consistent))
      res.fault_outcome = "silent_corruption";
    else
      res.fault_outcome = "masked";
  }

  // Blame: the stack's first detection, else the harness's post-mortem.
  std::vector<int64_t> blamed;
  std::string blamed_cause;
  if (res.first_detection) {
    blamed = res.first_detection->ranks;
    blamed_cause = res.first_detection->cause;
  } else if (!dead.empty()) {
    blamed = dead;
    blamed_cause = "rank_failure";
  } else if (!absent.empty() && res.outcome != "completed") {
    blamed = absent;
    blamed_cause = "hang";
  }
  const double abort_ms = first_inject_t ? double(job.t_end_us - *first_inject_t) / 1000.0 : -1;

  res.extra["postmortem"] = nullptr;
  if (!res.first_detection && !blamed.empty()) {
    res.extra["postmortem"] = {{"ranks", blamed}, {"cause", blamed_cause}};
  }
  res.extra["last_collective"] = last_coll;
  res.extra["collective_mismatch"] = mismatch;
  res.extra["absent_ranks"] = absent;
  res.extra["first_gap_collective"] = first_gap_seq >= 0 ? json(first_gap_seq) : json(nullptr);
  res.extra["dead_ranks"] = dead;
  res.extra["deadlock"] = deadlock;
  res.extra["longest_collective_wait_ms"] = longest_wait_ms;
  res.extra["abort_latency_ms"] =
      ((res.outcome == "aborted" || res.outcome == "crashed") && abort_ms >= 0) ? json(abort_ms)
                                                                                : json(nullptr);
  res.extra["false_positives"] = false_positives;
  res.extra["consistent"] = consistent ? json(*consistent) : json(nullptr);
  res.extra["recovered"] = recovered;
  res.extra["launcher_exit_code"] = job.exit_code;
  res.extra["orphans_killed"] = job.orphans_killed;
  res.extra["memory"] = memory_json(logs, job);
  res.extra["clock_offsets"] = clock_offsets_json(logs);
  res.extra["remote_ranks"] = job.remote_ranks;

  // --- [expect] ------------------------------------------------------------------------------
  const auto& ex = s.expect;
  auto add = [&](const std::string& key, json expected, json actual, bool pass) {
    res.checks.push_back(Check{key, std::move(expected), std::move(actual), pass});
  };
  const auto& fd = res.first_detection;
  if (ex.detected) add("detected", *ex.detected, detected, detected == *ex.detected);
  if (ex.first_detector) {
    add("first_detector", *ex.first_detector, fd ? json(fd->detector) : json(nullptr),
        fd && fd->detector == *ex.first_detector);
  }
  if (ex.within_steps) {
    add("within_steps", *ex.within_steps, fd ? json(*fd->latency_steps) : json(nullptr),
        fd && *fd->latency_steps <= *ex.within_steps);
  }
  if (ex.within_ms) {
    const bool have = fd && fd->latency_ms;
    add("within_ms", *ex.within_ms, have ? json(*fd->latency_ms) : json(nullptr),
        have && *fd->latency_ms <= *ex.within_ms);
  }
  if (ex.rank) {
    auto want = *ex.rank;
    std::sort(want.begin(), want.end());
    auto got = blamed;
    std::sort(got.begin(), got.end());
    add("rank", ranks_json(want), ranks_json(got), !got.empty() && want == got);
  }
  if (ex.layer) {
    const std::string got = fd ? fd->layer : "";
    add("layer", *ex.layer, fd ? json(got) : json(nullptr),
        fd && !got.empty() && got.rfind(*ex.layer, 0) == 0);
  }
  if (ex.cause) {
    add("cause", *ex.cause, blamed_cause.empty() ? json(nullptr) : json(blamed_cause),
        blamed_cause == *ex.cause);
  }
  if (ex.transient) {
    const bool have = fd && fd->transient;
    add("transient", *ex.transient, have ? json(*fd->transient) : json(nullptr),
        have && *fd->transient == *ex.transient);
  }
  if (ex.outcome) {
    add("outcome", *ex.outcome, res.outcome, res.outcome == *ex.outcome);
  } else if (res.outcome == "crashed" || res.outcome == "hung") {
    // No unexplained crash passes: a job that crashed or had to be killed, with no `crash` or
    // `hang` fault that fired to explain it, fails `outcome` even when [expect] did not ask (a
    // rank killed from outside, a std::bad_alloc, a stack that raised). Say what the ranks said.
    bool explained = false;
    for (const auto& inj : res.injections) explained |= inj.kind == "crash" || inj.kind == "hang";
    if (!explained) {
      add("outcome", "completed (no crash or hang fault explains another outcome)",
          res.outcome + ": " + last_words(logs, job), false);
    }
  }
  add("deadlock", ex.deadlock, deadlock, deadlock == ex.deadlock);
  if (ex.abort_within_ms) {
    // For a job that ended early: an abort, or a crash the launcher tore down.
    const bool ended_early = res.outcome == "aborted" || res.outcome == "crashed";
    const bool ok = ended_early && abort_ms >= 0 && abort_ms <= *ex.abort_within_ms;
    add("abort_within_ms", *ex.abort_within_ms, abort_ms >= 0 ? json(abort_ms) : json(nullptr), ok);
  }
  if (ex.recovered) add("recovered", *ex.recovered, recovered, recovered == *ex.recovered);
  if (ex.final_loss_max) {
    const bool have = res.final_loss && std::isfinite(*res.final_loss);
    add("final_loss_max", *ex.final_loss_max, have ? json(*res.final_loss) : json(nullptr),
        have && *res.final_loss <= *ex.final_loss_max);
  }
  if (ex.consistent || res.outcome == "completed") {
    const bool want = ex.consistent.value_or(true);
    add("consistent", want, consistent ? json(*consistent) : json(nullptr),
        consistent && *consistent == want);
  }
  if (ex.fault_outcome) {
    add("fault_outcome", *ex.fault_outcome, res.fault_outcome,
        res.fault_outcome == *ex.fault_outcome);
  }
  add("max_false_positives", ex.max_false_positives, false_positives,
      false_positives <= ex.max_false_positives);

  // --- Verdict -------------------------------------------------------------------------------
  std::vector<std::string> unverified;
  int64_t most_steps = 0;
  for (const auto& l : logs) most_steps = std::max(most_steps, l.steps_done);
  for (const auto& f : s.faults) {
    if (!fired.count(f.index) && f.probability >= 1.0) {
      std::string what = fmt::format("[[fault]] #{} ({}, step {}", f.index + 1, f.kind, f.step);
      if (res.outcome == "completed" && most_steps <= f.step) {
        what +=
            fmt::format(": the job ran {} iteration(s), so step {} never came", most_steps, f.step);
      } else if (f.params.has("target")) {
        what +=
            ", target " + f.params.get_string("target") + ": " +
            target_hint(f.params.get_string("target"), logs.empty() ? json() : logs[0].start_ev);
      }
      unverified.push_back(what + ")");
    }
  }
  bool setup_failed = false;
  for (const auto& l : logs) setup_failed = setup_failed || !l.started;
  const std::string lost = evidence_lost(logs, run_dir, res.dropped_events);
  const std::string err = first_error_line(run_dir + "/ranks.log");
  const std::string external_err = s.job.external() && setup_failed && res.outcome != "completed"
                                       ? external_setup_error(logs, job, run_dir)
                                       : "";
  if (!lost.empty()) {
    // Checks judged on a partial record mean nothing: neither pass nor fail.
    res.verdict = "error";
    res.reason = lost;
  } else if (setup_failed && res.outcome != "completed") {
    res.verdict = "error";
    if (!external_err.empty()) {
      res.reason = external_err;
    } else if (!err.empty()) {
      res.reason = err;
    } else if (job.timed_out) {
      res.reason = fmt::format("[job].timeout_ms ({} ms) expired before every rank started",
                               s.job.timeout_ms);
    } else {
      res.reason = "a rank never started; see " + run_dir + "/ranks.log";
    }
  } else if (!unverified.empty()) {
    res.verdict = "error";
    res.reason = "injection not verified: ";
    for (size_t i = 0; i < unverified.size(); ++i) {
      res.reason += (i ? ", " : "") + unverified[i] + " never fired";
    }
  } else {
    std::string failed;
    for (const auto& c : res.checks) {
      if (c.pass) continue;
      failed += fmt::format("{}{}: expected {}, got {}", failed.empty() ? "" : "; ", c.key,
                            c.expected.dump(), c.actual.dump());
    }
    res.verdict = failed.empty() ? "pass" : "fail";
    res.reason = failed;
  }
  return res;
}

}  // namespace

// An event whose field has the wrong type (`"step": "x"`: a corrupted or foreign log) makes
// nlohmann's value() throw; the scenario is then an error naming the folder, never a crash of
// the run (found by nanchaos_fuzz_report, docs/fuzzing.md).
results::ScenarioResult result_for(const Scenario& s, const std::string& run_dir) {
  results::ScenarioResult res;
  res.name = s.name;
  res.file = s.file;
  res.seed = s.seed;
  res.ranks = s.job.ranks;
  res.run_dir = run_dir;
  return res;
}

results::ScenarioResult judge(const Scenario& s, const std::string& run_dir, const JobResult& job) {
  try {
    return judge_logs(s, run_dir, job);
  } catch (const nlohmann::json::exception& e) {
    results::ScenarioResult res = result_for(s, run_dir);
    res.wall_ms = double(job.t_end_us - job.t0_us) / 1000.0;
    res.verdict = "error";
    res.reason = fmt::format(
        "cannot judge: an event in {}/events has a field of the wrong type: {}", run_dir, e.what());
    return res;
  }
}

}  // namespace nanchaos::harness
