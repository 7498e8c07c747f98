// Controller: launch, watch, kill, judge, report. See controller.h.
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
#include "harness/common/proc_status.h"
#include "harness/common/rank_host.h"
#include "harness/controller/judge.h"
#include "harness/controller/progress.h"
#include "harness/evidence/clock_sync.h"
#include "harness/evidence/events.h"
#include "harness/scenario/plan.h"
#include "nanchaos/config.h"
#include "results/html.h"
#include "results/report.h"
#include "results/stats.h"

namespace fs = std::filesystem;

namespace nanchaos::harness {
namespace {

// True when `name` is an executable file: as a path when it has a '/', else searched in PATH.
bool find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string full = (dir.empty() ? "." : dir) + "/" + name;
    if (access(full.c_str(), X_OK) == 0 && !fs::is_directory(full)) return true;
  }
  return false;
}

// The full path of `name` as execvp would find it ("" when it would not).
std::string which(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string full = (dir.empty() ? "." : dir) + "/" + name;
    if (access(full.c_str(), X_OK) == 0 && !fs::is_directory(full)) return full;
  }
  return "";
}

// What an external rank's log says so far about attaching (read incrementally, whole lines).
struct AttachWatch {
  int64_t launch_t = 0;
  int64_t seen_us = 0;  // remote ranks: when the controller first read the `launch` line
  bool agent = false, start = false;
  std::string attach_error;
  std::streamoff offset = 0;
};

void scan_attach(const std::string& path, AttachWatch& w) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  in.seekg(w.offset);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline yet: an incomplete line, read it next time
    w.offset += std::streamoff(line.size() + 1);
    const auto e = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!e.is_object()) continue;
    const std::string ev = e.value("ev", "");
    if (ev == "launch") {
      w.launch_t = e.value("t_us", int64_t(0));
    } else if (ev == "agent") {
      w.agent = true;
    } else if (ev == "start") {
      w.start = true;
    } else if (ev == "attach_error" && w.attach_error.empty()) {
      w.attach_error = e.value("reason", std::string("attach_error"));
    }
  }
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string utc_stamp(const char* fmt_str) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), fmt_str, &tm);
  return buf;
}

std::string hostname() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

void kill_job(pid_t pgid, const std::string& job_id, int sig) {
  if (pgid > 0) ::kill(-pgid, sig);
  for (int pid : job_processes(job_id)) ::kill(pid, sig);
}

// Alive and not a zombie (an exited rank stays a zombie until the launcher reaps it).
bool process_alive(int pid) {
  if (pid <= 0) return false;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto rp = line.rfind(')');
  return rp == std::string::npos || rp + 2 >= line.size() || line[rp + 2] != 'Z';
}

// The first SIGINT/SIGTERM the controller got (0: none). A signal handler may only store to a
// volatile sig_atomic_t; launch_job's poll loop and run_suite read it (issue 13, point 4).
volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {  // a second one: die of it now (the ranks' guards end the job)
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_stop_signal = sig;
}

// Catches SIGINT and SIGTERM for the lifetime of one run_suite call, then restores what was
// there. A SIGINT ignored when the run starts (a background job of a non-interactive shell,
// nohup) stays ignored, as the shell meant.
class StopSignalHandlers {
 public:
  StopSignalHandlers() {
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
  ~StopSignalHandlers() {
    for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &old_[i], nullptr);
  }
  StopSignalHandlers(const StopSignalHandlers&) = delete;
  StopSignalHandlers& operator=(const StopSignalHandlers&) = delete;

 private:
  static constexpr int kSignals[2] = {SIGINT, SIGTERM};
  struct sigaction old_[2]{};
};

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : std::to_string(sig);
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
  fs::path p = fs::path(paths[0]).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return fs::is_directory(p) ? p.filename().string() : p.stem().string();
}

}  // namespace

