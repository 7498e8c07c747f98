// Injectors built through the fault-kind registry: target matching, arming, element choice, and
// what each kind actually changes (tensor, bitflip, lr, batch, comm).
#include "inject/injector.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "detectors/core/fused_scan.h"
#include "harness/job/workload.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"

namespace nanchaos::inject {
namespace {

using harness::Scenario;

// One recorded ctx.fired call.
struct Fired {
  int fault;
  std::string target;
  nlohmann::json detail;
};

class InjectorTest : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); }

  // Loads a 4-rank scenario whose only [[fault]] table is `fault` (after the tables in `before`)
  // and builds its injector. Targets name the configured mlp's parameters: the loader checks.
  std::unique_ptr<Injector> Make(const std::string& fault, uint64_t seed = 7,
                                 const std::string& before = "") {
    const std::string text = "[scenario]\nname = \"t\"\nseed = " + std::to_string(seed) +
                             "\n[job]\nworkload = \"mlp\"\nsteps = 20\nranks = 4\n" + before +
                             "[[fault]]\n" + fault +
                             // The loader refuses a fault with no [expect].
                             "[expect]\ndeadlock = false\n";
    scenario_ = harness::load_scenario_string(text, "inj.toml");
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
    ctx.fired = [this](int fault, const std::string& target, nlohmann::json detail) {
      fired_.push_back({fault, target, std::move(detail)});
    };
    return ctx;
  }

  Scenario scenario_;
  std::vector<Fired> fired_;
};

// Flat indices where `t` is NaN.
std::vector<int64_t> NanIndices(const torch::Tensor& t) {
  auto flat = t.contiguous().view({-1});
  std::vector<int64_t> out;
  for (int64_t i = 0; i < flat.numel(); ++i) {
    if (std::isnan(flat[i].item<float>())) out.push_back(i);
  }
  return out;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// --- match_target ------------------------------------------------------------------------------

TEST(InjectorMatchTarget, WildcardWithinOneSegment) {
  EXPECT_TRUE(match_target("blocks.*.attn.qkv.weight", "blocks.1.attn.qkv.weight"));
  EXPECT_TRUE(match_target("blocks.*.attn.qkv.weight", "blocks.12.attn.qkv.weight"));
  EXPECT_FALSE(match_target("blocks.*.attn.qkv.weight", "blocks.1.attn.proj.weight"));
  EXPECT_FALSE(match_target("blocks.*.attn.qkv.weight", "blocks.1.2.attn.qkv.weight"));
  EXPECT_FALSE(match_target("blocks.*.attn.qkv.weight", "blocks.1.attn.qkv.weight.x"));
  EXPECT_TRUE(match_target("layers.*", "layers.3"));
  EXPECT_FALSE(match_target("layers.*", "layers.3.linear"));
  EXPECT_TRUE(match_target("*.weight", "head.weight"));
  EXPECT_FALSE(match_target("*.weight", "head.bias"));
}

TEST(InjectorMatchTarget, ExactNames) {
  EXPECT_TRUE(match_target("head.weight", "head.weight"));
  EXPECT_TRUE(match_target("layers.1", "layers.1"));
  EXPECT_FALSE(match_target("layers.1", "layers.10"));
  EXPECT_FALSE(match_target("layers.10", "layers.1"));
  EXPECT_FALSE(match_target("layers.1", "layers.1.linear"));
  EXPECT_FALSE(match_target("head.weight", "head.bias"));
  EXPECT_FALSE(match_target("head", "head.weight"));
  EXPECT_FALSE(match_target("", "head"));
}

// --- armed -------------------------------------------------------------------------------------

TEST_F(InjectorTest, ArmedRespectsWindowAndRanks) {
  auto inj = Make("kind = \"lr\"\nfactor = 2.0\nranks = [1, 3]\nstep = 4\nrepeat = 3\n");
  for (int64_t step = 0; step < 10; ++step) {
    for (int rank = 0; rank < 4; ++rank) {
      const bool want = step >= 4 && step < 7 && (rank == 1 || rank == 3);
      EXPECT_EQ(inj->armed(Ctx(step, rank)), want) << "step " << step << " rank " << rank;
    }
  }
}

TEST_F(InjectorTest, ArmedDefaultsToRankZeroOneStep) {
  auto inj = Make("kind = \"lr\"\nfactor = 2.0\nstep = 2\n");
  EXPECT_TRUE(inj->armed(Ctx(2, 0)));
  EXPECT_FALSE(inj->armed(Ctx(2, 1)));
  EXPECT_FALSE(inj->armed(Ctx(1, 0)));
  EXPECT_FALSE(inj->armed(Ctx(3, 0)));
}

TEST_F(InjectorTest, ArmedForeverAndAllRanks) {
  auto inj = Make("kind = \"lr\"\nfactor = 2.0\nranks = \"all\"\nstep = 5\nrepeat = \"forever\"\n");
  EXPECT_FALSE(inj->armed(Ctx(4, 2)));
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(inj->armed(Ctx(5, rank)));
    EXPECT_TRUE(inj->armed(Ctx(1000000, rank)));
  }
}

