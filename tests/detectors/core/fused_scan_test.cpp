#include "detectors/core/fused_scan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace nanchaos::harness {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The obvious implementation the fused scan must agree with: std::isfinite per element, squares
// summed in long double (more precise than the scan's double lanes, so it bounds their error).
struct Reference {
  std::vector<uint8_t> nonfinite;
  int first_nonfinite = -1;
  long double sq_norm = 0;
  std::vector<long double> sq_norms;  // per tensor
  float max_abs = 0;
};

Reference reference_scan(const std::vector<std::vector<float>>& tensors) {
  Reference r;
  for (size_t t = 0; t < tensors.size(); ++t) {
    uint8_t bad = 0;
    r.sq_norms.push_back(0);
    for (float x : tensors[t]) {
      if (!std::isfinite(x)) {
        bad = 1;
        continue;
      }
      r.sq_norm += static_cast<long double>(x) * x;
      r.sq_norms.back() += static_cast<long double>(x) * x;
      r.max_abs = std::max(r.max_abs, std::fabs(x));
    }
    r.nonfinite.push_back(bad);
    if (bad && r.first_nonfinite < 0) r.first_nonfinite = static_cast<int>(t);
  }
  return r;
}

std::vector<ConstSpan> const_spans(const std::vector<std::vector<float>>& tensors) {
  std::vector<ConstSpan> spans;
  for (const auto& t : tensors) spans.push_back({t.data(), t.size()});
  return spans;
}

std::vector<float> concat(const std::vector<std::vector<float>>& tensors) {
  std::vector<float> all;
  for (const auto& t : tensors) all.insert(all.end(), t.begin(), t.end());
  return all;
}

const uint32_t kSpecialBits[] = {
    0x7fc00000u,  // quiet NaN
    0x7f800001u,  // signalling NaN
    0xffc00000u,  // negative quiet NaN
    0x7fa5a5a5u,  // signalling NaN, custom payload
    0xffffffffu,  // negative NaN, all payload bits
    0x7fc0beefu,  // quiet NaN, custom payload
    0x7f800000u,  // +inf
    0xff800000u,  // -inf
};

// Gaussian gradients plus the awkward finite values; `special_rate` of the tensors get one or more
// NaN/inf elements at random positions (chunk and lane boundaries included by chance and by hand).
std::vector<std::vector<float>> random_tensors(uint32_t seed, size_t count, double special_rate) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1e-2f);
  std::uniform_int_distribution<size_t> size_dist(0, 9000);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  const float awkward[] = {1e-40f,  -1e-40f, std::numeric_limits<float>::denorm_min(), -0.0f,
                           3e38f,   -3e38f,  std::numeric_limits<float>::max(),        65520.0f,
                           1.0e20f, 1e-30f};
  std::vector<std::vector<float>> tensors(count);
  for (auto& t : tensors) {
    const size_t n = coin(rng) < 0.1 ? 0 : size_dist(rng);
    t.resize(n);
    for (float& x : t) x = normal(rng);
    if (n == 0) continue;
    for (int k = 0; k < 3; ++k) t[rng() % n] = awkward[rng() % std::size(awkward)];
    if (coin(rng) < special_rate) {
      const int specials = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < specials; ++k) {
        t[rng() % n] = from_bits(kSpecialBits[rng() % std::size(kSpecialBits)]);
      }
    }
  }
  return tensors;
}

void expect_matches_reference(const ScanStats& s, const Reference& r) {
  EXPECT_EQ(s.nonfinite, r.nonfinite);
  EXPECT_EQ(s.first_nonfinite, r.first_nonfinite);
  EXPECT_EQ(s.any_nonfinite(), r.first_nonfinite >= 0);
  EXPECT_EQ(s.max_abs, r.max_abs);
  ASSERT_TRUE(std::isfinite(s.sq_norm));
  const long double ref = r.sq_norm;
  if (ref == 0) {
    EXPECT_EQ(s.sq_norm, 0.0);
  } else {
    EXPECT_LE(std::fabs(static_cast<long double>(s.sq_norm) - ref) / ref, 1e-12L)
        << s.sq_norm << " vs " << static_cast<double>(ref);
  }
  // Per tensor (grad_norm_spike's per-parameter history): each within the same bound, and the
  // total is exactly their sum in tensor order.
  ASSERT_EQ(s.sq_norms.size(), r.sq_norms.size());
  double total = 0;
  for (size_t t = 0; t < s.sq_norms.size(); ++t) {
    const long double want = r.sq_norms[t];
    if (want == 0) {
      EXPECT_EQ(s.sq_norms[t], 0.0) << "tensor " << t;
    } else {
      EXPECT_LE(std::fabs(static_cast<long double>(s.sq_norms[t]) - want) / want, 1e-12L)
          << "tensor " << t;
    }
    total += s.sq_norms[t];
  }
  EXPECT_EQ(total, s.sq_norm);
}

