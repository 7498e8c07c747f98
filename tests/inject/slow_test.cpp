// Fault kind `slow` (inject/slow.cpp): which steps and ranks it slows, in which phase, by how
// much, and what the loader refuses. Delays are asserted as lower bounds only (a sleep never
// returns early); no upper bound on wall time.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "harness/tensor/batch.h"
#include "inject/injector.h"

namespace nanchaos::inject {
namespace {

class SlowTest : public ::testing::Test {
 protected:
  std::unique_ptr<Injector> Make(const std::string& keys) {
    scenario_ = harness::load_scenario_string(
        "[scenario]\nname = \"t\"\nseed = 11\n[job]\nworkload = \"mlp\"\nsteps = 40\nranks = 4\n"
        "[[fault]]\nkind = \"slow\"\ndelay_ms = 20\n" +
            keys + "[expect]\ndeadlock = false\n",
        "slow.toml");
    const auto& spec = scenario_.faults.at(0);
    return harness::fault_kinds().at(spec.kind).make(spec, scenario_);
  }
  FaultContext Ctx(int64_t step, int rank, bool reexecution = false) {
    FaultContext ctx;
    ctx.step = step;
    ctx.rank = rank;
    ctx.world = 4;
    ctx.seed = scenario_.seed;
    ctx.reexecution = reexecution;
    ctx.fired = [this](int, const std::string& where, nlohmann::json detail) {
      fired_.push_back(where);
      EXPECT_EQ(detail.at("delay_ms"), 20);
    };
    return ctx;
  }
  // Runs the comm hook (where = "comm") for every step in [0, 40) on `rank`: the slowed steps.
  std::vector<int64_t> SlowedSteps(Injector& inj, int rank) {
    std::vector<int64_t> steps;
    for (int64_t s = 0; s < 40; ++s) {
      const size_t before = fired_.size();
      auto ctx = Ctx(s, rank);
      inj.on_before_collective(ctx, "grad_allreduce");
      if (fired_.size() > before) steps.push_back(s);
    }
    return steps;
  }
  std::string LoadError(const std::string& keys) {
    try {
      Make("step = 0\n" + keys);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }

  harness::Scenario scenario_;
  std::vector<std::string> fired_;
};

TEST_F(SlowTest, SlowsTheStepsInRangeOnTheHitRanksOnly) {
  auto inj = Make("ranks = [2]\nstep = 5\nsteps = 3\nwhere = \"comm\"\n");
  EXPECT_EQ(SlowedSteps(*inj, 2), (std::vector<int64_t>{5, 6, 7}));
  EXPECT_TRUE(SlowedSteps(*inj, 1).empty());
}

TEST_F(SlowTest, ZeroStepsMeansToTheEnd) {
  auto inj = Make("ranks = [0]\nstep = 30\nsteps = 0\nwhere = \"comm\"\n");
  EXPECT_EQ(SlowedSteps(*inj, 0).size(), 10u);
}

TEST_F(SlowTest, FractionSlowsAShareOfTheStepsSameOnEveryHitRank) {
  auto inj = Make("ranks = [1, 3]\nstep = 0\nsteps = 0\nfraction = 0.5\nwhere = \"comm\"\n");
  const auto r1 = SlowedSteps(*inj, 1);
  EXPECT_GT(r1.size(), 8u);
  EXPECT_LT(r1.size(), 32u);
  EXPECT_EQ(SlowedSteps(*inj, 3), r1);  // one throttled node: the same steps
}

TEST_F(SlowTest, EachPhaseDelaysOnlyItsOwnHook) {
  auto inj = Make("step = 0\nwhere = \"data\"\n");
  auto ctx = Ctx(0, 0);
  inj->on_before_collective(ctx, "grad_allreduce");
  inj->on_loss(ctx, torch::ones({}));
  EXPECT_TRUE(fired_.empty());
  harness::Batch batch;
  const auto t0 = std::chrono::steady_clock::now();
  inj->on_batch(ctx, batch);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20));
  EXPECT_EQ(fired_, (std::vector<std::string>{"data"}));
}

TEST_F(SlowTest, CommDelaysTheGradientAllReduceNotTheConsensus) {
  auto inj = Make("step = 0\nwhere = \"comm\"\n");
  auto ctx = Ctx(0, 0);
  inj->on_before_collective(ctx, "consensus");
  EXPECT_TRUE(fired_.empty());
  inj->on_before_collective(ctx, "grad_allreduce");
  EXPECT_EQ(fired_, (std::vector<std::string>{"comm"}));
}

TEST_F(SlowTest, BackwardDelaysInsideTheBackwardOfTheFirstModule) {
  auto inj = Make("step = 0\nwhere = \"backward\"\n");
  auto ctx = Ctx(0, 0);
  torch::Tensor x = torch::ones({3}, torch::requires_grad());
  torch::Tensor first = inj->on_activation(ctx, "fc1", x * 2);
  torch::Tensor second = inj->on_activation(ctx, "fc2", first * 3);  // not hooked: one per step
  EXPECT_TRUE(fired_.empty());  // nothing happens in the forward
  const auto t0 = std::chrono::steady_clock::now();
  second.sum().backward();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20));
  EXPECT_EQ(fired_, (std::vector<std::string>{"backward"}));
  EXPECT_TRUE(torch::equal(x.grad(), torch::full({3}, 6.0f)));  // the gradient is untouched
}

TEST_F(SlowTest, TransientSlownessIsNotRepeatedOnReexecution) {
  auto inj = Make("step = 0\nwhere = \"comm\"\n");
  auto replay = Ctx(0, 0, /*reexecution=*/true);
  inj->on_before_collective(replay, "grad_allreduce");
  EXPECT_TRUE(fired_.empty());
  auto persistent = Make("step = 0\nwhere = \"comm\"\npersistent = true\n");
  persistent->on_before_collective(replay, "grad_allreduce");
  EXPECT_EQ(fired_.size(), 1u);
}

TEST_F(SlowTest, LoaderRefusesRepeatProbabilityAndAbsurdValues) {
  EXPECT_NE(LoadError("repeat = 3\n").find("#1.repeat: a `slow` fault counts its steps with"),
            std::string::npos);
  EXPECT_NE(LoadError("probability = 0.5\n").find("with `fraction`"), std::string::npos);
  EXPECT_NE(LoadError("fraction = 0\n").find("fraction"), std::string::npos);
  EXPECT_NE(LoadError("where = \"gpu\"\n").find("where"), std::string::npos);
  EXPECT_NE(LoadError("steps = -1\n").find("steps"), std::string::npos);
}

TEST(SlowKind, GroundTruthIsAStragglerInThePhase) {
  const auto& info = harness::fault_kinds().at("slow");
  const auto truth = info.truth(nlohmann::ordered_json{{"where", "data"}});
  EXPECT_EQ(truth.cause, harness::Cause::kStraggler);
  EXPECT_EQ(truth.layer, "data");
  EXPECT_EQ(harness::to_string(harness::Cause::kStraggler), "straggler");
}

}  // namespace
}  // namespace nanchaos::inject
