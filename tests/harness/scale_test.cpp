// 64 ranks on one host: the shipped scale scenarios, judged from the report entries of
// the shipped suite's run (shipped_suite_passes runs each once, ~30-60 s apiece on a 2-core host;
// test_util.h shipped_scenario). Registered as their own CTest tests (labels `scale;slow`: they
// need that suite run), not through gtest discovery.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/test_util.h"

using nlohmann::json;

namespace {

using nanchaos::test_util::shipped_scenario;

void expect_memory_of_every_rank(const json& s) {
  const json& m = s["memory"];
  ASSERT_TRUE(m.is_object()) << s.dump();
  EXPECT_EQ(m["ranks_measured"], 64);
  ASSERT_EQ(m["per_rank_mib"].size(), 64u);
  double total = 0;
  for (const auto& [rank, mib] : m["per_rank_mib"].items()) {
    EXPECT_GT(mib.get<double>(), 1.0) << "rank " << rank;
    total += mib.get<double>();
  }
  EXPECT_NEAR(m["total_mib"].get<double>(), total, 64 * 0.05 + 1e-6);
  EXPECT_GE(m["per_rank_max_mib"].get<double>(), m["per_rank_mean_mib"].get<double>());
}

TEST(Scale64Ranks, NanOnRank37DetectedSameStepNamedAndConsistent) {
  const json s = shipped_scenario("scale-64ranks-nan-rank37");
  EXPECT_EQ(s["verdict"], "pass") << s["reason"];
  EXPECT_EQ(s["ranks"], 64);
  EXPECT_EQ(s["outcome"], "completed");
  const json& fd = s["first_detection"];
  ASSERT_TRUE(fd.is_object()) << s.dump(1);
  EXPECT_EQ(fd["rank"], 37);
  EXPECT_EQ(fd["step"], 3);
  EXPECT_EQ(fd["latency_steps"], 0);
  EXPECT_EQ(s["consistent"], true);
  EXPECT_EQ(s["deadlock"], false);
  EXPECT_EQ(s["steps_completed"], 6);
  expect_memory_of_every_rank(s);
}

TEST(Scale64Ranks, HangOnRank50AbortedWithinDeadlineAndNamed) {
  const json s = shipped_scenario("scale-64ranks-hang-rank50");
  EXPECT_EQ(s["verdict"], "pass") << s["reason"];
  EXPECT_EQ(s["outcome"], "aborted");
  EXPECT_EQ(s["deadlock"], false);
  EXPECT_EQ(s["absent_ranks"], json::array({50}));
  ASSERT_TRUE(s["abort_latency_ms"].is_number()) << s.dump(1);
  EXPECT_LE(s["abort_latency_ms"].get<double>(), 8000.0);  // the scenario's abort_within_ms
  // The hung rank never writes its exit event: its figure comes from the controller's samples.
  expect_memory_of_every_rank(s);
  EXPECT_TRUE(s["memory"]["per_rank_mib"].contains("50"));
}

}  // namespace
