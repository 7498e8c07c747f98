// Workloads: the contract names (docs/scenario-format.md), deterministic batches, probes in forward
// order, the classic numeric traps (normalize_inputs, masked_mse, empty mask) and learnability.
#include "harness/job/workload.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/scenario/scenario.h"
#include "harness/tensor/torch_compat.h"

namespace nanchaos::harness {
namespace {

Scenario Load(const std::string& workload, const std::string& keys, uint64_t seed = 3) {
  const std::string text = "[scenario]\nname = \"w\"\nseed = " + std::to_string(seed) +
                           "\n[job]\nworkload = \"" + workload +
                           "\"\nsteps = 5\nranks = 2\n[workload]\n" + keys;
  return load_scenario_string(text, "w.toml");
}

std::vector<std::string> ParamNames(Workload& w) {
  std::vector<std::string> out;
  for (auto& [name, p] : w.parameters()) out.push_back(name);
  return out;
}

const ProbeFn kIdentity = [](const std::string&, torch::Tensor t) { return t; };

class WorkloadTest : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

const char* kSmallMlp = "hidden = 8\nlayers = 2\nfeatures = 6\nclasses = 3\nbatch_size = 16\n";
const char* kSmallGpt =
    "hidden = 8\nlayers = 2\nheads = 2\nseq_len = 5\nvocab = 11\nbatch_size = 4\n";

// --- names -------------------------------------------------------------------------------------

TEST_F(WorkloadTest, MlpLayerNormNames) {
  auto w = make_workload(Load("mlp", std::string(kSmallMlp) + "norm = \"layernorm\"\n"));
  EXPECT_EQ(ParamNames(*w),
            (std::vector<std::string>{
                "layers.0.linear.weight", "layers.0.linear.bias", "layers.0.norm.weight",
                "layers.0.norm.bias", "layers.1.linear.weight", "layers.1.linear.bias",
                "layers.1.norm.weight", "layers.1.norm.bias", "head.weight", "head.bias"}));
  EXPECT_EQ(w->module_names(),
            (std::vector<std::string>{"layers.0.linear", "layers.0.norm", "layers.0",
                                      "layers.1.linear", "layers.1.norm", "layers.1", "head"}));
  EXPECT_TRUE(w->buffers().empty());
}

TEST_F(WorkloadTest, MlpWithoutNormNames) {
  auto w = make_workload(Load("mlp", kSmallMlp));
  EXPECT_EQ(ParamNames(*w),
            (std::vector<std::string>{"layers.0.linear.weight", "layers.0.linear.bias",
                                      "layers.1.linear.weight", "layers.1.linear.bias",
                                      "head.weight", "head.bias"}));
  EXPECT_EQ(w->module_names(), (std::vector<std::string>{"layers.0.linear", "layers.0",
                                                         "layers.1.linear", "layers.1", "head"}));
}

TEST_F(WorkloadTest, MlpBatchNormHasRunningStatistics) {
  auto w = make_workload(Load("mlp", std::string(kSmallMlp) + "norm = \"batchnorm\"\n"));
  const auto names = ParamNames(*w);
  EXPECT_EQ(names.at(2), "layers.0.norm.weight");
  EXPECT_EQ(names.at(3), "layers.0.norm.bias");
  std::vector<std::string> buffers;
  for (auto& [name, b] : w->buffers()) buffers.push_back(name);
  EXPECT_NE(std::find(buffers.begin(), buffers.end(), "layers.0.norm.running_mean"), buffers.end());
  EXPECT_NE(std::find(buffers.begin(), buffers.end(), "layers.1.norm.running_var"), buffers.end());
}

TEST_F(WorkloadTest, MlpShapes) {
  auto w = make_workload(Load("mlp", kSmallMlp));
  auto params = w->parameters();
  EXPECT_EQ(params[0].second.sizes(), torch::IntArrayRef({8, 6}));  // layers.0.linear.weight
  EXPECT_EQ(params[4].second.sizes(), torch::IntArrayRef({3, 8}));  // head.weight
  Batch b = w->make_batch(0, 0);
  EXPECT_EQ(b.inputs.sizes(), torch::IntArrayRef({16, 6}));
  EXPECT_EQ(b.labels.sizes(), torch::IntArrayRef({16}));
  EXPECT_EQ(b.labels.scalar_type(), torch::kLong);
  EXPECT_FALSE(b.mask.defined());
  EXPECT_EQ(w->forward(b, kIdentity).sizes(), torch::IntArrayRef({16, 3}));
}

TEST_F(WorkloadTest, TransformerNames) {
  auto w = make_workload(Load("transformer", kSmallGpt));
  std::vector<std::string> want = {"embed.weight", "pos.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "blocks." + std::to_string(i);
    for (const char* s : {".ln1.weight", ".ln1.bias", ".attn.qkv.weight", ".attn.qkv.bias",
                          ".attn.proj.weight", ".attn.proj.bias", ".ln2.weight", ".ln2.bias",
                          ".mlp.fc1.weight", ".mlp.fc1.bias", ".mlp.fc2.weight", ".mlp.fc2.bias"}) {
      want.push_back(p + s);
    }
  }
  for (const char* s : {"ln_f.weight", "ln_f.bias", "head.weight", "head.bias"}) want.push_back(s);
  EXPECT_EQ(ParamNames(*w), want);

  std::vector<std::string> mods = {"embed", "pos"};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "blocks." + std::to_string(i);
    for (const char* s :
         {".ln1", ".attn.qkv", ".attn.proj", ".attn", ".ln2", ".mlp.fc1", ".mlp.fc2", ".mlp", ""}) {
      mods.push_back(p + s);
    }
  }
  mods.push_back("ln_f");
  mods.push_back("head");
  EXPECT_EQ(w->module_names(), mods);
}

TEST_F(WorkloadTest, ListTargetsMatchesWorkload) {
  const Scenario s = Load("transformer", kSmallGpt);
  auto w = make_workload(s);
  const TargetList t = list_targets(s);
  EXPECT_EQ(t.modules, w->module_names());
  EXPECT_EQ(t.parameters, ParamNames(*w));
}

TEST_F(WorkloadTest, TransformerShapesAndNextTokenLabels) {
  auto w = make_workload(Load("transformer", kSmallGpt));
  Batch b = w->make_batch(2, 1);
  EXPECT_EQ(b.inputs.sizes(), torch::IntArrayRef({4, 5}));
  EXPECT_EQ(b.labels.sizes(), torch::IntArrayRef({4, 5}));
  EXPECT_EQ(b.mask.sizes(), torch::IntArrayRef({4, 5}));
  EXPECT_TRUE(torch::all(b.mask == 1).item<bool>());
  // labels are the inputs shifted by one token
  EXPECT_TRUE(torch::equal(b.labels.narrow(1, 0, 4), b.inputs.narrow(1, 1, 4)));
  EXPECT_TRUE(torch::all(b.inputs >= 0).item<bool>());
  EXPECT_TRUE(torch::all(b.inputs < 11).item<bool>());
  EXPECT_EQ(w->forward(b, kIdentity).sizes(), torch::IntArrayRef({4, 5, 11}));
}

// --- batches -----------------------------------------------------------------------------------

void ExpectBatchesDeterministic(Workload& w) {
  Batch a = w.make_batch(3, 0), a2 = w.make_batch(3, 0);
  Batch other_rank = w.make_batch(3, 1), other_step = w.make_batch(4, 0);
  EXPECT_TRUE(torch::equal(a.inputs, a2.inputs));
  EXPECT_TRUE(torch::equal(a.labels, a2.labels));
  EXPECT_FALSE(torch::equal(a.inputs, other_rank.inputs));
  EXPECT_FALSE(torch::equal(a.inputs, other_step.inputs));
}

TEST_F(WorkloadTest, MlpBatchesDeterministicPerStepAndRank) {
  auto w = make_workload(Load("mlp", kSmallMlp));
  ExpectBatchesDeterministic(*w);
}

TEST_F(WorkloadTest, TransformerBatchesDeterministicPerStepAndRank) {
  auto w = make_workload(Load("transformer", kSmallGpt));
  ExpectBatchesDeterministic(*w);
}

TEST_F(WorkloadTest, EvalBatchIdenticalAcrossInstances) {
  for (const char* kind : {"mlp", "transformer"}) {
    const Scenario s = Load(kind, std::string(kind) == "mlp" ? kSmallMlp : kSmallGpt);
    auto w1 = make_workload(s);
    auto w2 = make_workload(s);
    Batch e1 = w1->make_batch(0, -1), e2 = w2->make_batch(0, -1);
    EXPECT_TRUE(torch::equal(e1.inputs, e2.inputs)) << kind;
    EXPECT_TRUE(torch::equal(e1.labels, e2.labels)) << kind;
    EXPECT_FALSE(torch::equal(e1.inputs, w1->make_batch(0, 0).inputs)) << kind;
    // Same seed, same initialization: identical replicas.
    auto p1 = w1->parameters(), p2 = w2->parameters();
    ASSERT_EQ(p1.size(), p2.size());
    for (size_t i = 0; i < p1.size(); ++i) {
      EXPECT_TRUE(torch::equal(p1[i].second, p2[i].second)) << kind << " " << p1[i].first;
    }
  }
}

TEST_F(WorkloadTest, SeedChangesData) {
  auto a = make_workload(Load("mlp", kSmallMlp, 1));
  auto b = make_workload(Load("mlp", kSmallMlp, 2));
  EXPECT_FALSE(torch::equal(a->make_batch(0, 0).inputs, b->make_batch(0, 0).inputs));
}

// --- probes ------------------------------------------------------------------------------------

void ExpectProbesInForwardOrder(Workload& w) {
  std::vector<std::string> seen;
  ProbeFn record = [&](const std::string& name, torch::Tensor t) {
    seen.push_back(name);
    return t;
  };
  Batch b = w.make_batch(0, 0);
  w.prepare(b);
  w.forward(b, record);
  EXPECT_EQ(seen, w.module_names());
}

TEST_F(WorkloadTest, MlpProbeOncePerModuleInForwardOrder) {
  auto w = make_workload(Load("mlp", std::string(kSmallMlp) + "norm = \"batchnorm\"\n"));
  ExpectProbesInForwardOrder(*w);
}

TEST_F(WorkloadTest, TransformerProbeOncePerModuleInForwardOrder) {
  auto w = make_workload(Load("transformer", kSmallGpt));
  ExpectProbesInForwardOrder(*w);
}

TEST_F(WorkloadTest, ProbeReturnValueReplacesOutput) {
  auto w = make_workload(Load("mlp", kSmallMlp));
  Batch b = w->make_batch(0, 0);
  ProbeFn poison = [](const std::string& name, torch::Tensor t) {
    if (name != "layers.1.linear") return t;
    return t.detach().clone().fill_(std::numeric_limits<float>::quiet_NaN());
  };
  auto logits = w->forward(b, poison);
  EXPECT_TRUE(torch::isnan(logits).all().item<bool>());
  EXPECT_TRUE(torch::isfinite(w->forward(b, kIdentity)).all().item<bool>());
}

// --- numeric traps -----------------------------------------------------------------------------

TEST_F(WorkloadTest, NormalizeInputsConstantColumnGivesNan) {
  auto w = make_workload(Load("mlp", std::string(kSmallMlp) + "normalize_inputs = true\n"));
  Batch b = w->make_batch(1, 0);
  b.inputs.select(1, 2).fill_(b.inputs[0][2].item<float>());
  w->prepare(b);
  EXPECT_TRUE(torch::isnan(b.inputs.select(1, 2)).all().item<bool>());
  for (int c : {0, 1, 3, 4, 5}) {
    EXPECT_TRUE(torch::isfinite(b.inputs.select(1, c)).all().item<bool>()) << c;
  }
  // Other columns are standardized: mean 0, std 1.
  EXPECT_NEAR(b.inputs.select(1, 0).mean().item<float>(), 0.0f, 1e-5);
  EXPECT_NEAR(b.inputs.select(1, 0).std().item<float>(), 1.0f, 1e-4);
}

TEST_F(WorkloadTest, NormalizeInputsOffLeavesBatch) {
  auto w = make_workload(Load("mlp", kSmallMlp));
  Batch b = w->make_batch(1, 0);
  const auto before = b.inputs.clone();
  w->prepare(b);
  EXPECT_TRUE(torch::equal(b.inputs, before));
}

TEST_F(WorkloadTest, MaskedMseNanTargetFiniteLossNanGradient) {
  auto w = make_workload(Load("mlp", std::string(kSmallMlp) + "loss = \"masked_mse\"\n"));
  Batch b = w->make_batch(0, 0);
  ASSERT_EQ(b.labels.sizes(), torch::IntArrayRef({16, 3}));
  EXPECT_EQ(b.labels.scalar_type(), torch::kFloat);
  b.labels[3][1] = std::numeric_limits<float>::quiet_NaN();
  auto loss = w->loss(w->forward(b, kIdentity), b);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  loss.backward();
  bool any_nan_grad = false;
  for (auto& [name, p] : w->parameters()) {
    if (p.grad().defined() && torch::isnan(p.grad()).any().item<bool>()) any_nan_grad = true;
  }
  EXPECT_TRUE(any_nan_grad);
  auto head_b = w->parameters().back().second;
  ASSERT_EQ(w->parameters().back().first, "head.bias");
  EXPECT_TRUE(std::isnan(head_b.grad()[1].item<float>()));
}

TEST_F(WorkloadTest, MaskedMseCleanTargetsFiniteGradient) {
  auto w = make_workload(Load("mlp", std::string(kSmallMlp) + "loss = \"masked_mse\"\n"));
  Batch b = w->make_batch(0, 0);
  auto loss = w->loss(w->forward(b, kIdentity), b);
  loss.backward();
  for (auto& [name, p] : w->parameters()) {
    EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>()) << name;
  }
}

