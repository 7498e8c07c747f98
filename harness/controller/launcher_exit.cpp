// Whether the launcher's exit status is the job's (judge_internal.h LauncherExit).
//
// The launcher's status is evidence of how the ranks ended only while they run: mpirun returns
// the first failed rank's code, srun fails the step. A launcher that crashes after every rank has
// written its exit record (Open MPI 4.1's mpirun segfaulted in its teardown in 3 of 5 runs of
// one scenario) says nothing more about the job, so the judge counts the
// ranks' own codes then, and report.json keeps the launcher's status with the reason. A crash
// before some rank exited stays the job's end (the ranks it took down have no exit record).
#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <vector>

#include "harness/controller/judge_internal.h"
#include "harness/controller/stop_signal.h"

namespace nanchaos::harness {

LauncherExit launcher_exit(const std::vector<RankEvidence>& logs, const JobResult& job) {
  LauncherExit l;
  l.status = l.counted = job.exit_code;
  if (job.exit_code > 128 && job.exit_code < 128 + 65) l.signal = job.exit_code - 128;
  const bool ended_by_controller =
      job.timed_out || job.interrupted_by != 0 || !job.attach_failure.empty();
  bool all_exited = !logs.empty();
  int ranks_code = 0;
  for (const auto& r : logs) {
    all_exited = all_exited && r.exit_code.has_value();
    if (r.exit_code && *r.exit_code != 0 && ranks_code == 0) ranks_code = *r.exit_code;
  }
  l.after_ranks_exited = all_exited && !ended_by_controller;
  static constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE};
  const bool crashed = std::find(std::begin(kCrashSignals), std::end(kCrashSignals), l.signal) !=
                       std::end(kCrashSignals);
  if (!l.after_ranks_exited || !crashed) return l;
  l.teardown_crash = true;
  l.counted = ranks_code;
  std::vector<int> codes;
  for (const auto& r : logs) codes.push_back(*r.exit_code);
  l.note = fmt::format(
      "the launcher died of {} after every rank had written its exit record (exit codes {}): a "
      "crash in its own teardown, not the job's; the verdict counts the ranks' codes",
      signal_name(l.signal), fmt::join(codes, ", "));
  return l;
}

results::LauncherExitFacts launcher_exit_facts(const LauncherExit& l) {
  return {l.status, l.signal ? signal_name(l.signal) : "", l.after_ranks_exited, !l.teardown_crash,
          l.note};
}

}  // namespace nanchaos::harness