TEST(FusedScan, WireBytes) {
  EXPECT_EQ(wire_bytes(WireType::kFp32), 4u);
  EXPECT_EQ(wire_bytes(WireType::kFp16), 2u);
  EXPECT_EQ(wire_bytes(WireType::kBf16), 2u);
}

TEST(FusedScan, RandomTensorsMatchReference) {
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    SCOPED_TRACE(seed);
    const auto tensors = random_tensors(seed, 150, 0.05);
    const Reference ref = reference_scan(tensors);
    const std::vector<float> input = concat(tensors);
    std::vector<float> wire(input.size(), 1.0f);
    ScanStats stats;
    pack_and_scan(const_spans(tensors), wire.data(), WireType::kFp32, 1.0f, &stats);
    expect_matches_reference(stats, ref);
    // fp32 wire with scale 1 is a bit-exact copy: NaN payloads, -0 and denormals survive.
    ASSERT_EQ(wire.size(), input.size());
    EXPECT_EQ(std::memcmp(wire.data(), input.data(), input.size() * sizeof(float)), 0);
  }
}

TEST(FusedScan, CleanTensorsHaveNoFlags) {
  auto tensors = random_tensors(99, 60, 0.0);
  const Reference ref = reference_scan(tensors);
  ASSERT_EQ(ref.first_nonfinite, -1);
  std::vector<float> wire(concat(tensors).size());
  ScanStats stats;
  pack_and_scan(const_spans(tensors), wire.data(), WireType::kFp32, 1.0f, &stats);
  expect_matches_reference(stats, ref);
  EXPECT_FALSE(stats.any_nonfinite());
}

TEST(FusedScan, HugeFiniteValuesDoNotOverflowTheNorm) {
  std::vector<std::vector<float>> tensors = {std::vector<float>(1000, 3e38f),
                                             std::vector<float>(77, -3.4028235e38f)};
  const Reference ref = reference_scan(tensors);
  std::vector<float> wire(1077);
  ScanStats stats;
  pack_and_scan(const_spans(tensors), wire.data(), WireType::kFp32, 1.0f, &stats);
  EXPECT_TRUE(std::isfinite(stats.sq_norm));
  EXPECT_FALSE(stats.any_nonfinite());
  expect_matches_reference(stats, ref);
  const double expected =
      1000.0 * 3e38 * 3e38 + 77.0 * 3.4028234663852886e38 * 3.4028234663852886e38;
  EXPECT_NEAR(stats.sq_norm / expected, 1.0, 1e-6);  // float(3e38) is not exactly 3e38
}

TEST(FusedScan, DenormalsAndNegativeZero) {
  const float dmin = std::numeric_limits<float>::denorm_min();
  std::vector<std::vector<float>> tensors = {{-0.0f, 0.0f, dmin, -dmin, 1e-40f}};
  ScanStats stats;
  std::vector<float> wire(5);
  pack_and_scan(const_spans(tensors), wire.data(), WireType::kFp32, 1.0f, &stats);
  EXPECT_FALSE(stats.any_nonfinite());
  EXPECT_EQ(stats.max_abs, 1e-40f);
  expect_matches_reference(stats, reference_scan(tensors));
  EXPECT_GT(stats.sq_norm, 0.0);  // 1e-80 is representable in double
  EXPECT_EQ(to_bits(wire[0]), 0x80000000u);
}

TEST(FusedScan, EmptyInputsAndEmptyTensors) {
  ScanStats stats;
  stats.first_nonfinite = 5;
  stats.sq_norm = 1;
  pack_and_scan({}, nullptr, WireType::kFp32, 1.0f, &stats);
  EXPECT_TRUE(stats.nonfinite.empty());
  EXPECT_EQ(stats.first_nonfinite, -1);
  EXPECT_EQ(stats.sq_norm, 0.0);
  EXPECT_EQ(stats.max_abs, 0.0f);

  std::vector<std::vector<float>> tensors = {{}, {}, {1.0f, NAN}, {}, {2.0f}};
  std::vector<float> wire(3);
  pack_and_scan(const_spans(tensors), wire.data(), WireType::kFp32, 1.0f, &stats);
  EXPECT_EQ(stats.nonfinite, (std::vector<uint8_t>{0, 0, 1, 0, 0}));
  EXPECT_EQ(stats.first_nonfinite, 2);
  EXPECT_EQ(stats.sq_norm, 5.0);
  EXPECT_EQ(stats.max_abs, 2.0f);
  EXPECT_EQ(wire[2], 2.0f);
}

