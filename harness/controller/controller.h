// The controller: `nanchaos run`. Never an MPI rank, so a hung or crashed job cannot take it down.
//
// For each scenario: makes a run folder, launches the ranks with the launcher (mpirun by default,
// oversubscribed and root-safe; `--launcher`/NANCHAOS_LAUNCHER for a hostfile or Slurm), enforces
// [job].timeout_ms by killing the job's whole process tree, then judges from the ranks' event logs
// and process exit states (judge.h) and writes the reports.
// Thread-safety: single-threaded; blocks while a job runs (polling every 10 ms).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/controller/host_limits.h"
#include "harness/controller/launch.h"
#include "harness/controller/shard.h"
#include "harness/scenario/scenario.h"
#include "results/report.h"

namespace nanchaos::harness {

struct RunOptions {
  std::vector<std::string> paths;         ///< files or folders (searched recursively for *.toml)
  std::string out_dir;                    ///< "" = results/runs/<UTC time>-<suite>
  std::vector<std::string> tags;          ///< run only scenarios carrying one of these tags (OR)
  std::vector<std::string> exclude_tags;  ///< then drop those carrying any of these
  std::string junit;                      ///< extra copy of junit.xml
  std::string launcher;                   ///< "" = $NANCHAOS_LAUNCHER or "mpirun"
  std::string self_exe;                   ///< this binary (ranks run `<self_exe> rank ...`)
  bool quiet = false;  ///< no console table, no progress lines; one summary line at the end
  /// Runs per scenario; trial i uses seed + i and, when trials > 1, the run folder
  /// <out>/<name>/trial-<i>/ (docs/scenario-format.md "Trials").
  int trials = 1;
  /// A `skipped` scenario makes the run exit 1 (as a failure would; errors still exit 2).
  bool fail_on_skip = false;
  /// --no-host-limits / --max-ranks: every scenario passes check_host_limits() before any job.
  HostLimitOptions host_limits;
  /// --shard I/N: run only this part of the suite (after --tag; harness/controller/shard.h) and
  /// record the whole suite's names in report.json "shard" for `nanchaos merge`.
  ShardSpec shard;
  std::string shard_balance;  ///< --shard-balance: an earlier report.json whose wall times balance
  /// --jobs J: scenarios run at a time, taken in suite order (each with its own Open MPI
  /// session folder); one whose [job].ranks exceed twice this host's cores runs alone. The
  /// reports stay in suite order; the console rows and progress lines come as scenarios finish.
  int jobs = 1;
};

/// `nanchaos run`: returns the exit status (0 all passed or skipped, 1 a check failed,
/// 2 a scenario or usage error), or 128 + the signal when SIGINT or SIGTERM interrupted it (then
/// the running job was ended, the interrupted scenario is an `error` with reason "interrupted",
/// the rest are listed in report.json's `not_run`, and the reports carry "interrupted": true;
/// the caller re-raises the signal, as main() does, so a shell sees the death it expects). While
/// it runs, SIGINT and SIGTERM are caught (a second one kills at once); a SIGINT ignored at the
/// start stays ignored.
int run_suite(const RunOptions& opts);

/// `nanchaos run --resume RUN_DIR`: goes on with a suite whose controller died (kill -9, a lost
/// node) or was stopped (Ctrl-C). Every run writes RUN_DIR/run-state.json when it starts (its
/// options, the planned scenario names, "complete": false) and sets "complete": true when it
/// finishes uninterrupted. Resume plans the suite again from those options, keeps the scenarios
/// report.json already holds (written after every scenario) but for one an interruption cut
/// short, runs the others and writes the reports in suite order. Returns as run_suite; 0 with a
/// note for a run that finished; 2 when RUN_DIR has no readable run-state.json or report.json.
int resume_suite(const std::string& run_dir, const std::string& self_exe);

/// The current UTC time through strftime(3): utc_stamp("%Y-%m-%dT%H:%M:%SZ").
std::string utc_stamp(const char* strftime_format);

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
