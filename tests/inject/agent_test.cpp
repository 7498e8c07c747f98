// The C++ agent of external LibTorch programs (inject/agent.h), driven in process with a plan
// and an event log in the environment, as exec-rank sets them: what it applies, where, and the
// events the judge reads.
#include "inject/agent.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "harness/common/rng.h"
#include "harness/evidence/events.h"
#include "harness/scenario/plan.h"
#include "harness/scenario/scenario.h"

namespace nanchaos {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct TinyImpl : torch::nn::Module {
  TinyImpl() : fc(register_module("fc", torch::nn::Linear(4, 3))) {}
  torch::nn::Linear fc;
};
TORCH_MODULE(Tiny);

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::set_num_threads(1);
    events_ =
        (fs::path(::testing::TempDir()) / ("nanchaos_agent_" + std::to_string(getpid()) + ".jsonl"))
            .string();
    std::ofstream(events_) << R"({"ev":"launch","t_us":1,"rank":0})"
                           << "\n";
  }
  void TearDown() override {
    unsetenv("NANCHAOS_PLAN");
    unsetenv("NANCHAOS_EVENTS");
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    fs::remove(events_);
  }

  // Puts the plan of an external scenario with these [[fault]] tables in the environment.
  void Plan(const std::string& faults, int rank = 0) {
    const std::string text =
        "[scenario]\nname = \"agent\"\nseed = 11\n[job]\nworkload = \"external\"\n"
        "command = [\"prog\"]\nranks = 2\nsteps = 4\n" +
        faults + "[expect]\ndeadlock = false\n";
    const harness::Scenario s = harness::load_scenario_string(text, "agent.toml");
    setenv("NANCHAOS_PLAN", harness::compile_plan(s).dump().c_str(), 1);
    setenv("NANCHAOS_EVENTS", events_.c_str(), 1);
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", "2", 1);
  }

  std::vector<json> Events(const std::string& ev) const {
    std::vector<json> out;
    for (auto& e : harness::read_events(events_)) {
      if (e.value("ev", "") == ev) out.push_back(e);
    }
    return out;
  }

  // One training step of `model` as an external program makes it; `update`: run the optimizer.
  void Step(Agent& agent, Tiny& model, torch::optim::SGD& opt, int64_t step, bool update = true) {
    agent.begin_step(step);
    opt.zero_grad();
    torch::manual_seed(uint64_t(step));
    auto x = torch::randn({8, 4});
    auto loss = agent.probe("fc", model->fc(x)).pow(2).mean();
    loss = agent.loss(loss);
    loss.backward();
    agent.gradients();
    if (!update) return;
    agent.before_optimizer_step();
    opt.step();
    agent.after_optimizer_step();
  }

  std::string events_;
};

TEST_F(AgentTest, OutsideNanchaosEveryCallIsANoOp) {
  Agent agent;
  EXPECT_FALSE(agent.active());
  Tiny model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  agent.attach(*model, &opt);
  auto t = torch::ones({3});
  EXPECT_EQ(agent.probe("fc", t).data_ptr(), t.data_ptr());
  bool ran = false;
  EXPECT_FALSE(agent.collective("grad_allreduce", t, [&] { return ran = true, false; }));
  EXPECT_TRUE(ran);
  EXPECT_EQ(agent.steps(7), 7);
  agent.finish();
  EXPECT_EQ(harness::read_events(events_).size(), 1u);  // only exec-rank's line
}

