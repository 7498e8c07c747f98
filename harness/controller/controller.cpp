// Controller: run a suite (load, launch, judge, report, progress, interruption). The launch and
// the host probes are in launch.cpp and host_probe.cpp. See controller.h.
#include "harness/controller/controller.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "harness/common/child_process.h"
#include "harness/common/cuda_device.h"
#include "harness/common/job_guard.h"
#include "harness/common/log.h"
#include "harness/common/proc_status.h"
#include "harness/common/rank_host.h"
#include "harness/controller/judge.h"
#include "harness/controller/merged_log.h"
#include "harness/controller/progress.h"
#include "harness/controller/rank_evidence.h"
#include "harness/evidence/clock_sync.h"
#include "harness/evidence/event_paths.h"
#include "harness/evidence/events.h"
#include "harness/scenario/plan.h"
#include "nanchaos/config.h"
#include "results/html.h"
#include "results/report.h"
#include "results/stats.h"

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

// The first SIGINT/SIGTERM the controller got (0: none). A signal handler may only store to a
// volatile sig_atomic_t; launch_job's poll loop and run_suite read it.
volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {  // a second one: die of it now (the ranks' guards end the job)
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_stop_signal = sig;
}

}  // namespace

StopSignalHandlers::StopSignalHandlers() {
  g_stop_signal = 0;
  for (int i = 0; i < 2; ++i) {
    struct sigaction sa {};
    sa.sa_handler = &on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(kSignals[i], nullptr, &old_[i]);
    if (kSignals[i] == SIGINT && old_[i].sa_handler == SIG_IGN) continue;
    sigaction(kSignals[i], &sa, nullptr);
  }
}

StopSignalHandlers::~StopSignalHandlers() {
  for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &old_[i], nullptr);
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : std::to_string(sig);
}

namespace {

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
  fs::path p = fs::path(paths[0]).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return fs::is_directory(p) ? p.filename().string() : p.stem().string();
}
}  // namespace

int stop_signal() { return g_stop_signal; }

MpiSessionDir::MpiSessionDir(const LaunchContext& ctx, const std::string& job_id,
                             std::map<std::string, std::string>& env) {
  if (!ctx.private_mpi_tmpdir) return;
  // Short: Open MPI puts its sockets below it (a Unix socket path holds ~107 bytes).
  dir_ = fmt::format("/tmp/nanchaos-mpi-{}", job_id);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  env["OMPI_MCA_orte_tmpdir_base"] = dir_;
}

