// Launching one job and watching it to its end: the launcher command lines (mpirun, srun,
// exec-rank), the poll loop (pid watch, memory, attach deadlines, timeout, interruption), the
// kill sequence and the orphan sweep. Declared in launch.h.
#include "harness/controller/launch.h"

#include <arpa/inet.h>
#include <dirent.h>
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
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "harness/common/child_process.h"
#include "harness/common/job_guard.h"
#include "harness/common/log.h"
#include "harness/common/proc_status.h"
#include "harness/common/rank_host.h"
#include "harness/common/rank_output.h"
#include "harness/controller/merged_log.h"
#include "harness/controller/stop_signal.h"
#include "harness/evidence/clock_sync.h"
#include "harness/evidence/event_paths.h"
#include "harness/evidence/event_types.h"
#include "harness/evidence/events.h"
#include "harness/scenario/plan.h"

namespace fs = std::filesystem;

namespace nanchaos::harness {
namespace {

// What an external rank's log says so far about attaching (read incrementally, whole lines).
struct AttachWatch {
  int64_t launch_t = 0;
  int64_t seen_us = 0;  // remote ranks: when the controller first read the `launch` line
  bool agent = false, start = false;
  std::string attach_error;
  std::streamoff offset = 0;
};

void scan_attach(const std::string& path, AttachWatch& w) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return;  // a link to /dev/zero: one endless line
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  in.seekg(w.offset);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline yet: an incomplete line, read it next time
    w.offset += std::streamoff(line.size() + 1);
    const auto e = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!e.is_object()) continue;
    // A live log may hold anything a job wrote: nothing read here throws.
    const std::string ev = event_type(e);
    const auto text = [&](const char* key, const char* def) {
      const auto it = e.find(key);
      return it != e.end() && it->is_string() ? it->get<std::string>() : std::string(def);
    };
    if (ev == LaunchEvent::kEv) {
      const auto t = e.find("t_us");
      w.launch_t = t != e.end() && t->is_number_integer() ? t->get<int64_t>() : 0;
    } else if (ev == "agent") {
      w.agent = true;
    } else if (ev == StartEvent::kEv) {
      w.start = true;
    } else if (ev == "attach_error" && w.attach_error.empty()) {
      w.attach_error = text("reason", "attach_error");
    }
  }
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
}  // namespace

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

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
    // When one rank fails, Open MPI 4.1 sends the others SIGCONT, sleeps
    // odls_base_sigkill_timeout (default 1 s), then SIGTERM and at once SIGKILL (strace of
    // mpirun, 2026-12-07). Kept at its default: in that second the survivors' stack sees the
    // failure (pytorch-crash-rank1's rank 0 observes gloo's exception) as under a real launcher.
    // It is most of a restart's teardown_ms; OMPI_MCA_odls_base_sigkill_timeout=0 in the
    // environment removes it (bench/README.md "Restart cost").
    // The ranks' guard against a dead controller (job_guard.h), also on other hosts.
    for (const char* v :
         {"NANCHAOS_CONTROLLER_PID", "NANCHAOS_CONTROLLER_START", "NANCHAOS_CONTROLLER_HOST",
          "NANCHAOS_CONTROLLER_PIDNS", "NANCHAOS_DEADLINE_UNIX_MS"}) {
      argv.insert(argv.end(), {"-x", v});
    }
    // Where each rank writes its own stdout and stderr (rank_output.h), also on other hosts.
    argv.insert(argv.end(), {"-x", kRankOutputEnv});
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

namespace {

// Whether `port` can be bound now on every IPv4 and IPv6 address: torch's TCPStore binds
// [::] and 0.0.0.0, so a port taken on either is taken.
bool port_bindable(int port) {
  const int v4 = socket(AF_INET, SOCK_STREAM, 0);
  if (v4 < 0) return false;
  sockaddr_in a4{};
  a4.sin_family = AF_INET;
  a4.sin_addr.s_addr = htonl(INADDR_ANY);
  a4.sin_port = htons(uint16_t(port));
  bool ok = bind(v4, reinterpret_cast<sockaddr*>(&a4), sizeof(a4)) == 0;
  close(v4);
  const int v6 = socket(AF_INET6, SOCK_STREAM, 0);
  if (ok && v6 >= 0) {  // a host without IPv6 has nothing to collide with there
    int only = 1;
    setsockopt(v6, IPPROTO_IPV6, IPV6_V6ONLY, &only, sizeof(only));
    sockaddr_in6 a6{};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons(uint16_t(port));
    ok = bind(v6, reinterpret_cast<sockaddr*>(&a6), sizeof(a6)) == 0;
  }
  if (v6 >= 0) close(v6);
  return ok;
}

// The kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range; Linux's default
// 32768 60999): the local ports of outgoing connections, which a gloo or NCCL job opens by
// the hundred. A MASTER_PORT from it can be taken by one of them before rank 0 binds it.
std::pair<int, int> ephemeral_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 32768, hi = 60999;
  if (!(in >> lo >> hi) || lo < 1024 || hi < lo || hi > 65535) return {32768, 60999};
  return {lo, hi};
}

}  // namespace