TEST_F(InjectorTest, TransientFaultDoesNotFireOnReexecution) {
  auto inj = Make("kind = \"lr\"\nfactor = 2.0\nstep = 2\n");
  EXPECT_TRUE(inj->armed(Ctx(2, 0, false)));
  EXPECT_FALSE(inj->armed(Ctx(2, 0, true)));
}

TEST_F(InjectorTest, PersistentFaultFiresOnReexecution) {
  auto inj = Make("kind = \"lr\"\nfactor = 2.0\nstep = 2\npersistent = true\n");
  EXPECT_TRUE(inj->armed(Ctx(2, 0, false)));
  EXPECT_TRUE(inj->armed(Ctx(2, 0, true)));
  EXPECT_FALSE(inj->armed(Ctx(3, 0, true)));  // still only inside the window
}

TEST_F(InjectorTest, ProbabilityIsSeededAndPartial) {
  auto inj = Make(
      "kind = \"lr\"\nfactor = 2.0\nranks = \"all\"\nstep = 0\nrepeat = \"forever\"\n"
      "probability = 0.5\n");
  int hits = 0;
  for (int64_t step = 0; step < 400; ++step) {
    const bool a = inj->armed(Ctx(step, 1));
    EXPECT_EQ(a, inj->armed(Ctx(step, 1))) << "same (seed, fault, step, rank), same draw";
    hits += a;
  }
  EXPECT_GT(hits, 120);
  EXPECT_LT(hits, 280);
}

// --- element choice ----------------------------------------------------------------------------

TEST_F(InjectorTest, ElementChoiceSameAcrossRanksDifferentAcrossSteps) {
  auto inj = Make(
      "kind = \"tensor\"\ntarget = \"gradient:head.weight\"\nranks = \"all\"\nstep = 3\n"
      "repeat = 2\ncount = 5\n");
  auto hit = [&](int64_t step, int rank) {
    NamedTensors grads = {{"head.weight", torch::zeros({40, 25})}};
    auto ctx = Ctx(step, rank);
    inj->on_gradients(ctx, grads);
    return NanIndices(grads[0].second);
  };
  const auto r0 = hit(3, 0);
  const auto r1 = hit(3, 1);
  const auto r3 = hit(3, 3);
  ASSERT_EQ(r0.size(), 5u);
  EXPECT_EQ(r0, r1);
  EXPECT_EQ(r0, r3);
  const auto next = hit(4, 0);
  ASSERT_EQ(next.size(), 5u);
  EXPECT_NE(r0, next);
}

