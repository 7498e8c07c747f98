// Controller: run a suite (plan, run each scenario's trials, report, exit status) and one job of
// a scenario (run_scenario_job). The pre-launch checks are in preflight.cpp, the launch in
// launch.cpp, the host probes in host_probe.cpp. See controller.h.
#include "harness/controller/controller.h"

#include <dirent.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "harness/common/exit_status.h"
#include "harness/common/job_guard.h"
#include "harness/common/log.h"
#include "harness/common/proc_status.h"
#include "harness/common/rank_host.h"
#include "harness/controller/clean_run.h"
#include "harness/controller/host_probe.h"
#include "harness/controller/judge.h"
#include "harness/controller/merged_log.h"
#include "harness/controller/preflight.h"
#include "harness/controller/progress.h"
#include "harness/controller/rank_evidence.h"
#include "harness/controller/stop_signal.h"
#include "harness/evidence/event_paths.h"
#include "harness/evidence/events.h"
#include "results/html.h"
#include "results/report.h"
#include "results/stats.h"
#include "results/text.h"

namespace fs = std::filesystem;

namespace nanchaos::harness {
std::string utc_stamp(const char* fmt_str) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), fmt_str, &tm);
  return buf;
}

namespace {

std::string hostname() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

// Open file descriptors of this process (/proc/self/fd, less the one reading it).
int open_fd_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    --n;
  }
  return n;
}

std::string suite_name(const std::vector<std::string>& paths) {
  if (paths.size() != 1) return "suite";
  // Absolute first: `run .` or `run ../x/` names the folder, never "." or "..".
  fs::path p = fs::absolute(paths[0]).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  const std::string name = fs::is_directory(p) ? p.filename().string() : p.stem().string();
  return name.empty() ? "suite" : name;
}
}  // namespace

namespace {

// An earlier run in the same folder (--out reused) must leave nothing a job could read: no event
// log that would pass for this job's, no checkpoint of the job's own under {run_dir}. The
// scenario file itself stays when it lives there (a campaign writes it there first).
// The clean reference run's folder (RUN/clean) stays too: its cache key says whether it is this
// scenario's and seed's (clean_run.h).
void empty_run_folder(const std::string& run_dir, const std::string& scenario_file) {
  fs::create_directories(run_dir);
  std::error_code same_ec;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    if (fs::equivalent(entry.path(), scenario_file, same_ec)) continue;
    if (entry.path() == fs::path(clean_run_dir(run_dir))) continue;
    fs::remove_all(entry.path());
  }
}

// Launch K's evidence out of the way of launch K+1: RUN/{events,ranks.log,ranks,plan.json} into
// RUN/launches/K/ (rank_evidence.h launch_dir). Every process of the launch is gone, so nothing
// writes to them any more. Throws fs::filesystem_error.
void keep_launch_evidence(const std::string& run_dir, size_t launch) {
  const fs::path to = launch_dir(run_dir, launch);
  fs::create_directories(to);
  for (const char* name : {"events", "ranks.log", "ranks", "plan.json"}) {
    const fs::path from = fs::path(run_dir) / name;
    if (fs::exists(from)) fs::rename(from, to / name);
  }
  fs::create_directories(fs::path(run_dir) / "events");
}

// Sleeps `ms`, waking every 10 ms for a stop signal (then returns early).
void wait_between_launches(int64_t ms) {
  const int64_t until = now_us() + ms * 1000;
  while (now_us() < until && stop_signal() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(10, ms)));
  }
}

}  // namespace