TEST_F(WorkloadTest, NaiveLogSoftmaxOverflowsOnExtremeLogits) {
  auto w = make_workload(Load("mlp", std::string(kSmallMlp) + "loss = \"naive_log_softmax\"\n"));
  auto w_ce = make_workload(Load("mlp", kSmallMlp));
  Batch b = w->make_batch(0, 0);
  auto logits = torch::zeros({16, 3});
  logits.select(1, 0).fill_(1000.0f);
  b.labels.fill_(1);
  EXPECT_TRUE(std::isinf(w->loss(logits, b).item<float>()));
  EXPECT_TRUE(std::isfinite(w_ce->loss(logits, b).item<float>()));
}

TEST_F(WorkloadTest, TransformerEmptyMaskGivesNanLoss) {
  auto w = make_workload(Load("transformer", kSmallGpt));
  Batch b = w->make_batch(0, 0);
  auto logits = w->forward(b, kIdentity);
  EXPECT_TRUE(std::isfinite(w->loss(logits, b).item<double>()));
  b.mask.zero_();
  EXPECT_TRUE(std::isnan(w->loss(logits, b).item<double>()));
}

// --- learnable ---------------------------------------------------------------------------------

// Single-process training on the rank-0 stream; returns {loss at step 0, loss at step `steps`}
// on the training batches and the eval loss before and after.
struct Curve {
  double first, last, eval_before, eval_after;
};