TEST_F(InjectorTest, ElementChoiceDependsOnSeed) {
  auto pick = [&](uint64_t seed) {
    auto inj =
        Make("kind = \"tensor\"\ntarget = \"gradient:head.weight\"\nstep = 0\ncount = 4\n", seed);
    NamedTensors grads = {{"head.weight", torch::zeros({1000})}};
    auto ctx = Ctx(0, 0);
    inj->on_gradients(ctx, grads);
    return NanIndices(grads[0].second);
  };
  EXPECT_EQ(pick(1), pick(1));
  EXPECT_NE(pick(1), pick(2));
}

// --- tensor ------------------------------------------------------------------------------------

TEST_F(InjectorTest, TensorNanOnGradientHitsExactlyCountElements) {
  auto inj = Make(
      "kind = \"tensor\"\ntarget = \"gradient:head.weight\"\nvalue = \"nan\"\ncount = 3\n"
      "ranks = [1]\nstep = 2\n");
  NamedTensors grads = {{"layers.0.linear.weight", torch::ones({6, 4})},
                        {"head.weight", torch::ones({5, 6})},
                        {"head.bias", torch::ones({5})}};
  auto ctx = Ctx(2, 1);
  inj->on_gradients(ctx, grads);
  EXPECT_EQ(NanIndices(grads[1].second).size(), 3u);
  EXPECT_EQ(torch::isfinite(grads[1].second).sum().item<int64_t>(), 30 - 3);
  EXPECT_TRUE(torch::equal(grads[0].second, torch::ones({6, 4})));
  EXPECT_TRUE(torch::equal(grads[2].second, torch::ones({5})));
  ASSERT_EQ(fired_.size(), 1u);
  EXPECT_EQ(fired_[0].fault, 0);
  EXPECT_EQ(fired_[0].target, "gradient:head.weight");
  EXPECT_EQ(fired_[0].detail["elements"], 3);

  // Not armed: wrong rank, wrong step. Nothing changes, nothing is logged.
  NamedTensors clean = {{"head.weight", torch::ones({5, 6})}};
  auto c0 = Ctx(2, 0);
  auto c3 = Ctx(3, 1);
  inj->on_gradients(c0, clean);
  inj->on_gradients(c3, clean);
  EXPECT_TRUE(torch::equal(clean[0].second, torch::ones({5, 6})));
  EXPECT_EQ(fired_.size(), 1u);
}

TEST_F(InjectorTest, TensorGradientIgnoresOtherHooks) {
  auto inj = Make("kind = \"tensor\"\ntarget = \"gradient:head.weight\"\nstep = 0\n");
  NamedTensors params = {{"head.weight", torch::ones({3, 3})}};
  auto ctx = Ctx(0, 0);
  inj->on_parameters(ctx, params);
  auto act = torch::ones({2, 3});
  auto out = inj->on_activation(ctx, "head", act);
  EXPECT_TRUE(torch::equal(params[0].second, torch::ones({3, 3})));
  EXPECT_TRUE(torch::equal(out, torch::ones({2, 3})));
  EXPECT_TRUE(fired_.empty());
}

TEST_F(InjectorTest, TensorWildcardHitsEveryMatch) {
  auto inj = Make(
      "kind = \"tensor\"\ntarget = \"gradient:layers.*.linear.weight\"\nvalue = \"inf\"\n"
      "step = 0\n");
  NamedTensors grads = {{"layers.0.linear.weight", torch::zeros({4, 4})},
                        {"layers.0.linear.bias", torch::zeros({4, 4})},
                        {"layers.1.linear.weight", torch::zeros({4, 4})}};
  auto ctx = Ctx(0, 0);
  inj->on_gradients(ctx, grads);
  EXPECT_EQ(torch::isinf(grads[0].second).sum().item<int64_t>(), 1);
  EXPECT_EQ(torch::isinf(grads[1].second).sum().item<int64_t>(), 0);
  EXPECT_EQ(torch::isinf(grads[2].second).sum().item<int64_t>(), 1);
  ASSERT_EQ(fired_.size(), 2u);
  EXPECT_EQ(fired_[0].target, "gradient:layers.0.linear.weight");
  EXPECT_EQ(fired_[1].target, "gradient:layers.1.linear.weight");
}

