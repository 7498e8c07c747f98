// PhaseClock: a built-in job rank's own time per phase of a step, for the `straggler` detector
// (detectors/core/straggler.h) and the reports' step-time table (SCENARIO_FORMAT.md "Slow ranks
// and finite silent data corruption"; the Python agent's twin is
// inject/python/nanchaos/phases.py, which writes the same step_end fields).
//
// The loop marks the end of each stretch of a step with the phase it belonged to; a stretch's
// own time is its wall time minus
//   - the wall time spent inside the stack's collectives (StackComm::waited(): waiting for a
//     slow peer is not being slow), and
//   - the run delay outside them (run_delay.h: time runnable but kept off the CPU by the host's
//     scheduler, as 4 ranks on 2 cores are); the run delay inside a collective is already in
//     its wall time, so it is not taken out twice.
// What is left is the rank's own work, its sleeps and blocking waits included (a `slow` fault,
// a slow loader). A stretch whose own time reads negative (clock granularity) counts as 0.
//
// Built-in job's phases (harness/job/runner.cpp):
//   data      the batch fetch, its faults, the batch check
//   compute   forward, loss and their checks
//   backward  backward, the gradient faults and the fused scan
//   comm      the step's collectives' own work: buffer broadcast and replica digests at step
//             start, the consensus, packing and unpacking of the gradient all-reduce
// The optimizer update belongs to no phase (as in phases.py).
// Example: clock.begin(); ...; clock.mark(StepPhase::kData); ...; clock.times() -> StepTimes.
// Cost: per step 6 marks and 2 reads around each collective (3 or 4), each a clock read and a
// pread of the schedstat file (~1 us on this project's VM): ~15 us a step.
// Torch-free. Thread-safety: the rank's one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "detectors/core/straggler.h"

namespace nanchaos::harness {

/// One step's timing as the step_end event carries it (`own_us`, `wait_us`, `run_delay_us`).
struct StepTimes {
  PhaseTimes own_us{};       ///< own time per phase (us), StepPhase order
  int64_t wait_us = 0;       ///< wall time inside collectives (us)
  int64_t run_delay_us = 0;  ///< run delay over the whole step, collectives included (us)
};

class PhaseClock {
 public:
  /// Where the clock reads from (each returns a cumulative count in ns). Injectable for tests.
  struct Sources {
    std::function<int64_t()> now_ns;             ///< a monotonic clock
    std::function<int64_t()> run_delay_ns;       ///< the thread's run delay
    std::function<int64_t()> wait_wall_ns;       ///< wall time inside collectives
    std::function<int64_t()> wait_run_delay_ns;  ///< run delay inside collectives
  };
  explicit PhaseClock(Sources src) : src_(std::move(src)) {}

  /// Starts a step (forgets the last one's times).
  void begin();
  /// The stretch since the last mark (or begin) was `phase`'s; nullopt: no phase's (the update).
  void mark(std::optional<StepPhase> phase);
  /// The step's times so far (own_us in us, fractional).
  StepTimes times() const;

 private:
  struct Reading {
    int64_t now = 0, run_delay = 0, wait_wall = 0, wait_run_delay = 0;
  };
  Reading read() const;

  Sources src_;
  Reading start_, last_;
  PhaseTimes own_ns_{};
};

}  // namespace nanchaos::harness