TEST(FusedScan, NonFiniteAtChunkAndLaneBoundaries) {
  // Sizes straddle the 32-lane blocks and 2048-element chunks of the implementation.
  for (size_t n : {1u, 31u, 32u, 33u, 2047u, 2048u, 2049u, 3 * 2048u + 17u}) {
    for (size_t pos : {size_t{0}, n / 2, n - 1, size_t{2047}, size_t{2048}}) {
      if (pos >= n) continue;
      SCOPED_TRACE(testing::Message() << "n=" << n << " pos=" << pos);
      std::vector<std::vector<float>> tensors = {std::vector<float>(n, 0.5f),
                                                 std::vector<float>(n, -0.25f)};
      tensors[1][pos] = from_bits(0x7f800001u);
      std::vector<float> wire(2 * n);
      ScanStats stats;
      pack_and_scan(const_spans(tensors), wire.data(), WireType::kFp32, 1.0f, &stats);
      expect_matches_reference(stats, reference_scan(tensors));
      EXPECT_EQ(stats.first_nonfinite, 1);
      EXPECT_EQ(to_bits(wire[n + pos]), 0x7f800001u);  // the signalling NaN is not quieted
    }
  }
}

TEST(FusedScan, ManyTensorsFirstNonfinite) {
  std::vector<std::vector<float>> tensors(1000, std::vector<float>(7, 1.0f));
  tensors[613][3] = -INFINITY;
  tensors[900][0] = NAN;
  std::vector<float> wire(7000);
  ScanStats stats;
  pack_and_scan(const_spans(tensors), wire.data(), WireType::kFp32, 1.0f, &stats);
  EXPECT_EQ(stats.first_nonfinite, 613);
  EXPECT_EQ(stats.nonfinite[613], 1);
  EXPECT_EQ(stats.nonfinite[900], 1);
  EXPECT_EQ(std::count(stats.nonfinite.begin(), stats.nonfinite.end(), 1), 2);
  expect_matches_reference(stats, reference_scan(tensors));
}

TEST(FusedScan, ScaleAppliesToWireButNotToStats) {
  const auto tensors = random_tensors(7, 40, 0.2);
  const Reference ref = reference_scan(tensors);
  const std::vector<float> input = concat(tensors);
  const float scale = 0.25f;
  std::vector<float> wire(input.size());
  ScanStats stats;
  pack_and_scan(const_spans(tensors), wire.data(), WireType::kFp32, scale, &stats);
  expect_matches_reference(stats, ref);
  for (size_t i = 0; i < input.size(); ++i) {
    const float want = input[i] * scale;
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(wire[i])) << i;
    } else {
      EXPECT_EQ(to_bits(wire[i]), to_bits(want)) << i;
    }
  }
}

TEST(FusedScan, PackToHalfAndBf16) {
  const auto tensors = random_tensors(11, 40, 0.2);
  const Reference ref = reference_scan(tensors);
  const std::vector<float> input = concat(tensors);
  for (WireType wire_type : {WireType::kFp16, WireType::kBf16}) {
    const float scale = 0.5f;
    std::vector<uint16_t> wire(input.size());
    ScanStats stats;
    pack_and_scan(const_spans(tensors), wire.data(), wire_type, scale, &stats);
    expect_matches_reference(stats, ref);  // stats are on the fp32 originals
    for (size_t i = 0; i < input.size(); ++i) {
      const uint16_t want = wire_type == WireType::kFp16 ? float_to_half_bits(input[i] * scale)
                                                         : float_to_bf16_bits(input[i] * scale);
      ASSERT_EQ(wire[i], want) << i;
    }
  }
}