results::ScenarioResult run_scenario_job(const Scenario& s, const std::string& run_dir,
                                         const LaunchContext& ctx, const std::string& job_id,
                                         std::optional<uint64_t> seed) {
  JobResult job;
  try {
    // A full disk or a read-only --out: this scenario is an error naming the path and errno;
    // the suite goes on and the reports keep what was measured. A log left by an earlier run in
    // the same folder (--out reused) must not pass for this job's: a rank that never starts
    // would be judged on it; nor a checkpoint folder the job keeps under {run_dir}.
    empty_run_folder(run_dir, s.file);
    fs::create_directories(events_dir(run_dir));
    const fs::path copy = fs::path(run_dir) / "scenario.toml";
    std::error_code same_ec;
    if (!fs::equivalent(s.file, copy, same_ec)) {  // a campaign writes it there itself
      fs::copy_file(s.file, copy, fs::copy_options::overwrite_existing);
    }
  } catch (const std::exception& e) {
    job.launch_error = std::string("cannot prepare the run folder: ") + e.what();
  }
  if (!job.launch_error.empty()) {
    results::ScenarioResult res = result_for(s, run_dir);
    res.reason = job.launch_error;  // verdict stays "error"
    return res;
  }
  std::vector<JobResult> earlier;  // the launches before the last one ([job] restarts)
  LaunchIndex launch;
  for (;;) {
    job = launch_scenario(s, s.file, run_dir, ctx, job_id, seed, launch);
    // Relaunch only a job that ran and ended abnormally: not one that could not start, never
    // attached (its command is wrong; a relaunch would fail alike) or was interrupted.
    if (launch.launch >= s.job.restarts || job.interrupted_by != 0 || !job.launch_error.empty() ||
        !job.attach_failure.empty()) {
      break;
    }
    const JobEvidence ev = read_job_evidence(int(s.job.ranks), run_dir, job);
    if (ev.unreadable || launch_outcome(ev.ranks, job) == results::Outcome::kCompleted) break;
    // The launch must be completely gone before the next starts (launch_job swept its orphans;
    // a process that survived SIGKILL would share the next launch's port and files).
    if (const auto left = job_processes(job_id); !left.empty()) {
      job.launch_error = fmt::format(
          "launch {}: {} process(es) of the job still alive after its end (pid {}); not "
          "relaunched",
          launch.launch, left.size(), left.front());
      break;
    }
    std::set<int> fired(launch.fired_earlier.begin(), launch.fired_earlier.end());
    for (const auto& rank : ev.ranks) {
      for (const auto& inj : rank.injections) fired.insert(inj.fault);
    }
    try {
      keep_launch_evidence(run_dir, earlier.size());
    } catch (const std::exception& e) {
      job.launch_error =
          fmt::format("launch {}: cannot keep its evidence: {}", launch.launch, e.what());
      break;
    }
    earlier.push_back(job);
    launch.launch += 1;
    launch.fired_earlier.assign(fired.begin(), fired.end());
    log::info("job {}: launch {} ended abnormally; relaunch {} of {} in {} ms", job_id,
              launch.launch - 1, launch.launch, s.job.restarts, s.job.restart_delay_ms);
    wait_between_launches(s.job.restart_delay_ms);
    if (const int sig = stop_signal()) {  // interrupted between two launches
      job = JobResult{};
      job.interrupted_by = sig;
      job.t0_us = job.t_end_us = now_us();
      break;
    }
  }
  // [expect] final_matches_clean: the clean reference (cached in RUN/clean across judges).
  if (s.expect.final_matches_clean && job.launch_error.empty() && job.interrupted_by == 0) {
    run_clean_reference(s, run_dir, ctx, job_id + "-clean", seed);
  }
  results::ScenarioResult res = judge_run(s, run_dir, job, earlier);
  res.logs = job_logs(run_dir, int(s.job.ranks));
  if (!job.launch_error.empty()) {
    res.verdict = results::Verdict::kError;
    res.reason = job.launch_error;
  }
  if (job.interrupted_by != 0) {
    // The evidence so far stays (events, detections, the ranks seen gone); what the judge would
    // conclude from how the job ended does not: the controller ended it, so it neither crashed
    // nor completed, what the fault did was not seen to the end, and a rank the stop killed is
    // nobody's to blame.
    res.verdict = results::Verdict::kError;
    res.reason = "interrupted";
    res.interrupted_by = signal_name(job.interrupted_by);
    res.outcome = results::Outcome::kNone;
    res.fault_outcome = results::FaultOutcome::kNone;
    if (res.judged) res.judged->postmortem.blame.reset();
  }
  results::ControllerFacts facts;
  // The timeline's zero (CLOCK_MONOTONIC us): the first launch's start.
  facts.job_start_us = earlier.empty() ? job.t0_us : earlier.front().t0_us;
  // No orphans: what of this job is alive now, after launch_job's sweep (0, or a bug).
  facts.orphans_left = int64_t(job_processes(job_id).size());
  // The controller's own footprint after each job (the soak test bounds its growth).
  facts.vm_rss_kib = vm_rss_kib().value_or(0);
  facts.vm_hwm_kib = vm_hwm_kib().value_or(0);
  facts.fds = open_fd_count();
  res.controller = facts;
  return res;
}