TEST_F(InjectorTest, TensorFactorMultipliesParameters) {
  auto inj = Make(
      "kind = \"tensor\"\ntarget = \"parameter:layers.0.linear.weight\"\nfactor = 10.0\n"
      "count = 2\nstep = 1\n");
  auto before = torch::arange(1, 21, torch::kFloat).view({4, 5});
  NamedTensors params = {{"layers.0.linear.weight", before.clone()}};
  auto ctx = Ctx(1, 0);
  inj->on_parameters(ctx, params);
  auto after = params[0].second;
  auto ratio = (after / before).view({-1});
  int64_t scaled = 0;
  for (int64_t i = 0; i < ratio.numel(); ++i) {
    const float r = ratio[i].item<float>();
    if (r == 1.0f) continue;
    EXPECT_FLOAT_EQ(r, 10.0f) << "element " << i;
    ++scaled;
  }
  EXPECT_EQ(scaled, 2);
  ASSERT_EQ(fired_.size(), 1u);
  EXPECT_EQ(fired_[0].target, "parameter:layers.0.linear.weight");
}

TEST_F(InjectorTest, TensorFractionHitsShareOfElements) {
  auto inj =
      Make("kind = \"tensor\"\ntarget = \"gradient:head.weight\"\nfraction = 0.25\nstep = 0\n");
  NamedTensors grads = {{"head.weight", torch::zeros({40})}};
  auto ctx = Ctx(0, 0);
  inj->on_gradients(ctx, grads);
  EXPECT_EQ(NanIndices(grads[0].second).size(), 10u);
}

TEST_F(InjectorTest, TensorActivationChangesOnlyChosenElements) {
  auto inj = Make(
      "kind = \"tensor\"\ntarget = \"activation:layers.1\"\nvalue = 7.0\ncount = 3\n"
      "ranks = [2]\nstep = 0\n");
  auto x = torch::randn({4, 8}).requires_grad_(true);
  auto out = x * 2;
  auto ctx = Ctx(0, 2);
  // Another module (a prefix-sharing name) is untouched and the very same tensor comes back.
  auto other = inj->on_activation(ctx, "layers.10", out);
  EXPECT_TRUE(other.is_same(out));
  EXPECT_TRUE(fired_.empty());

  auto hit = inj->on_activation(ctx, "layers.1", out);
  ASSERT_EQ(fired_.size(), 1u);
  EXPECT_EQ(fired_[0].target, "activation:layers.1");
  EXPECT_EQ(hit.sizes(), out.sizes());
  auto changed = (hit != out).view({-1});
  EXPECT_EQ(changed.sum().item<int64_t>(), 3);
  auto flat_hit = hit.detach().view({-1});
  for (int64_t i = 0; i < changed.numel(); ++i) {
    if (changed[i].item<bool>()) EXPECT_FLOAT_EQ(flat_hit[i].item<float>(), 7.0f);
  }
  // The input itself is not modified, and autograd still flows through the untouched elements.
  EXPECT_TRUE(torch::equal(out, x * 2));
  hit.sum().backward();
  auto g = x.grad().view({-1});
  for (int64_t i = 0; i < g.numel(); ++i) {
    EXPECT_FLOAT_EQ(g[i].item<float>(), changed[i].item<bool>() ? 0.0f : 2.0f) << i;
  }
}

TEST_F(InjectorTest, TensorLossTargetMakesLossNonFinite) {
  auto inj = Make("kind = \"tensor\"\ntarget = \"loss\"\nvalue = \"inf\"\nstep = 0\n");
  auto w = torch::ones({3}).requires_grad_(true);
  auto loss = (w * 2).sum();
  auto ctx = Ctx(0, 0);
  auto out = inj->on_loss(ctx, loss);
  EXPECT_TRUE(std::isinf(out.item<float>()));
  ASSERT_EQ(fired_.size(), 1u);
  EXPECT_EQ(fired_[0].target, "loss");
  auto later = Ctx(1, 0);
  auto clean = inj->on_loss(later, loss);
  EXPECT_FLOAT_EQ(clean.item<float>(), 6.0f);
}

