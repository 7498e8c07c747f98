// The controller: `nanchaos run`. Never an MPI rank, so a hung or crashed job cannot take it down.
//
// For each scenario: makes a run folder, launches the ranks with the launcher (mpirun by default,
// oversubscribed and root-safe; `--launcher`/NANCHAOS_LAUNCHER for a hostfile or Slurm), enforces
// [job].timeout_ms by killing the job's whole process tree, then judges from the ranks' event logs
// and process exit states (judge.h) and writes the reports.
// Thread-safety: single-threaded; blocks while a job runs (polling every 10 ms).
#pragma once

#include <signal.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "harness/controller/host_limits.h"
#include "harness/scenario/scenario.h"
#include "results/report.h"

namespace nanchaos::harness {

struct RunOptions {
  std::vector<std::string> paths;  ///< files or folders (searched recursively for *.toml)
  std::string out_dir;             ///< "" = results/runs/<UTC time>-<suite>
  std::vector<std::string> tags;   ///< run only scenarios carrying one of these tags
  std::string junit;               ///< extra copy of junit.xml
  std::string launcher;            ///< "" = $NANCHAOS_LAUNCHER or "mpirun"
  std::string self_exe;            ///< this binary (ranks run `<self_exe> rank ...`)
  bool quiet = false;              ///< no console table, no progress lines
  /// Runs per scenario; trial i uses seed + i and, when trials > 1, the run folder
  /// <out>/<name>/trial-<i>/ (docs/scenario-format.md "Trials").
  int trials = 1;
  /// A `skipped` scenario makes the run exit 1 (as a failure would; errors still exit 2).
  bool fail_on_skip = false;
  /// --no-host-limits / --max-ranks: every scenario passes check_host_limits() before any job.
  HostLimitOptions host_limits;
};

/// "rank R: the nanchaos agent never loaded (...)": an external rank that never wrote `agent`
/// (neither the Python bootstrap nor a LibTorch program's nanchaos::Agent ran).
std::string agent_never_loaded(int64_t rank);

/// How a launched job ended, as the controller saw it.
struct JobResult {
  int exit_code = -1;      ///< launcher exit code (or 128 + signal)
  bool timed_out = false;  ///< the controller killed it at timeout_ms
  int64_t t0_us = 0;       ///< launch time (CLOCK_MONOTONIC us, as in events.h)
  int64_t t_end_us = 0;    ///< launcher reaped
  /// Every process of the job gone (after the orphan sweep; CLOCK_MONOTONIC us); 0: not recorded.
  int64_t t_gone_us = 0;
  int orphans_killed = 0;    ///< job processes still alive after the launcher was reaped
  std::string launch_error;  ///< the launcher could not start: "cannot execute mpirun: ..."
  /// SIGINT or SIGTERM when the controller got one while the job ran (0: not interrupted); the
  /// job was then ended like a timed-out one (its process group and job id, SIGTERM, SIGKILL).
  int interrupted_by = 0;
  /// Post-mortem of process exit states (single host): for each rank whose pid the controller saw
  /// (from its `start` event), when the controller first saw that process gone (CLOCK_MONOTONIC
  /// us). Polled every 10 ms while the job runs. Ranks on other hosts are absent here.
  std::map<int, int64_t> rank_gone_us;
  /// Peak resident set size (VmHWM, KiB; proc_status.h) of each watched rank, as last sampled
  /// from /proc while it was alive (every ~250 ms). A rank's own `exit` event, when it writes
  /// one, carries the exact figure; this covers ranks that never write it (hung, killed).
  std::map<int, int64_t> rank_vm_hwm_kib;
  /// Ranks whose first event says they run on another host or in another PID namespace
  /// (rank_host.h): never pid-watched nor memory-sampled (absent from rank_gone_us and
  /// rank_vm_hwm_kib); their post-mortem comes from their event logs and the launcher's status.
  std::set<int> remote_ranks;
  /// The controller's host name and CLOCK_REALTIME - CLOCK_MONOTONIC (us) at launch: with each
  /// rank's `clock` event they put remote ranks' events on the controller's timeline
  /// (clock_sync.h). Empty / 0 (a JobResult not made by launch_job): no rank's times are shifted.
  std::string host;
  int64_t real_minus_mono_us = 0;
  /// External jobs: why the controller ended the job early because a rank never attached ("" when
  /// it did not): "rank 1: cannot execute ./x: ..." (its attach_error, once its process was
  /// gone), or "rank 0: the nanchaos agent never loaded (no `agent` event): ..." (its process gone
  /// without one, or attach_timeout_ms passed after its `launch` line).
  std::string attach_failure;
};

/// What the controller knows about the host's GPUs before launching a device = "cuda" job.
struct GpuHost {
  bool built_with_cuda = false;  ///< nanchaos built with the CUDA kernels and the NCCL engine
  bool torch_cuda = false;       ///< the LibTorch it links was built with CUDA
  int devices = 0;               ///< cudaGetDeviceCount (0 on error: no GPU)
  std::string why;               ///< the CUDA runtime's reason when devices == 0
};

/// The host as this process sees it (CUDA runtime queried once, ~ms; cached). Never throws.
GpuHost probe_gpu_host();

/// Why a device = "cuda" scenario is `skipped` on `host` ("" when it can run: CUDA and NCCL built,
/// CUDA LibTorch, at least one GPU per rank). "" for device = "cpu". The first blocker named is
/// the one no GPU would remove: a CPU-only LibTorch, then a nanchaos built without CUDA/NCCL,
/// then too few GPUs. Pure function.
std::string gpu_skip_reason(const Scenario& s, const GpuHost& host);
/// gpu_skip_reason(s, probe_gpu_host()).
std::string gpu_skip_reason(const Scenario& s);

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

/// A Python interpreter probed for torch and packages, in one run: `python -c "<probe>" NAME...`
/// prints `nanchaos-package NAME VERSION` (`nanchaos-package NAME` when not installed) for each
/// package name, read with importlib.metadata.version (nothing is imported), then imports torch
/// and prints its version.
struct PythonCandidate {
  std::string label;          ///< as tried: "python3 (/usr/bin/python3)", "/opt/v/bin/python"
  std::string path;           ///< resolved executable ("" when not found)
  std::string torch_version;  ///< torch.__version__ ("" when torch does not import)
  std::string why;            ///< why not, when torch_version is "": the import's last line
  /// normalized_package_name -> installed version ("" when not installed), for each name probed.
  std::map<std::string, std::string> packages;
};

/// The default interpreter candidates after $NANCHAOS_PYTHON: {"python3", "/usr/bin/python3"}.
const std::vector<std::string>& default_python_candidates();

/// The candidates in the order [job] torch tries them (../shared/SCENARIO_FORMAT.md, "Modern
/// PyTorch jobs"): each entry of $NANCHAOS_PYTHON (a ':'-separated list), then `candidates` (a
/// bare name is searched in PATH). Each distinct executable is probed once (a hung import is
/// killed after 120 s); the same executable under two names is kept once.
/// `packages`: [job] python_packages entries of every scenario that will choose from the result
/// ("lightning>=2.0", "transformers"); the distinct names (pip-normalized) are probed in the same
/// run, and malformed entries are skipped (the loader refuses them).
std::vector<PythonCandidate> probe_pythons(
    const std::vector<std::string>& candidates = default_python_candidates(),
    const std::vector<std::string>& packages = {});

/// The interpreter that replaces a bare `python`/`python3` command[0] of an external job.
/// `error` (path empty) names every candidate and its torch version or why it has none:
/// "no Python interpreter with torch >=2.4: python3 (/usr/bin/python3): torch 1.13.0a0;
/// /opt/v/bin/python: No module named 'torch'; ...". With [job] python_packages each candidate
/// with torch also lists every package's version or its absence: "no Python interpreter with
/// torch >=2.4 and lightning>=2.0, transformers: python3 (/usr/bin/python3): torch 1.13.0a0, no
/// lightning, no transformers; /opt/v/bin/python: torch 2.5.1, lightning 2.6.6, no transformers;
/// ...". `unmet` is true when some interpreter has torch but none meets the requirements (the
/// scenario is then skipped, not an error).
struct PythonInterpreter {
  std::string path;
  std::string torch_version;
  /// Each [job] python_packages entry's name as written and the chosen interpreter's version of
  /// it, in the scenario's order (empty when path is "").
  std::vector<std::pair<std::string, std::string>> packages;
  std::string error;
  bool unmet = false;
};
/// The first of `probed` whose torch meets `torch_requirement` ([job] torch; "" any torch) and
/// that has every one of `packages` ([job] python_packages) at a version meeting its requirement.
/// A package `probed` lacks an entry for counts as not installed.
PythonInterpreter choose_python(const std::vector<PythonCandidate>& probed,
                                const std::string& torch_requirement,
                                const std::vector<std::string>& packages = {});
/// probe_pythons(default_python_candidates(), packages) then choose_python().
PythonInterpreter resolve_python(const std::string& torch_requirement = "",
                                 const std::vector<std::string>& packages = {});
/// True for an external job whose command[0] is exactly "python" or "python3".
bool command_needs_python(const Scenario& s);

/// A TCP port free on 127.0.0.1 now (bound to port 0 and closed): the job's MASTER_PORT.
int free_port();

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

/// True when `name` is an executable file: as a path when it has a '/', else searched in PATH.
bool find_program(const std::string& name);

/// --launcher if given, else $NANCHAOS_LAUNCHER, else "mpirun".
std::string default_launcher(const std::string& given = "");

/// Pids of live processes whose environment has NANCHAOS_JOB_ID=<job_id>.
std::vector<int> job_processes(const std::string& job_id);

/// `nanchaos run`: returns the exit status (0 all passed or skipped, 1 a check failed,
/// 2 a scenario or usage error), or 128 + the signal when SIGINT or SIGTERM interrupted it (then
/// the running job was ended, the interrupted scenario is an `error` with reason "interrupted",
/// the rest are listed in report.json's `not_run`, and the reports carry "interrupted": true;
/// the caller re-raises the signal, as main() does, so a shell sees the death it expects). While
/// it runs, SIGINT and SIGTERM are caught (a second one kills at once); a SIGINT ignored at the
/// start stays ignored.
int run_suite(const RunOptions& opts);

/// The SIGINT/SIGTERM run_suite (or run_campaign) has caught (0: none). Async-signal-safe to
/// read; launch_job ends its job at the next poll once it is set.
int stop_signal();

/// The current UTC time through strftime(3): utc_stamp("%Y-%m-%dT%H:%M:%SZ").
std::string utc_stamp(const char* strftime_format);

/// "SIGINT", "SIGTERM" (or the number).
std::string signal_name(int sig);

/// Catches SIGINT and SIGTERM into stop_signal() for its lifetime (a second one kills at once),
/// then restores what was there. A SIGINT ignored when it is made (a background job of a
/// non-interactive shell, nohup) stays ignored. One at a time, on the main thread.
class StopSignalHandlers {
 public:
  StopSignalHandlers();
  ~StopSignalHandlers();
  StopSignalHandlers(const StopSignalHandlers&) = delete;
  StopSignalHandlers& operator=(const StopSignalHandlers&) = delete;