MpiSessionDir::~MpiSessionDir() {
  if (dir_.empty()) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

namespace {

// An earlier run in the same folder (--out reused) must leave nothing a job could read: no event
// log that would pass for this job's, no checkpoint of the job's own under {run_dir}. The
// scenario file itself stays when it lives there (a campaign writes it there first).
void empty_run_folder(const std::string& run_dir, const std::string& scenario_file) {
  fs::create_directories(run_dir);
  std::error_code same_ec;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    if (fs::equivalent(entry.path(), scenario_file, same_ec)) continue;
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
    std::map<std::string, std::string> env;
    std::optional<MpiSessionDir> mpi_tmp(std::in_place, ctx, job_id, env);
    if (s.job.external()) {
      job = run_external_job(ctx.launcher, s, ctx.self_exe, run_dir, ctx.python, job_id, seed,
                             false, env, launch);
    } else {
      auto argv = launcher_argv(ctx.launcher, s, ctx.self_exe, fs::absolute(s.file).string(),
                                fs::absolute(run_dir).string(), seed);
      if (!launch.fired_earlier.empty()) {
        argv.insert(argv.end(),
                    {"--skip-faults", fmt::format("{}", fmt::join(launch.fired_earlier, ","))});
      }
      job = launch_job(argv, run_dir + "/ranks.log", s.job.timeout_ms, job_id, events_dir(run_dir),
                       int(s.job.ranks), 0, env);
    }
    mpi_tmp.reset();
    // A rank killed mid-job leaves NUL bytes after its last event (events.h): cut them, so
    // the logs are plain JSON lines for every reader, not only read_events().
    for (int64_t r = 0; r < s.job.ranks; ++r) {
      trim_event_log(event_log_path(run_dir, r));
    }
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
  results::ScenarioResult res = judge_run(s, run_dir, job, earlier);
  res.logs = job_logs(run_dir, int(s.job.ranks));
  if (!job.launch_error.empty()) {
    res.verdict = results::Verdict::kError;
    res.reason = job.launch_error;
  }
  if (job.interrupted_by != 0) {
    // The evidence so far stays (outcome, events); the verdict cannot mean anything.
    res.verdict = results::Verdict::kError;
    res.reason = "interrupted";
    res.extra["interrupted_by"] = signal_name(job.interrupted_by);
  }
  // The timeline's zero (CLOCK_MONOTONIC us): the first launch's start.
  res.extra["job_start_us"] = earlier.empty() ? job.t0_us : earlier.front().t0_us;
  // No orphans: what of this job is alive now, after launch_job's sweep (0, or a bug).
  res.extra["orphans_left"] = job_processes(job_id).size();
  // The controller's own footprint after each job (the soak test bounds its growth).
  res.extra["controller"] = {{"vm_rss_kib", vm_rss_kib().value_or(0)},
                             {"vm_hwm_kib", vm_hwm_kib().value_or(0)},
                             {"fds", open_fd_count()}};
  return res;
}

int run_suite(const RunOptions& opts) {
  // Ctrl-C / SIGTERM end the running job, write the reports (interrupted) and return 128 + sig.
  StopSignalHandlers stop_handlers;
  // 1. Load everything first: a bad scenario never starts a job.
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
  std::vector<Scenario> scenarios;
  bool bad = false;
  std::map<std::string, std::string> names;
  const HostResources host = probe_host();
  for (const auto& f : files) {
    try {
      Scenario s = load_scenario(f);
      check_host_limits(s, host, opts.host_limits);
      if (auto it = names.find(s.name); it != names.end()) {
        std::cerr << fmt::format("{}: error: [scenario].name \"{}\" is also used by {}\n", f,
                                 s.name, it->second);
        bad = true;
        continue;
      }
      names[s.name] = f;
      if (!opts.tags.empty()) {
        bool hit = false;
        for (const auto& t : opts.tags) {
          hit |= std::find(s.tags.begin(), s.tags.end(), t) != s.tags.end();
        }
        if (!hit) continue;
      }
      scenarios.push_back(std::move(s));
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
    std::cerr << fmt::format(
        "nanchaos run: error: no scenario carries the tag(s) {}; no job "
        "started\n",
        fmt::join(opts.tags, ", "));
    return 2;
  }

  results::SuiteReport report;
  report.suite = suite_name(opts.paths);
  report.started = utc_stamp("%Y-%m-%dT%H:%M:%SZ");
  report.nanchaos_version = NANCHAOS_VERSION;
  report.host = hostname();
  report.trials = opts.trials;
  const std::string out = opts.out_dir.empty()
                              ? "results/runs/" + utc_stamp("%Y%m%dT%H%M%SZ") + "-" + report.suite
                              : opts.out_dir;
  // Output locations are checked before any job starts: a typo must not cost a whole suite.
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out)) {
    std::cerr << fmt::format("nanchaos run: error: --out {}: cannot create the run folder: {}\n",
                             out, ec ? ec.message() : "not a directory");
    return 2;
  }
  if (fs::exists(fs::path(out) / "report.json", ec)) {
    std::cerr << fmt::format(
        "nanchaos run: warning: --out {}: replacing the report of an earlier run there (its run "
        "folders are overwritten scenario by scenario, others stay)\n",
        out);
  }
  if (!opts.junit.empty()) {
    std::ofstream probe(opts.junit, std::ios::app);
    if (!probe) {
      std::cerr << fmt::format("nanchaos run: error: --junit {}: cannot open for writing: {}\n",
                               opts.junit, std::strerror(errno));
      return 2;
    }
  }
  const std::string launcher = default_launcher(opts.launcher);
  LaunchContext launch;
  launch.launcher = launcher;
  launch.self_exe = opts.self_exe;
  // A missing launcher is a missing dependency, said once up front (not a "crashed" job per
  // scenario). Only CPU jobs need it: a CUDA job is one NCCL rank or skipped.
  const bool needs_launcher =
      std::any_of(scenarios.begin(), scenarios.end(), [](const Scenario& s) {
        return s.job.external() || !(s.job.backend == Backend::kNccl && s.job.ranks == 1);
      });
  const std::vector<std::string> launcher_words = split_words(launcher);
  if (needs_launcher && (launcher_words.empty() || !find_program(launcher_words.front()))) {
    std::cerr << fmt::format(
        "nanchaos run: error: launcher '{}' not found{} (Open MPI's mpirun: Debian package "
        "openmpi-bin, installed by .ci/install-deps; or set --launcher / NANCHAOS_LAUNCHER)\n",
        launcher_words.empty() ? launcher : launcher_words.front(),
        launcher_words.empty() || launcher_words.front().find('/') != std::string::npos
            ? ""
            : " in PATH");
    return 2;
  }
  // The interpreters for external jobs run as `python3 ...`: probed once per suite (for every
  // package any scenario lists), chosen per scenario by its [job] torch and python_packages.
  std::vector<PythonCandidate> pythons;
  if (std::any_of(scenarios.begin(), scenarios.end(), command_needs_python)) {
    std::vector<std::string> packages;
    for (const auto& s : scenarios) {
      if (!command_needs_python(s)) continue;
      packages.insert(packages.end(), s.job.python_packages.begin(), s.job.python_packages.end());
    }
    pythons = probe_pythons(default_python_candidates(), packages);
  }
  if (!opts.quiet) std::cout << results::console_header() << std::flush;

  bool write_failed = false;
  auto write_reports = [&] {
    try {
      results::write_report_json(report, out + "/report.json");
      results::write_junit(report, out + "/junit.xml");
      results::write_markdown(report, out + "/report.md");
      if (!opts.junit.empty()) results::write_junit(report, opts.junit);
    } catch (const std::exception& e) {
      // Keep running: later scenarios still measure; the exit status reports the failure.
      if (!write_failed) std::cerr << "nanchaos run: error: " << e.what() << "\n";
      write_failed = true;
    }
  };

  bool usage_error = false;
  int job_counter = 0;
  harness::Progress progress(scenarios.size(), !opts.quiet);
  // One trial = one job of the scenario with seed + trial, in its own run folder.
  auto run_trial = [&](const Scenario& base, size_t index, int trial) {
    Scenario s = base;
    s.seed = base.seed + uint64_t(trial);
    progress.start(index, s.name, trial, opts.trials);
    const std::string run_dir =
        opts.trials == 1 ? out + "/" + s.name : fmt::format("{}/{}/trial-{}", out, s.name, trial);
    const std::string job_id = fmt::format("{}-{}-{}", getpid(), ++job_counter, now_us());
    const auto seed = trial == 0 ? std::nullopt : std::optional<uint64_t>(s.seed);
    results::ScenarioResult res = run_scenario_job(s, run_dir, launch, job_id, seed);
    res.trial = trial;
    res.trial_count = opts.trials;
    return res;
  };

  // A stop signal: the scenario it interrupted is an `error` (reason "interrupted"), the ones
  // after it are listed as not run, and the reports say so at the top level.
  auto note_interruption = [&](size_t first_not_run) {
    report.interrupted = true;
    report.interrupt_signal = signal_name(stop_signal());
    for (size_t i = first_not_run; i < scenarios.size(); ++i) {
      report.not_run.push_back(scenarios[i].name);
    }
  };
  for (size_t index = 0; index < scenarios.size(); ++index) {
    if (stop_signal() != 0) {
      note_interruption(index);
      break;
    }
    const auto& s = scenarios[index];
    results::ScenarioResult res = result_for(s, "");  // no run folder yet
    res.trial_count = 0;  // until a trial runs: a skipped or refused scenario has no trials
    auto missing = unimplemented_features(s);
    const std::string no_gpu = s.job.device == Device::kCuda ? gpu_skip_reason(s) : "";
    PythonInterpreter python;
    if (command_needs_python(s))
      python = choose_python(pythons, s.job.torch, s.job.python_packages);
    launch.python = python.path;
    // A scenario that never runs has no trials: its stats say so (trials 0, no pass rate).
    auto not_run_stats = [](const results::ScenarioResult& r) {
      nlohmann::json st = results::scenario_stats({r});
      st["trials"] = 0;
      st["passed"] = 0;
      st["pass_rate"] = nullptr;
      return st;
    };
    if (!no_gpu.empty()) {
      res.verdict = results::Verdict::kSkipped;
      res.reason = no_gpu;
      res.stats = not_run_stats(res);
    } else if (command_needs_python(s) && python.path.empty()) {
      // Interpreters with torch, none meeting [job] torch and python_packages: skipped with what
      // each one has.
      res.verdict = python.unmet ? results::Verdict::kSkipped : results::Verdict::kError;
      res.reason = python.error;
      res.stats = not_run_stats(res);
    } else if (!missing.empty()) {
      res.verdict = results::Verdict::kError;
      res.reason = "not implemented yet: " + missing.front();
      for (size_t i = 1; i < missing.size(); ++i) res.reason += "; " + missing[i];
      usage_error = true;
      res.stats = not_run_stats(res);
    } else {
      std::vector<results::ScenarioResult> trials;
      for (int t = 0; t < opts.trials && (t == 0 || stop_signal() == 0); ++t) {
        trials.push_back(run_trial(s, index, t));
      }
      // Cut short: a trial's job was interrupted, or the signal came between two trials.
      const bool cut = stop_signal() != 0 && (trials.size() < size_t(opts.trials) ||
                                              trials.back().reason == "interrupted");
      res = results::representative_trial(trials);
      if (cut) {
        res = trials.back();
        res.verdict = results::Verdict::kError;
        res.reason = "interrupted";
        res.extra["interrupted_by"] = signal_name(stop_signal());
      }
      res.stats = results::scenario_stats(trials);
      if (opts.trials > 1) res.trials = std::move(trials);
    }
    if (command_needs_python(s) && !python.path.empty()) {
      res.extra["python"] = python.path;  // report.json: the interpreter and torch it ran with
      res.extra["torch"] = python.torch_version;
      if (!s.job.python_packages.empty()) {  // the listed packages' versions it ran with
        nlohmann::json versions = nlohmann::json::object();
        for (const auto& [name, version] : python.packages) versions[name] = version;
        res.extra["python_packages"] = versions;
      }
    }
    if (res.verdict == results::Verdict::kError) usage_error = true;
    report.scenarios.push_back(res);
    progress.finish(index, res);
    if (!opts.quiet) {
      std::cout << results::console_row(res) << std::flush;
    } else if ((res.verdict == results::Verdict::kFail ||
                res.verdict == results::Verdict::kError) &&
               stop_signal() == 0) {
      // Quiet hides the table, not a failure: a CI log must say which scenario and why (an
      // interrupted scenario is said by the interruption's own line).
      std::cerr << fmt::format("nanchaos run: {} {}: {} (run dir {})\n", to_string(res.verdict),
                               res.name, res.reason, res.run_dir);
    }
    if (stop_signal() != 0) note_interruption(index + 1);
    write_reports();  // after every scenario: nothing measured is lost if the controller dies
    if (report.interrupted) break;
  }
  if (stop_signal() != 0 && !report.interrupted) note_interruption(scenarios.size());
  progress.done();
  report.detector_stats = results::suite_detector_stats(report);
  write_reports();
  if (report.interrupted) {
    // No report.html: gnuplot would keep a person who pressed Ctrl-C waiting.
    std::cerr << fmt::format(
        "nanchaos run: interrupted by {}: {} scenario(s) judged, {} not run; reports: "
        "{}/report.json, junit.xml, report.md\n",
        report.interrupt_signal, report.scenarios.size(), report.not_run.size(), out);
    return 128 + stop_signal();
  }
  const std::string html_note = results::write_html(report, out + "/report.html");
  if (!opts.quiet) {
    std::cout << results::console_footer(report);
    std::cout << "reports: " << out << "/report.json, junit.xml, report.md, report.html\n";
  }
  // Not an error: the page is there with its tables; the note says what is missing.
  if (!html_note.empty()) std::cerr << "nanchaos run: warning: report.html: " << html_note << "\n";
  if (usage_error || write_failed || report.errors() > 0) return 2;
  if (report.failed() > 0) return 1;
  // CI on a GPU runner that lost its GPU must not stay green (RunOptions::fail_on_skip).
  if (opts.fail_on_skip && report.skipped() > 0) {
    std::cerr << fmt::format(
        "nanchaos run: error: {} scenario(s) skipped and --fail-on-skip is set (exit 1)\n",
        report.skipped());
    return 1;
  }
  return 0;
}
}  // namespace nanchaos::harness
