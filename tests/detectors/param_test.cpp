// Detector `param` (detectors/param.cpp): non-finite parameters at step start.
#include <cmath>

#include "tests/detectors/detector_test_util.h"

namespace nanchaos::detect {
namespace {

using fixture::Make;

const std::vector<std::string> kBackward = {"head.bias", "head.weight", "layers.0.weight"};

TEST(ParamDetector, NamesTheFirstNonFiniteParameterInBackwardOrder) {
  auto d = Make("param");
  EXPECT_EQ(d->hook(), Hook::kStepStart);
  std::vector<torch::Tensor> params = {torch::randn({3}), torch::randn({3, 4}),
                                       torch::randn({4, 4})};
  StepView v;
  v.params = &params;
  v.grad_names = &kBackward;
  EXPECT_FALSE(d->check(v));
  params[2][1][1] = INFINITY;
  params[1][0][3] = NAN;
  const auto f = d->check(v);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->layer, "head.weight");
  EXPECT_EQ(f->cause, "parameter");
  EXPECT_EQ(f->code, 1);
}

}  // namespace
}  // namespace nanchaos::detect
