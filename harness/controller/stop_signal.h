// SIGINT and SIGTERM while the controller runs (`nanchaos run`, `nanchaos campaign`): caught
// into stop_signal() by StopSignalHandlers, read by launch_job's poll loop (which then ends its
// job) and by the orchestrators (which start no more jobs and write their reports).
#pragma once

#include <signal.h>

#include <string>

namespace nanchaos::harness {

/// The SIGINT/SIGTERM run_suite (or run_campaign) has caught (0: none). Async-signal-safe to
/// read; launch_job ends its job at the next poll once it is set.
int stop_signal();

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

}  // namespace nanchaos::harness