std::string gpu_skip_reason(const Scenario& s, const GpuHost& host) {
  if (s.job.device != Device::kCuda) return "";
  // A CPU-only LibTorch is the blocker a GPU or a driver would not remove: name it first (with
  // that LibTorch the GPU count says nothing), and the nanchaos build only as a second one.
  if (!host.torch_cuda) {
    return std::string("device cuda needs a GPU: this LibTorch has no CUDA (CPU-only build)") +
           (host.built_with_cuda ? "" : "; nanchaos was also built without CUDA/NCCL");
  }
  if (!host.built_with_cuda) {
    return "device cuda needs a GPU build: nanchaos was built without CUDA/NCCL (nvcc or nccl.h "
           "not found)";
  }
  if (host.devices < s.job.ranks) {
    return fmt::format("device cuda needs a GPU per rank: {} ranks, this host has {}{}",
                       s.job.ranks, host.devices, host.why.empty() ? "" : " (" + host.why + ")");
  }
  return "";
}

GpuHost probe_gpu_host() {
  static const GpuHost cached = [] {
    GpuHost h;
    h.built_with_cuda = NANCHAOS_WITH_CUDA && NANCHAOS_WITH_NCCL;
    h.torch_cuda = NANCHAOS_TORCH_CUDA;
    if (h.built_with_cuda) h.devices = cuda_device_count(&h.why);
    return h;
  }();
  return cached;
}

std::string gpu_skip_reason(const Scenario& s) { return gpu_skip_reason(s, probe_gpu_host()); }

std::vector<std::string> launcher_argv(const std::string& launcher, const Scenario& s,
                                       const std::string& self_exe, const std::string& scenario,
                                       const std::string& run_dir, std::optional<uint64_t> seed) {
  if (s.job.backend == Backend::kNccl && s.job.ranks == 1) {
    // One rank over NCCL needs no launcher: the unique id is generated locally, MPI is not used.
    std::vector<std::string> argv = {self_exe, "rank",      "--scenario",
                                     scenario, "--run-dir", run_dir};
    if (seed) argv.insert(argv.end(), {"--seed", std::to_string(*seed)});
    return argv;
  }
  std::vector<std::string> argv = split_words(launcher.empty() ? "mpirun" : launcher);
  const std::string tool = fs::path(argv.at(0)).filename().string();
  const std::string np = std::to_string(s.job.ranks);
  if (tool == "srun") {
    argv.insert(argv.end(), {"-n", np, "--kill-on-bad-exit=1"});
  } else {  // Open MPI's mpirun (or orterun/mpiexec)
    argv.insert(argv.end(),
                {"-np", np, "--oversubscribe", "--bind-to", "none", "-x", "NANCHAOS_JOB_ID", "-x",
                 "NANCHAOS_CLOCK", "--mca", "mpi_yield_when_idle", "1"});
    // The ranks' guard against a dead controller (job_guard.h), also on other hosts.
    for (const char* v :
         {"NANCHAOS_CONTROLLER_PID", "NANCHAOS_CONTROLLER_START", "NANCHAOS_CONTROLLER_HOST",
          "NANCHAOS_CONTROLLER_PIDNS", "NANCHAOS_DEADLINE_UNIX_MS"}) {
      argv.insert(argv.end(), {"-x", v});
    }
    if (std::getenv("NANCHAOS_LOG")) argv.insert(argv.end(), {"-x", "NANCHAOS_LOG"});
    if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  }
  argv.insert(argv.end(), {self_exe, "rank", "--scenario", scenario, "--run-dir", run_dir});
  if (seed) argv.insert(argv.end(), {"--seed", std::to_string(*seed)});
  return argv;
}