namespace {

// Step 1, plan the suite: load every file first (a bad scenario never starts a job), keep those
// carrying one of --tag. Prints what is wrong; returns the exit status (0: `scenarios` is set).
int plan_suite(const RunOptions& opts, Preflight& preflight, std::vector<Scenario>& scenarios) {
  std::vector<std::string> files;
  try {
    files = expand_scenario_paths(opts.paths);
  } catch (const ScenarioError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  if (opts.trials < 1) {
    std::cerr << fmt::format("nanchaos run: error: --trials {}: must be at least 1\n", opts.trials);
    return 2;
  }
  if (files.empty()) {
    std::cerr << "nanchaos run: error: no *.toml scenario found in the given paths\n";
    return 2;
  }
  bool bad = false;
  for (const auto& f : files) {
    try {
      Scenario s = preflight.load(f);
      const bool tagged = std::any_of(opts.tags.begin(), opts.tags.end(), [&](const auto& t) {
        return std::find(s.tags.begin(), s.tags.end(), t) != s.tags.end();
      });
      const bool excluded =
          std::any_of(opts.exclude_tags.begin(), opts.exclude_tags.end(), [&](const auto& t) {
            return std::find(s.tags.begin(), s.tags.end(), t) != s.tags.end();
          });
      if ((opts.tags.empty() || tagged) && !excluded) scenarios.push_back(std::move(s));
    } catch (const ScenarioError& e) {
      std::cerr << e.what() << "\n";
      bad = true;
    }
  }
  if (bad) {
    std::cerr << "nanchaos run: no job started (fix the scenario errors above)\n";
    return 2;
  }
  if (scenarios.empty()) {
    std::string why = opts.tags.empty() ? fmt::format("{} scenario(s) found", files.size())
                                        : fmt::format("no scenario carries the tag(s) {}",
                                                      fmt::join(opts.tags, ", "));
    if (!opts.exclude_tags.empty()) {
      why += fmt::format(" (after --exclude-tag {})", fmt::join(opts.exclude_tags, ", "));
    }
    std::cerr << fmt::format("nanchaos run: error: {}; nothing left to run; no job started\n", why);
    return 2;
  }
  return 0;
}

// --shard I/N: keeps this shard's scenarios (suite order) and notes the whole suite for merge.
// Returns the exit status (0: fine).
int select_shard(const RunOptions& opts, std::vector<Scenario>& scenarios,
                 std::optional<results::ShardInfo>& shard) {
  if (!opts.shard.on()) return 0;
  std::map<std::string, double> weights;
  if (!opts.shard_balance.empty()) {
    try {
      weights = shard_weights_from_report(opts.shard_balance);
    } catch (const std::exception& e) {
      std::cerr << "nanchaos run: error: " << e.what() << "\n";
      return 2;
    }
  }
  results::ShardInfo info{opts.shard.index, opts.shard.count, {}};
  for (const auto& s : scenarios) info.suite.push_back(s.name);
  const std::vector<bool> mine = shard_members(info.suite, weights, opts.shard);
  std::vector<Scenario> kept;
  for (size_t k = 0; k < scenarios.size(); ++k) {
    if (mine[k]) kept.push_back(std::move(scenarios[k]));
  }
  if (kept.empty()) {
    std::cerr << fmt::format(
        "nanchaos run: shard {}/{} has no scenario (the suite has {}); writing an empty report\n",
        opts.shard.index, opts.shard.count, info.suite.size());
  }
  scenarios = std::move(kept);
  shard = std::move(info);
  return 0;
}

// --out holds an earlier run: its reports and the scenario folders its report.json lists are
// removed, so that an artifact upload of the folder holds this run only (a scenario dropped
// from the suite must not leave its old folder behind). Anything else in the folder stays.
void clear_earlier_run(const std::string& out) {
  std::vector<std::string> folders;
  try {
    const auto old = nlohmann::json::parse(std::ifstream(fs::path(out) / "report.json"));
    for (const auto& s : old.value("scenarios", nlohmann::json::array())) {
      const std::string name = s.is_object() ? s.value("name", std::string()) : "";
      // A name is one path component (scenario names are checked at load): never ".." or "a/b".
      if (!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos) {
        folders.push_back(name);
      }
    }
  } catch (const std::exception&) {
    // An unreadable old report: its folders are unknown; the reports are still replaced.
  }
  std::error_code ec;
  size_t removed = 0;
  for (const auto& name : folders) removed += fs::remove_all(fs::path(out) / name, ec) > 0;
  for (const char* f : {"report.json", "junit.xml", "report.md", "report.html"}) {
    fs::remove(fs::path(out) / f, ec);
  }
  std::cerr << fmt::format(
      "nanchaos run: note: --out {}: cleared the earlier run there (its reports and {} scenario "
      "folder(s))\n",
      out, removed);
}

// Output locations are checked before any job starts: a typo must not cost a whole suite.
// Returns the exit status (0: fine).
int check_outputs(const std::string& out, const std::string& junit) {
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out)) {
    std::cerr << fmt::format("nanchaos run: error: --out {}: cannot create the run folder: {}\n",
                             out, ec ? ec.message() : "not a directory");
    return 2;
  }
  if (fs::exists(fs::path(out) / "report.json", ec)) clear_earlier_run(out);
  if (!junit.empty()) {
    std::ofstream probe(junit, std::ios::app);
    if (!probe) {
      std::cerr << fmt::format("nanchaos run: error: --junit {}: cannot open for writing: {}\n",
                               junit, std::strerror(errno));
      return 2;
    }
  }
  return 0;
}

// A scenario that never runs has no trials: its stats say so (trials 0, no pass rate).
nlohmann::json not_run_stats(const results::ScenarioResult& r) {
  nlohmann::json st = results::scenario_stats({r});
  st["trials"] = 0;
  st["passed"] = 0;
  st["pass_rate"] = nullptr;
  return st;
}

