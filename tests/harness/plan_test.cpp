// The plan JSON an external job's agent reads (harness/scenario/plan.h), compiled from a scenario.
#include "harness/scenario/plan.h"

#include <gtest/gtest.h>

#include <stdexcept>
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

// FSDP2's collective points reach the agent as written; a comm fault without `target` carries
// null (the gradient all-reduce).
TEST(Plan, CarriesFsdp2CollectivePoints) {
  const Scenario s = load_scenario_string(
      "[scenario]\nname = \"p\"\n[job]\nworkload = \"external\"\ncommand = [\"x\"]\nsteps = 5\n"
      "[[fault]]\nkind = \"comm\"\ntarget = \"reduce_scatter\"\nranks = [1]\nstep = 1\n"
      "[[fault]]\nkind = \"comm\"\nstep = 1\n"
      "[[fault]]\nkind = \"hang\"\nwhere = \"before_reduce_scatter\"\nduration_ms = \"forever\"\n"
      "step = 2\n[expect]\ndeadlock = false\n",
      "x.toml");
  const auto plan = compile_plan(s);
  EXPECT_EQ(plan["faults"][0]["params"].dump(),
            R"({"value":"nan","bit":null,"count":1,"target":"reduce_scatter"})");
  EXPECT_EQ(plan["faults"][0]["given"], nlohmann::ordered_json::array({"target"}));
  EXPECT_TRUE(plan["faults"][1]["params"]["target"].is_null());
  EXPECT_EQ(plan["faults"][2]["params"]["where"], "before_reduce_scatter");
}

// The C++ agent reads the plan back (read_plan): every fault field and param as loaded, and
// "given" exactly where the file wrote it.
TEST(Plan, ReadsBackWhatItCompiled) {
  const Scenario s = load_scenario_string(kScenario, "x.toml");
  const PlanRead back = read_plan(nlohmann::json::parse(compile_plan(s).dump()), "$NANCHAOS_PLAN");
  EXPECT_FALSE(back.dry_run);
  EXPECT_EQ(back.scenario.name, "ext-plan");
  EXPECT_EQ(back.scenario.seed, 7u);
  EXPECT_EQ(back.scenario.job.steps, 30);
  EXPECT_EQ(back.scenario.job.micro_batches, 2);
  EXPECT_EQ(collective_timeout_ms(back.scenario.detectors), 4000);
  ASSERT_EQ(back.scenario.faults.size(), s.faults.size());
  for (size_t i = 0; i < s.faults.size(); ++i) {
    const FaultSpec &a = s.faults[i], &b = back.scenario.faults[i];
    EXPECT_EQ(b.index, a.index);
    EXPECT_EQ(b.kind, a.kind);
    EXPECT_EQ(b.ranks.all, a.ranks.all);
    EXPECT_EQ(b.ranks.ranks, a.ranks.ranks);
    EXPECT_EQ(b.step, a.step);
    EXPECT_EQ(b.repeat, a.repeat);
    EXPECT_EQ(b.probability, a.probability);
    EXPECT_EQ(b.persistent, a.persistent);
    EXPECT_EQ(b.params.values().size(), a.params.values().size());
  }
  // Params and "given" (NaN spelt "nan"): compiling the plan read back gives the same faults.
  EXPECT_EQ(compile_plan(back.scenario)["faults"], compile_plan(s)["faults"]);
}

TEST(Plan, ReadRefusesAPlanItCannotApplyNamingTheField) {
  auto error_of = [](const std::string& text) {
    try {
      read_plan(nlohmann::json::parse(text), "$NANCHAOS_PLAN");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string head =
      R"({"version":1,"scenario":"p","seed":1,"steps":4,"micro_batches":1,"world":2,)"
      R"("collective_timeout_ms":100,"faults":[)";
  EXPECT_EQ(error_of("[1]"), "$NANCHAOS_PLAN: the plan is not a JSON object");
  EXPECT_EQ(error_of(R"({"version":2})"),
            "$NANCHAOS_PLAN: plan version 2 (this agent reads version 1)");
  EXPECT_EQ(error_of(head + R"({"index":0,"kind":"nope","ranks":[0],"step":1,"repeat":1,)"
                            R"("probability":1.0,"persistent":false}]})"),
            "$NANCHAOS_PLAN: plan.faults[0]: unknown fault kind nope");
  EXPECT_EQ(error_of(head + R"({"index":0,"kind":"tensor","ranks":[0],"step":1,"repeat":1,)"
                            R"("probability":1.0,"persistent":false,"params":{"count":"x"}}]})"),
            "$NANCHAOS_PLAN: plan.faults[0].params.count: expected an integer, got \"x\"");
  EXPECT_EQ(error_of(head + R"({"index":0,"kind":"tensor","ranks":[0],"repeat":1,)"
                            R"("probability":1.0,"persistent":false}]})"),
            "$NANCHAOS_PLAN: plan.faults[0].step is missing");
}

}  // namespace
}  // namespace nanchaos::harness