std::vector<std::string> exec_rank_argv(const std::string& launcher, const Scenario& s,
                                        const std::string& self_exe, const std::string& scenario,
                                        const std::string& run_dir, int master_port,
                                        const std::string& python, std::optional<uint64_t> seed) {
  // The built-in rank command line, with `rank` swapped for `exec-rank` and its options.
  Scenario via_launcher = s;
  via_launcher.job.backend = Backend::kMpi;  // never the one-NCCL-rank shortcut: ranks need ids
  std::vector<std::string> argv =
      launcher_argv(launcher, via_launcher, self_exe, scenario, run_dir, std::nullopt);
  auto it = std::find(argv.begin(), argv.end(), self_exe);
  *(it + 1) = "exec-rank";
  argv.insert(argv.end(), {"--master-port", std::to_string(master_port)});
  if (!python.empty()) argv.insert(argv.end(), {"--python", python});
  if (seed) argv.insert(argv.end(), {"--seed", std::to_string(*seed)});
  return argv;
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

bool command_needs_python(const Scenario& s) {
  return s.job.external() && !s.job.command.empty() &&
         (s.job.command[0] == "python" || s.job.command[0] == "python3");
}

PythonInterpreter resolve_python(const std::vector<std::string>& candidates) {
  PythonInterpreter out;
  if (const char* env = std::getenv("NANCHAOS_PYTHON"); env && *env) {
    out.path = env;
    return out;
  }
  std::vector<std::string> said;
  std::set<std::string> probed;
  for (const auto& name : candidates) {
    const std::string full = which(name);
    const std::string label = name.find('/') == std::string::npos && !full.empty()
                                  ? fmt::format("{} ({})", name, full)
                                  : name;
    if (full.empty()) {
      said.push_back(name +
                     (name.find('/') == std::string::npos ? ": not found in PATH" : ": not found"));
      continue;
    }
    if (!probed.insert(fs::weakly_canonical(full).string()).second) continue;
    std::string text, last;
    int st = -1;
    try {
      SpawnOptions probe;
      probe.argv = {full, "-c", "import torch"};
      probe.capture_output = true;  // stdout and stderr: the last line says why not
      ChildProcess py = ChildProcess::spawn(probe);
      text = py.read_output(std::chrono::seconds(120));  // then killed: a hung import
      st = py.wait().code();
    } catch (const SpawnError& e) {
      text = e.what();
    }
    if (st == 0) {
      out.path = full;
      return out;
    }
    std::istringstream lines(text);
    for (std::string l; std::getline(lines, l);) {
      if (l.find_first_not_of(" \t\r") != std::string::npos) last = l;
    }
    const std::string prefix = "ModuleNotFoundError: ";
    if (last.rfind(prefix, 0) == 0) last.erase(0, prefix.size());
    said.push_back(label + ": " + (last.empty() ? "cannot import torch" : last));
  }
  out.error = "no Python interpreter with torch: " + fmt::format("{}", fmt::join(said, "; ")) +
              "; install Debian's python3-torch (.ci/install-deps) or set NANCHAOS_PYTHON";
  return out;
}

std::string default_launcher(const std::string& given) {
  if (!given.empty()) return given;
  const char* env = std::getenv("NANCHAOS_LAUNCHER");
  return env && *env ? env : "mpirun";
}

JobResult run_external_job(const std::string& launcher, const Scenario& s,
                           const std::string& self_exe, const std::string& run_dir,
                           const std::string& python, const std::string& job_id,
                           std::optional<uint64_t> seed, bool dry_run) {
  const std::string abs_run = fs::absolute(run_dir).string();
  // A log left by an earlier run in the same folder must not pass for this job's first line.
  std::error_code ec;
  fs::remove_all(abs_run + "/events", ec);
  if (fs::create_directories(abs_run + "/events", ec); ec) {
    JobResult r;
    r.launch_error = fmt::format("cannot create {}/events: {}", abs_run, ec.message());
    return r;
  }
  {
    errno = 0;
    std::ofstream plan(abs_run + "/plan.json");
    plan << compile_plan(s, dry_run).dump() << "\n";  // one line: $NANCHAOS_PLAN reads well
    plan.close();
    if (!plan) {
      JobResult r;
      r.launch_error =
          fmt::format("cannot write {}/plan.json: {}", abs_run, std::strerror(errno ? errno : EIO));
      return r;
    }
  }
  const auto argv = exec_rank_argv(launcher, s, self_exe, fs::absolute(s.file).string(), abs_run,
                                   free_port(), python, seed);
  return launch_job(argv, abs_run + "/ranks.log", s.job.timeout_ms, job_id, abs_run + "/events",
                    int(s.job.ranks), s.job.attach_timeout_ms);
}

std::vector<int> job_processes(const std::string& job_id) {
  std::vector<int> pids;
  const std::string marker = "NANCHAOS_JOB_ID=" + job_id;
  DIR* d = opendir("/proc");
  if (!d) return pids;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == getpid()) continue;
    std::ifstream env(fmt::format("/proc/{}/environ", pid), std::ios::binary);
    std::string entry;
    while (std::getline(env, entry, '\0')) {
      if (entry == marker) {
        // Zombies have already exited; only live processes count.
        std::ifstream stat(fmt::format("/proc/{}/stat", pid));
        std::string statline;
        std::getline(stat, statline);
        const auto rp = statline.rfind(')');
        if (rp != std::string::npos && rp + 2 < statline.size() && statline[rp + 2] == 'Z') break;
        pids.push_back(int(pid));
        break;
      }
    }
  }
  closedir(d);
  return pids;
}

