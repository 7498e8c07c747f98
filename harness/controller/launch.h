// Launching one job and watching it to its end (launch.cpp): the launcher command lines
// (mpirun, srun, exec-rank), launch_job's poll loop (pid watch, memory, attach deadlines,
// timeout, interruption), the kill sequence and the orphan sweep; LaunchContext, what every job of
// a suite or campaign shares.
// Thread-safety: launch_job blocks while its job runs; see its caveat on the death signal.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/controller/job_result.h"
#include "harness/scenario/scenario.h"

namespace nanchaos::harness {

/// Builds the launcher command for `s` (argv), e.g.
/// mpirun -np 4 --oversubscribe --bind-to none [--allow-run-as-root] -x NANCHAOS_JOB_ID
/// -x NANCHAOS_CLOCK ...
/// <self_exe> rank --scenario FILE --run-dir DIR [--seed N]
/// `seed` overrides the scenario file's seed (a repeated trial); nullopt keeps the file's.
/// One rank over NCCL runs without a launcher: <self_exe> rank --scenario FILE --run-dir DIR
/// [--seed N].
std::vector<std::string> launcher_argv(const std::string& launcher, const Scenario& s,
                                       const std::string& self_exe, const std::string& scenario,
                                       const std::string& run_dir,
                                       std::optional<uint64_t> seed = std::nullopt);

/// Launches one job and waits for it (at most timeout_ms, then kills its process tree).
/// `job_id` marks every process of the job (NANCHAOS_JOB_ID) so none can be left behind (on
/// this host: processes on other hosts are the launcher's to end, as mpirun ends its orteds).
/// The launcher is a ChildProcess (child_process.h) in its own session with the death signal
/// SIGTERM, and gets the NANCHAOS_CONTROLLER_* / NANCHAOS_DEADLINE_UNIX_MS variables of
/// job_guard.h: if this process dies, the job ends by itself. Call it from the main thread (the
/// death signal is tied to the calling thread). A stop signal (stop_signal()) ends the job at
/// the next 10-ms poll and sets JobResult::interrupted_by. A ClockServer runs for the job's
/// duration; its address is in the child's $NANCHAOS_CLOCK (clock_sync.h).
/// When `events_dir` is given, the ranks' pids are read from their first event (`start`, or an
/// external rank's `launch`) and watched. `attach_timeout_ms` > 0 (external jobs) also ends the
/// job early when a rank never attaches (JobResult::attach_failure).
/// `extra_env` is added to the launcher's environment (after the job's own variables).
JobResult launch_job(const std::vector<std::string>& argv, const std::string& log_path,
                     int64_t timeout_ms, const std::string& job_id,
                     const std::string& events_dir = "", int world = 0,
                     int64_t attach_timeout_ms = 0,
                     const std::map<std::string, std::string>& extra_env = {});

/// A TCP port that can be bound now on every address, IPv4 and IPv6: the job's MASTER_PORT.
/// Chosen at random from 20000 up to the kernel's ephemeral range
/// (/proc/sys/net/ipv4/ip_local_port_range), whose ports outgoing connections take by
/// themselves; the kernel's pick from that range only when none below is free. 0 when no
/// socket can be made.
int free_port();

/// Whether the external job in `run_dir` lost its MASTER_PORT before it got going: some rank
/// logged an `exception` saying "Address already in use" (EADDRINUSE: torch's TCPStore could
/// not bind) and no rank logged `start` (nothing was measured). Reads RUN/events/rank-R.jsonl.
bool lost_master_port(const std::string& run_dir, int world);

/// The launcher command of an external job:
/// mpirun -np N --oversubscribe ... -x NANCHAOS_JOB_ID ... <self_exe> exec-rank --scenario FILE
///   --run-dir DIR --master-port P [--python PY] [--seed S]   (srun: -n N --kill-on-bad-exit=1)
std::vector<std::string> exec_rank_argv(const std::string& launcher, const Scenario& s,
                                        const std::string& self_exe, const std::string& scenario,
                                        const std::string& run_dir, int master_port,
                                        const std::string& python,
                                        std::optional<uint64_t> seed = std::nullopt);

/// Which launch of a job ([job] restarts) a command line starts: 0 for the first, and the
/// one-shot faults that fired in the earlier ones (drop_fired_faults, harness/scenario/plan.h).
struct LaunchIndex {
  int64_t launch = 0;
  std::vector<int> fired_earlier;  ///< [[fault]] indices, ascending
};

/// Runs one external job: writes RUN/plan.json (compile_plan of `s` less the faults
/// `launch.fired_earlier` retires, plus "launch" and "fired_earlier"), clears RUN/events, picks
/// a fresh MASTER_PORT, launches through `launcher` and waits (launch_job). `seed`: as for
/// launcher_argv.
JobResult run_external_job(const std::string& launcher, const Scenario& s,
                           const std::string& self_exe, const std::string& run_dir,
                           const std::string& python, const std::string& job_id,
                           std::optional<uint64_t> seed, bool dry_run = false,
                           const std::map<std::string, std::string>& extra_env = {},
                           const LaunchIndex& launch = {});

/// Whitespace-separated words of a command line (no quoting): "mpirun --mca x y" -> 3 words.
std::vector<std::string> split_words(const std::string& s);

/// --launcher if given, else $NANCHAOS_LAUNCHER, else "mpirun".
std::string default_launcher(const std::string& given = "");

/// Pids of live processes whose environment has NANCHAOS_JOB_ID=<job_id>.
std::vector<int> job_processes(const std::string& job_id);

/// Pids of live processes (not zombies, not this one) whose environment holds every one of
/// `entries` ("NAME=value", exactly). Reads /proc/PID/environ: only processes this user may read.
std::vector<int> processes_with_env(const std::vector<std::string>& entries);

/// What launching a scenario's job needs besides the scenario: the same for every job of a suite
/// or a campaign.
struct LaunchContext {
  std::string launcher;  ///< default_launcher()
  std::string self_exe;  ///< this binary
  std::string python;    ///< resolve_python() for a bare python3 command of external jobs ("")
  /// Each job gets its own Open MPI session folder (OMPI_MCA_orte_tmpdir_base, a fresh folder
  /// under /tmp removed after the job): launches that start or end at the same moment otherwise
  /// race on mpirun's shared /tmp/ompi.<host>.<uid> ("A call to mkdir was unable to create the
  /// desired directory ... File exists"). For parallel launches (`nanchaos campaign --jobs`).
  bool private_mpi_tmpdir = false;
  /// A shared clean reference run's folder (clean_run.h; a campaign's DIR/clean) that
  /// run_clean_reference reuses when its key matches; "": each run folder has its own.
  std::string clean_cache;
};

/// The job's own Open MPI session folder when `ctx.private_mpi_tmpdir` (see LaunchContext):
/// made by the constructor (/tmp/nanchaos-mpi-<job_id>) and named in `env`
/// (OMPI_MCA_orte_tmpdir_base), removed by the destructor. Nothing when the flag is off.
class MpiSessionDir {
 public:
  MpiSessionDir(const LaunchContext& ctx, const std::string& job_id,
                std::map<std::string, std::string>& env);
  ~MpiSessionDir();
  MpiSessionDir(const MpiSessionDir&) = delete;
  MpiSessionDir& operator=(const MpiSessionDir&) = delete;

 private:
  std::string dir_;
};

/// One launch of `s`'s job in `run_dir`, waited for: run_external_job for external jobs, else
/// launch_job of launcher_argv(`scenario_file`, ...) with `--skip-faults` for the faults
/// `launch.fired_earlier` retires; in its own MPI session folder (MpiSessionDir); the event logs
/// trimmed afterwards (trim_event_log). `scenario_file`: what built-in ranks load (s.file, or a
/// derived file such as the clean run's).
JobResult launch_scenario(const Scenario& s, const std::string& scenario_file,
                          const std::string& run_dir, const LaunchContext& ctx,
                          const std::string& job_id, std::optional<uint64_t> seed,
                          const LaunchIndex& launch = {});

}  // namespace nanchaos::harness