TEST_F(AgentTest, AGradientFaultHitsTheGeneratorsElementOnTheChosenStep) {
  Plan(
      "[[fault]]\nkind = \"tensor\"\ntarget = \"gradient:fc.weight\"\nvalue = \"nan\"\n"
      "ranks = [0]\nstep = 1\n");
  Agent agent;
  ASSERT_TRUE(agent.active());
  EXPECT_EQ(agent.steps(99), 4);
  Tiny model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  agent.attach(*model, &opt);
  Step(agent, model, opt, 0);
  EXPECT_TRUE(torch::isfinite(model->fc->weight.grad()).all().item<bool>());
  Step(agent, model, opt, 1, /*update=*/false);
  const auto idx = inject::pick_elements(11, 0, 1, model->fc->weight.numel(), 1);
  ASSERT_EQ(idx.size(), 1u);
  const auto g = model->fc->weight.grad().reshape({-1});
  EXPECT_TRUE(std::isnan(g[idx[0]].item<float>()));
  EXPECT_EQ(int64_t((~torch::isfinite(g)).sum().item<int64_t>()), 1);
  agent.finish();

  const auto all = harness::read_events(events_);
  ASSERT_GE(all.size(), 3u);
  EXPECT_EQ(all[0]["ev"], "launch");  // appended after exec-rank's line
  EXPECT_EQ(all[1]["ev"], "agent");
  EXPECT_EQ(all[1]["agent"], "cpp");
  const auto start = Events("start");
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0]["parameters"], json({"fc.weight", "fc.bias"}));
  EXPECT_EQ(start[0]["modules"], json({"fc"}));
  const auto inject = Events("inject");
  ASSERT_EQ(inject.size(), 1u);
  EXPECT_EQ(inject[0]["step"], 1);
  EXPECT_EQ(inject[0]["kind"], "tensor");
  EXPECT_EQ(inject[0]["target"], "gradient:fc.weight");
  // Step 1 ran no optimizer step: the agent observed the skip by itself.
  const auto ends = Events("step_end");
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_EQ(ends[0]["action"], "update");
  EXPECT_EQ(ends[1]["action"], "skip");
  const auto detect = Events("detect");
  ASSERT_EQ(detect.size(), 1u);
  EXPECT_EQ(detect[0]["detector"], "observed:skip");
  EXPECT_EQ(detect[0]["step"], 1);
  const auto fin = Events("final");
  ASSERT_EQ(fin.size(), 1u);
  EXPECT_EQ(fin[0]["steps_completed"], 2);
  EXPECT_EQ(fin[0]["params_finite"], true);
  EXPECT_EQ(fin[0]["params_hash"].get<std::string>().size(), 16u);
  EXPECT_EQ(Events("exit").at(0)["code"], 0);
}

TEST_F(AgentTest, OtherRanksAreNotHit) {
  Plan("[[fault]]\nkind = \"tensor\"\ntarget = \"gradient:fc.weight\"\nranks = [0]\nstep = 0\n",
       /*rank=*/1);
  Agent agent;
  Tiny model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  agent.attach(*model, &opt);
  Step(agent, model, opt, 0);
  agent.finish();
  EXPECT_TRUE(Events("inject").empty());
  EXPECT_TRUE(torch::isfinite(model->fc->weight).all().item<bool>());
}