// report.json: the interpreter, torch and listed packages an external scenario ran with.
void note_python(const Scenario& s, const PythonInterpreter& python, results::ScenarioResult& res) {
  if (!command_needs_python(s) || python.path.empty()) return;
  res.interpreter = results::Interpreter{python.path, python.torch_version, std::nullopt};
  if (!s.job.python_packages.empty()) {  // the listed packages' versions it ran with
    auto& versions = res.interpreter->packages.emplace();
    for (const auto& [name, version] : python.packages) versions[name] = version;
  }
}

// RUN/run-state.json (`run --resume`, controller.h): the options a run was started with, as
// JSON, and back.
nlohmann::json invocation_json(const RunOptions& o) {
  std::vector<std::string> paths;
  for (const auto& p : o.paths) paths.push_back(fs::absolute(p).lexically_normal().string());
  std::error_code ec;
  nlohmann::json j = {
      {"paths", paths},
      // As written, with the folder they were written in: a resume runs from there, so the
      // scenarios it runs are named in the reports as the earlier controller named its own.
      {"paths_given", o.paths},
      {"cwd", fs::current_path(ec).string()},
      {"tags", o.tags},
      {"exclude_tags", o.exclude_tags},
      {"trials", o.trials},
      {"launcher", o.launcher},
      {"quiet", o.quiet},
      {"fail_on_skip", o.fail_on_skip},
      {"host_limits", o.host_limits.enabled},
      {"max_ranks", o.host_limits.max_ranks ? nlohmann::json(*o.host_limits.max_ranks)
                                            : nlohmann::json(nullptr)},
      {"junit", o.junit.empty() ? "" : fs::absolute(o.junit).string()},
      {"shard",
       o.shard.on() ? nlohmann::json({o.shard.index, o.shard.count}) : nlohmann::json(nullptr)},
      {"shard_balance", o.shard_balance.empty() ? "" : fs::absolute(o.shard_balance).string()},
      {"jobs", o.jobs}};
  return j;
}

RunOptions options_from_invocation(const nlohmann::json& j) {
  RunOptions o;
  o.paths = j.at("paths").get<std::vector<std::string>>();
  o.tags = j.value("tags", std::vector<std::string>{});
  o.exclude_tags = j.value("exclude_tags", std::vector<std::string>{});
  o.trials = j.value("trials", 1);
  o.launcher = j.value("launcher", std::string());
  o.quiet = j.value("quiet", false);
  o.fail_on_skip = j.value("fail_on_skip", false);
  o.host_limits.enabled = j.value("host_limits", true);
  if (j.contains("max_ranks") && j["max_ranks"].is_number_integer()) {
    o.host_limits.max_ranks = j["max_ranks"].get<int64_t>();
  }
  o.junit = j.value("junit", std::string());
  if (j.contains("shard") && j["shard"].is_array() && j["shard"].size() == 2) {
    o.shard.index = j["shard"][0].get<int>();
    o.shard.count = j["shard"][1].get<int>();
  }
  o.shard_balance = j.value("shard_balance", std::string());
  o.jobs = j.value("jobs", 1);
  return o;
}

// One suite run once planned: the report, its files, the console and the progress lines.
class SuiteRun {
 public:
  SuiteRun(const RunOptions& opts, std::vector<Scenario> scenarios)
      : opts_(opts), scenarios_(std::move(scenarios)), started_(scenarios_.size(), false) {
    for (size_t i = 0; i < scenarios_.size(); ++i) order_[scenarios_[i].name] = i;
    report_.suite = suite_name(opts.paths);
    report_.started = utc_stamp("%Y-%m-%dT%H:%M:%SZ");
    report_.nanchaos_version = NANCHAOS_VERSION;
    report_.host = hostname();
    report_.trials = opts.trials;
    out_ = opts.out_dir.empty()
               ? "results/runs/" + utc_stamp("%Y%m%dT%H%M%SZ") + "-" + report_.suite
               : opts.out_dir;
  }
  const std::string& out() const { return out_; }
  const std::vector<Scenario>& scenarios() const { return scenarios_; }
  void set_shard(results::ShardInfo shard) { report_.shard = std::move(shard); }

  // The console table's header; the progress lines' clock starts; RUN/run-state.json says the
  // run is under way (complete: false until finish()).
  void start() {
    if (!opts_.quiet) std::cout << results::console_header() << std::flush;
    progress_.emplace(scenarios_.size(), !opts_.quiet);
    write_state(false);
  }

