// The rank side of a job: `nanchaos rank` runs one MPI rank of a scenario and writes its event
// log (events.h). Torch-free header so the CLI stays light; the loop lives in runner.cpp.
//
// Exit codes of a rank process (documented in docs/architecture.md):
//   0 completed every step; 3 clean coordinated abort (policy `abort`, max_consecutive);
//   4 watchdog expiry (the rank takes the job down with MPI_Abort); 2 setup error;
//   5 (kJobGuardExit, job_guard.h) the controller or the launcher is gone, or the deadline passed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/scenario/scenario.h"

namespace nanchaos::harness {

inline constexpr int kRankExitAborted = 3;
inline constexpr int kRankExitWatchdog = 4;
inline constexpr int kRankExitSetup = 2;

/// Runs this process's rank of the scenario at `scenario_path`, logging to
/// `run_dir/events/rank-<rank>.jsonl`. `seed` replaces the file's [scenario].seed (a repeated
/// trial of `nanchaos run --trials N`). `campaign_file` non-empty: an in-launch campaign
/// (run_campaign_on) over the fault scenarios it lists, one path a line, each fault's folder the
/// folder of its scenario file; the launch's scenario is `scenario_path` without its faults.
/// `skip_faults`: indices of one-shot faults that fired in an earlier launch of the job ([job]
/// restarts; harness/scenario/plan.h drop_fired_faults): they do not fire in this launch.
/// Returns the process exit code.
int run_rank(const std::string& scenario_path, const std::string& run_dir,
             std::optional<uint64_t> seed = std::nullopt, const std::string& campaign_file = "",
             const std::vector<int>& skip_faults = {});

/// One fault of an in-launch campaign: its complete scenario (the launch's, with its own
/// [[fault]]s) and its folder; its evidence goes to `dir/events/rank-<rank>.jsonl`.
struct InLaunchFault {
  Scenario s;
  std::string dir;
};

/// Reads a campaign file (one fault scenario path a line; blank lines skipped) and loads each.
/// Throws std::runtime_error naming the file on an unreadable list or scenario.
std::vector<InLaunchFault> load_inlaunch_faults(const std::string& campaign_file);

/// The in-launch campaign (docs/architecture.md "Campaigns"): one rank of `s` (no
/// faults) trains the clean prefix once, logging to `run_dir/events/rank-<rank>.jsonl`. For each
/// fault, by its first step: trains on clean to that step, checkpoints the whole rank in memory
/// (model, optimizer, loss scaler, the loop's and the stack's state, every detector's), then
/// runs the fault's window to [job].steps with its faults, its event log (a copy of the launch's
/// so far, then the window: the evidence of the fault's scenario run alone) and its end records
/// (`final`/`exit`, or `abort`/`final`/`exit` 3 on a coordinated abort), and restores the
/// checkpoint bit-exact. A watchdog expiry in a window takes the launch down (exit 4). Returns
/// the launch's exit code (0; 3 when the clean run itself aborted).
int run_campaign_on(Scenario s, std::vector<InLaunchFault> faults,
                    std::unique_ptr<Communicator> comm, const std::string& run_dir);

/// Runs one rank of `s` on `comm` (its rank and world size) in this thread, logging to
/// `run_dir/events/rank-<rank>.jsonl`: the loop of run_rank() without the launcher, MPI or the
/// job guard, for an in-process world (harness/comm/in_process.h). Returns the rank's exit code
/// (a WorldAborted becomes its code). Throws std::runtime_error on a setup error (a rank count
/// that differs from [job].ranks, a fault kind not implemented).
int run_rank_on(Scenario s, std::unique_ptr<Communicator> comm, const std::string& run_dir);

}  // namespace nanchaos::harness
