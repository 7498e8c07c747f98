// The calling thread's run delay: how long it has sat runnable on a run queue, waiting for a CPU
// (Linux /proc/thread-self/schedstat, second field, ns; kept when CONFIG_SCHEDSTATS or
// CONFIG_SCHED_INFO is set, as on every distribution kernel). A rank that the host's scheduler
// kept off the CPU (4 ranks on 2 cores, a busy neighbour) was not slow by itself: the `straggler`
// statistic takes this time out of a rank's own step time (detectors/core/straggler.h). An
// injected `slow` delay is a sleep, which is not run delay: it still counts.
//
// Example: RunDelay rd; const int64_t a = rd.ns(); work(); const int64_t spent = rd.ns() - a;
// Cost: one pread of a small proc file (~1 us on this project's VM). Torch-free; never throws.
// Thread-safety: an instance reads the run queue of the thread that first called ns(); use it
// on that thread only.
#pragma once

#include <cstdint>

namespace nanchaos::harness {

class RunDelay {
 public:
  RunDelay() = default;
  RunDelay(const RunDelay&) = delete;
  RunDelay& operator=(const RunDelay&) = delete;
  ~RunDelay();

  /// The thread's cumulative run delay (ns) since it started; 0 where the file is missing or
  /// unreadable (not Linux, schedstats off), so differences then read 0.
  int64_t ns();
  /// Whether ns() reads a real value (after its first call).
  bool available() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  bool opened_ = false;
};

/// CLOCK_MONOTONIC in ns (the event log's clock, events.h now_us(), at ns resolution).
int64_t monotonic_ns();

}  // namespace nanchaos::harness
