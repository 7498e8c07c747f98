// The built-in job's phase clock (harness/job/phase_clock.h) and the straggler statistic on its
// output: waiting for peers and sitting on a run queue are not a rank's own time; a sleep is.
#include "harness/job/phase_clock.h"

#include <gtest/gtest.h>

#include <vector>

#include "detectors/core/straggler.h"

namespace nanchaos::harness {
namespace {

// Cumulative counters a test moves by hand (ns).
struct FakeSources {
  int64_t now = 0, run_delay = 0, wait_wall = 0, wait_run_delay = 0;
  PhaseClock clock() {
    return PhaseClock({[this] { return now; }, [this] { return run_delay; },
                       [this] { return wait_wall; }, [this] { return wait_run_delay; }});
  }
  // `ms` of wall time, `queued_ms` of which runnable off the CPU.
  void run(double ms, double queued_ms = 0) {
    now += int64_t(ms * 1e6);
    run_delay += int64_t(queued_ms * 1e6);
  }
  // `ms` inside a collective, `queued_ms` of which runnable off the CPU.
  void wait(double ms, double queued_ms = 0) {
    run(ms, queued_ms);
    wait_wall += int64_t(ms * 1e6);
    wait_run_delay += int64_t(queued_ms * 1e6);
  }
};

TEST(PhaseClock, OwnTimeIsWallMinusWaitsAndRunDelayCountedOnce) {
  FakeSources src;
  PhaseClock clock = src.clock();
  clock.begin();
  src.run(1.0);
  clock.mark(StepPhase::kData);
  src.run(5.0, /*queued_ms=*/2.0);  // descheduled 2 ms in the forward
  clock.mark(StepPhase::kCompute);
  src.run(6.0);
  clock.mark(StepPhase::kBackward);
  src.wait(10.0, /*queued_ms=*/4.0);  // consensus: 10 ms inside, 4 of them off the CPU
  src.run(0.5, 0.25);
  clock.mark(StepPhase::kComm);
  src.run(3.0);  // the update: no phase
  clock.mark(std::nullopt);
  const StepTimes t = clock.times();
  EXPECT_DOUBLE_EQ(t.own_us[size_t(StepPhase::kData)], 1000);
  EXPECT_DOUBLE_EQ(t.own_us[size_t(StepPhase::kCompute)], 3000);
  EXPECT_DOUBLE_EQ(t.own_us[size_t(StepPhase::kBackward)], 6000);
  // 10.5 ms wall - 10 ms in the collective - 0.25 ms queued outside it (not the 4 inside).
  EXPECT_DOUBLE_EQ(t.own_us[size_t(StepPhase::kComm)], 250);
  EXPECT_EQ(t.wait_us, 10000);
  EXPECT_EQ(t.run_delay_us, 6250);
  // A new step forgets the last one.
  clock.begin();
  src.run(2.0);
  clock.mark(StepPhase::kData);
  EXPECT_DOUBLE_EQ(clock.times().own_us[size_t(StepPhase::kData)], 2000);
  EXPECT_DOUBLE_EQ(clock.times().own_us[size_t(StepPhase::kCompute)], 0);
}

// One step of 4 ranks in lock step: each computes (data 1 ms, compute 4 ms, backward 6 ms),
// then all meet in a collective that ends when the last arrives. `queued[r]` ms of rank r's
// compute are spent runnable off the CPU; `slept[r]` ms are a sleep in its backward (a `slow`
// fault). Returns every rank's own times from its phase clock.
std::vector<PhaseTimes> lockstep(std::vector<FakeSources>& src, const std::vector<double>& queued,
                                 const std::vector<double>& slept) {
  const size_t world = src.size();
  std::vector<PhaseClock> clocks;
  for (auto& s : src) clocks.push_back(s.clock());
  std::vector<double> busy(world);
  for (size_t r = 0; r < world; ++r) {
    clocks[r].begin();
    src[r].run(1.0);
    clocks[r].mark(StepPhase::kData);
    src[r].run(4.0 + queued[r], queued[r]);
    clocks[r].mark(StepPhase::kCompute);
    src[r].run(6.0 + slept[r]);
    clocks[r].mark(StepPhase::kBackward);
    busy[r] = 11.0 + queued[r] + slept[r];
  }
  double last = 0;
  for (double b : busy) last = std::max(last, b);
  std::vector<PhaseTimes> out;
  for (size_t r = 0; r < world; ++r) {
    // Waiting for the last rank; a waiting rank that spins is descheduled half of the time.
    const double waited = last - busy[r] + 0.2;
    src[r].wait(waited, waited / 2);
    src[r].run(0.3);
    clocks[r].mark(StepPhase::kComm);
    out.push_back(clocks[r].times().own_us);
  }
  return out;
}

TEST(PhaseClock, ADescheduledRankWithMatchingRunDelayIsNoStraggler) {
  std::vector<FakeSources> src(4);
  StragglerTracker tracker(StragglerParams{});
  int64_t flags = 0;
  for (int step = 0; step < 200; ++step) {
    // From step 20 on, rank 1 shares its core with a busy loop: 3x the wall time of its
    // compute, all of the extra as run delay.
    const double q = step >= 20 ? 8.0 : 0.0;
    flags += int64_t(tracker.observe(lockstep(src, {0, q, 0, 0}, {0, 0, 0, 0})).size());
  }
  EXPECT_EQ(flags, 0);
}

TEST(PhaseClock, ASleepingRankIsAStragglerInItsPhase) {
  std::vector<FakeSources> src(4);
  StragglerTracker tracker(StragglerParams{});
  int flagged_at = -1;
  for (int step = 0; step < 40 && flagged_at < 0; ++step) {
    // From step 20 on, rank 2 sleeps 44 ms in its backward: 5x its 11 ms step.
    const double sleep = step >= 20 ? 44.0 : 0.0;
    const auto flags = tracker.observe(lockstep(src, {0, 0, 0, 0}, {0, 0, sleep, 0}));
    if (flags.empty()) continue;
    ASSERT_EQ(flags.size(), 1u);
    EXPECT_EQ(flags[0].rank, 2);
    EXPECT_EQ(flags[0].phase, StepPhase::kBackward);
    flagged_at = step;
  }
  EXPECT_EQ(flagged_at, 20 + StragglerParams{}.consecutive - 1);
}

}  // namespace
}  // namespace nanchaos::harness