  // `run --resume`: the scenarios an earlier controller of this run judged stay as judged (and
  // are not run again), but for the one an interruption cut short, which runs again.
  void adopt(const results::SuiteReport& earlier) {
    report_.started = earlier.started;
    for (const auto& r : earlier.scenarios) {
      if (r.verdict == results::Verdict::kError && r.reason == "interrupted") continue;
      done_.insert(r.name);
      report_.scenarios.push_back(r);
      if (!opts_.quiet) std::cout << results::console_row(r) << std::flush;
    }
  }
  bool done(size_t index) const { return done_.count(scenarios_[index].name) > 0; }
  // The reports before any scenario of this controller ran: complete false, all pending.
  void write_pending() {
    std::lock_guard<std::mutex> lock(mu_);
    note_pending();
    write_reports();
  }
  size_t adopted() const { return done_.size(); }

  // Step 2, run one scenario with its trials (or refuse it: a Blocker), record and show it,
  // write the reports. False once a stop signal ended the suite. Called from --jobs threads at
  // once: what they share (the report, its files, `preflight`, the console) is under mu_.
  bool scenario(size_t index, Preflight& preflight, LaunchContext launch) {
    if (stop_signal() != 0) {
      std::lock_guard<std::mutex> lock(mu_);
      note_interruption();
      return false;
    }
    const Scenario& s = scenarios_[index];
    PythonInterpreter python;
    Blocker blocked;
    {
      std::lock_guard<std::mutex> lock(mu_);
      started_[index] = true;
      python = preflight.python_for(s);
      blocked = preflight.blocker(s);
    }
    launch.python = python.path;
    results::ScenarioResult res;
    if (blocked) {
      progress_->start(index, s.name, 0,
                       1);      // its line's seconds: this decision's, not the last job's
      res = result_for(s, "");  // no run folder
      res.trial_count = 0;      // a skipped or refused scenario has no trials
      res.verdict = blocked.skip ? results::Verdict::kSkipped : results::Verdict::kError;
      res.reason = blocked.reason;
      res.stats = not_run_stats(res);
    } else {
      res = run_trials(s, index, launch);
    }
    note_python(s, python, res);
    std::lock_guard<std::mutex> lock(mu_);
    record(index, res);
    if (stop_signal() != 0) note_interruption();
    note_pending();
    write_reports();  // after every scenario: nothing measured is lost if the controller dies
    return !report_.interrupted;
  }

  // Step 3, the final reports and the exit status.
  int finish() {
    if (stop_signal() != 0) note_interruption();
    progress_->done();
    if (!report_.interrupted) write_state(true);
    report_.complete = !report_.interrupted;
    report_.pending.clear();
    report_.detector_stats = results::suite_detector_stats(report_);
    write_reports();
    if (report_.interrupted) {
      // No report.html: gnuplot would keep a person who pressed Ctrl-C waiting.
      std::cerr << fmt::format(
          "nanchaos run: interrupted by {}: {} scenario(s) judged, {} not run; reports: "
          "{}/report.json, junit.xml, report.md\n",
          report_.interrupt_signal, report_.scenarios.size(), report_.not_run.size(), out_);
      return 128 + stop_signal();
    }
    const std::string html_note = results::write_html(report_, out_ + "/report.html");
    if (!opts_.quiet) {
      std::cout << results::console_footer(report_);
      std::cout << "reports: " << out_ << "/report.json, junit.xml, report.md, report.html\n";
    } else {  // quiet hides the table, not the outcome: one line for the CI log
      std::cout << fmt::format("nanchaos run: {}; reports: {}/report.json\n",
                               results::summary_text(report_), out_);
    }
    // Not an error: the page is there with its tables; the note says what is missing.
    if (!html_note.empty())
      std::cerr << "nanchaos run: warning: report.html: " << html_note << "\n";
    return exit_code();
  }

 private:
  // One trial = one job of the scenario with seed + trial, in its own run folder.
  results::ScenarioResult run_trial(const Scenario& base, size_t index, int trial,
                                    const LaunchContext& launch) {
    Scenario s = base;
    s.seed = base.seed + uint64_t(trial);
    progress_->start(index, s.name, trial, opts_.trials);
    const std::string run_dir = opts_.trials == 1
                                    ? out_ + "/" + s.name
                                    : fmt::format("{}/{}/trial-{}", out_, s.name, trial);
    const std::string job_id = fmt::format("{}-{}-{}", getpid(), ++job_counter_, now_us());
    const auto seed = trial == 0 ? std::nullopt : std::optional<uint64_t>(s.seed);
    results::ScenarioResult res = run_scenario_job(s, run_dir, launch, job_id, seed);
    res.trial = trial;
    res.trial_count = opts_.trials;
    return res;
  }

