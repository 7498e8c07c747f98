// LossScaler against torch.cuda.amp.GradScaler's documented update rule, step by step.
#include "detectors/core/loss_scaler.h"

#include <gtest/gtest.h>

using nanchaos::harness::LossScaler;
using Result = LossScaler::Result;

TEST(LossScaler, BacksOffOnFoundInfAndResetsTheTracker) {
  LossScaler s({65536.0, 2.0, 0.5, 3, 16777216.0, 1.0});
  EXPECT_EQ(s.update(false), Result::kClean);
  EXPECT_EQ(s.growth_tracker(), 1);
  EXPECT_EQ(s.update(true), Result::kOverflow);
  EXPECT_DOUBLE_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(LossScaler, GrowsAfterGrowthIntervalCleanStepsOnly) {
  LossScaler s({1024.0, 2.0, 0.5, 3, 1e9, 1.0});
  s.update(false);
  s.update(false);
  EXPECT_DOUBLE_EQ(s.scale(), 1024.0);
  s.update(false);  // third clean step in a row
  EXPECT_DOUBLE_EQ(s.scale(), 2048.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_TRUE(s.just_grew());
}

TEST(LossScaler, OverflowRightAfterGrowthIsAProbeNotADetection) {
  LossScaler s({1024.0, 2.0, 0.5, 1, 1e9, 1.0});
  s.update(false);  // grows to 2048
  ASSERT_TRUE(s.just_grew());
  EXPECT_EQ(s.update(true), Result::kProbe);
  EXPECT_DOUBLE_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.update(true), Result::kOverflow);  // a second one in a row is a detection
}

TEST(LossScaler, NeverGrowsPastMaxScale) {
  LossScaler s({4096.0, 2.0, 0.5, 1, 8192.0, 1.0});
  for (int i = 0; i < 10; ++i) s.update(false);
  EXPECT_DOUBLE_EQ(s.scale(), 8192.0);
  EXPECT_FALSE(s.just_grew());  // capped: no growth, so the next overflow is a detection
  EXPECT_EQ(s.update(true), Result::kOverflow);
}

TEST(LossScaler, BackoffBelowMinScaleEscalates) {
  LossScaler s({2.0, 2.0, 0.5, 2000, 1e9, 1.0});
  EXPECT_EQ(s.update(true), Result::kOverflow);  // 1.0: still allowed
  EXPECT_EQ(s.update(true), Result::kBelowMin);  // 0.5 < 1.0
}

TEST(LossScaler, StateRoundTripsForRollback) {
  LossScaler s({1024.0, 2.0, 0.5, 1, 1e9, 1.0});
  s.update(false);
  const auto saved = s.state();
  s.update(true);
  s.update(true);
  s.restore(saved);
  EXPECT_DOUBLE_EQ(s.scale(), 2048.0);
  EXPECT_TRUE(s.just_grew());
}
