// The statistic of the `straggler` detector (SCENARIO_FORMAT.md "Slow ranks and finite silent data
// corruption"): which rank, if any, is persistently slower than its peers, and in which phase.
//
// Input, once per step and the same on every rank (it travels in the consensus row): each rank's
// own time per phase (us): the phase's wall time minus the time the rank spent waiting in
// collectives (waiting for a slow peer is not being slow) and minus the time it sat runnable on a
// run queue (Linux schedstat run_delay: a rank that the host's scheduler kept off the CPU, as on
// a 2-core runner with 4 ranks, is not a slow rank). What is left is the time the rank's own work
// took, including its own sleeps and blocking waits (a throttled GPU, a slow data loader, a
// `slow` fault).
//
// Rules (chosen for zero false positives on noisy shared hosts, after the per-rank scoring of
// NVIDIA's resiliency extension and Minder's consecutive-window rule):
// - warm-up: the first `warmup_steps` steps only build baselines (first iterations allocate,
//   autotune and fault in pages); a step whose ranks' median is 0 (no times yet) is skipped;
// - a rank's score at a step is its own total time over the median of all ranks' (the one
//   percentile definition, harness/common/percentile.h: nearest rank, so with 2 ranks the
//   median is the faster one);
// - the rank's baseline is the median of its own last `baseline_steps` unflagged scores,
//   clamped to [1, factor] (a rank that is always a little slower, a different socket or a
//   busier host, is not a straggler; one more than factor x slower from its first step on still
//   is), and its spread the MAD of those scores (x 1.4826: a standard deviation for Gaussian
//   noise);
// - a step is slow for a rank when all of:
//     score > factor x baseline                          (the contract's rule)
//     score > baseline + mad_k x spread                  (a rank with noisy steps needs more)
//     own - median > max(min_excess_us, max(factor - 1, min_excess_steps) x typical step)
//   where the typical step is the median over the last baseline_steps steps of the ranks'
//   median: one step on which the others happened to be fast does not make a rank slow, and
//   jitter of a few hundred us on millisecond steps is never slowness. With the defaults a rank
//   must spend at least one more typical step of its own (2x) for straggler_steps steps: on
//   clean runs of the shipped suite on a 2-core VM loaded with 4 busy loops, a rank's own time
//   (run delay already out) reached 1.75x the median for 3 steps in a row (CPU and cache
//   contention that is not run delay), and a 1.5x threshold alone would have flagged it;
// - `consecutive` slow steps in a row flag the rank; every flagged rank is reported, with the
//   phase whose own time exceeds the ranks' median for that phase by the most. A flagged rank
//   stays reported while it stays slow; slow steps never enter its baseline.
// Medians are the nearest-rank ones of harness/common/percentile.h, found with nth_element.
// Cost: O(world) on a step where no rank passes the cheap conditions (score > factor and the
// min excess), O(baseline_steps) more per rank that does; no allocation once the buffers have
// grown. Measured on this project's loaded 2-core VM: 0.4 us a step at 4 ranks, 1.7 us at 64.
// Torch-free and pure given its state: every rank feeds the same rows and derives the same
// flags. Thread-safety: one instance per rank, on the training thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace nanchaos::harness {

/// The phases of a training step whose own time is measured (SCENARIO_FORMAT `slow` `where`).
enum class StepPhase { kData = 0, kCompute = 1, kBackward = 2, kComm = 3 };
constexpr size_t kStepPhases = 4;

/// "data", "compute", "backward", "comm" (the `slow` fault's `where` words).
const char* phase_name(StepPhase p);

/// One rank's own time per phase at one step (us), indexed by StepPhase.
using PhaseTimes = std::array<double, kStepPhases>;

struct StragglerParams {
  double factor = 1.5;            ///< `straggler_factor`: slow when score > factor x baseline
  int64_t consecutive = 3;        ///< `straggler_steps`: slow steps in a row before a flag
  int64_t warmup_steps = 5;       ///< steps that only build the baselines
  int64_t baseline_steps = 20;    ///< window of a rank's baseline (steps, unflagged ones)
  double min_excess_us = 2000.0;  ///< own time must exceed the median by more than this (us)
  double mad_k = 6.0;             ///< robust sigmas of its own scores a slow score must pass
  double min_excess_steps = 1.0;  ///< own time must exceed the median by this x typical step
};

/// A flagged rank and the phase that grew.
struct StragglerFlag {
  int64_t rank = 0;
  StepPhase phase = StepPhase::kCompute;
  double score = 0;  ///< own time / median of the ranks at the flagging step
};

class StragglerTracker {
 public:
  /// Throws std::invalid_argument for factor <= 1, consecutive < 1, warmup_steps < 0,
  /// baseline_steps < 1, min_excess_us < 0, mad_k < 0 or min_excess_steps < 0 (the message names
  /// the key).
  explicit StragglerTracker(StragglerParams p);

  /// Feeds one step: `times[r]` is rank r's own time per phase (us, >= 0; world = its size,
  /// the same every step: a change restarts the baselines). Returns the ranks flagged at this
  /// step, ascending (a rank stays flagged, and reported, while it stays slow).
  std::vector<StragglerFlag> observe(const std::vector<PhaseTimes>& times);

  /// Forgets everything (a rollback re-executes steps; a relaunch starts over).
  void reset();

 private:
  struct RankState {
    std::deque<double> scores;  ///< recent unflagged scores (baseline)
    int64_t slow_run = 0;       ///< consecutive slow steps so far
  };
  StragglerParams p_;
  int64_t steps_ = 0;
  std::deque<double> medians_;  ///< the ranks' median total of recent steps (typical step)
  // Scratch space reused across steps (no allocation once grown).
  std::vector<PhaseTimes> clean_;
  std::vector<double> totals_, scratch_;
  std::vector<RankState> ranks_;
};

}  // namespace nanchaos::harness
