// Detector `activation` (detectors/activation.cpp): the first module output that is non-finite.
#include <cmath>

#include "tests/detectors/detector_test_util.h"

namespace nanchaos::detect {
namespace {

using fixture::Make;

const std::vector<std::string> kModules = {"embed", "layers.0", "head"};

TEST(ActivationDetector, NamesTheFirstNonFiniteModuleOutputInForwardOrder) {
  auto d = Make("activation");
  EXPECT_EQ(d->hook(), Hook::kLoss);
  StepView v;
  v.module_names = &kModules;
  d->reset();
  d->on_activation("embed", torch::ones({2, 3}));
  d->on_activation("layers.0", torch::full({2, 3}, NAN));
  d->on_activation("head", torch::full({2, 3}, INFINITY));  // downstream: not the first
  const auto f = d->check(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->layer, "layers.0");
  EXPECT_EQ(f->cause, "activation");
  EXPECT_EQ(f->code, 1);
}

TEST(ActivationDetector, FiniteOutputsAndAResetStepAreClean) {
  auto d = Make("activation");
  StepView v;
  v.module_names = &kModules;
  d->reset();
  d->on_activation("embed", torch::full({4}, NAN));
  ASSERT_TRUE(d->check(v));
  d->reset();  // the next step forgets the last one's outputs
  for (const auto& m : kModules) d->on_activation(m, torch::randn({4}));
  EXPECT_FALSE(d->check(v));
}

}  // namespace
}  // namespace nanchaos::detect
