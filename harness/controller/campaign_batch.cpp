// In-launch batches of a campaign (campaign_batch.h): one `nanchaos rank --campaign FILE` launch,
// then each fault's folder judged as `nanchaos run` judges a run folder.
#include "harness/controller/campaign_batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "harness/controller/judge.h"
#include "harness/evidence/event_paths.h"
#include "harness/evidence/event_types.h"
#include "harness/evidence/events.h"
#include "harness/scenario/registry.h"

namespace fs = std::filesystem;

namespace nanchaos::harness {
namespace {

bool enabled(const Scenario& s, const std::string& detector) {
  const auto& e = s.detectors.enabled;
  return std::find(e.begin(), e.end(), detector) != e.end();
}

std::string rank_log(const std::string& dir, int64_t r) { return event_log_path(dir, r); }

// The lines of an event log that can be its `exit` records: the judge parses the whole log once
// more right after (judge_run), so this pass only scans the text. A string value cannot hold
// the unescaped `"ev":"exit"`, so no other record's line matches.
std::string exit_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"ev\":\"exit\"") != std::string::npos) out += line + "\n";
  }
  return out;
}

// Where a fault's window stands after the launch: not started (no log), finished (every rank
// wrote `exit`), or cut short by the launch's end.
enum class Window { kNotStarted, kFinished, kCut };

struct WindowState {
  Window state = Window::kNotStarted;
  int code = 0;        // the first non-zero `exit` code of its ranks
  int64_t end_us = 0;  // its last `exit` record (CLOCK_MONOTONIC us): when the window ended
};

WindowState window_of(const Scenario& s, const std::string& dir) {
  WindowState w;
  bool any = false, all_exited = true;
  for (int64_t r = 0; r < s.job.ranks; ++r) {
    const std::string path = rank_log(dir, r);
    if (!fs::exists(path)) {
      all_exited = false;
      continue;
    }
    any = true;
    trim_event_log(path);
    bool exited = false;
    for (const auto& e : parse_events(exit_lines(path))) {
      if (event_type(e) != ExitEvent::kEv) continue;
      exited = true;
      const ExitEvent x = parse_exit(e);  // as the judge reads it (rank_evidence.cpp)
      if (x.code != 0 && w.code == 0) w.code = x.code;
      w.end_us = std::max(w.end_us, x.t_us);
    }
    all_exited &= exited;
  }
  w.state = !any ? Window::kNotStarted : all_exited ? Window::kFinished : Window::kCut;
  return w;
}

}  // namespace

bool inlaunch_eligible(const Scenario& s) {
  if (s.job.external() || !s.detectors.consensus || !enabled(s, "watchdog")) return false;
  return !any_fault_kind(s.faults, &FaultKindInfo::stops_job);
}

std::vector<std::optional<results::ScenarioResult>> run_inlaunch_batch(
    const std::vector<Scenario>& faults, const std::string& launch_dir, const LaunchContext& ctx,
    const std::string& job_id) {
  std::vector<std::optional<results::ScenarioResult>> out(faults.size());
  if (faults.empty()) return out;
  const Scenario& first = faults.front();
  const std::string list = launch_dir + "/campaign.txt";
  std::string launch_error;
  try {
    fs::create_directories(events_dir(launch_dir));
    std::ofstream txt(list, std::ios::trunc);
    for (const auto& s : faults) {
      const std::string dir = fs::path(s.file).parent_path().string();
      fs::remove_all(events_dir(dir));  // an earlier launch's cut window
      txt << fs::absolute(s.file).string() << "\n";
    }
    txt.close();
    if (!txt) throw std::runtime_error("cannot write " + list);
  } catch (const std::exception& e) {
    launch_error = std::string("cannot prepare the launch folder: ") + e.what();
  }
  JobResult job;
  if (launch_error.empty()) {
    std::map<std::string, std::string> env;
    const MpiSessionDir mpi_tmp(ctx, job_id, env);
    auto argv = launcher_argv(ctx.launcher, first, ctx.self_exe, fs::absolute(first.file).string(),
                              fs::absolute(launch_dir).string());
    argv.push_back("--campaign");
    argv.push_back(fs::absolute(list).string());
    // Each window runs at most to [job].steps, as a whole run does; plus the clean prefix.
    const int64_t timeout = first.job.timeout_ms * int64_t(faults.size() + 1);
    job = launch_job(argv, launch_dir + "/ranks.log", timeout, job_id, events_dir(launch_dir),
                     int(first.job.ranks), 0, env);
    launch_error = job.launch_error;
  }
  for (int64_t r = 0; r < first.job.ranks; ++r) trim_event_log(rank_log(launch_dir, r));
  const double share_ms = double(job.t_end_us - job.t0_us) / 1000.0 / double(faults.size());
  // Each fault's folder is judged on its own (the judge reads only that folder): in parallel,
  // one thread per core.
  auto judge_one = [&](size_t i) {
    const Scenario& s = faults[i];
    const std::string dir = fs::path(s.file).parent_path().string();
    if (!launch_error.empty()) {
      results::ScenarioResult res = result_for(s, dir);
      res.reason = launch_error;  // verdict stays "error"
      out[i] = res;
      return;
    }
    const WindowState w = window_of(s, dir);
    if (w.state == Window::kNotStarted) return;
    JobResult mine = job;  // the launch's: a window cut short is judged with its end
    if (w.state == Window::kFinished) {
      mine = JobResult{};
      mine.exit_code = w.code;
      mine.t0_us = job.t0_us;
      // The window ended with its ranks' `exit` records, as a job run alone ends with them (not
      // with the rest of the launch).
      mine.t_end_us = w.end_us > 0 ? w.end_us : job.t_end_us;
      mine.host = job.host;
      mine.real_minus_mono_us = job.real_minus_mono_us;
    }
    results::ScenarioResult res = judge_run(s, dir, mine);
    if (job.interrupted_by != 0 && w.state == Window::kCut) {
      res.verdict = results::Verdict::kError;
      res.reason = "interrupted";
    }
    res.wall_ms = share_ms;
    res.in_launch = launch_dir;
    res.timeline = {};  // the launch's whole timeline, once per fault: campaigns draw none
    out[i] = std::move(res);
  };
  const size_t threads =
      std::min<size_t>(faults.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::mutex error_mu;
  std::exception_ptr error;  // the first judge that threw: thrown here, as from one thread
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < faults.size();) {
      try {
        judge_one(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  return out;
}

}  // namespace nanchaos::harness
