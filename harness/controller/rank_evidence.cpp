// Reading one rank's event log into a RankEvidence, and the report facts that come straight from
// the per-rank evidence: clock offsets, peak memory, evidence lost to a full disk.
#include "harness/controller/rank_evidence.h"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <vector>

#include "harness/evidence/clock_sync.h"
#include "harness/evidence/event_paths.h"
#include "harness/evidence/events.h"
#include "harness/evidence/proc_watch.h"

namespace nanchaos::harness {
namespace {

using nlohmann::json;

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

// Below this much free space in the run folder, a rank log without an exit record is taken as
// evidence lost to a full disk rather than a crash: a 256-KiB block (events.h) cannot be had.
constexpr uint64_t kMinFreeBytes = uint64_t(256) << 10;

// The events the judge reads by type, and the bookkeeping they feed.
struct TypedReader {
  RankEvidence& r;
  void operator()(const OtherEvent&) {}  // read from the JSON (read_rank_evidence)
  void operator()(const StepBeginEvent& e) {
    r.first_step = std::min(r.first_step.value_or(e.step), e.step);
  }
  void operator()(const FinalEvent& e) { r.final = e; }
  void operator()(const AbortEvent& e) { r.abort = e; }
  void operator()(const ExitEvent& e) {
    r.exit_code = e.code;
    if (e.vm_hwm_kib) r.vm_hwm_kib = e.vm_hwm_kib;
  }
  void operator()(const StepEndEvent& e) {
    if (!r.first_step_end_t) r.first_step_end_t = e.t_us;
    r.steps_done = std::max(r.steps_done, e.step + 1);
    r.actions[e.step] = e.action;
    if (e.phases) r.phases[e.step] = *e.phases;
  }
  void operator()(const CollEnterEvent& e) { r.coll_enter[e.seq] = e; }
  void operator()(const CollLeaveEvent& e) {
    r.coll_left.insert(e.seq);
    if (e.status == "error") r.coll_failed_t[e.seq] = e.t_us;
  }
  void operator()(const InjectEvent& e) { r.injections.push_back(e); }
  void operator()(const LaunchEvent&) {}
  void operator()(const StartEvent& e) {
    r.started = true;
    if (!r.start_t) r.start_t = e.t_us;
    r.start = e;
  }
  void operator()(const P2pEnterEvent& e) { r.p2p.push_back(e); }
  void operator()(const P2pLeaveEvent&) {}
  void operator()(const CkptSaveEvent& e) { r.ckpt_saves.push_back(e); }
  void operator()(const CkptLoadEvent& e) { r.ckpt_loads.push_back(e); }
  void operator()(const CkptRejectEvent& e) { r.ckpt_rejects.push_back(e); }
  void operator()(const CkptRenameEvent& e) {
    // An atomic save renamed into place: the same checkpoint, now under its final path.
    for (auto it = r.ckpt_saves.rbegin(); it != r.ckpt_saves.rend(); ++it) {
      if (it->path != e.from) continue;
      CheckpointEvent moved = *it;
      moved.path = e.path;
      moved.t_us = e.t_us;
      r.ckpt_saves.push_back(std::move(moved));
      break;
    }
  }
  void operator()(const DetectEvent& e) { r.stack_events.emplace_back(e); }
  void operator()(const DecisionEvent& e) { r.stack_events.emplace_back(e); }
};

// The events only this reader needs (the agent's own records, the log's records of lost
// evidence), read from the JSON.
void read_other(const json& e, const std::string& ev, RankEvidence& r) {
  if (ev == "probe" && r.start) {
    r.start->modules.push_back(e.value("name", ""));  // a probe is a module to target
  } else if (ev == "exception" && !r.exception) {
    r.exception = e.value("message", std::string("an exception"));
  } else if (ev == "agent") {
    // An external rank is up when its agent loaded, before the job built its model (`start`).
    r.start_t = std::min(r.start_t.value_or(int_field(e, "t_us", 0)), int_field(e, "t_us", 0));
    r.agent = true;
    r.agent_kind = e.value("agent", std::string("python"));
  } else if (ev == "imported") {
    if (const auto ms = e.find("import_ms"); ms != e.end() && ms->is_number()) {
      r.import_ms = ms->get<double>();
    }
  } else if (ev == "agent_warning") {
    r.agent_warnings.push_back(e.value("message", std::string("agent_warning")));
  } else if (ev == "log_error" && !r.log_error) {
    r.log_error = e;
  } else if (ev == "log_dropped") {
    r.log_dropped = int_field(e, "count", 0);
  } else if (ev == "attach_error" && !r.attach_error) {
    r.attach_error = e.value("reason", std::string("attach_error"));
  }
}

// The event on the rank's timeline lane, if it is drawn there.
void add_to_lane(const TypedEvent& te, int64_t t, std::vector<LaneEvent>& lane) {
  using What = LaneEvent::What;
  auto mark = [&](const char* kind, std::string label) {
    lane.push_back({What::kMark, t, false, 0, kind, std::move(label)});
  };
  if (const auto* c = std::get_if<CollEnterEvent>(&te)) {
    lane.push_back({What::kEnter, t, false, c->seq, c->name, ""});
  } else if (const auto* c = std::get_if<CollLeaveEvent>(&te)) {
    lane.push_back({What::kLeave, t, false, c->seq, "", ""});
  } else if (const auto* i = std::get_if<InjectEvent>(&te)) {
    mark("inject", fmt::format("inject {} s{}{}", i->kind, i->step, i->replay ? " (replay)" : ""));
  } else if (const auto* d = std::get_if<DetectEvent>(&te)) {
    mark("detect", "detect " + d->detector);
  } else if (const auto* d = std::get_if<DecisionEvent>(&te)) {
    mark("decision", "decision " + d->action);
  } else if (std::holds_alternative<AbortEvent>(te)) {
    mark("abort", "abort");
  } else if (const auto* x = std::get_if<ExitEvent>(&te)) {
    mark("exit", fmt::format("exit {}", x->code));
  } else if (const auto* p = std::get_if<P2pEnterEvent>(&te)) {
    const std::string peer = p->peer < 0 ? "any" : std::to_string(p->peer);
    lane.push_back(
        {What::kEnter, t, true, p->seq, p->send() ? "send to " + peer : "recv from " + peer, ""});
  } else if (const auto* p = std::get_if<P2pLeaveEvent>(&te)) {
    lane.push_back({What::kLeave, t, true, p->seq, "", ""});
  }
}

}  // namespace

RankEvidence rank_evidence_from_events(std::vector<json> events, const JobResult& job,
                                       std::optional<int64_t> gone_t_us) {
  RankEvidence r;
  place_on_controller_timeline(events, job, r.host, r.clock, r.shift_us);
  TypedReader typed{r};
  for (const auto& e : events) {
    const TypedEvent te = parse_event(e);
    const int64_t t = event_time_us(te);
    r.last_t = std::max<int64_t>(r.last_t, t);
    r.first_t = std::min(r.first_t.value_or(t), t);
    add_to_lane(te, t, r.lane);
    if (const auto* other = std::get_if<OtherEvent>(&te)) read_other(e, other->ev, r);
    std::visit(typed, te);
  }
  if (gone_t_us) r.gone_us = *gone_t_us + r.shift_us.value_or(0);
  return r;
}

RankEvidence read_rank_evidence(const std::string& run_dir, int rank, const JobResult& job) {
  // The rank's own process watch; a record that cannot be read is no record.
  std::optional<int64_t> gone_t_us;
  std::ifstream gone(gone_record_path(events_dir(run_dir), rank));
  const json g = json::parse(gone, nullptr, /*allow_exceptions=*/false);
  if (g.is_object() && g.contains("t_us") && g["t_us"].is_number_integer()) {
    gone_t_us = g["t_us"].get<int64_t>();
  }
  return rank_evidence_from_events(read_events_strict(event_log_path(run_dir, rank)), job,
                                   gone_t_us);
}

void read_ranks_log(std::istream& in, JobEvidence& ev) {
  // srun's output (JobEvidence::slurm_cancelled): a task it saw fail before the cancellation, or
  // a task that exited by itself with a code, means a rank ended the step (--kill-on-bad-exit, a
  // watchdog's MPI_Abort), not Slurm; Slurm's own cancel comes first and kills every task.
  bool rank_ended_it = false;
  std::string cancelled;
  for (std::string line; std::getline(in, line);) {
    if (ev.ranks_log_first_error.empty() && line.find("error:") != std::string::npos) {
      ev.ranks_log_first_error = line;
    }
    if (line.find_first_not_of(" \t\r") != std::string::npos) ev.ranks_log_last_line = line;
    const size_t open = line.find("*** ");
    if (cancelled.empty() && open != std::string::npos &&
        line.find(" CANCELLED AT ", open) != std::string::npos) {
      const size_t close = line.rfind(" ***");
      cancelled = line.substr(open, close > open ? close + 4 - open : std::string::npos);
      continue;
    }
    const bool task_line =
        line.find("srun: error: ") != std::string::npos &&
        (line.find(": task ") != std::string::npos || line.find(": tasks ") != std::string::npos);
    if (task_line &&
        (cancelled.empty() || line.find("Exited with exit code") != std::string::npos)) {
      rank_ended_it = true;
    }
  }
  if (!cancelled.empty() && !rank_ended_it) ev.slurm_cancelled = cancelled;
}

std::string launch_dir(const std::string& run_dir, size_t launch) {
  return fmt::format("{}/launches/{}", run_dir, launch);
}

namespace {

// Where the event that made a log unreadable is: "PATH:LINE: event \"EV\", field \"KEY\"", found
// by reading its events one at a time (the line whose event alone throws) and then that event
// without each of its fields in turn (the field whose absence reads); "" when no single event
// throws. Only on the error path: a log that reads is never read twice.
std::string locate_unreadable(const std::string& path, const JobResult& job) {
  auto throws = [&](const json& e) {
    try {
      (void)rank_evidence_from_events({e}, job, std::nullopt);
      return false;
    } catch (const json::exception&) {
      return true;
    }
  };
  std::ifstream in(path);
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const json e = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (e.is_discarded() || !e.is_object() || !throws(e)) continue;
    // "ev" last: without its type an event reads as an unknown one, whatever its fields hold.
    std::vector<std::string> keys;
    for (const auto& [k, v] : e.items()) {
      if (k != "ev") keys.push_back(k);
    }
    if (e.contains("ev")) keys.push_back("ev");
    std::string key;
    for (const auto& k : keys) {
      json without = e;
      without.erase(k);
      if (!throws(without)) {
        key = k;
        break;
      }
    }
    const auto ev = e.find("ev");
    const std::string name = ev == e.end()     ? "?"
                             : ev->is_string() ? ev->get<std::string>()
                                               : ev->dump();
    return key.empty() ? fmt::format("{}:{}: event \"{}\"", path, line_no, name)
                       : fmt::format("{}:{}: event \"{}\", field \"{}\"", path, line_no, name, key);
  }
  return "";
}

}  // namespace