TEST(FusedScan, HalfOverflowOnTheWireIsNotAPreReduceFlag) {
  std::vector<std::vector<float>> tensors = {{1e5f, -1e5f, 1.0f}};
  std::vector<uint16_t> wire(3);
  ScanStats stats;
  pack_and_scan(const_spans(tensors), wire.data(), WireType::kFp16, 1.0f, &stats);
  EXPECT_FALSE(stats.any_nonfinite());
  EXPECT_EQ(wire[0], 0x7c00);
  EXPECT_EQ(wire[1], 0xfc00);
  // ... it is caught by the post-reduce scan.
  std::vector<float> out(3);
  pack_and_scan(const_spans(tensors), wire.data(), WireType::kFp16, 1.0f, &stats);
  ScanStats post;
  unpack_and_scan(wire.data(), WireType::kFp16, 1.0f, {{out.data(), 3}}, &post);
  EXPECT_EQ(post.first_nonfinite, 0);
  EXPECT_EQ(post.max_abs, 1.0f);
  EXPECT_EQ(post.sq_norm, 1.0);
}

TEST(FusedScan, HalfConversionBoundaries) {
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65519.99f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_half_bits(-65520.0f), 0xfc00);
  EXPECT_EQ(float_to_half_bits(1e10f), 0x7c00);
  EXPECT_EQ(float_to_half_bits(INFINITY), 0x7c00);
  EXPECT_EQ(float_to_half_bits(-INFINITY), 0xfc00);
  // Smallest subnormal 2^-24 ~ 5.96e-8; 1e-8 is below half of it and rounds to +0.
  EXPECT_EQ(float_to_half_bits(5.96e-8f), 0x0001);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half_bits(1e-8f), 0x0000);
  EXPECT_EQ(float_to_half_bits(-1e-8f), 0x8000);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(float_to_half_bits(std::ldexp(3.0f, -25)), 0x0002);  // tie -> even (2)
  EXPECT_EQ(float_to_half_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_half_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(float_to_half_bits(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie -> even
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half_bits(0.0f), 0x0000);
  for (uint32_t nan : kSpecialBits) {
    if ((nan & 0x7fffffffu) == 0x7f800000u) continue;
    const uint16_t h = float_to_half_bits(from_bits(nan));
    EXPECT_EQ(h & 0x7c00, 0x7c00) << std::hex << nan;
    EXPECT_NE(h & 0x03ff, 0) << std::hex << nan;
    EXPECT_EQ(h >> 15, nan >> 31) << std::hex << nan;
    EXPECT_TRUE(std::isnan(half_bits_to_float(h)));
  }
  EXPECT_EQ(half_bits_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_bits_to_float(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(half_bits_to_float(0x7c00), INFINITY);
  EXPECT_EQ(half_bits_to_float(0xfc00), -INFINITY);
  EXPECT_EQ(to_bits(half_bits_to_float(0x8000)), 0x80000000u);
}

TEST(FusedScan, HalfRoundTripIsExactForEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_bits_to_float(static_cast<uint16_t>(h));
    if ((h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0) {
      ASSERT_TRUE(std::isnan(f)) << h;
      continue;
    }
    ASSERT_EQ(float_to_half_bits(f), h) << std::hex << h;
  }
}

#if defined(__FLT16_MAX__)
// GCC's _Float16 conversions (libgcc / F16C) are IEEE round-to-nearest-even: use them as the
// oracle over every half and a dense sample of all floats.
uint16_t f16_bits(_Float16 h) {
  uint16_t u;
  std::memcpy(&u, &h, sizeof u);
  return u;
}

TEST(FusedScan, HalfConversionMatchesFloat16) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t hb = static_cast<uint16_t>(h);
    _Float16 v;
    std::memcpy(&v, &hb, sizeof v);
    const float want = static_cast<float>(v);
    const float got = half_bits_to_float(hb);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(to_bits(got), to_bits(want)) << std::hex << h;
    }
  }
  for (uint64_t u = 0; u <= 0xffffffffu; u += 1021) {
    const float f = from_bits(static_cast<uint32_t>(u));
    const uint16_t got = float_to_half_bits(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(half_bits_to_float(got))) << std::hex << u;
      continue;
    }
    ASSERT_EQ(got, f16_bits(static_cast<_Float16>(f))) << std::hex << u;
  }
}
#endif

// bf16 oracle: pick the nearer of the two bf16 neighbours in double, ties to the even one; the
// neighbour above the largest finite bf16 is inf, at 2^128 for rounding purposes.
uint16_t bf16_reference(float f) {
  if (std::isnan(f)) return 0x7fc0;
  const uint32_t b = to_bits(f);
  const uint32_t sign = b & 0x80000000u;
  const uint32_t mag = b & 0x7fffffffu;
  const uint32_t lo = mag & 0xffff0000u;
  const uint32_t hi = lo + 0x10000u;
  if (lo == mag) return static_cast<uint16_t>((sign | mag) >> 16);
  auto value = [](uint32_t m) {
    return m >= 0x7f800000u ? std::ldexp(1.0, 128) : static_cast<double>(from_bits(m));
  };
  const double x = from_bits(mag);
  const double dlo = x - value(lo), dhi = value(hi) - x;
  uint32_t pick;
  if (dlo < dhi) {
    pick = lo;
  } else if (dhi < dlo) {
    pick = hi;
  } else {
    pick = ((lo >> 16) & 1) ? hi : lo;
  }
  return static_cast<uint16_t>((sign | pick) >> 16);
}

