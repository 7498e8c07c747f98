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

#include "harness/comm/communicator.h"
#include "harness/scenario/scenario.h"

namespace nanchaos::harness {

inline constexpr int kRankExitAborted = 3;
inline constexpr int kRankExitWatchdog = 4;
inline constexpr int kRankExitSetup = 2;

/// Runs this process's rank of the scenario at `scenario_path`, logging to
/// `run_dir/events/rank-<rank>.jsonl`. `seed` replaces the file's [scenario].seed (a repeated
/// trial of `nanchaos run --trials N`). Returns the process exit code.
int run_rank(const std::string& scenario_path, const std::string& run_dir,
             std::optional<uint64_t> seed = std::nullopt);

/// Runs one rank of `s` on `comm` (its rank and world size) in this thread, logging to
/// `run_dir/events/rank-<rank>.jsonl`: the loop of run_rank() without the launcher, MPI or the
/// job guard, for an in-process world (harness/comm/in_process.h). Returns the rank's exit code
/// (a WorldAborted becomes its code). Throws std::runtime_error on a setup error (a rank count
/// that differs from [job].ranks, a fault kind not implemented).
int run_rank_on(Scenario s, std::unique_ptr<Communicator> comm, const std::string& run_dir);

}  // namespace nanchaos::harness