JobEvidence read_job_evidence(int world, const std::string& run_dir, const JobResult& job,
                              const std::vector<JobResult>& earlier) {
  JobEvidence ev;
  ev.run_dir = run_dir;
  // A rank's log that cannot be read: unreadable names its file, line and field (and nlohmann's
  // own text), and the evidence read so far is kept.
  auto read = [&](const std::string& dir, int r,
                  const JobResult& j) -> std::optional<RankEvidence> {
    try {
      return read_rank_evidence(dir, r, j);
    } catch (const BadEventLine& e) {
      ev.unreadable = e.what();
    } catch (const json::exception& e) {
      const std::string where = locate_unreadable(event_log_path(dir, r), j);
      ev.unreadable = "an event has a field of the wrong type: " +
                      (where.empty() ? std::string(e.what()) : where + ": " + e.what());
    }
    return std::nullopt;
  };
  for (size_t k = 0; k < earlier.size() && !ev.unreadable; ++k) {
    LaunchEvidence launch;
    launch.job = earlier[k];
    for (int r = 0; r < world && !ev.unreadable; ++r) {
      if (auto rank = read(launch_dir(run_dir, k), r, earlier[k])) {
        launch.ranks.push_back(std::move(*rank));
      }
    }
    if (!ev.unreadable) ev.earlier.push_back(std::move(launch));
  }
  for (int r = 0; r < world && !ev.unreadable; ++r) {
    if (auto rank = read(run_dir, r, job)) ev.ranks.push_back(std::move(*rank));
  }
  std::ifstream log(run_dir + "/ranks.log");
  read_ranks_log(log, ev);
  ev.clean = read_clean_reference(run_dir);
  struct statvfs fs {};
  if (statvfs(run_dir.c_str(), &fs) == 0) ev.free_bytes = uint64_t(fs.f_bavail) * fs.f_frsize;
  return ev;
}