TEST(FusedScan, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie -> even
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(3.0f, -8)), 0x3f82);  // tie -> even
  EXPECT_EQ(float_to_bf16_bits(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3f81);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(float_to_bf16_bits(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(float_to_bf16_bits(INFINITY), 0x7f80);
  EXPECT_EQ(float_to_bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(bf16_bits_to_float(0x3f80), 1.0f);
  for (uint32_t nan : kSpecialBits) {
    const float f = from_bits(nan);
    if (!std::isnan(f)) continue;
    const uint16_t h = float_to_bf16_bits(f);
    EXPECT_TRUE(std::isnan(bf16_bits_to_float(h))) << std::hex << nan;  // payload 0x0001 too
    EXPECT_EQ(h >> 15, nan >> 31);
  }
  for (uint64_t u = 0; u <= 0xffffffffu; u += 997) {
    const float f = from_bits(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16_bits(f), bf16_reference(f)) << std::hex << u;
  }
}

TEST(FusedScan, WireSumRoundsAndOverflowsInTheWireType) {
  {
    std::vector<float> a = {40000.0f, 1.0f, -0.0f}, b = {40000.0f, 2.0f, -0.0f};
    wire_sum(a.data(), b.data(), 3, WireType::kFp32);
    EXPECT_EQ(b[0], 80000.0f);
    EXPECT_EQ(b[1], 3.0f);
    EXPECT_EQ(to_bits(b[2]), 0x80000000u);
  }
  {
    auto h = [](float f) { return float_to_half_bits(f); };
    std::vector<uint16_t> a = {h(40000), h(2048), h(2048), h(-40000), h(1), h(NAN)};
    std::vector<uint16_t> b = {h(40000), h(1), h(3), h(-40000), h(-1), h(1)};
    wire_sum(a.data(), b.data(), a.size(), WireType::kFp16);
    EXPECT_EQ(b[0], 0x7c00);                       // 80000 overflows fp16
    EXPECT_EQ(half_bits_to_float(b[1]), 2048.0f);  // 2049: tie -> even
    EXPECT_EQ(half_bits_to_float(b[2]), 2052.0f);  // 2051: tie -> even
    EXPECT_EQ(b[3], 0xfc00);
    EXPECT_EQ(b[4], 0x0000);  // 1 + -1 = +0
    EXPECT_TRUE(std::isnan(half_bits_to_float(b[5])));
  }
  {
    auto h = [](float f) { return float_to_bf16_bits(f); };
    std::vector<uint16_t> a = {h(1.0f), h(3e38f), h(256.0f)};
    std::vector<uint16_t> b = {h(std::ldexp(1.0f, -8)), h(3e38f), h(1.0f)};
    wire_sum(a.data(), b.data(), a.size(), WireType::kBf16);
    EXPECT_EQ(b[0], 0x3f80);                      // 1 + 2^-8: tie -> even
    EXPECT_EQ(b[1], 0x7f80);                      // overflow -> inf
    EXPECT_EQ(bf16_bits_to_float(b[2]), 256.0f);  // 257 -> tie -> even
  }
}

#if defined(__FLT16_MAX__)
TEST(FusedScan, HalfWireSumMatchesFloat16Addition) {
  std::mt19937 rng(5);
  for (int k = 0; k < 200000; ++k) {
    const uint16_t x = static_cast<uint16_t>(rng()), y = static_cast<uint16_t>(rng());
    uint16_t out = y;
    wire_sum(&x, &out, 1, WireType::kFp16);
    _Float16 hx, hy;
    std::memcpy(&hx, &x, 2);
    std::memcpy(&hy, &y, 2);
    const _Float16 want = hx + hy;
    if (want != want) {
      ASSERT_TRUE(std::isnan(half_bits_to_float(out)));
    } else {
      ASSERT_EQ(out, f16_bits(want)) << std::hex << x << " + " << y;
    }
  }
}
#endif

TEST(FusedScan, UnpackFp32ScalesCopiesAndFlags) {
  std::vector<float> wire = {2.0f, -4.0f, NAN, 8.0f, INFINITY, 6.0f, -0.0f};
  std::vector<float> a(2), b(0), c(3), d(2);
  ScanStats stats;
  unpack_and_scan(wire.data(), WireType::kFp32, 0.5f,
                  {{a.data(), 2}, {b.data(), 0}, {c.data(), 3}, {d.data(), 2}}, &stats);
  EXPECT_EQ(a, (std::vector<float>{1.0f, -2.0f}));
  EXPECT_TRUE(std::isnan(c[0]));
  EXPECT_EQ(c[1], 4.0f);
  EXPECT_EQ(c[2], INFINITY);
  EXPECT_EQ(d[0], 3.0f);
  EXPECT_EQ(to_bits(d[1]), 0x80000000u);
  EXPECT_EQ(stats.nonfinite, (std::vector<uint8_t>{0, 0, 1, 0}));
  EXPECT_EQ(stats.first_nonfinite, 2);
  EXPECT_EQ(stats.max_abs, 4.0f);
  EXPECT_EQ(stats.sq_norm, 1.0 + 4.0 + 16.0 + 9.0);
}

TEST(FusedScan, UnpackFp32ScaleOneIsBitExact) {
  const auto tensors = random_tensors(21, 30, 0.3);
  const std::vector<float> wire = concat(tensors);
  std::vector<std::vector<float>> out;
  std::vector<MutSpan> spans;
  for (const auto& t : tensors) out.emplace_back(t.size());
  for (auto& o : out) spans.push_back({o.data(), o.size()});
  ScanStats stats;
  unpack_and_scan(wire.data(), WireType::kFp32, 1.0f, spans, &stats);
  expect_matches_reference(stats, reference_scan(tensors));
  const std::vector<float> back = concat(out);
  EXPECT_EQ(std::memcmp(back.data(), wire.data(), wire.size() * sizeof(float)), 0);
}

TEST(FusedScan, PackUnpackRoundTripThroughHalfAndBf16) {
  const auto tensors = random_tensors(31, 30, 0.1);
  const std::vector<float> input = concat(tensors);
  for (WireType wire_type : {WireType::kFp16, WireType::kBf16}) {
    std::vector<uint16_t> wire(input.size());
    ScanStats pre;
    pack_and_scan(const_spans(tensors), wire.data(), wire_type, 1.0f, &pre);
    std::vector<std::vector<float>> out;
    std::vector<MutSpan> spans;
    for (const auto& t : tensors) out.emplace_back(t.size());
    for (auto& o : out) spans.push_back({o.data(), o.size()});
    ScanStats post;
    unpack_and_scan(wire.data(), wire_type, 2.0f, spans, &post);
    const std::vector<float> back = concat(out);
    for (size_t i = 0; i < input.size(); ++i) {
      const float want = 2.0f * (wire_type == WireType::kFp16 ? half_bits_to_float(wire[i])
                                                              : bf16_bits_to_float(wire[i]));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(back[i]));
      } else {
        ASSERT_EQ(back[i], want) << i;
      }
    }
    expect_matches_reference(post, reference_scan(out));
    // Every tensor flagged before the wire is flagged after it (fp16 adds overflow flags).
    for (size_t t = 0; t < tensors.size(); ++t) {
      if (pre.nonfinite[t]) {
        EXPECT_TRUE(post.nonfinite[t]) << t;
      }
    }
  }
}

TEST(FusedScan, SameInputSameStats) {
  const auto tensors = random_tensors(3, 50, 0.1);
  std::vector<float> wire(concat(tensors).size());
  ScanStats a, b;
  pack_and_scan(const_spans(tensors), wire.data(), WireType::kFp32, 1.0f, &a);
  pack_and_scan(const_spans(tensors), wire.data(), WireType::kFp32, 1.0f, &b);
  EXPECT_EQ(a.nonfinite, b.nonfinite);
  EXPECT_EQ(a.sq_norm, b.sq_norm);  // bit-identical
  EXPECT_EQ(a.max_abs, b.max_abs);
}

// ---- scan / scale_and_scan: the in-place fp32 (gradient-as-bucket-view) path ----

void expect_identical(const ScanStats& a, const ScanStats& b) {
  EXPECT_EQ(a.nonfinite, b.nonfinite);
  EXPECT_EQ(a.first_nonfinite, b.first_nonfinite);
  EXPECT_EQ(to_bits(a.max_abs), to_bits(b.max_abs));
  uint64_t ua, ub;
  std::memcpy(&ua, &a.sq_norm, sizeof ua);
  std::memcpy(&ub, &b.sq_norm, sizeof ub);
  EXPECT_EQ(ua, ub) << a.sq_norm << " vs " << b.sq_norm;  // bit-identical, not just equal
}

// The awkward cases by hand: every NaN payload, +-inf, denormals, -0, 3e38 and FLT_MAX, empty
// tensors (null data) between non-empty ones, sizes across lane and chunk boundaries.
std::vector<std::vector<float>> edge_tensors() {
  const float dmin = std::numeric_limits<float>::denorm_min();
  std::vector<std::vector<float>> tensors;
  tensors.push_back({});
  for (uint32_t special : kSpecialBits) {
    std::vector<float> t(33, 0.5f);
    t[32] = from_bits(special);
    t[0] = 3e38f;
    tensors.push_back(t);
  }
  tensors.push_back({-0.0f, 0.0f, dmin, -dmin, 1e-40f, -1e-38f});
  tensors.push_back({});
  tensors.push_back(std::vector<float>(2049, -3e38f));
  tensors.push_back({std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()});
  std::vector<float> big(3 * 2048 + 17, 1e-3f);
  big[2048] = from_bits(0x7fa5a5a5u);
  tensors.push_back(big);
  tensors.push_back({});
  return tensors;
}

std::vector<std::vector<std::vector<float>>> scan_cases() {
  std::vector<std::vector<std::vector<float>>> cases = {edge_tensors()};
  for (uint32_t seed = 1; seed <= 6; ++seed) cases.push_back(random_tensors(100 + seed, 80, 0.2));
  cases.push_back(random_tensors(200, 40, 0.0));
  return cases;
}

TEST(FusedScanInPlace, ScanMatchesPackAndScanBitForBit) {
  for (const auto& tensors : scan_cases()) {
    std::vector<ConstSpan> spans = const_spans(tensors);
    for (auto& s : spans) {
      if (s.n == 0) s.data = nullptr;  // empty spans may have null data
    }
    const std::vector<float> input = concat(tensors);
    std::vector<float> wire(input.size());
    ScanStats packed, scanned;
    pack_and_scan(spans, wire.data(), WireType::kFp32, 1.0f, &packed);
    scanned.first_nonfinite = 3;  // stale contents are reset
    scanned.sq_norm = 7;
    scanned.nonfinite = {1, 1};
    scan(spans, &scanned);
    expect_identical(scanned, packed);
    expect_matches_reference(scanned, reference_scan(tensors));
    // The stats of pack_and_scan at another scale / wire describe the same fp32 originals.
    std::vector<uint16_t> half(input.size());
    pack_and_scan(spans, half.data(), WireType::kFp16, 0.25f, &packed);
    expect_identical(scanned, packed);
    EXPECT_EQ(std::memcmp(concat(tensors).data(), input.data(), input.size() * sizeof(float)), 0);
  }
}

TEST(FusedScanInPlace, ScanOfBucketViewsMatchesSeparateTensors) {
  // gradient_as_bucket_view: the tensors are views of one flat buffer.
  const auto tensors = random_tensors(77, 60, 0.1);
  std::vector<float> bucket = concat(tensors);
  std::vector<ConstSpan> views;
  size_t offset = 0;
  for (const auto& t : tensors) {
    views.push_back({bucket.data() + offset, t.size()});
    offset += t.size();
  }
  ScanStats from_views, from_tensors;
  scan(views, &from_views);
  scan(const_spans(tensors), &from_tensors);
  expect_identical(from_views, from_tensors);
}

TEST(FusedScanInPlace, ScanEmpty) {
  ScanStats stats;
  stats.first_nonfinite = 2;
  stats.max_abs = 3;
  scan({}, &stats);
  EXPECT_TRUE(stats.nonfinite.empty());
  EXPECT_EQ(stats.first_nonfinite, -1);
  EXPECT_EQ(stats.sq_norm, 0.0);
  EXPECT_EQ(stats.max_abs, 0.0f);
  scan({{nullptr, 0}, {nullptr, 0}}, &stats);
  EXPECT_EQ(stats.nonfinite, (std::vector<uint8_t>{0, 0}));
  EXPECT_EQ(stats.first_nonfinite, -1);
  scale_and_scan({}, 0.25f, &stats);
  EXPECT_TRUE(stats.nonfinite.empty());
  scale_and_scan({{nullptr, 0}}, 0.25f, &stats);
  EXPECT_EQ(stats.nonfinite, (std::vector<uint8_t>{0}));
  EXPECT_EQ(stats.sq_norm, 0.0);
}

// scale_and_scan(g, s) must write what unpack_and_scan(concat(g), kFp32, s) writes and report the
// same stats, bit for bit.
void check_scale_against_unpack(const std::vector<std::vector<float>>& tensors, float scale) {
  const std::vector<float> wire = concat(tensors);
  std::vector<std::vector<float>> unpacked, inplace = tensors;
  std::vector<MutSpan> out_spans, inplace_spans;
  for (const auto& t : tensors) unpacked.emplace_back(t.size(), 123.0f);
  for (auto& o : unpacked) out_spans.push_back({o.empty() ? nullptr : o.data(), o.size()});
  for (auto& t : inplace) inplace_spans.push_back({t.empty() ? nullptr : t.data(), t.size()});
  ScanStats want, got;
  unpack_and_scan(wire.data(), WireType::kFp32, scale, out_spans, &want);
  got.first_nonfinite = 9;
  scale_and_scan(inplace_spans, scale, &got);
  expect_identical(got, want);
  const std::vector<float> a = concat(inplace), b = concat(unpacked);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  expect_matches_reference(got, reference_scan(inplace));  // stats are of the scaled values
}

TEST(FusedScanInPlace, ScaleAndScanMatchesUnpackBitForBit) {
  for (float scale : {1.0f, 0.25f, 1.0f / 3.0f, 8.0f, 0.0f}) {
    SCOPED_TRACE(scale);
    for (const auto& tensors : scan_cases()) check_scale_against_unpack(tensors, scale);
  }
}

TEST(FusedScanInPlace, ScaleOneLeavesBitsAlone) {
  auto tensors = edge_tensors();
  const std::vector<float> before = concat(tensors);
  std::vector<MutSpan> spans;
  for (auto& t : tensors) spans.push_back({t.data(), t.size()});
  ScanStats stats;
  scale_and_scan(spans, 1.0f, &stats);
  const std::vector<float> after = concat(tensors);
  EXPECT_EQ(std::memcmp(after.data(), before.data(), before.size() * sizeof(float)), 0);
  ScanStats read_only;
  scan(const_spans(tensors), &read_only);
  expect_identical(stats, read_only);
}

TEST(FusedScanInPlace, ScaleQuarterValuesAndFlags) {
  const float dmin = std::numeric_limits<float>::denorm_min();
  std::vector<std::vector<float>> tensors = {
      {2.0f, -4.0f}, {}, {from_bits(0x7fa5a5a5u), 8.0f, -INFINITY}, {-0.0f, dmin, 3e38f}};
  std::vector<MutSpan> spans;
  for (auto& t : tensors) spans.push_back({t.data(), t.size()});
  ScanStats stats;
  scale_and_scan(spans, 0.25f, &stats);
  EXPECT_EQ(tensors[0], (std::vector<float>{0.5f, -1.0f}));
  EXPECT_TRUE(std::isnan(tensors[2][0]));
  EXPECT_EQ(tensors[2][1], 2.0f);
  EXPECT_EQ(tensors[2][2], -INFINITY);
  EXPECT_EQ(to_bits(tensors[3][0]), 0x80000000u);
  EXPECT_EQ(tensors[3][1], 0.0f);  // 2^-149 / 4 rounds to +0
  EXPECT_EQ(tensors[3][2], 7.5e37f);
  EXPECT_EQ(stats.nonfinite, (std::vector<uint8_t>{0, 0, 1, 0}));
  EXPECT_EQ(stats.first_nonfinite, 2);
  EXPECT_EQ(stats.max_abs, 7.5e37f);
  const double big = 7.5e37f;
  EXPECT_EQ(stats.sq_norm, (0.25 + 1.0) + 4.0 + big * big);
}

TEST(FusedScanInPlace, ScaleOverflowIsFlaggedPostReduce) {
  std::vector<std::vector<float>> tensors = {{1.0f}, {3e38f, 1.0f}};
  std::vector<MutSpan> spans;
  for (auto& t : tensors) spans.push_back({t.data(), t.size()});
  ScanStats pre;
  scan(const_spans(tensors), &pre);
  EXPECT_FALSE(pre.any_nonfinite());
  ScanStats post;
  scale_and_scan(spans, 4.0f, &post);
  EXPECT_EQ(post.first_nonfinite, 1);
  EXPECT_EQ(tensors[1][0], INFINITY);
  EXPECT_EQ(post.max_abs, 4.0f);
  EXPECT_EQ(post.sq_norm, 32.0);
}

}  // namespace
}  // namespace nanchaos::harness