int free_port() {
  // Below the ephemeral range, where no outgoing connection takes a port by itself; a random
  // start so that concurrent controllers (ctest -j, shards on one host) seldom try the same one.
  const auto [eph_lo, eph_hi] = ephemeral_range();
  const int lo = 20000, hi = std::max(lo + 1000, eph_lo) - 1;
  thread_local std::mt19937 rng(std::random_device{}());
  const int start = std::uniform_int_distribution<int>(lo, hi)(rng);
  for (int i = 0; i < 200; ++i) {
    const int port = lo + (start - lo + i * 7919) % (hi - lo + 1);
    if ((port < eph_lo || port > eph_hi) && port_bindable(port)) return port;
  }
  // A host whose low ports are all taken: one the kernel picks (ephemeral, as before).
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

bool lost_master_port(const std::string& run_dir, int world) {
  bool taken = false;
  for (int r = 0; r < world; ++r) {
    std::ifstream in(event_log_path(run_dir, r));
    std::string line;
    while (std::getline(in, line)) {
      const auto e = nlohmann::json::parse(line, nullptr, false);
      if (!e.is_object()) continue;
      const std::string ev = event_type(e);
      // A rank that attached may have measured something: never launched again.
      if (ev == StartEvent::kEv) return false;
      const auto m = e.find("message");
      const std::string message = m != e.end() && m->is_string() ? m->get<std::string>() : "";
      if (ev == "exception" && (message.find("Address already in use") != std::string::npos ||
                                message.find("EADDRINUSE") != std::string::npos)) {
        taken = true;
      }
    }
  }
  return taken;
}

std::string default_launcher(const std::string& given) {
  if (!given.empty()) return given;
  const char* env = std::getenv("NANCHAOS_LAUNCHER");
  return env && *env ? env : "mpirun";
}

JobResult run_external_job(const std::string& launcher, const Scenario& s,
                           const std::string& self_exe, const std::string& run_dir,
                           const std::string& python, const std::string& job_id,
                           std::optional<uint64_t> seed, bool dry_run,
                           const std::map<std::string, std::string>& extra_env,
                           const LaunchIndex& launch) {
  const std::string abs_run = fs::absolute(run_dir).string();
  // A log left by an earlier run in the same folder must not pass for this job's first line.
  std::error_code ec;
  fs::remove_all(events_dir(abs_run), ec);
  if (fs::create_directories(events_dir(abs_run), ec); ec) {
    JobResult r;
    r.launch_error = fmt::format("cannot create {}/events: {}", abs_run, ec.message());
    return r;
  }
  {
    errno = 0;
    std::ofstream plan(abs_run + "/plan.json");
    Scenario this_launch = s;
    drop_fired_faults(this_launch, launch.fired_earlier);
    auto compiled = compile_plan(this_launch, dry_run);
    compiled["launch"] = launch.launch;  // exec-rank substitutes it for {launch}
    compiled["fired_earlier"] = launch.fired_earlier;
    plan << compiled.dump() << "\n";  // one line: $NANCHAOS_PLAN reads well
    plan.close();
    if (!plan) {
      JobResult r;
      r.launch_error =
          fmt::format("cannot write {}/plan.json: {}", abs_run, std::strerror(errno ? errno : EIO));
      return r;
    }
  }
  // The port free_port() found can still be taken before rank 0 binds it (another process's
  // listener): a job that lost it before any rank attached is launched again on a fresh port,
  // its first try's output kept as ranks.port-taken-N.log.
  constexpr int kPortTries = 3;
  for (int attempt = 1;; ++attempt) {
    const int port = free_port();
    const auto argv = exec_rank_argv(launcher, s, self_exe, fs::absolute(s.file).string(), abs_run,
                                     port, python, seed);
    JobResult r =
        launch_job(argv, abs_run + "/ranks.log", s.job.timeout_ms, job_id, events_dir(abs_run),
                   int(s.job.ranks), s.job.attach_timeout_ms, extra_env);
    if (attempt == kPortTries || r.interrupted_by || !lost_master_port(abs_run, int(s.job.ranks))) {
      return r;
    }
    log::warn(
        "{}: MASTER_PORT {} was taken before rank 0 bound it; launching again on a fresh "
        "port (try {} of {})",
        abs_run, port, attempt + 1, kPortTries);
    fs::rename(abs_run + "/ranks.log", fmt::format("{}/ranks.port-taken-{}.log", abs_run, attempt),
               ec);
    fs::remove_all(events_dir(abs_run), ec);
    fs::create_directories(events_dir(abs_run), ec);
  }
}

JobResult launch_scenario(const Scenario& s, const std::string& scenario_file,
                          const std::string& run_dir, const LaunchContext& ctx,
                          const std::string& job_id, std::optional<uint64_t> seed,
                          const LaunchIndex& launch) {
  std::map<std::string, std::string> env;
  JobResult job;
  {
    MpiSessionDir mpi_tmp(ctx, job_id, env);
    if (s.job.external()) {
      job = run_external_job(ctx.launcher, s, ctx.self_exe, run_dir, ctx.python, job_id, seed,
                             false, env, launch);
    } else {
      auto argv = launcher_argv(ctx.launcher, s, ctx.self_exe, fs::absolute(scenario_file).string(),
                                fs::absolute(run_dir).string(), seed);
      if (!launch.fired_earlier.empty()) {
        argv.insert(argv.end(),
                    {"--skip-faults", fmt::format("{}", fmt::join(launch.fired_earlier, ","))});
      }
      job = launch_job(argv, run_dir + "/ranks.log", s.job.timeout_ms, job_id, events_dir(run_dir),
                       int(s.job.ranks), 0, env);
    }
  }
  // A rank killed mid-job leaves NUL bytes after its last event (events.h): cut them, so the
  // logs are plain JSON lines for every reader, not only read_events().
  for (int64_t r = 0; r < s.job.ranks; ++r) trim_event_log(event_log_path(run_dir, r));
  return job;
}

std::vector<int> job_processes(const std::string& job_id) {
  return processes_with_env({"NANCHAOS_JOB_ID=" + job_id});
}

std::vector<int> processes_with_env(const std::vector<std::string>& entries) {
  std::vector<int> pids;
  DIR* d = opendir("/proc");
  if (!d) return pids;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == getpid()) continue;
    std::ifstream env(fmt::format("/proc/{}/environ", pid), std::ios::binary);
    size_t found = 0;
    for (std::string entry; found < entries.size() && std::getline(env, entry, '\0');) {
      found += size_t(std::count(entries.begin(), entries.end(), entry));
    }
    if (entries.empty() || found < entries.size()) continue;
    // Zombies have already exited; only live processes count.
    std::ifstream stat(fmt::format("/proc/{}/stat", pid));
    std::string statline;
    std::getline(stat, statline);
    const auto rp = statline.rfind(')');
    if (rp != std::string::npos && rp + 2 < statline.size() && statline[rp + 2] == 'Z') continue;
    pids.push_back(int(pid));
  }
  closedir(d);
  return pids;
}