std::map<int, int64_t> ranks_gone_us(const std::vector<RankEvidence>& logs, const JobResult& job) {
  std::map<int, int64_t> gone = job.rank_gone_us;
  for (size_t r = 0; r < logs.size(); ++r) {
    if (logs[r].gone_us && !gone.count(int(r))) gone[int(r)] = *logs[r].gone_us;
  }
  return gone;
}

std::map<int64_t, results::ClockOffset> clock_offsets(const std::vector<RankEvidence>& logs) {
  std::map<int64_t, results::ClockOffset> out;
  for (size_t r = 0; r < logs.size(); ++r) {
    const auto& c = logs[r].clock;
    if (!c.is_object()) continue;
    results::ClockOffset one;
    one.host = logs[r].host;
    one.applied_shift_us = logs[r].shift_us;
    if (c.contains("error")) {
      one.error = c["error"].is_string() ? c["error"].get<std::string>() : c["error"].dump();
    } else {
      one.offset_us = c.value("offset_us", int64_t(0));
      one.rtt_us = c.value("rtt_us", int64_t(0));
      one.samples = c.value("samples", 0);
    }
    out[int64_t(r)] = one;
  }
  return out;
}

// The rank's own exit-event figure, else the controller's last sample of its /proc status (ranks
// on its host only). `measured_by` says which for each rank: "exit_event", "controller_sample",
// or why none ("remote, no exit event": a rank on another host that did not reach its exit
// record).
std::optional<results::Memory> peak_memory(const std::vector<RankEvidence>& logs,
                                           const JobResult& job) {
  results::Memory m;
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
    m.measured_by[int64_t(r)] = how;
    if (kib <= 0) continue;
    const double mib = double(kib) / 1024.0;
    m.per_rank_mib[int64_t(r)] = std::round(mib * 10) / 10;
    max_mib = std::max(max_mib, mib);
    total_mib += mib;
  }
  if (m.per_rank_mib.empty()) return std::nullopt;
  auto round1 = [](double v) { return std::round(v * 10) / 10; };
  m.ranks_measured = int64_t(m.per_rank_mib.size());
  m.per_rank_max_mib = round1(max_mib);
  m.per_rank_mean_mib = round1(total_mib / double(m.ranks_measured));
  m.total_mib = round1(total_mib);
  return m;
}

// Two ways evidence goes missing: a rank's log that could not grow (its own log_error,
// events.h), or a run folder on a filesystem with no room left while a rank's log lacks its exit
// record (a log that could not even be created, an agent's writes refused before any reserve
// existed).
std::string evidence_lost(const JobEvidence& ev, int64_t& dropped) {
  const std::vector<RankEvidence>& logs = ev.ranks;
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
  if (incomplete && ev.free_bytes && *ev.free_bytes < kMinFreeBytes) {
    return fmt::format(
        "evidence lost: the filesystem of {} is full ({} bytes free) and a rank's event log has "
        "no exit record",
        ev.run_dir, *ev.free_bytes);
  }
  return "";
}

}  // namespace nanchaos::harness
