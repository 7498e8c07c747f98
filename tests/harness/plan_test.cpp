// The plan JSON an external job's agent reads (harness/scenario/plan.h), compiled from a scenario.
#include "harness/scenario/plan.h"

#include <gtest/gtest.h>

#include <string>

#include "harness/scenario/scenario.h"

namespace nanchaos::harness {
namespace {

const char* kScenario = R"([scenario]
name = "ext-plan"
seed = 7
[job]
workload = "external"
command = ["python3", "train.py"]
steps = 30
micro_batches = 2
[detectors]
collective_timeout_ms = 4000
[[fault]]
kind = "tensor"
target = "activation:net.1"
ranks = [1]
step = 10
value = "nan"
[[fault]]
kind = "hang"
ranks = "all"
step = 12
repeat = "forever"
probability = 0.5
duration_ms = "forever"
[expect]
deadlock = false
)";

TEST(Plan, CompilesEveryFaultWithDefaultsFilledAndWhatWasWritten) {
  const Scenario s = load_scenario_string(kScenario, "x.toml");
  EXPECT_EQ(compile_plan(s).dump(),
            R"({"version":1,"scenario":"ext-plan","seed":7,"steps":30,"micro_batches":2,)"
            R"("world":2,"collective_timeout_ms":4000,"dry_run":false,"faults":[)"
            R"({"index":0,"kind":"tensor","ranks":[1],"step":10,"repeat":1,"probability":1.0,)"
            R"("persistent":false,"params":{"target":"activation:net.1","value":"nan",)"
            R"("factor":null,"count":1,"fraction":null},"given":["target","value"]},)"
            R"({"index":1,"kind":"hang","ranks":"all","step":12,"repeat":-1,"probability":0.5,)"
            R"("persistent":false,"params":{"duration_ms":-1,"where":"before_grad_allreduce",)"
            R"("stall":"host"},"given":["duration_ms"]}]})");
}

TEST(Plan, EffectiveSeedAndDryRun) {
  Scenario s = load_scenario_string(kScenario, "x.toml");
  s.seed = 9;  // a repeated trial (--seed)
  s.faults.clear();
  const auto plan = compile_plan(s, /*dry_run=*/true);
  EXPECT_EQ(plan["seed"], 9);
  EXPECT_EQ(plan["dry_run"], true);
  EXPECT_TRUE(plan["faults"].empty());
}

TEST(Plan, InfinitiesAndNumbersKeepTheirForm) {
  const Scenario s = load_scenario_string(
      "[scenario]\nname = \"p\"\n[job]\nworkload = \"external\"\ncommand = [\"x\"]\nsteps = 5\n"
      "[[fault]]\nkind = \"tensor\"\ntarget = \"loss\"\nstep = 1\nvalue = \"-inf\"\n"
      "[[fault]]\nkind = \"tensor\"\ntarget = \"gradient:w\"\nstep = 1\nfactor = 1e3\n"
      "fraction = 0.25\n[expect]\ndeadlock = false\n",
      "x.toml");
  const auto plan = compile_plan(s);
  EXPECT_EQ(plan["faults"][0]["params"]["value"], "-inf");
  EXPECT_EQ(plan["faults"][0]["ranks"], nlohmann::ordered_json::array({0}));
  EXPECT_EQ(plan["faults"][1]["params"]["factor"], 1000.0);
  EXPECT_EQ(plan["faults"][1]["params"]["fraction"], 0.25);
  EXPECT_EQ(plan["faults"][1]["given"],
            nlohmann::ordered_json::array({"target", "factor", "fraction"}));
}

}  // namespace
}  // namespace nanchaos::harness