// --- bitflip -----------------------------------------------------------------------------------

TEST_F(InjectorTest, BitflipFlipsExactlyBit30ByDefault) {
  auto inj = Make("kind = \"bitflip\"\ntarget = \"gradient:head.weight\"\ncount = 2\nstep = 0\n");
  auto before = torch::linspace(0.1, 3.0, 24).view({4, 6});
  NamedTensors grads = {{"head.weight", before.clone()}};
  auto ctx = Ctx(0, 0);
  inj->on_gradients(ctx, grads);
  auto b = before.view({-1});
  auto a = grads[0].second.contiguous().view({-1});
  int flipped = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const uint32_t diff = Bits(a[i].item<float>()) ^ Bits(b[i].item<float>());
    if (diff == 0) continue;
    EXPECT_EQ(diff, uint32_t(1) << 30) << "element " << i;
    ++flipped;
  }
  EXPECT_EQ(flipped, 2);
  ASSERT_EQ(fired_.size(), 1u);
  EXPECT_EQ(fired_[0].detail["bit"], 30);
}

TEST_F(InjectorTest, BitflipOtherBitAndSignBit) {
  for (int bit : {0, 31}) {
    auto inj =
        Make("kind = \"bitflip\"\ntarget = \"parameter:head.bias\"\nbit = " + std::to_string(bit) +
             "\nstep = 0\n");
    auto before = torch::full({10}, 1.25f);
    NamedTensors params = {{"head.bias", before.clone()}};
    auto ctx = Ctx(0, 0);
    inj->on_parameters(ctx, params);
    int flipped = 0;
    for (int64_t i = 0; i < 10; ++i) {
      const uint32_t diff = Bits(params[0].second[i].item<float>()) ^ Bits(1.25f);
      if (diff == 0) continue;
      EXPECT_EQ(diff, uint32_t(1) << bit);
      ++flipped;
    }
    EXPECT_EQ(flipped, 1) << "bit " << bit;
  }
}

// --- lr ----------------------------------------------------------------------------------------

TEST_F(InjectorTest, LrFactorOnlyOnArmedSteps) {
  auto inj = Make("kind = \"lr\"\nfactor = 1000.0\nranks = [0]\nstep = 3\nrepeat = 2\n");
  for (int64_t step = 0; step < 8; ++step) {
    auto c0 = Ctx(step, 0);
    auto c1 = Ctx(step, 1);
    const double want = (step == 3 || step == 4) ? 1000.0 : 1.0;
    EXPECT_DOUBLE_EQ(inj->lr_factor(c0), want) << "step " << step;
    EXPECT_DOUBLE_EQ(inj->lr_factor(c1), 1.0) << "rank 1 is not hit";
  }
  ASSERT_EQ(fired_.size(), 2u);
  EXPECT_EQ(fired_[0].target, "lr");
  EXPECT_DOUBLE_EQ(fired_[0].detail["factor"].get<double>(), 1000.0);
}

TEST_F(InjectorTest, NonLrKindsLeaveLrAlone) {
  auto inj = Make("kind = \"tensor\"\ntarget = \"gradient:head.weight\"\nstep = 0\n");
  auto ctx = Ctx(0, 0);
  EXPECT_DOUBLE_EQ(inj->lr_factor(ctx), 1.0);
}

// --- batch -------------------------------------------------------------------------------------

