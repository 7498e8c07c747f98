// SIGINT, SIGTERM and SIGHUP while the controller runs (`nanchaos run`, `nanchaos campaign`):
// caught into stop_signal() by StopSignalHandlers, read by launch_job's poll loop (which then ends
// its job) and by the orchestrators (which start no more jobs and write their reports). SIGHUP is
// what salloc sends the command it runs when the job's allocation is revoked (scancel of the job,
// its time limit, a node set down: docs/multi-node.md "Failure modes under Slurm"), and what a
// closed terminal sends; uncaught it would kill the controller before it wrote any report.
#pragma once

#include <signal.h>

#include <cstdint>
#include <string>

namespace nanchaos::harness {

/// The SIGINT/SIGTERM/SIGHUP run_suite (or run_campaign) has caught (0: none). Async-signal-safe
/// to read; launch_job ends its job at the next poll once it is set.
int stop_signal();

/// "SIGINT", "SIGTERM", "SIGHUP" (or the number).
std::string signal_name(int sig);

/// A second stop signal within this many ms of the first is the same request delivered twice
/// (timeout(1) sends its signal to the command and then to the command's process group) and is
/// ignored; one after it kills the controller at once.
inline constexpr int64_t kRepeatWindowMs = 500;

/// Catches SIGINT, SIGTERM and SIGHUP into stop_signal() for its lifetime (a second one, at least
/// kRepeatWindowMs after the first, kills at once), then restores what was there. A SIGINT or
/// SIGHUP ignored when it is made (a background job of a non-interactive shell; nohup) stays
/// ignored. One at a time, on the main thread.
class StopSignalHandlers {
 public:
  StopSignalHandlers();
  ~StopSignalHandlers();
  StopSignalHandlers(const StopSignalHandlers&) = delete;
  StopSignalHandlers& operator=(const StopSignalHandlers&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3]{};
};

}  // namespace nanchaos::harness
