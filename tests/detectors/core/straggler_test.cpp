// The straggler statistic (detectors/core/straggler.h): a slow rank is named within its
// consecutive-steps window, with the phase that grew; noisy clean runs flag nothing.
#include "detectors/core/straggler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

namespace nanchaos::harness {
namespace {

// One step of `world` ranks: data 200 us, compute 800 us, backward 1000 us, comm 100 us, each
// phase times lognormal jitter (sigma 0.15) and, with probability 1 %, a hiccup that makes the
// whole step 2.5x (a page fault storm, a late timer): the noise of a shared CPU host after the
// run-queue wait is taken out.
std::vector<PhaseTimes> noisy_step(std::mt19937_64& rng, size_t world) {
  std::lognormal_distribution<double> jitter(0.0, 0.15);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<PhaseTimes> out(world);
  for (auto& t : out) {
    const double hiccup = u(rng) < 0.01 ? 2.5 : 1.0;
    t = {200 * jitter(rng) * hiccup, 800 * jitter(rng) * hiccup, 1000 * jitter(rng) * hiccup,
         100 * jitter(rng) * hiccup};
  }
  return out;
}

TEST(Straggler, CleanNoisyRunsFlagNothing) {
  for (size_t world : {2u, 4u, 8u, 64u}) {
    StragglerTracker tracker(StragglerParams{});
    std::mt19937_64 rng(1000 + world);
    int64_t flags = 0;
    for (int step = 0; step < 5000; ++step)
      flags += int64_t(tracker.observe(noisy_step(rng, world)).size());
    EXPECT_EQ(flags, 0) << world << " ranks";
  }
}

TEST(Straggler, AFiveTimesSlowerRankIsNamedWithItsPhaseWithinFourSteps) {
  const StepPhase where[] = {StepPhase::kCompute, StepPhase::kBackward, StepPhase::kData,
                             StepPhase::kComm};
  for (StepPhase phase : where) {
    StragglerTracker tracker(StragglerParams{});
    std::mt19937_64 rng(7);
    const int slow_from = 40;
    int flagged_at = -1;
    for (int step = 0; step < 60 && flagged_at < 0; ++step) {
      auto times = noisy_step(rng, 4);
      if (step >= slow_from) {
        // The whole step 5x slower, all of it in one phase: + 4 x the usual step (2100 us).
        times[2][size_t(phase)] += 4 * 2100;
      }
      const auto flags = tracker.observe(times);
      if (!flags.empty()) {
        ASSERT_EQ(flags.size(), 1u);
        EXPECT_EQ(flags[0].rank, 2);
        EXPECT_EQ(flags[0].phase, phase) << phase_name(phase);
        EXPECT_GT(flags[0].score, 4.0);
        flagged_at = step;
      }
    }
    ASSERT_GE(flagged_at, slow_from) << phase_name(phase);
    EXPECT_LE(flagged_at - slow_from, 3) << "named within 4 steps";
  }
}

TEST(Straggler, ARankThatIsAlwaysABitSlowerIsNotAStraggler) {
  StragglerTracker tracker(StragglerParams{});
  std::mt19937_64 rng(11);
  int64_t flags = 0;
  for (int step = 0; step < 2000; ++step) {
    auto times = noisy_step(rng, 4);
    for (double& v : times[1]) v *= 1.6;  // a busier host: 1.6x from the first step on
    flags += int64_t(tracker.observe(times).size());
  }
  EXPECT_EQ(flags, 0);
}

TEST(Straggler, WarmUpAndTheConsecutiveRuleHoldShortSlowdownsBack) {
  StragglerParams p;
  p.warmup_steps = 5;
  p.consecutive = 3;
  StragglerTracker tracker(p);
  const PhaseTimes usual{100, 1000, 1000, 100};
  const PhaseTimes slow{100, 9000, 1000, 100};
  auto step = [&](bool rank1_slow) {
    return tracker.observe({usual, rank1_slow ? slow : usual, usual, usual});
  };
  // Slow during the warm-up: nothing (and those steps are part of no flag).
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(step(true).empty()) << i;
  // Two slow steps, one usual, two slow: never three in a row.
  EXPECT_TRUE(step(true).empty());
  EXPECT_TRUE(step(true).empty());
  EXPECT_TRUE(step(false).empty());
  EXPECT_TRUE(step(true).empty());
  EXPECT_TRUE(step(true).empty());
  const auto third = step(true);
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].rank, 1);
  EXPECT_EQ(third[0].phase, StepPhase::kCompute);
  // Still slow: still reported; back to usual: no longer.
  EXPECT_EQ(step(true).size(), 1u);
  EXPECT_TRUE(step(false).empty());
}

TEST(Straggler, TinyExcessesAndBadReadingsAreNotSlowness) {
  StragglerParams p;
  p.warmup_steps = 0;
  p.consecutive = 1;
  StragglerTracker tracker(p);
  // 3x the median but only 200 us more: under min_excess_us (2000 us).
  EXPECT_TRUE(tracker.observe({{0, 100, 0, 0}, {0, 300, 0, 0}, {0, 100, 0, 0}}).empty());
  // NaN and negative readings count as 0, never as slow and never an exception.
  EXPECT_TRUE(tracker.observe({{NAN, 100, 0, 0}, {-5, 100, 0, 0}, {0, 100, 0, 0}}).empty());
  // A new world size starts over (no baseline carried across).
  EXPECT_TRUE(tracker.observe({{0, 100, 0, 0}, {0, 100, 0, 0}}).empty());
}