  // The scenario's trials and the one result that stands for them (results/stats.h).
  results::ScenarioResult run_trials(const Scenario& s, size_t index, const LaunchContext& launch) {
    std::vector<results::ScenarioResult> trials;
    for (int t = 0; t < opts_.trials && (t == 0 || stop_signal() == 0); ++t) {
      trials.push_back(run_trial(s, index, t, launch));
    }
    // Cut short: a trial's job was interrupted, or the signal came between two trials.
    const bool cut = stop_signal() != 0 && (trials.size() < size_t(opts_.trials) ||
                                            trials.back().reason == "interrupted");
    results::ScenarioResult res = results::representative_trial(trials);
    if (cut) {
      res = trials.back();
      res.verdict = results::Verdict::kError;
      res.reason = "interrupted";
      res.interrupted_by = signal_name(stop_signal());
    }
    res.stats = results::scenario_stats(trials);
    if (opts_.trials > 1) res.trials = std::move(trials);
    return res;
  }

  // Into the report (in suite order: --jobs and a resume's adopted results come out of it), the
  // progress lines and the console table. Under mu_.
  void record(size_t index, const results::ScenarioResult& res) {
    if (res.verdict == results::Verdict::kError) usage_error_ = true;
    write_timeline(res);
    // Adopted results arrive in the earlier report's order: the whole list is kept sorted.
    auto place = [&](const results::ScenarioResult& r) {
      const auto it = order_.find(r.name);
      return it == order_.end() ? order_.size() : it->second;
    };
    report_.scenarios.push_back(res);
    std::stable_sort(report_.scenarios.begin(), report_.scenarios.end(),
                     [&](const auto& a, const auto& b) { return place(a) < place(b); });
    progress_->finish(index, res);
    if (!opts_.quiet) {
      std::cout << results::console_row(res) << std::flush;
    } else if ((res.verdict == results::Verdict::kFail ||
                res.verdict == results::Verdict::kError) &&
               stop_signal() == 0) {
      // Quiet hides the table, not a failure: a CI log must say which scenario and why (an
      // interrupted scenario is said by the interruption's own line).
      std::cerr << fmt::format("nanchaos run: {} {}: {} (run dir {})\n", to_string(res.verdict),
                               res.name, res.reason, res.run_dir);
    }
  }

  // A stop signal: the scenarios it interrupted are `error`s (reason "interrupted"), the ones
  // not started are listed as not run, and the reports say so at the top level. Once; under mu_.
  void note_interruption() {
    if (report_.interrupted) return;
    report_.interrupted = true;
    report_.interrupt_signal = signal_name(stop_signal());
    for (size_t i = 0; i < scenarios_.size(); ++i) {
      if (!started_[i] && !done(i)) report_.not_run.push_back(scenarios_[i].name);
    }
  }

  // While the run goes on, the reports say so (complete: false) and name the scenarios not judged
  // yet: a report a controller killed with SIGKILL leaves never reads as a finished run. Under
  // mu_.
  void note_pending() {
    report_.complete = false;
    report_.pending.clear();
    std::set<std::string> judged;
    for (const auto& r : report_.scenarios) judged.insert(r.name);
    for (const auto& sc : scenarios_) {
      if (judged.count(sc.name) == 0 && std::find(report_.not_run.begin(), report_.not_run.end(),
                                                  sc.name) == report_.not_run.end()) {
        report_.pending.push_back(sc.name);
      }
    }
  }

  // RUN/<scenario>/timeline.json: report.html's timeline, which report.json does not hold, for
  // `nanchaos merge` to draw it again.
  void write_timeline(const results::ScenarioResult& res) {
    if (res.run_dir.empty() || (res.timeline.bars.empty() && res.timeline.marks.empty())) return;
    std::ofstream out(res.run_dir + "/timeline.json");
    if (out) out << results::to_json(res.timeline).dump() << "\n";
  }

  void write_reports() {
    try {
      results::write_report_json(report_, out_ + "/report.json");
      results::write_junit(report_, out_ + "/junit.xml");
      results::write_markdown(report_, out_ + "/report.md");
      if (!opts_.junit.empty()) results::write_junit(report_, opts_.junit);
    } catch (const std::exception& e) {
      // Keep running: later scenarios still measure; the exit status reports the failure.
      if (!write_failed_) std::cerr << "nanchaos run: error: " << e.what() << "\n";
      write_failed_ = true;
    }
  }

  void write_state(bool complete) {
    nlohmann::json planned = nlohmann::json::array();
    for (const auto& sc : scenarios_) planned.push_back(sc.name);
    // Who ran it: `--resume` refuses a run whose controller still runs, and kills what a dead
    // one left (its jobs carry NANCHAOS_CONTROLLER_PID/START, job_guard_env).
    const nlohmann::json controller = {{"pid", int64_t(getpid())},
                                       {"start", process_start_ticks().value_or(0)},
                                       {"host", this_host()}};
    const nlohmann::json state = {{"invocation", invocation_json(opts_)},
                                  {"planned", planned},
                                  {"complete", complete},
                                  {"controller", controller}};
    std::ofstream(out_ + "/run-state.json") << state.dump(2) << "\n";
  }

