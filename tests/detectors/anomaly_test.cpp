// Detector `anomaly` (detectors/anomaly.cpp): the backward op anomaly mode named.
#include <string>

#include "tests/detectors/detector_test_util.h"

namespace nanchaos::detect {
namespace {

using fixture::Make;

TEST(AnomalyDetector, NamesTheBackwardOpOfAnomalyModesError) {
  auto d = Make("anomaly");
  EXPECT_EQ(d->hook(), Hook::kGradients);
  EXPECT_TRUE(d->wants_anomaly_mode());
  const std::string message =
      "Function 'MulBackward0' returned nan values in its 0th output.\nmore text";
  StepView v;
  v.anomaly_message = &message;
  const auto f = d->check(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->layer, "MulBackward0");
  EXPECT_EQ(f->cause, "gradient");
}

TEST(AnomalyDetector, NoErrorIsClean) {
  auto d = Make("anomaly");
  StepView v;
  EXPECT_FALSE(d->check(v));  // no backward error this step
  const std::string none;
  v.anomaly_message = &none;
  EXPECT_FALSE(d->check(v));
}

}  // namespace
}  // namespace nanchaos::detect