JobResult launch_job(const std::vector<std::string>& argv, const std::string& log_path,
                     int64_t timeout_ms, const std::string& job_id, const std::string& events_dir,
                     int world, int64_t attach_timeout_ms,
                     const std::map<std::string, std::string>& extra_env) {
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
  // Each rank writes its own stdout and stderr into RUN/ranks/ (rank_output.h); the launcher's
  // own output goes beside them, and the controller merges them all into `log_path` as it goes.
  const std::string ranks_dir =
      rank_output_dir(fs::absolute(fs::path(log_path)).parent_path().string());
  {
    std::error_code ec;
    fs::remove_all(ranks_dir, ec);  // an earlier run's files must not pass for this job's
    fs::create_directories(ranks_dir, ec);
  }
  ours[kRankOutputEnv] = ranks_dir;
  for (const auto& [k, v] : extra_env) ours[k] = v;
  SpawnOptions spawn;
  spawn.argv = argv;
  spawn.env = env_with(ours);
  spawn.stdout_path = launcher_log_path(ranks_dir);  // stderr too
  spawn.new_session = true;  // own process group: the whole tree can be signalled at once
  // Defence 1 of job_guard.h: the launcher gets SIGTERM when this (main) thread ends, and tears
  // its ranks down. run_suite launches from the main thread only.
  spawn.death_signal = SIGTERM;
  MergedLog merged(ranks_dir, log_path);
  ChildProcess launcher;
  try {
    launcher = ChildProcess::spawn(spawn);
  } catch (const SpawnError& e) {
    r.launch_error = e.what();
    r.t_end_us = now_us();
    merged.finish();
    return r;
  }
  const pid_t pid = launcher.pid();
  log::debug("job {}: launched pid {}: {}", job_id, pid, fmt::join(argv, " "));
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
        // `start` is a rank's first event: read one line, not the whole (pre-grown) log; of a
        // regular file only (a job may put a link to /dev/zero there: one endless line).
        const std::string log_path = event_log_in(events_dir, rank);
        std::error_code ec;
        if (!fs::is_regular_file(log_path, ec)) continue;
        std::ifstream in(log_path);
        std::string line;
        if (std::getline(in, line)) {
          const auto e = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
          const std::string ev = event_type(e);
          if (ev == StartEvent::kEv || ev == LaunchEvent::kEv) {
            std::optional<RankIdentity> id;
            try {
              id = ev == StartEvent::kEv ? RankIdentity(parse_start(e))
                                         : RankIdentity(parse_launch(e));
            } catch (const nlohmann::json::exception&) {
              // A first line whose pid or host cannot be read: its process cannot be watched
              // through /proc, as a remote rank's; the launcher reports its end.
            }
            rank_pid[rank] = id ? int(id->pid) : 0;
            if (!id || !rank_is_local(id->host, id->pidns.value_or(""))) {
              r.remote_ranks.insert(rank);  // its pid is not in our /proc
            }
          }
          if (ev == LaunchEvent::kEv && attach_timeout_ms > 0) attach[rank] = AttachWatch{};
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
        scan_attach(event_log_in(events_dir, rank), w);
        if (remote && w.launch_t > 0 && w.seen_us == 0) w.seen_us = now_us();
        const int64_t launched = remote ? w.seen_us : w.launch_t;
        const std::string never = agent_never_loaded(rank);
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
      } else if ((sample_memory || !r.rank_vm_hwm_kib.count(rank)) && !r.rank_gone_us.count(rank)) {
        // A rank with no sample yet is read at once: one that hangs early and is killed at the
        // deadline would otherwise be missed by every 25th poll on a loaded host.
        if (auto kib = vm_hwm_kib(rank_pid[rank])) {
          r.rank_vm_hwm_kib[rank] = std::max(r.rank_vm_hwm_kib[rank], *kib);
        }
      }
    }
  };
  // Ends the job: SIGTERM to its group and to every process with its job id, 300 ms, SIGKILL.
  auto end_job = [&](const char* why) {
    log::info("job {}: ending it ({}): SIGTERM, SIGKILL 300 ms later", job_id, why);
    kill_job(pid, job_id, SIGTERM);
    launcher.wait_for(std::chrono::milliseconds(300));
    kill_job(pid, job_id, SIGKILL);
    return launcher.wait();
  };
  ExitStatus status;
  for (;;) {
    sample_memory = polls % 25 == 0;
    if (polls++ % 5 == 0) merged.poll();  // ~50 ms: the merged view follows the job
    watch_ranks();
    if (auto st = launcher.poll()) {
      status = *st;
      break;
    }
    if (const int sig = stop_signal()) {  // SIGINT/SIGTERM on the controller (run_suite)
      r.interrupted_by = sig;
      status = end_job("the controller was interrupted");
      break;
    }
    if (attach_kill_at > 0 && now_us() >= attach_kill_at) {
      status = end_job("a rank never attached");
      break;
    }
    if (now_us() >= deadline) {
      r.timed_out = true;
      status = end_job("timeout_ms passed");
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
  log::debug("job {}: launcher exited with code {} after {} ms", job_id, r.exit_code,
             (r.t_end_us - r.t0_us) / 1000);
  // No orphans: whatever of this job is still alive (a rank that outlived its launcher) dies now.
  for (int attempt = 0; attempt < 50; ++attempt) {
    auto left = job_processes(job_id);
    if (left.empty()) break;
    r.orphans_killed = std::max<int>(r.orphans_killed, int(left.size()));
    log::info("job {}: {} process(es) outlived the launcher; killing them", job_id, left.size());
    kill_job(pid, job_id, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.t_gone_us = now_us();
  merged.finish();  // every process of the job is gone: nothing more will be written
  return r;
}
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

std::string agent_never_loaded(int64_t rank) {
  return fmt::format(
      "rank {}: the nanchaos agent never loaded (no `agent` event): the command is not a Python "
      "program or its interpreter did not run the bootstrap, nor a LibTorch program that "
      "constructs nanchaos::Agent",
      rank);
}

}  // namespace nanchaos::harness
