// Detector `loss` (detectors/loss.cpp): a non-finite local loss, loss math or activation.
#include <cmath>

#include "tests/detectors/detector_test_util.h"

namespace nanchaos::detect {
namespace {

using fixture::Make;

TEST(LossDetector, AFiniteLossIsClean) {
  auto d = Make("loss");
  EXPECT_EQ(d->hook(), Hook::kLoss);
  const torch::Tensor loss = torch::tensor(2.3f), logits = torch::randn({4, 10});
  StepView v;
  v.loss = &loss;
  v.logits = &logits;
  EXPECT_FALSE(d->check(v));
}

TEST(LossDetector, FiniteLogitsAreLossMathNonFiniteOnesAnActivation) {
  auto d = Make("loss");
  const torch::Tensor loss = torch::tensor(NAN);
  torch::Tensor logits = torch::randn({4, 10});
  StepView v;
  v.loss = &loss;
  v.logits = &logits;
  auto f = d->check(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->layer, "loss");
  EXPECT_EQ(f->cause, "loss_math");
  EXPECT_EQ(f->code, 1);
  logits[2][3] = INFINITY;
  f = d->check(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->layer, "");  // the stack's probes or the replay name the module
  EXPECT_EQ(f->cause, "activation");
  EXPECT_EQ(f->code, 0);
  EXPECT_TRUE(harness::detectors().at("loss").localizes_loss);
}

}  // namespace
}  // namespace nanchaos::detect
