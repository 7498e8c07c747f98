// fp16/bf16 rounding of the CPU half-precision emulation at known boundary values.
#include "detectors/core/half_round.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using nanchaos::harness::round_through_half;

namespace {
float round_one(float x, torch::ScalarType t) {
  return round_through_half(torch::tensor({x}), t).item<float>();
}
}  // namespace

TEST(HalfRound, Fp16RangeBoundaries) {
  EXPECT_EQ(round_one(65504.0f, torch::kHalf), 65504.0f);      // largest finite half
  EXPECT_EQ(round_one(65519.0f, torch::kHalf), 65504.0f);      // rounds down to it
  EXPECT_TRUE(std::isinf(round_one(65520.0f, torch::kHalf)));  // rounds past it
  EXPECT_TRUE(std::isinf(round_one(1e5f, torch::kHalf)));
  EXPECT_LT(round_one(-1e5f, torch::kHalf), 0.0f);
  EXPECT_EQ(round_one(1.0f + 1.0f / 4096.0f, torch::kHalf), 1.0f);  // below half an ulp (2^-10)
}

TEST(HalfRound, Fp16Subnormals) {
  const float smallest = std::ldexp(1.0f, -24);  // 5.96e-8
  EXPECT_EQ(round_one(smallest, torch::kHalf), smallest);
  EXPECT_EQ(round_one(smallest * 0.49f, torch::kHalf), 0.0f);  // flushes to zero
  EXPECT_EQ(round_one(std::ldexp(1.0f, -20), torch::kHalf), std::ldexp(1.0f, -20));
}

TEST(HalfRound, Bf16KeepsTheFp32RangeButNotThePrecision) {
  EXPECT_EQ(round_one(1e30f, torch::kBFloat16) > 9e29f, true);
  EXPECT_FALSE(std::isinf(round_one(1e38f, torch::kBFloat16)));
  EXPECT_EQ(round_one(1.0f + 1.0f / 512.0f, torch::kBFloat16), 1.0f);  // 7 mantissa bits
}

TEST(HalfRound, NanStaysNanAndGradientIsRoundedToo) {
  EXPECT_TRUE(std::isnan(round_one(std::numeric_limits<float>::quiet_NaN(), torch::kHalf)));
  auto x = torch::tensor({1.0f}, torch::requires_grad());
  auto y = round_through_half(x, torch::kHalf) * 1e5f;  // incoming gradient 1e5 > 65504
  y.sum().backward();
  EXPECT_TRUE(std::isinf(x.grad().item<float>()));
}
