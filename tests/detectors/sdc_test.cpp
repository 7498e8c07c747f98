// The `sdc` detector's check() and its registration (detectors/sdc.cpp): the two computations
// compared bit for bit, the module output before the gradients, the consensus code and its
// attribution. The recompute itself on the built-in jobs: tests/job/sdc_job_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "detectors/core/consensus.h"
#include "tests/detectors/detector_test_util.h"

namespace nanchaos::detect {
namespace {

using fixture::Backward;
using fixture::Make;

// Three gradients in Backward()'s order, deterministic values.
std::vector<torch::Tensor> Grads() {
  return {torch::linspace(-1, 1, 4), torch::linspace(0.5, 2, 6).reshape({2, 3}),
          torch::linspace(-3, 3, 8)};
}

std::vector<torch::Tensor> Clone(const std::vector<torch::Tensor>& ts) {
  std::vector<torch::Tensor> out;
  for (const auto& t : ts) out.push_back(t.clone());
  return out;
}

// Flips bit `bit` of element `i` of a float32 tensor in place.
void FlipBit(torch::Tensor& t, int64_t i, int bit) {
  float* p = t.data_ptr<float>() + i;
  uint32_t u;
  std::memcpy(&u, p, 4);
  u ^= uint32_t(1) << bit;
  std::memcpy(p, &u, 4);
}

struct Pass {
  std::vector<torch::Tensor> grads, sums;
};

const std::vector<std::string>& Modules() {
  static const std::vector<std::string> m = {"layers.0.linear", "layers.0", "head"};
  return m;
}

std::optional<Finding> Compare(Detector& d, const Pass& a, const Pass& b) {
  StepView v;
  v.step = 0;
  v.grad_names = &Backward();
  v.module_names = &Modules();
  v.grads = &a.grads;
  v.recomputed_grads = &b.grads;
  v.activation_sums = &a.sums;
  v.recomputed_activation_sums = &b.sums;
  v.activation_modules = &Modules();
  return d.check(v);
}

Pass Clean() {
  Pass p;
  p.grads = Grads();
  for (double s : {1.25, -3.5, 0.0}) p.sums.push_back(torch::tensor(s, torch::kDouble));
  return p;
}

TEST(Sdc, IdenticalComputationsAreClean) {
  auto d = Make("sdc", "sdc_every = 1");
  EXPECT_EQ(d->hook(), Hook::kRecompute);
  const Pass a = Clean();
  Pass b;
  b.grads = Clone(a.grads);
  b.sums = Clone(a.sums);
  EXPECT_FALSE(Compare(*d, a, b).has_value());
}

TEST(Sdc, LowestMantissaBitOfOneGradientIsNamedWithItsParameter) {
  auto d = Make("sdc");
  const Pass a = Clean();
  Pass b = Clean();
  FlipBit(b.grads[1], 4, 0);  // one ulp: |relative change| ~ 6e-8
  const auto f = Compare(*d, a, b);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->layer, Backward()[1]);
  EXPECT_EQ(f->cause, "gradient");
  EXPECT_EQ(f->code, 1);
}

TEST(Sdc, SignOfZeroAndNanPayloadAreDifferences) {
  auto d = Make("sdc");
  Pass a = Clean(), b = Clean();
  a.grads[2][0] = 0.0f;
  b.grads[2][0] = -0.0f;  // equal as values, not as bits
  auto f = Compare(*d, a, b);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->layer, Backward()[2]);
  // The same NaN on both sides is the same computation.
  Pass c = Clean(), e = Clean();
  c.grads[0][1] = std::numeric_limits<float>::quiet_NaN();
  e.grads[0][1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(Compare(*d, c, e).has_value());
}

TEST(Sdc, ADifferingModuleOutputIsCauseActivationBeforeAnyGradient) {
  auto d = Make("sdc");
  Pass a = Clean(), b = Clean();
  b.sums[1] = torch::tensor(std::nextafter(-3.5, 0.0), torch::kDouble);
  FlipBit(b.grads[0], 0, 3);  // every gradient after it differs too
  const auto f = Compare(*d, a, b);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->layer, "layers.0");
  EXPECT_EQ(f->cause, "activation");
  EXPECT_EQ(f->code, -(1 + 1));
}

TEST(Sdc, DueEverySdcEveryStepsFromStepZero) {
  auto d = Make("sdc", "sdc_every = 3");
  std::vector<int64_t> due;
  for (int64_t s = 0; s < 10; ++s) {
    if (d->due(s)) due.push_back(s);
  }
  EXPECT_EQ(due, (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_TRUE(Make("sdc")->due(100));
  EXPECT_FALSE(Make("sdc")->due(50));  // default sdc_every = 100
}

TEST(Sdc, AttributionReadsTheCodeFromItsColumn) {
  using harness::kBits;
  using harness::kRowWidth;
  using harness::kSdcIdx;
  const std::vector<std::string> modules = Modules();
  std::vector<double> rows(2 * kRowWidth, 0.0);
  rows[kRowWidth + kBits] = double(uint64_t(1) << harness::detector_bit("sdc"));
  rows[kRowWidth + kSdcIdx] = 2;
  auto dec = harness::decide(rows, 2, Backward(), modules);
  EXPECT_EQ(dec.detector, "sdc");
  EXPECT_EQ(dec.ranks, std::vector<int64_t>{1});
  EXPECT_EQ(dec.layer, Backward()[2]);
  EXPECT_EQ(dec.cause, "gradient");
  EXPECT_EQ(dec.transient, true);
  rows[kRowWidth + kSdcIdx] = -(1 + 2);
  dec = harness::decide(rows, 2, Backward(), modules);
  EXPECT_EQ(dec.layer, "head");
  EXPECT_EQ(dec.cause, "activation");
}

}  // namespace
}  // namespace nanchaos::detect
