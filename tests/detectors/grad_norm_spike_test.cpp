// Detector `grad_norm_spike` (detectors/grad_norm_spike.cpp): a z-score spike of the local
// gradient norm, with the parameter whose norm rose the most.
#include "tests/detectors/detector_test_util.h"

namespace nanchaos::detect {
namespace {

using fixture::Make;

const std::vector<std::string> kBackward = {"head.weight", "layers.0.weight"};

// Checks a step whose per-parameter squared gradient norms are `sq`.
std::optional<Finding> Check(Detector& d, std::vector<double> sq) {
  harness::ScanStats st;
  st.nonfinite.assign(sq.size(), 0);
  for (double x : sq) st.sq_norm += x;
  st.sq_norms = std::move(sq);
  StepView v;
  v.grad_stats = &st;
  v.grad_names = &kBackward;
  return d.check(v);
}

std::unique_ptr<Detector> Warmed() {
  auto d = Make("grad_norm_spike", "spike_window = 4\nspike_zscore = 6.0");
  for (double a : {0.50, 0.55, 0.45, 0.50}) EXPECT_FALSE(Check(*d, {a, 0.5}));
  return d;
}

TEST(GradNormSpikeDetector, ManyParametersRisingTogetherIsGradientExplosion) {
  auto d = Warmed();
  EXPECT_EQ(d->hook(), Hook::kGradients);
  EXPECT_FALSE(Check(*d, {0.52, 0.5}));  // ordinary noise
  const auto f = Check(*d, {5000.0, 4000.0});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->cause, "gradient_explosion");
  EXPECT_EQ(f->layer, "head.weight");
  EXPECT_EQ(f->code, 0);
}

TEST(GradNormSpikeDetector, OneParameterHoldingTheSpikeIsACorruptedGradientThere) {
  auto d = Warmed();
  const auto f = Check(*d, {0.5, 1e4});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->cause, "gradient");
  EXPECT_EQ(f->layer, "layers.0.weight");
  EXPECT_EQ(f->code, -(1 + 2));  // -(index + 2): held by one parameter
}

TEST(GradNormSpikeDetector, NonFiniteGradientsAreTheGradChecks) {
  auto d = Warmed();
  harness::ScanStats st = fixture::Stats(2, 0);
  st.sq_norm = 1e8;
  StepView v;
  v.grad_stats = &st;
  v.grad_names = &kBackward;
  EXPECT_FALSE(d->check(v));
}

}  // namespace
}  // namespace nanchaos::detect
