// The fault target parser (harness/scenario/target.h) against the shared test vector
// (tests/data/target_vectors.json, also checked by the Python agent's tests/test_target.py), and
// the loader and read_plan carrying the parsed target in FaultSpec.
#include "harness/scenario/target.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/scenario/plan.h"
#include "harness/scenario/scenario.h"
#include "tests/harness/loader_text.h"

namespace nanchaos::harness {
namespace {

using nlohmann::json;

json cases() {
  std::ifstream in(std::string(NANCHAOS_SOURCE_DIR) + "/tests/data/target_vectors.json");
  EXPECT_TRUE(in.good());
  return json::parse(in).at("cases");
}

std::vector<TargetWhere> allowed_of(const json& c) {
  if (!c.contains("allowed")) return all_target_wheres();
  std::vector<TargetWhere> out;
  for (const auto& w : c["allowed"]) out.push_back(target_where_from_string(w).value());
  return out;
}

TEST(Target, parse_target_matches_the_shared_vector) {
  const json all = cases();
  ASSERT_GT(all.size(), 10u);
  for (const auto& c : all) {
    SCOPED_TRACE(c.dump());
    const std::string text = c.at("text");
    const std::optional<Target> t = parse_target(text, allowed_of(c));
    if (c.contains("error")) {
      EXPECT_FALSE(t.has_value());
      EXPECT_EQ(target_error(text, allowed_of(c)), c["error"].get<std::string>());
      continue;
    }
    ASSERT_TRUE(t.has_value());
    const json& want = c.at("target");
    EXPECT_EQ(to_string(t->where), want.at("where").get<std::string>());
    EXPECT_EQ(t->pattern, want.at("pattern").get<std::string>());
    EXPECT_EQ(t->name(), want.at("name").get<std::string>());
    EXPECT_EQ(t->state(), want.at("state").get<std::string>());
    EXPECT_EQ(t->text(), want.at("text").get<std::string>());
  }
}

TEST(Target, where_round_trips_through_its_text) {
  for (TargetWhere w : all_target_wheres()) EXPECT_EQ(target_where_from_string(to_string(w)), w);
  EXPECT_FALSE(target_where_from_string("batch").has_value());
  EXPECT_FALSE(target_where_from_string("").has_value());
}

TEST(Target, loader_carries_the_parsed_target_in_the_fault) {
  const Scenario s = load_scenario_string(test_util::with_head(R"([[fault]]
kind = "tensor"
target = "gradient:layers.*.linear.weight"
step = 1
[[fault]]
kind = "overflow"
target = "activation:layers.0"
step = 1
[[fault]]
kind = "lr"
factor = 2.0
step = 1
[expect]
deadlock = false
)"),
                                          "x.toml");
  ASSERT_EQ(s.faults.size(), 3u);
  ASSERT_TRUE(s.faults[0].target.has_value());
  EXPECT_EQ(s.faults[0].target->where, TargetWhere::kGradient);
  EXPECT_EQ(s.faults[0].target->pattern, "layers.*.linear.weight");
  ASSERT_TRUE(s.faults[1].target.has_value());
  EXPECT_EQ(s.faults[1].target->where, TargetWhere::kActivation);
  EXPECT_EQ(s.faults[1].target->pattern, "layers.0");
  EXPECT_FALSE(s.faults[2].target.has_value());  // lr has no target
}

TEST(Target, loader_refuses_a_where_the_kind_lacks_in_its_words) {
  EXPECT_EQ(test_util::loader_error(test_util::with_head(
                "[[fault]]\nkind = \"overflow\"\ntarget = \"gradient:layers.0\"\nstep = 1\n")),
            "x.toml:8:10: error: [[fault]] #1.target: \"gradient:layers.0\" is not a valid "
            "target; expected activation:NAME");
}

TEST(Target, read_plan_parses_the_target_and_refuses_a_bad_one) {
  const std::string head =
      R"({"version":1,"scenario":"p","seed":1,"steps":4,"micro_batches":1,"world":2,)"
      R"("collective_timeout_ms":100,"faults":[{"index":0,"kind":"tensor","ranks":[0],"step":1,)"
      R"("repeat":1,"probability":1.0,"persistent":false,"params":{"target":)";
  const PlanRead good =
      read_plan(json::parse(head + R"("optimizer:head.weight.exp_avg"}}]})"), "$NANCHAOS_PLAN");
  ASSERT_TRUE(good.scenario.faults.at(0).target.has_value());
  EXPECT_EQ(good.scenario.faults[0].target->where, TargetWhere::kOptimizer);
  EXPECT_EQ(good.scenario.faults[0].target->name(), "head.weight");
  try {
    read_plan(json::parse(head + R"("activation:"}}]})"), "$NANCHAOS_PLAN");
    FAIL() << "read";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "$NANCHAOS_PLAN: plan.faults[0].params.target: \"activation:\" is not a valid "
              "target; expected activation:NAME or parameter:NAME or gradient:NAME or "
              "optimizer:PARAM.STATE or \"loss\"");
  }
}

}  // namespace
}  // namespace nanchaos::harness
