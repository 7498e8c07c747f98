// The portable generator against the shared test vector (tests/data/generator_vectors.json, also
// checked by the Python agent's tests): every entry must match bit for bit.
#include "harness/common/rng.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nanchaos::inject {
namespace {

using nlohmann::json;

// 64-bit values are decimal strings in the file (JSON numbers lose them); small ones may be
// plain numbers.
uint64_t u64(const json& j) {
  if (j.is_string()) return std::stoull(j.get<std::string>());
  return j.get<uint64_t>();
}

json vectors() {
  std::ifstream in(std::string(NANCHAOS_SOURCE_DIR) + "/tests/data/generator_vectors.json");
  EXPECT_TRUE(in.good());
  return json::parse(in);
}

TEST(Rng, MixMatchesTheSharedVector) {
  const json v = vectors();
  ASSERT_FALSE(v["mix"].empty());
  for (const auto& e : v["mix"]) EXPECT_EQ(mix(u64(e["h"]), u64(e["v"])), u64(e["out"])) << e;
}

TEST(Rng, StreamMatchesTheSharedVector) {
  const json v = vectors();
  ASSERT_FALSE(v["stream"].empty());
  for (const auto& e : v["stream"]) {
    SplitMix64 g(u64(e["key"]));
    for (const auto& want : e["next"]) EXPECT_EQ(g.next(), u64(want)) << e;
  }
}

TEST(Rng, BelowMatchesTheSharedVector) {
  const json v = vectors();
  ASSERT_FALSE(v["below"].empty());
  for (const auto& e : v["below"]) {
    SplitMix64 g(u64(e["key"]));
    for (const auto& want : e["out"]) EXPECT_EQ(g.below(u64(e["n"])), u64(want)) << e;
  }
}

TEST(Rng, FiresMatchesTheSharedVector) {
  const json v = vectors();
  ASSERT_FALSE(v["fires"].empty());
  for (const auto& e : v["fires"]) {
    EXPECT_EQ(fires(u64(e["seed"]), int64_t(u64(e["fault"])), int64_t(u64(e["step"])),
                    int64_t(u64(e["rank"])), e["probability"].get<double>()),
              e["fires"].get<bool>())
        << e;
  }
}

TEST(Rng, PickMatchesTheSharedVector) {
  const json v = vectors();
  ASSERT_FALSE(v["pick"].empty());
  for (const auto& e : v["pick"]) {
    std::vector<int64_t> want;
    for (const auto& x : e["out"]) want.push_back(int64_t(u64(x)));
    EXPECT_EQ(pick_elements(u64(e["seed"]), int64_t(u64(e["fault"])), int64_t(u64(e["step"])),
                            int64_t(u64(e["numel"])), int64_t(u64(e["want"]))),
              want)
        << e;
  }
}

TEST(Rng, ElementCountRoundsHalfUpAndClamps) {
  EXPECT_EQ(element_count(0, 3, std::nullopt), 0);
  EXPECT_EQ(element_count(10, std::nullopt, std::nullopt), 1);
  EXPECT_EQ(element_count(10, 4, std::nullopt), 4);
  EXPECT_EQ(element_count(10, 40, std::nullopt), 10);
  EXPECT_EQ(element_count(10, std::nullopt, 0.25), 3);  // 2.5 rounds up
  EXPECT_EQ(element_count(10, std::nullopt, 0.01), 1);  // at least one
}

}  // namespace
}  // namespace nanchaos::inject
