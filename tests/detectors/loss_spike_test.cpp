// Detector `loss_spike` (detectors/loss_spike.cpp): a z-score spike of the loss over its window.
#include <cmath>

#include "tests/detectors/detector_test_util.h"

namespace nanchaos::detect {
namespace {

using fixture::Make;

// Checks loss value `x` (a fresh view each time).
std::optional<Finding> Check(Detector& d, float x) {
  const torch::Tensor loss = torch::tensor(x);
  StepView v;
  v.loss = &loss;
  return d.check(v);
}

TEST(LossSpikeDetector, ABlowUpOverItsWindowIsGradientExplosion) {
  auto d = Make("loss_spike", "spike_window = 4\nspike_zscore = 6.0");
  EXPECT_EQ(d->hook(), Hook::kLoss);
  for (float x : {2.0f, 2.1f, 1.9f, 2.0f}) EXPECT_FALSE(Check(*d, x)) << x;
  EXPECT_FALSE(Check(*d, 2.05f));  // ordinary noise
  const auto f = Check(*d, 40.0f);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->layer, "loss");
  EXPECT_EQ(f->cause, "gradient_explosion");
}

TEST(LossSpikeDetector, NoHistoryOrANonFiniteLossIsNotASpike) {
  auto d = Make("loss_spike", "spike_window = 4");
  EXPECT_FALSE(Check(*d, 1000.0f));  // the first value has nothing to compare with
  auto e = Make("loss_spike", "spike_window = 4");
  for (float x : {2.0f, 2.1f, 1.9f}) EXPECT_FALSE(Check(*e, x));
  EXPECT_FALSE(Check(*e, NAN));  // the loss detector owns it
}

}  // namespace
}  // namespace nanchaos::detect