TEST_F(AgentTest, LrFaultScalesOneStepAndRestores) {
  Plan("[[fault]]\nkind = \"lr\"\nfactor = 1000.0\nranks = [0]\nstep = 1\n");
  Agent agent;
  Tiny model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  agent.attach(*model, &opt);
  for (int64_t s = 0; s < 3; ++s) Step(agent, model, opt, s);
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].options().get_lr(), 0.1);
  agent.finish();
  const auto ends = Events("step_end");
  ASSERT_EQ(ends.size(), 3u);
  EXPECT_DOUBLE_EQ(ends[0]["lr"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(ends[1]["lr"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(ends[2]["lr"].get<double>(), 0.1);
}

TEST_F(AgentTest, CommFaultCorruptsTheSendBufferBeforeTheCollectiveRuns) {
  Plan("[[fault]]\nkind = \"comm\"\nvalue = \"inf\"\nranks = [0]\nstep = 0\n");
  Agent agent;
  Tiny model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  agent.attach(*model, &opt);
  agent.begin_step(0);
  auto buf = torch::zeros({16});
  bool saw_inf = false;
  auto other = torch::zeros({16});
  agent.collective("nan_check", other, [&] { return true; });  // not the gradient all-reduce
  EXPECT_TRUE(agent.collective("grad_allreduce", buf, [&] {
    saw_inf = torch::isinf(buf).any().item<bool>();
    return true;
  }));
  EXPECT_TRUE(saw_inf);
  EXPECT_FALSE(torch::isinf(other).any().item<bool>());
  agent.finish();
  const auto enter = Events("coll_enter");
  ASSERT_EQ(enter.size(), 2u);
  EXPECT_EQ(enter[0]["seq"], 0);
  EXPECT_EQ(enter[1]["name"], "grad_allreduce");
  EXPECT_EQ(enter[1]["count"], 16);
  EXPECT_EQ(Events("coll_leave").size(), 2u);
}

// FSDP2's collectives and optimizer state are the Python agent's: the loader
// accepts them for any external job, and this agent refuses them at attach, naming the key.
TEST_F(AgentTest, WhatOnlyThePythonAgentAppliesIsAnAttachError) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"kind = \"comm\"\ntarget = \"reduce_scatter\"\nstep = 1\n",
       "[[fault]] #1 (comm): target = \"reduce_scatter\" (an FSDP2 collective) is applied by the "
       "Python agent only; this LibTorch job's agent cannot apply it"},
      {"kind = \"hang\"\nwhere = \"before_reduce_scatter\"\nduration_ms = 5\nstep = 1\n",
       "[[fault]] #1 (hang): where = \"before_reduce_scatter\" (FSDP2's reduce-scatter) is "
       "applied by the Python agent only; this LibTorch job's agent cannot apply it"},
      {"kind = \"tensor\"\ntarget = \"optimizer:fc.weight.exp_avg\"\nstep = 1\n",
       "[[fault]] #1 (tensor): target optimizer:fc.weight.exp_avg (optimizer state) is applied "
       "by the Python agent only; this LibTorch job's agent cannot apply it"},
  };
  for (const auto& [fault, reason] : cases) {
    Plan("[[fault]]\n" + fault);
    Agent agent;
    Tiny model;
    EXPECT_THROW(agent.attach(*model), AttachError) << fault;
    const auto err = Events("attach_error");  // one more per case, in the same log
    ASSERT_FALSE(err.empty()) << fault;
    EXPECT_EQ(err.back()["reason"], reason);
  }
}

TEST_F(AgentTest, AnUnmatchedParameterTargetIsAnAttachError) {
  Plan("[[fault]]\nkind = \"tensor\"\ntarget = \"parameter:fc2.weight\"\nstep = 1\n");
  Agent agent;
  Tiny model;
  EXPECT_THROW(agent.attach(*model), AttachError);
  const auto err = Events("attach_error");
  ASSERT_EQ(err.size(), 1u);
  EXPECT_NE(err[0]["reason"].get<std::string>().find(
                "target parameter:fc2.weight matches no parameter of the model"),
            std::string::npos)
      << err[0];
  // fc2.weight is one edit from the model's fc.weight.
  EXPECT_NE(err[0]["reason"].get<std::string>().find("(did you mean parameter:fc.weight?)"),
            std::string::npos)
      << err[0];
  EXPECT_TRUE(Events("start").empty());
}

TEST_F(AgentTest, StackReportsAndExceptionsAreEvidence) {
  Plan("");
  Agent agent;
  Tiny model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  agent.attach(*model, &opt);
  agent.begin_step(0);
  agent.report_detection("nan_check", "fc.weight", "gradient");
  agent.report_decision("abort");
  agent.exception("boom");
  agent.finish();
  const auto detect = Events("detect");
  ASSERT_EQ(detect.size(), 2u);
  EXPECT_EQ(detect[0]["source"], "stack");
  EXPECT_EQ(detect[0]["layer"], "fc.weight");
  EXPECT_EQ(detect[1]["detector"], "observed:exception");
  EXPECT_EQ(Events("abort").size(), 1u);
  EXPECT_TRUE(Events("final").empty());  // not a clean exit
  EXPECT_EQ(Events("exit").at(0)["code"], 1);
}