  int exit_code() const {
    if (write_failed_) return kExitReportUnwritten;
    if (usage_error_ || report_.errors() > 0) return kExitErrored;
    if (report_.failed() > 0) return kExitCheckFailed;
    // CI on a GPU runner that lost its GPU must not stay green (RunOptions::fail_on_skip).
    if (opts_.fail_on_skip && report_.skipped() > 0) {
      std::cerr << fmt::format(
          "nanchaos run: error: {} scenario(s) skipped and --fail-on-skip is set (exit 1)\n",
          report_.skipped());
      return 1;
    }
    return 0;
  }

  const RunOptions& opts_;
  const std::vector<Scenario> scenarios_;
  results::SuiteReport report_;
  std::string out_;
  std::optional<harness::Progress> progress_;  // from start()
  std::atomic<int> job_counter_{0};
  std::set<std::string> done_;           // resumed: judged by the earlier controller
  std::vector<bool> started_;            // by scenario index: this controller began it
  std::map<std::string, size_t> order_;  // name -> index: the reports' order
  std::mutex mu_;  // --jobs: the report, its files, the console, the Preflight
  bool usage_error_ = false;
  bool write_failed_ = false;
};

}  // namespace

namespace {

// --jobs J: J threads take the scenarios in suite order, each running one at a time. A scenario
// with more ranks than twice the host's cores runs alone: it waits for the running ones to end
// and none starts beside it (64 ranks on 2 cores take every core for ~20 s, and the others'
// deadlines would pay for it). A worker outlives the jobs it starts (their death signal is tied
// to the thread that started them). After a stop signal no scenario starts.
void run_concurrently(SuiteRun& run, Preflight& preflight, const LaunchContext& launch, int jobs,
                      int cores) {
  std::mutex mu;
  std::condition_variable cv;
  const size_t n = run.scenarios().size();
  size_t next = 0;
  int running = 0;
  bool alone = false, stopped = false;
  auto worker = [&] {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      while (next < n && run.done(next)) ++next;
      if (next >= n || stopped || stop_signal() != 0) return;
      const bool big = run.scenarios()[next].job.ranks > 2 * int64_t(cores);
      if (alone || (big && running > 0)) {
        cv.wait(lock);
        continue;
      }
      const size_t index = next++;
      ++running;
      alone = big;
      lock.unlock();
      const bool go_on = run.scenario(index, preflight, launch);
      lock.lock();
      --running;
      if (big) alone = false;
      if (!go_on) stopped = true;
      cv.notify_all();
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < jobs; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
}

int run_planned(const RunOptions& opts, const results::SuiteReport* earlier) {
  // Ctrl-C / SIGTERM end the running job, write the reports (interrupted) and return 128 + sig.
  StopSignalHandlers stop_handlers;
  Preflight preflight(opts.host_limits);
  std::vector<Scenario> scenarios;
  if (const int rc = plan_suite(opts, preflight, scenarios); rc != 0) return rc;
  std::optional<results::ShardInfo> shard;
  if (const int rc = select_shard(opts, scenarios, shard); rc != 0) return rc;
  SuiteRun run(opts, std::move(scenarios));
  if (shard) run.set_shard(std::move(*shard));
  if (earlier) {
    std::error_code ec;
    fs::create_directories(run.out(), ec);
  } else if (const int rc = check_outputs(run.out(), opts.junit); rc != 0) {
    return rc;
  }
  LaunchContext launch;
  launch.launcher = default_launcher(opts.launcher);
  launch.self_exe = opts.self_exe;
  // A missing launcher is a missing dependency, said once up front (not a "crashed" job per
  // scenario).
  if (const std::string e = launcher_error(launch.launcher, run.scenarios()); !e.empty()) {
    std::cerr << "nanchaos run: error: " << e << "\n";
    return 2;
  }
  // The interpreters for external jobs run as `python3 ...`: probed once per suite, chosen per
  // scenario by its [job] torch and python_packages.
  preflight.probe_pythons(run.scenarios());
  run.start();
  if (earlier) {
    run.adopt(*earlier);
    std::cerr << fmt::format(
        "nanchaos run: resuming {}: {} of {} scenario(s) judged already, running the rest\n",
        run.out(), run.adopted(), run.scenarios().size());
  }
  run.write_pending();  // a controller that dies in its first scenario leaves reports too
  if (opts.jobs > 1) {
    launch.private_mpi_tmpdir = true;  // launches that start or end together race on /tmp/ompi.*
    run_concurrently(run, preflight, launch, opts.jobs, probe_host().cores);
  } else {
    for (size_t index = 0; index < run.scenarios().size(); ++index) {
      if (run.done(index)) continue;
      if (!run.scenario(index, preflight, launch)) break;
    }
  }
  return run.finish();
}

}  // namespace

int run_suite(const RunOptions& opts) { return run_planned(opts, nullptr); }

namespace {

// `--resume`: the run's controller (run-state.json "controller") must be gone; every process its
// jobs left running (ranks whose job guard has not fired yet, a launcher, an external job's
// children: they carry its NANCHAOS_CONTROLLER_PID and _START) is killed before anything runs
// again, so no process of the dead run writes into the folder the resume writes. kExitOk, or
// kExitNothingRan when that controller still runs. A state without "controller" (a run from
// before this field) or from another host: nothing to check here.
int end_dead_controllers_jobs(const std::string& run_dir, const nlohmann::json& state) {
  const auto c = state.find("controller");
  if (c == state.end() || !c->is_object() || c->value("host", std::string()) != this_host()) {
    return kExitOk;
  }
  const int pid = int(c->value("pid", int64_t(0)));
  const uint64_t start = c->value("start", uint64_t(0));
  if (pid <= 0) return kExitOk;
  if (pid == getpid()) return kExitOk;  // cannot be: a run-state.json of this very process
  if (start != 0 && process_start_ticks(pid) == start) {
    std::cerr << fmt::format(
        "nanchaos run: error: --resume {}: its controller (pid {}) is still running; stop it "
        "first (Ctrl-C writes its reports) or wait for it\n",
        run_dir, pid);
    return kExitNothingRan;
  }
  const std::vector<std::string> marks = {fmt::format("NANCHAOS_CONTROLLER_PID={}", pid),
                                          fmt::format("NANCHAOS_CONTROLLER_START={}", start)};
  const std::vector<int> left = processes_with_env(marks);
  for (int p : left) ::kill(p, SIGKILL);
  for (int waited_ms = 0; waited_ms < 5000 && !processes_with_env(marks).empty(); waited_ms += 20) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!left.empty()) {
    std::cerr << fmt::format(
        "nanchaos run: --resume {}: killed {} process(es) the dead controller (pid {}) left "
        "running\n",
        run_dir, left.size(), pid);
  }
  return kExitOk;
}

}  // namespace

