// Same seed, same plan: the random half of a scenario's plan (harness/scenario/plan.h plan_draws)
// pinned to literal values. The literals were computed with the Python agent's twin of the
// generator (inject/python/nanchaos/rng.py), an independent implementation; .ci/fuzz-short also
// checks that a clang++ build prints the same plans as the g++ one.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "harness/scenario/plan.h"
#include "harness/scenario/scenario.h"

namespace nanchaos::harness {
namespace {

// A probability draw per (step, rank) and element choice by count and by fraction.
const char* kScenario = R"([scenario]
name = "draws-pinned"
seed = 20260
[job]
workload = "external"
command = ["python3", "train.py"]
ranks = 4
steps = 12
[[fault]]
kind = "tensor"
target = "activation:net.1"
ranks = "all"
step = 2
repeat = 6
probability = 0.4
count = 3
[[fault]]
kind = "tensor"
target = "parameter:net.0.weight"
ranks = [1, 3]
step = 5
fraction = 0.05
[expect]
deadlock = false
)";

TEST(PlanDraws, FixedSeedGivesLiteralStepsRanksAndElements) {
  const Scenario s = load_scenario_string(kScenario, "draws.toml");
  const auto d = plan_draws(s, 64);
  EXPECT_EQ(d.dump(), R"({"scenario":"draws-pinned","seed":20260,"numel":64,"faults":[)"
                      R"({"index":0,"kind":"tensor","fires":[)"
                      R"({"step":2,"ranks":[1,2],"elements":[12,39,51]},)"
                      R"({"step":4,"ranks":[0,1,2,3],"elements":[33,50,57]},)"
                      R"({"step":5,"ranks":[0,1,2,3],"elements":[16,28,34]},)"
                      R"({"step":6,"ranks":[2],"elements":[28,35,63]},)"
                      R"({"step":7,"ranks":[0,2,3],"elements":[19,47,63]}]},)"
                      R"({"index":1,"kind":"tensor","fires":[)"
                      R"({"step":5,"ranks":[1,3],"elements":[8,32,35]}]}]})");
}

TEST(PlanDraws, TrialSeedChangesTheDraws) {
  Scenario s = load_scenario_string(kScenario, "draws.toml");
  const std::string first = plan_draws(s, 64).dump();
  EXPECT_EQ(plan_draws(s, 64).dump(), first);  // a pure function
  s.seed += 1;                                 // trial 1 of `nanchaos run --trials`
  EXPECT_NE(plan_draws(s, 64).dump(), first);
}

TEST(PlanDraws, ElementCountFollowsCountThenFraction) {
  const Scenario s = load_scenario_string(kScenario, "draws.toml");
  EXPECT_EQ(fault_element_count(s.faults[0], 64), 3);  // count = 3
  EXPECT_EQ(fault_element_count(s.faults[0], 2), 2);   // never more than numel
  EXPECT_EQ(fault_element_count(s.faults[1], 64), 3);  // round-half-up(0.05 x 64) = 3
  EXPECT_EQ(fault_element_count(s.faults[1], 4), 1);   // at least one
  EXPECT_EQ(fault_element_count(s.faults[1], 0), 0);
}

}  // namespace
}  // namespace nanchaos::harness