// A loaded 2-core host after the run delay is taken out: each rank's steps drift between 1x
// and 1.45x for stretches of 5-40 steps (which core it shares, with whom, cache and SMT
// contention), with lognormal jitter (sigma 0.25) and a 1 % chance a step of a rank doubles
// (three of those in a row on one rank would be a 2.9x straggler, beyond what was measured).
// Every rank's own time is noisy the same way; none is a straggler.
TEST(Straggler, LoadedHostDriftAndBurstsFlagNothing) {
  for (size_t world : {2u, 4u, 64u}) {
    StragglerTracker tracker(StragglerParams{});
    std::mt19937_64 rng(2000 + world);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::lognormal_distribution<double> jitter(0.0, 0.25);
    std::vector<double> level(world, 1.0);
    std::vector<int> left(world, 0);
    int64_t flags = 0;
    for (int step = 0; step < 4000; ++step) {
      std::vector<PhaseTimes> times(world);
      for (size_t r = 0; r < world; ++r) {
        if (left[r]-- <= 0) {
          level[r] = 1.0 + 0.45 * u(rng);
          left[r] = 5 + int(35 * u(rng));
        }
        const double burst = u(rng) < 0.01 ? 2.0 : 1.0;
        const double f = level[r] * burst;
        times[r] = {1500 * f * jitter(rng), 4000 * f * jitter(rng), 6000 * f * jitter(rng),
                    800 * f * jitter(rng)};
      }
      flags += int64_t(tracker.observe(times).size());
    }
    EXPECT_EQ(flags, 0) << world << " ranks";
  }
}

// A rank slow from its very first step (5x) has no usual self to compare with: its baseline is
// clamped to factor, and it is still named, within straggler_steps steps after the warm-up.
TEST(Straggler, ARankSlowFromTheFirstStepIsStillNamed) {
  StragglerTracker tracker(StragglerParams{});
  std::mt19937_64 rng(5);
  int flagged_at = -1;
  for (int step = 0; step < 30 && flagged_at < 0; ++step) {
    auto times = noisy_step(rng, 4);
    for (double& v : times[3]) v *= 5;
    times[3][size_t(StepPhase::kData)] += 20000;
    const auto flags = tracker.observe(times);
    if (!flags.empty()) {
      EXPECT_EQ(flags[0].rank, 3);
      EXPECT_EQ(flags[0].phase, StepPhase::kData);
      flagged_at = step;
    }
  }
  EXPECT_EQ(flagged_at, StragglerParams{}.warmup_steps + StragglerParams{}.consecutive - 1);
}

// The first steps carry no times (the summary's slots are zero until a step ended): skipped,
// neither slow nor part of the warm-up.
TEST(Straggler, StepsWithoutTimesAreSkipped) {
  StragglerParams p;
  p.warmup_steps = 1;
  p.consecutive = 1;
  StragglerTracker tracker(p);
  const PhaseTimes zero{0, 0, 0, 0}, usual{100, 3000, 3000, 100}, slow{100, 30000, 3000, 100};
  EXPECT_TRUE(tracker.observe({zero, zero, zero}).empty());
  EXPECT_TRUE(tracker.observe({usual, usual, usual}).empty());  // the one warm-up step
  const auto flags = tracker.observe({usual, slow, usual});
  ASSERT_EQ(flags.size(), 1u);
  EXPECT_EQ(flags[0].rank, 1);
}

// The noise measured on a loaded 2-core host (straggler.h): a rank 1.75x the median for 3 steps
// in a row, its own time otherwise as steady as its peers', is not a straggler; 2.5x is.
TEST(Straggler, ARankUnderThreeStepsOfContentionIsNotAStraggler) {
  for (double burst : {1.75, 2.5}) {
    StragglerTracker tracker(StragglerParams{});
    const PhaseTimes usual{500, 1500, 2000, 600};  // 4.6 ms, the 4-rank transformer's step
    int64_t flags = 0;
    for (int step = 0; step < 60; ++step) {
      PhaseTimes r3 = usual;
      if (step >= 40 && step < 43) {
        for (double& v : r3) v *= burst;
      }
      flags += int64_t(tracker.observe({usual, usual, usual, r3}).size());
    }
    EXPECT_EQ(flags, burst < 2 ? 0 : 1) << burst;
  }
}

TEST(Straggler, ParamsAreChecked) {
  auto make = [](auto edit) {
    StragglerParams p;
    edit(p);
    StragglerTracker t(p);
  };
  EXPECT_THROW(make([](StragglerParams& p) { p.factor = 1.0; }), std::invalid_argument);
  EXPECT_THROW(make([](StragglerParams& p) { p.consecutive = 0; }), std::invalid_argument);
  EXPECT_THROW(make([](StragglerParams& p) { p.warmup_steps = -1; }), std::invalid_argument);
  EXPECT_THROW(make([](StragglerParams& p) { p.baseline_steps = 0; }), std::invalid_argument);
  EXPECT_THROW(make([](StragglerParams& p) { p.min_excess_us = -1; }), std::invalid_argument);
  EXPECT_THROW(make([](StragglerParams& p) { p.mad_k = -1; }), std::invalid_argument);
  EXPECT_THROW(make([](StragglerParams& p) { p.min_excess_steps = -1; }), std::invalid_argument);
  EXPECT_STREQ(phase_name(StepPhase::kBackward), "backward");
}

}  // namespace
}  // namespace nanchaos::harness