Curve Train(Workload& w, torch::optim::Optimizer& opt, int steps) {
  auto eval = [&] {
    torch::NoGradGuard ng;
    w.module().eval();
    Batch e = w.make_batch(0, -1);
    w.prepare(e);
    const double l = w.loss(w.forward(e, kIdentity), e).item<double>();
    w.module().train();
    return l;
  };
  Curve c{};
  c.eval_before = eval();
  for (int step = 0; step <= steps; ++step) {
    Batch b = w.make_batch(step, 0);
    w.prepare(b);
    auto loss = w.loss(w.forward(b, kIdentity), b);
    if (step == 0) c.first = loss.item<double>();
    if (step == steps) {
      c.last = loss.item<double>();
      break;
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  c.eval_after = eval();
  return c;
}

std::vector<torch::Tensor> Tensors(Workload& w) {
  std::vector<torch::Tensor> out;
  for (auto& [name, p] : w.parameters()) out.push_back(p);
  return out;
}

TEST_F(WorkloadTest, MlpLearnableWithAdam) {
  auto w = make_workload(
      Load("mlp", "hidden = 32\nlayers = 2\nfeatures = 16\nclasses = 4\nbatch_size = 32\n"));
  torch::optim::Adam opt(Tensors(*w), torch::optim::AdamOptions(1e-2));
  const Curve c = Train(*w, opt, 30);
  EXPECT_LT(c.last, c.first);
  EXPECT_LT(c.eval_after, c.eval_before);
}

TEST_F(WorkloadTest, MlpLearnableWithSgd) {
  auto w =
      make_workload(Load("mlp",
                         "hidden = 32\nlayers = 2\nfeatures = 16\nclasses = 4\nbatch_size = 32\n"
                         "norm = \"layernorm\"\n"));
  torch::optim::SGD opt(Tensors(*w), torch::optim::SGDOptions(0.1));
  const Curve c = Train(*w, opt, 30);
  EXPECT_LT(c.last, c.first);
  EXPECT_LT(c.eval_after, c.eval_before);
}

TEST_F(WorkloadTest, MlpRegressionLearnable) {
  auto w =
      make_workload(Load("mlp",
                         "hidden = 32\nlayers = 2\nfeatures = 16\nclasses = 4\nbatch_size = 32\n"
                         "loss = \"mse\"\n"));
  torch::optim::Adam opt(Tensors(*w), torch::optim::AdamOptions(1e-2));
  const Curve c = Train(*w, opt, 30);
  EXPECT_LT(c.eval_after, c.eval_before);
}

TEST_F(WorkloadTest, TransformerLearnable) {
  auto w = make_workload(
      Load("transformer",
           "hidden = 16\nlayers = 1\nheads = 2\nseq_len = 8\nvocab = 16\nbatch_size = 8\n"));
  torch::optim::Adam opt(Tensors(*w), torch::optim::AdamOptions(1e-2));
  const Curve c = Train(*w, opt, 30);
  EXPECT_LT(c.eval_after, c.eval_before);
}

// Ranks as threads of one process share LibTorch's default CPU generator. Another thread that
// restores its state (as a rank's `sdc` recompute or checkpoint load does, under
// compat::default_generator_mutex()) must not land between a workload's seed and its last draw:
// every build gives the seed's weights. Without the lock around the build, most builds here
// differ (the restorer spins).
TEST_F(WorkloadTest, BuildsGiveTheSeedsWeightsWhileAnotherThreadRestoresTheGenerator) {
  const Scenario s = Load("transformer", "hidden = 16\nheads = 2\nlayers = 2\nvocab = 32\n");
  auto weights = [&] {
    auto w = make_workload(s);
    std::vector<torch::Tensor> out;
    for (auto& [name, p] : w->parameters()) out.push_back(p.detach().clone());
    return out;
  };
  const std::vector<torch::Tensor> reference = weights();
  auto gen = at::detail::getDefaultCPUGenerator();
  torch::Tensor other_state;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    other_state = gen.get_state();
  }
  std::atomic<bool> stop{false};
  std::thread restorer([&] {
    while (!stop) {
      std::lock_guard<std::mutex> ranks(compat::default_generator_mutex());
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(other_state);
    }
  });
  int differ = 0;
  for (int i = 0; i < 30; ++i) {
    const auto w = weights();
    bool same = w.size() == reference.size();
    for (size_t k = 0; same && k < w.size(); ++k) same = torch::equal(w[k], reference[k]);
    differ += !same;
  }
  stop = true;
  restorer.join();
  EXPECT_EQ(differ, 0) << "of 30 builds";
}

}  // namespace
}  // namespace nanchaos::harness