JobResult launch_job(const std::vector<std::string>& argv, const std::string& log_path,
                     int64_t timeout_ms, const std::string& job_id, const std::string& events_dir,
                     int world, int64_t attach_timeout_ms) {
  JobResult r;
  r.t0_us = now_us();
  r.host = this_host();
  r.real_minus_mono_us = real_minus_mono_us();
  const ClockServer clock;  // answers the ranks' clock exchanges until the job is reaped
  // The launcher's environment: ours, the job id that marks every process of the job, what
  // its ranks need to end themselves should this controller die (job_guard.h), and where the
  // controller's clock service is (clock_sync.h).
  std::map<std::string, std::string> ours = job_guard_env(timeout_ms);
  ours.insert({{"NANCHAOS_JOB_ID", job_id},
               {"NANCHAOS_CLOCK", clock.spec()},
               {"OMPI_ALLOW_RUN_AS_ROOT", "1"},
               {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}});
  SpawnOptions spawn;
  spawn.argv = argv;
  spawn.env = env_with(ours);
  spawn.stdout_path = log_path;  // stderr too
  spawn.new_session = true;      // own process group: the whole tree can be signalled at once
  // Defence 1 of job_guard.h: the launcher gets SIGTERM when this (main) thread ends, and tears
  // its ranks down. run_suite launches from the main thread only.
  spawn.death_signal = SIGTERM;
  ChildProcess launcher;
  try {
    launcher = ChildProcess::spawn(spawn);
  } catch (const SpawnError& e) {
    r.launch_error = e.what();
    r.t_end_us = now_us();
    return r;
  }
  const pid_t pid = launcher.pid();
  const int64_t deadline = r.t0_us + timeout_ms * 1000;
  std::map<int, int> rank_pid;        // rank -> pid, once its start (or launch) event is there
  std::map<int, AttachWatch> attach;  // external ranks that have not written `start` yet
  int64_t attach_kill_at = 0;         // > 0: a rank never attached; kill the job then
  // Memory is sampled every 25th poll (~250 ms): 64 ranks' status files every 10 ms would cost
  // a 2-core host more than the check is worth; VmHWM is a peak, so a late sample loses nothing.
  int64_t polls = 0;
  bool sample_memory = false;
  auto watch_ranks = [&] {
    if (events_dir.empty()) return;
    for (int rank = 0; rank < world; ++rank) {
      if (!rank_pid.count(rank)) {
        // `start` is a rank's first event: read one line, not the whole (pre-grown) log.
        std::ifstream in(fmt::format("{}/rank-{}.jsonl", events_dir, rank));
        std::string line;
        if (std::getline(in, line)) {
          const auto e = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
          const std::string ev = e.is_object() ? e.value("ev", "") : "";
          if (ev == "start" || ev == "launch") {
            rank_pid[rank] = e.value("pid", 0);
            if (!rank_is_local(e)) r.remote_ranks.insert(rank);  // its pid is not in our /proc
          }
          if (ev == "launch" && attach_timeout_ms > 0) attach[rank] = AttachWatch{};
        }
        continue;
      }
      if (auto a = attach.find(rank); a != attach.end() && r.attach_failure.empty()) {
        // Alive first, then the log: a line written just before the process ended is seen.
        // A remote rank's end is the launcher's to report; its attach deadline runs from when
        // the controller saw its `launch` line (its t_us is another host's clock).
        const bool remote = r.remote_ranks.count(rank) > 0;
        const bool alive = remote || process_alive(rank_pid[rank]);
        AttachWatch& w = a->second;
        scan_attach(fmt::format("{}/rank-{}.jsonl", events_dir, rank), w);
        if (remote && w.launch_t > 0 && w.seen_us == 0) w.seen_us = now_us();
        const int64_t launched = remote ? w.seen_us : w.launch_t;
        const std::string never = fmt::format(
            "rank {}: the nanchaos agent never loaded (no `agent` event): the command is not a "
            "Python program or its interpreter did not run the bootstrap",
            rank);
        if (!w.attach_error.empty() && !alive) {
          r.attach_failure = fmt::format("rank {}: {}", rank, w.attach_error);
        } else if (!w.agent && !alive) {
          r.attach_failure = never;
        } else if (!w.agent && launched > 0 && now_us() - launched > attach_timeout_ms * 1000) {
          r.attach_failure =
              never + fmt::format(" (attach_timeout_ms = {} ms passed)", attach_timeout_ms);
        }
        if (!r.attach_failure.empty()) {
          // A rank that exited lets the launcher end by itself (its exit code is evidence); give
          // it a moment, then kill. A rank still running is killed now.
          attach_kill_at = now_us() + (alive ? 0 : 1000000);
        } else if (w.start && w.attach_error.empty()) {
          attach.erase(a);  // attached: the rest is the ordinary watch
        }
      }
      if (r.remote_ranks.count(rank)) continue;
      if (!r.rank_gone_us.count(rank) && !process_alive(rank_pid[rank])) {
        r.rank_gone_us[rank] = now_us();
      } else if (sample_memory && !r.rank_gone_us.count(rank)) {
        if (auto kib = vm_hwm_kib(rank_pid[rank])) {
          r.rank_vm_hwm_kib[rank] = std::max(r.rank_vm_hwm_kib[rank], *kib);
        }
      }
    }
  };
  // Ends the job: SIGTERM to its group and to every process with its job id, 300 ms, SIGKILL.
  auto end_job = [&] {
    kill_job(pid, job_id, SIGTERM);
    launcher.wait_for(std::chrono::milliseconds(300));
    kill_job(pid, job_id, SIGKILL);
    return launcher.wait();
  };
  ExitStatus status;
  for (;;) {
    sample_memory = polls++ % 25 == 0;
    watch_ranks();
    if (auto st = launcher.poll()) {
      status = *st;
      break;
    }
    if (const int sig = stop_signal()) {  // SIGINT/SIGTERM on the controller (run_suite)
      r.interrupted_by = sig;
      status = end_job();
      break;
    }
    if (attach_kill_at > 0 && now_us() >= attach_kill_at) {
      status = end_job();
      break;
    }
    if (now_us() >= deadline) {
      r.timed_out = true;
      status = end_job();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  r.t_end_us = now_us();
  for (const auto& [rank, rpid] : rank_pid) {
    if (!r.rank_gone_us.count(rank) && !r.remote_ranks.count(rank)) {
      r.rank_gone_us[rank] = r.t_end_us;
    }
  }
  r.exit_code = status.code();
  // No orphans: whatever of this job is still alive (a rank that outlived its launcher) dies now.
  for (int attempt = 0; attempt < 50; ++attempt) {
    auto left = job_processes(job_id);
    if (left.empty()) break;
    r.orphans_killed = std::max<int>(r.orphans_killed, int(left.size()));
    kill_job(pid, job_id, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return r;
}

int stop_signal() { return g_stop_signal; }

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
  // The interpreter of external jobs run as `python3 ...`: resolved once per suite.
  PythonInterpreter python;
  if (std::any_of(scenarios.begin(), scenarios.end(), command_needs_python)) {
    python = resolve_python();
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
    JobResult job;
    try {
      // A full disk or a read-only --out: this scenario is an error naming the path and errno;
      // the suite goes on and the reports keep what was measured.
      fs::create_directories(run_dir + "/events");
      fs::copy_file(s.file, run_dir + "/scenario.toml", fs::copy_options::overwrite_existing);
    } catch (const std::exception& e) {
      job.launch_error = std::string("cannot prepare the run folder: ") + e.what();
    }
    if (!job.launch_error.empty()) {
      results::ScenarioResult res;
      res.name = s.name;
      res.file = s.file;
      res.seed = s.seed;
      res.ranks = s.job.ranks;
      res.run_dir = run_dir;
      res.reason = job.launch_error;  // verdict stays "error"
      res.trial = trial;
      res.trial_count = opts.trials;
      return res;
    }
    if (s.job.external()) {
      job = run_external_job(launcher, s, opts.self_exe, run_dir, python.path, job_id, seed);
    } else {
      auto argv = launcher_argv(launcher, s, opts.self_exe, fs::absolute(s.file).string(),
                                fs::absolute(run_dir).string(), seed);
      job = launch_job(argv, run_dir + "/ranks.log", s.job.timeout_ms, job_id, run_dir + "/events",
                       int(s.job.ranks));
    }
    // A rank killed mid-job leaves NUL bytes after its last event (events.h): cut them, so
    // the logs are plain JSON lines for every reader, not only read_events().
    for (int64_t r = 0; r < s.job.ranks; ++r) {
      trim_event_log(fmt::format("{}/events/rank-{}.jsonl", run_dir, r));
    }
    results::ScenarioResult res = judge(s, run_dir, job);
    if (!job.launch_error.empty()) {
      res.verdict = "error";
      res.reason = job.launch_error;
    }
    if (job.interrupted_by != 0) {
      // The evidence so far stays (outcome, events); the verdict cannot mean anything.
      res.verdict = "error";
      res.reason = "interrupted";
      res.extra["interrupted_by"] = signal_name(job.interrupted_by);
    }
    res.trial = trial;
    res.trial_count = opts.trials;
    res.extra["job_start_us"] = job.t0_us;  // the timeline's zero (CLOCK_MONOTONIC us)
    // No orphans: what of this job is alive now, after launch_job's sweep (0, or a bug).
    res.extra["orphans_left"] = job_processes(job_id).size();
    // The controller's own footprint after each job (the soak test bounds its growth).
    res.extra["controller"] = {{"vm_rss_kib", vm_rss_kib().value_or(0)},
                               {"vm_hwm_kib", vm_hwm_kib().value_or(0)},
                               {"fds", open_fd_count()}};
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
    results::ScenarioResult res;
    res.name = s.name;
    res.file = s.file;
    res.seed = s.seed;
    res.ranks = s.job.ranks;
    res.trial_count = 0;  // until a trial runs: a skipped or refused scenario has no trials
    auto missing = unimplemented_features(s);
    const std::string no_gpu = s.job.device == Device::kCuda ? gpu_skip_reason(s) : "";
    // A scenario that never runs has no trials: its stats say so (trials 0, no pass rate).
    auto not_run_stats = [](const results::ScenarioResult& r) {
      nlohmann::json st = results::scenario_stats({r});
      st["trials"] = 0;
      st["passed"] = 0;
      st["pass_rate"] = nullptr;
      return st;
    };
    if (!no_gpu.empty()) {
      res.verdict = "skipped";
      res.reason = no_gpu;
      res.stats = not_run_stats(res);
    } else if (command_needs_python(s) && python.path.empty()) {
      res.verdict = "error";
      res.reason = python.error;
      res.stats = not_run_stats(res);
    } else if (!missing.empty()) {
      res.verdict = "error";
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
        res.verdict = "error";
        res.reason = "interrupted";
        res.extra["interrupted_by"] = signal_name(stop_signal());
      }
      res.stats = results::scenario_stats(trials);
      if (opts.trials > 1) res.trials = std::move(trials);
    }
    if (res.verdict == "error") usage_error = true;
    report.scenarios.push_back(res);
    progress.finish(index, res);
    if (!opts.quiet) std::cout << results::console_row(res) << std::flush;
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
