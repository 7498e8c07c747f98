// The controller: `nanchaos run`. Never an MPI rank, so a hung or crashed job cannot take it down.
//
// For each scenario: makes a run folder, launches the ranks with the launcher (mpirun by default,
// oversubscribed and root-safe; `--launcher`/NANCHAOS_LAUNCHER for a hostfile or Slurm), enforces
// [job].timeout_ms by killing the job's whole process tree, then judges from the ranks' event logs
// and process exit states (judge.h) and writes the reports.
// Thread-safety: single-threaded; blocks while a job runs (polling every 10 ms).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/scenario.h"

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
};

/// How a launched job ended, as the controller saw it.
struct JobResult {
  int exit_code = -1;        ///< launcher exit code (or 128 + signal)
  bool timed_out = false;    ///< the controller killed it at timeout_ms
  int64_t t0_us = 0;         ///< launch time (CLOCK_MONOTONIC us, as in events.h)
  int64_t t_end_us = 0;      ///< launcher reaped
  int orphans_killed = 0;    ///< job processes still alive after the launcher was reaped
  std::string launch_error;  ///< fork/exec failure text
  /// Post-mortem of process exit states (single host): for each rank whose pid the controller saw
  /// (from its `start` event), when the controller first saw that process gone (CLOCK_MONOTONIC
  /// us). Polled every 10 ms while the job runs. Ranks on other hosts are absent here.
  std::map<int, int64_t> rank_gone_us;
  /// Peak resident set size (VmHWM, KiB; proc_status.h) of each watched rank, as last sampled
  /// from /proc while it was alive (every ~250 ms). A rank's own `exit` event, when it writes
  /// one, carries the exact figure; this covers ranks that never write it (hung, killed).
  std::map<int, int64_t> rank_vm_hwm_kib;
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
/// CUDA LibTorch, at least one GPU per rank). "" for device = "cpu". Pure function.
std::string gpu_skip_reason(const Scenario& s, const GpuHost& host);
/// gpu_skip_reason(s, probe_gpu_host()).
std::string gpu_skip_reason(const Scenario& s);

/// Builds the launcher command for `s` (argv), e.g.
/// mpirun -np 4 --oversubscribe --bind-to none [--allow-run-as-root] -x NANCHAOS_JOB_ID ...
/// <self_exe> rank --scenario FILE --run-dir DIR [--seed N]
/// `seed` overrides the scenario file's seed (a repeated trial); nullopt keeps the file's.
/// One rank over NCCL runs without a launcher: <self_exe> rank --scenario FILE --run-dir DIR
/// [--seed N].
std::vector<std::string> launcher_argv(const std::string& launcher, const Scenario& s,
                                       const std::string& self_exe, const std::string& scenario,
                                       const std::string& run_dir,
                                       std::optional<uint64_t> seed = std::nullopt);

/// Launches one job and waits for it (at most timeout_ms, then kills its process tree).
/// `job_id` marks every process of the job (NANCHAOS_JOB_ID) so none can be left behind.
/// When `events_dir` is given, the ranks' pids are read from their `start` events and watched.
JobResult launch_job(const std::vector<std::string>& argv, const std::string& log_path,
                     int64_t timeout_ms, const std::string& job_id,
                     const std::string& events_dir = "", int world = 0);

/// Pids of live processes whose environment has NANCHAOS_JOB_ID=<job_id>.
std::vector<int> job_processes(const std::string& job_id);

/// `nanchaos run`: returns the exit status (0 all passed or skipped, 1 a check failed,
/// 2 a scenario or usage error).
int run_suite(const RunOptions& opts);

}  // namespace nanchaos::harness
