// The job's own watch over the controller: how every process of a job ends when the controller
// that launched it is gone (SIGKILLed, OOM-killed, its host rebooting the session).
//
// The controller is the one that enforces [job].timeout_ms; if it dies, nothing else would. So
// three independent defences end the job (docs/architecture.md "When the controller dies"):
//   1. The launcher gets a death signal tied to the controller: the controller starts it with
//      PR_SET_PDEATHSIG = SIGTERM (child_process.h), and Open MPI's mpirun answers SIGTERM by
//      killing its ranks and exiting.
//   2. Every rank watches (a) the controller's process, by pid and start time (so a reused pid is
//      not mistaken for it), on the controller's host only, and (b) its own parent, the launcher:
//      a changed parent pid means the launcher died and the rank was re-parented. Checked every
//      200 ms by a thread of the built-in rank (run_rank) and of the Python agent
//      (inject/python/nanchaos/guard.py).
//   3. Every rank has a deadline: timeout_ms + kJobGuardGraceMs after the launch, as a wall-clock
//      time (CLOCK_REALTIME ms, so ranks on other hosts share it, given synchronised clocks).
//      The controller kills the job at timeout_ms, so while it lives the deadline never fires.
// A guard that fires writes one line to stderr ("nanchaos rank 1: the controller (pid 4242) is
// gone: ending this rank") and ends the process with _exit(kJobGuardExit).
//
// Environment (set by the controller for the launcher, inherited or forwarded with -x):
//   NANCHAOS_CONTROLLER_PID, NANCHAOS_CONTROLLER_START (field 22 of /proc/PID/stat, clock ticks
//   since boot), NANCHAOS_CONTROLLER_HOST (gethostname), NANCHAOS_CONTROLLER_PIDNS (its PID
//   namespace, harness/common/rank_host.h; the pid is watched only where host and namespace match),
//   NANCHAOS_DEADLINE_UNIX_MS.
// A process without these variables (a rank started by hand) has no guard.
// Torch-free; never throws.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace nanchaos::harness {

/// Exit status of a job process its guard ended (docs/architecture.md, rank exit codes).
inline constexpr int kJobGuardExit = 5;
/// How long after timeout_ms a rank ends itself (the controller's own kill, SIGTERM + 300 ms +
/// SIGKILL, comes first while it is alive; the launcher's teardown fits in the rest of the 5 s
/// within which a killed job's processes must all be gone).
inline constexpr int64_t kJobGuardGraceMs = 2000;
/// How often the guard thread looks.
inline constexpr int64_t kJobGuardPollMs = 200;

/// CLOCK_REALTIME in milliseconds since the Unix epoch.
int64_t unix_ms();

/// Start time of process `pid` (0: this one) in clock ticks since boot (/proc/PID/stat field 22);
/// nullopt when it is gone or a zombie (a killed process its parent has not reaped yet).
std::optional<uint64_t> process_start_ticks(int pid = 0);

/// The variables above for a job launched now with `timeout_ms`.
std::map<std::string, std::string> job_guard_env(int64_t timeout_ms);

/// What a guard compares against (read from the environment and the process once, at start).
struct JobGuardState {
  int controller_pid = 0;         ///< 0: not watched (another host, or not set)
  uint64_t controller_start = 0;  ///< its start time, as process_start_ticks()
  int parent_pid = 0;             ///< getppid() at start (the launcher); 0: not watched
  int64_t deadline_unix_ms = 0;   ///< 0: none
};

/// The state from NANCHAOS_CONTROLLER_* / NANCHAOS_DEADLINE_UNIX_MS and this process; nullopt
/// when none is set (no guard).
std::optional<JobGuardState> job_guard_from_env();

/// Why the process must end now ("" when it may go on). `parent_pid` and `now_unix_ms` are the
/// current values (getppid(), unix_ms()); the controller is looked up in /proc. Pure apart from
/// that look-up.
std::string job_guard_reason(const JobGuardState& g, int parent_pid, int64_t now_unix_ms);

/// Starts the guard thread of this process (detached; at most once) when job_guard_from_env()
/// gives a state. `who` prefixes its stderr line ("nanchaos rank 1").
void start_job_guard(const std::string& who);

}  // namespace nanchaos::harness
