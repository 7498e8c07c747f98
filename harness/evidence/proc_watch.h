// A rank's own process watch: the time its process ended, seen from its own host. The
// controller pid-watches the ranks of its host (launch.cpp, every 10 ms); a rank on another host
// (another PID namespace) is out of its reach, so each rank leaves this record for itself.
//
// start_exit_watch() forks a small watcher child. The watcher leaves the rank's session (setsid,
// so the launcher's group signals miss it), ignores SIGTERM/SIGINT/SIGHUP, blanks the
// NANCHAOS_JOB_ID entry of its own environment (so the controller's sweep for job processes that
// outlived the launcher does not count it), closes every inherited descriptor, and waits for the
// rank to end: a pidfd of the rank (Linux >= 5.3) polled for readability, else its parent pid
// checked every 5 ms (re-parenting means the rank is gone). Then it writes, in one write(2),
//
//   RUN/events/rank-R.gone.json   {"ev":"gone","rank":R,"pid":P,"t_us":T}
//
// (t_us: CLOCK_MONOTONIC of that host in microseconds, the clock of the rank's event log, which
// the judge moves onto the controller's timeline with the rank's `clock` event) and exits. The
// record carries no exit status (the rank is not the watcher's child): the judge reads it as
// "this process was gone at T", the same fact the controller's pid watch gives for local ranks
// (harness/controller/rank_evidence.cpp, judge_internal.h ranks_gone_us).
//
// What it is for: crash blame from the processes themselves, never from the injector's record
// of a `crash` fault.
#pragma once

#include <string>

namespace nanchaos::harness {

/// Path of rank `rank`'s gone record in `events_dir` (RUN/events).
std::string gone_record_path(const std::string& events_dir, int rank);

/// Forks the watcher for this process (see above); `path` is where its record goes (absolute,
/// or relative to the current directory, which the watcher keeps). Call it early, while this
/// process has one thread (the child does only system calls either way). Returns false (and
/// starts nothing) when fork fails; never throws.
bool start_exit_watch(const std::string& path, int rank);

}  // namespace nanchaos::harness