int resume_suite(const std::string& run_dir, const std::string& self_exe) {
  const std::string who = "nanchaos run: error: --resume " + run_dir;
  nlohmann::json state;
  try {
    std::ifstream in(run_dir + "/run-state.json");
    if (!in) {
      std::cerr << fmt::format(
          "{}: no run-state.json there (not a run folder, or one from before --resume)\n", who);
      return kExitNothingRan;
    }
    state = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    std::cerr << fmt::format("{}/run-state.json: {}\n", who, e.what());
    return kExitNothingRan;
  }
  if (state.value("complete", false)) {
    std::cerr << fmt::format(
        "nanchaos run: --resume {}: that run finished; nothing to resume (report: "
        "{}/report.json)\n",
        run_dir, run_dir);
    return kExitOk;
  }
  RunOptions opts;
  try {
    const nlohmann::json& inv = state.at("invocation");
    opts = options_from_invocation(inv);
    opts.out_dir = run_dir;
    opts.self_exe = self_exe;
    // The paths as the user wrote them, run from the folder they were written in (while it is
    // still there): the scenarios the resume runs are named in the reports as the earlier
    // controller named its own. Else the absolute paths.
    const std::string cwd = inv.value("cwd", std::string());
    std::error_code ec;
    if (inv.contains("paths_given") && !cwd.empty() && fs::is_directory(cwd, ec)) {
      opts.paths = inv["paths_given"].get<std::vector<std::string>>();
      opts.out_dir = fs::absolute(run_dir, ec).lexically_normal().string();
      fs::current_path(cwd);
    }
  } catch (const std::exception& e) {
    std::cerr << fmt::format("{}/run-state.json: invocation: {}\n", who, e.what());
    return kExitNothingRan;
  }
  // The scenarios are read again from where the first run found them: a suite moved or deleted
  // since is named here with where the path came from, not as a loader error of a bare path.
  for (const auto& path : opts.paths) {
    std::error_code ec;
    if (fs::exists(path, ec)) continue;
    fs::path shown = fs::absolute(path, ec).lexically_normal();
    if (!shown.has_filename() && shown.has_relative_path()) shown = shown.parent_path();  // "d/."
    std::cerr << fmt::format(
        "{}: {} (a scenario path of run-state.json's invocation) no longer exists: the suite "
        "was moved or deleted after the first run; put it back there, or start a new run\n",
        who, shown.string());
    return kExitNothingRan;
  }
  if (const int rc = end_dead_controllers_jobs(opts.out_dir, state); rc != kExitOk) return rc;
  results::SuiteReport earlier;
  const std::string report = opts.out_dir + "/report.json";
  if (fs::exists(report)) {
    try {
      earlier = results::suite_from_json(nlohmann::json::parse(std::ifstream(report)));
    } catch (const std::exception& e) {
      std::cerr << fmt::format("{}: {}: {}\n", who, report, e.what());
      return kExitNothingRan;
    }
  }
  return run_planned(opts, &earlier);
}

}  // namespace nanchaos::harness