 private:
  static constexpr int kSignals[2] = {SIGINT, SIGTERM};
  struct sigaction old_[2]{};
};

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

/// Runs one job of `s` in `run_dir` and judges it: empties run_dir (but for a scenario.toml that
/// is the scenario's own file), copies the scenario to run_dir/scenario.toml, launches
/// (run_external_job or launch_job with launcher_argv), trims the event logs, judge().
/// [job] restarts: a launch that ended abnormally (launch_outcome() not completed; not for a
/// launch that could not start, a rank that never attached, or an interruption) is checked
/// gone (no process with its job id), its evidence moved to run_dir/launches/K/ (events/,
/// ranks.log, ranks/, plan.json), and after [job] restart_delay_ms the job is launched again
/// (fresh launcher, fresh MASTER_PORT; built-in ranks get `--skip-faults`), up to N times; the
/// last launch's evidence stays at the top of run_dir. A launch that cannot start, an interruption
/// (stop_signal()) and an unpreparable folder give verdict `error` with the reason; the rest of
/// the evidence stays. Adds ScenarioResult::controller (job start, orphans left, the controller's
/// footprint). `seed` overrides the scenario's (a trial). Safe to call from several threads at once
/// for different run folders and job ids (each call owns its launcher; see launch_job's caveat on
/// the death signal: the calling thread must outlive the call, which it does).
results::ScenarioResult run_scenario_job(const Scenario& s, const std::string& run_dir,
                                         const LaunchContext& ctx, const std::string& job_id,
                                         std::optional<uint64_t> seed = std::nullopt);

}  // namespace nanchaos::harness