TEST_F(AgentTest, AnUnreadablePlanIsAnAttachErrorNotASilentRun) {
  setenv("NANCHAOS_PLAN", "{not json", 1);
  setenv("NANCHAOS_EVENTS", events_.c_str(), 1);
  EXPECT_THROW(Agent(), std::runtime_error);
  const auto err = Events("attach_error");
  ASSERT_EQ(err.size(), 1u);
  EXPECT_EQ(err[0]["reason"], "$NANCHAOS_PLAN is not JSON");
}

TEST_F(AgentTest, ASecondAgentInTheProcessIsRefusedAndSaidInTheLog) {
  Plan("");
  {
    Agent first;
    ASSERT_TRUE(first.active());
    EXPECT_THROW(Agent(), AttachError);  // said through the first agent's open log
    first.finish();
    EXPECT_THROW(Agent(), AttachError);  // still alive, log closed: said by a log of its own
  }
  const auto err = Events("attach_error");
  ASSERT_EQ(err.size(), 2u);
  for (const auto& e : err) {
    EXPECT_NE(e["reason"].get<std::string>().find("second nanchaos::Agent"), std::string::npos);
  }
  EXPECT_EQ(Events("exit").size(), 1u);  // the first agent's, intact
  Agent after;                           // once the first is gone, the slot is free again
  EXPECT_TRUE(after.active());
}

TEST_F(AgentTest, GradientsTwiceInAStepApplyTheFaultOnceAndWarn) {
  Plan(
      "[[fault]]\nkind = \"tensor\"\ntarget = \"gradient:fc.bias\"\nfactor = 10.0\n"
      "ranks = [0]\nstep = 0\n");
  Agent agent;
  Tiny model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  agent.attach(*model, &opt);
  Step(agent, model, opt, 0, /*update=*/false);
  const auto once = model->fc->bias.grad().clone();
  agent.gradients();  // again, same step
  EXPECT_TRUE(torch::equal(once, model->fc->bias.grad()));
  agent.finish();
  EXPECT_EQ(Events("inject").size(), 1u);
  const auto warn = Events("agent_warning");
  ASSERT_EQ(warn.size(), 1u);
  EXPECT_EQ(warn[0]["kind"], "gradients_twice");
}

TEST_F(AgentTest, AStepBegunAgainIsAReexecutionAndAGapIsWarned) {
  // One-shot at step 1: the job's own retry of step 1 does not see it again; a persistent one
  // at step 3 fires on both runs of step 3.
  Plan(
      "[[fault]]\nkind = \"tensor\"\ntarget = \"gradient:fc.bias\"\nfactor = 2.0\n"
      "ranks = [0]\nstep = 1\n"
      "[[fault]]\nkind = \"tensor\"\ntarget = \"gradient:fc.weight\"\nfactor = 2.0\n"
      "ranks = [0]\nstep = 3\npersistent = true\n");
  Agent agent;
  Tiny model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  agent.attach(*model, &opt);
  for (int64_t step : {0, 1, 1, 3, 3}) Step(agent, model, opt, step);
  agent.finish();
  std::vector<int64_t> fired;
  for (const auto& e : Events("inject")) fired.push_back(e["step"].get<int64_t>());
  EXPECT_EQ(fired, (std::vector<int64_t>{1, 3, 3}));
  const auto warn = Events("agent_warning");
  ASSERT_EQ(warn.size(), 1u);
  EXPECT_EQ(warn[0]["kind"], "step_gap");  // step 2 never began
}

}  // namespace
}  // namespace nanchaos