TEST_F(InjectorTest, BatchConstantColumn) {
  auto inj = Make("kind = \"batch\"\nmode = \"constant_column\"\ncolumn = 2\nstep = 1\n");
  harness::Batch b;
  b.inputs = torch::randn({16, 5});
  b.labels = torch::randint(3, {16}, torch::kLong);
  const auto before = b.inputs.clone();
  auto ctx = Ctx(1, 0);
  inj->on_batch(ctx, b);
  auto col = b.inputs.select(1, 2);
  EXPECT_TRUE(torch::all(col == before[0][2]).item<bool>());
  EXPECT_LT(col.std().item<float>(), 1e-6f);
  for (int c : {0, 1, 3, 4}) {
    EXPECT_TRUE(torch::equal(b.inputs.select(1, c), before.select(1, c))) << "column " << c;
  }
  ASSERT_EQ(fired_.size(), 1u);
  EXPECT_EQ(fired_[0].target, "inputs");
}

TEST_F(InjectorTest, BatchLabelsValue) {
  // Float labels need a regression loss (the loader rejects a float value for class indices).
  auto inj = Make("kind = \"batch\"\nfield = \"labels\"\nvalue = \"nan\"\ncount = 2\nstep = 0\n", 7,
                  "[workload]\nloss = \"mse\"\n");
  harness::Batch b;
  b.inputs = torch::randn({8, 3});
  b.labels = torch::zeros({8, 4});
  const auto inputs = b.inputs.clone();
  auto ctx = Ctx(0, 0);
  inj->on_batch(ctx, b);
  EXPECT_EQ(NanIndices(b.labels).size(), 2u);
  EXPECT_TRUE(torch::equal(b.inputs, inputs));
  ASSERT_EQ(fired_.size(), 1u);
  EXPECT_EQ(fired_[0].target, "labels");
}

TEST_F(InjectorTest, BatchNotArmedLeavesBatch) {
  auto inj = Make("kind = \"batch\"\nmode = \"constant_column\"\ncolumn = 0\nstep = 1\n");
  harness::Batch b;
  b.inputs = torch::randn({6, 2});
  const auto before = b.inputs.clone();
  auto ctx = Ctx(0, 0);
  inj->on_batch(ctx, b);
  EXPECT_TRUE(torch::equal(b.inputs, before));
  EXPECT_TRUE(fired_.empty());
}

// --- comm --------------------------------------------------------------------------------------

TEST_F(InjectorTest, CommWritesNanIntoFp32SendBuffer) {
  auto inj = Make("kind = \"comm\"\ncount = 4\nranks = [3]\nstep = 5\n");
  std::vector<float> buf(200, 0.5f);
  auto ctx = Ctx(5, 3);
  inj->on_send_buffer(ctx, buf.data(), buf.size(), harness::WireType::kFp32);
  int nans = 0, untouched = 0;
  for (float v : buf) {
    if (std::isnan(v))
      ++nans;
    else if (v == 0.5f)
      ++untouched;
  }
  EXPECT_EQ(nans, 4);
  EXPECT_EQ(untouched, 196);
  ASSERT_EQ(fired_.size(), 1u);
  EXPECT_EQ(fired_[0].target, "grad_allreduce");
  EXPECT_EQ(fired_[0].detail["elements"], 4);

  // Another rank's buffer stays clean.
  std::vector<float> other(200, 0.5f);
  auto c0 = Ctx(5, 0);
  inj->on_send_buffer(c0, other.data(), other.size(), harness::WireType::kFp32);
  EXPECT_EQ(other, std::vector<float>(200, 0.5f));
  EXPECT_EQ(fired_.size(), 1u);
}

TEST_F(InjectorTest, CommBitFlipsFp32Word) {
  auto inj = Make("kind = \"comm\"\nbit = 30\nstep = 0\n");
  std::vector<float> buf(50, 1.5f);
  auto ctx = Ctx(0, 0);
  inj->on_send_buffer(ctx, buf.data(), buf.size(), harness::WireType::kFp32);
  int flipped = 0;
  for (float v : buf) {
    const uint32_t diff = Bits(v) ^ Bits(1.5f);
    if (diff == 0) continue;
    EXPECT_EQ(diff, uint32_t(1) << 30);
    ++flipped;
  }
  EXPECT_EQ(flipped, 1);
}

}  // namespace
}  // namespace nanchaos::inject
