// The spike detectors' torch-free rules (detectors/spike.h): SpikeWindow's z-score test and
// ParamNormHistory, which names the parameter of a gradient-norm spike.
#include "detectors/spike.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace nanchaos::detect {
namespace {

TEST(SpikeWindow, FlagsABlowUpAfterHalfAWindowAndKeepsItOutOfTheHistory) {
  SpikeWindow w(10, 6.0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(w.test_and_add(1.0 + 0.01 * i), 0.0);  // < window/2
  EXPECT_EQ(w.test_and_add(1.0), 0.0);
  EXPECT_GT(w.test_and_add(100.0), 6.0);  // z far above 6 and 100 > 2 x mean
  EXPECT_GT(w.test_and_add(100.0), 6.0);  // the spike was not added: still a spike
  EXPECT_EQ(w.test_and_add(NAN), 0.0);    // non-finite: the non-finite checks own it
  EXPECT_EQ(w.test_and_add(1.02), 0.0);
}

TEST(SpikeWindow, NoiseAroundAConstantIsNotASpike) {
  SpikeWindow w(10, 6.0);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(w.test_and_add(5.0), 0.0);
  EXPECT_EQ(w.test_and_add(5.001), 0.0);  // z = inf (std 0) but not above 2 x mean
}

TEST(ParamNormHistory, NamesTheParameterThatRoseTheMostAgainstItsOwnHistory) {
  ParamNormHistory h(4);
  EXPECT_EQ(h.most_risen({1.0, 1.0, 1.0}), -1);  // no history yet
  for (int i = 0; i < 6; ++i) h.add({100.0, 1.0, 0.01});
  // Parameter 0 has the largest norm now, parameter 2 rose the most (x50 against x2 and x3).
  EXPECT_EQ(h.most_risen({200.0, 3.0, 0.5}), 2);
  EXPECT_EQ(h.most_risen({1e4, 3.0, 0.5}), 0);
  EXPECT_EQ(h.most_risen({0.0, 0.0, 0.0}), -1);  // nothing non-zero
  EXPECT_EQ(h.most_risen({1.0, 1.0}), -1);       // another parameter list
}

TEST(ParamNormHistory, ASpikeOneParameterHoldsIsConcentrated) {
  ParamNormHistory h(4);
  EXPECT_FALSE(h.concentrated({1e20, 1.0}, 0));  // no history yet
  for (int i = 0; i < 4; ++i) h.add({1.0, 1.0, 1.0});
  // A flipped exponent bit in parameter 1's gradient: it holds the norm and rose alone.
  EXPECT_TRUE(h.concentrated({1.0, 1e12, 1.0}, 1));
  // Every parameter rose together (an LR blow-up): not one parameter's.
  EXPECT_FALSE(h.concentrated({1e10, 1e12, 1e10}, 1));
  // It rose alone but holds under 99 % of the norm.
  EXPECT_FALSE(h.concentrated({1.0, 150.0, 1.0}, 1));
  // It holds the norm but another parameter rose more than 1/100 as much.
  EXPECT_FALSE(h.concentrated({1.0, 1e6, 10050.0}, 1));   // 99.005 % of it, 99.5x the other
  EXPECT_FALSE(h.concentrated({1.0, 1e12, 1.0}, 5));      // out of range
  EXPECT_FALSE(h.concentrated({1.0, INFINITY, 1.0}, 1));  // non-finite: grad's
}

TEST(ParamNormHistory, TheMeanIsOverTheLastWindowSteps) {
  ParamNormHistory h(2);
  h.add({1.0, 1000.0});
  h.add({1.0, 1000.0});
  h.add({1.0, 1.0});
  h.add({1.0, 1.0});  // parameter 1's big values left the window: its mean is 1 now
  EXPECT_EQ(h.most_risen({1.5, 2.0}), 1);
  h.add({1.0, 1000.0});  // mean of parameter 1 over {1, 1000}
  EXPECT_EQ(h.most_risen({1.5, 2.0}), 0);
}

TEST(ParamNormHistory, AZeroHistoryThatTurnsNonZeroRisesInfinitely) {
  ParamNormHistory h(3);
  h.add({1.0, 0.0});
  EXPECT_EQ(h.most_risen({1e6, 1e-9}), 1);
}

}  // namespace
}  // namespace nanchaos::detect
