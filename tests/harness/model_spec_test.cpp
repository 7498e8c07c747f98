// The torch-free model description (harness/scenario/model_spec.h) against the real workloads: for
// several configurations the real model is built and its forward probes, named parameters (with
// shapes) and buffers are compared with builtin_model(), and the closed-form counts of
// host_limits.h with the summed shapes. If a workload changes a name or a shape, these fail.
#include "harness/scenario/model_spec.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "harness/controller/host_limits.h"
#include "harness/job/workload.h"
#include "harness/scenario/scenario.h"

namespace nanchaos::harness {
namespace {

Scenario Load(const std::string& workload, const std::string& keys) {
  return load_scenario_string("[scenario]\nname = \"m\"\n[job]\nworkload = \"" + workload +
                                  "\"\nsteps = 2\n[workload]\n" + keys,
                              "m.toml");
}

std::vector<TensorShape> Shapes(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  std::vector<TensorShape> out;
  for (const auto& [name, t] : named) out.push_back({name, t.sizes().vec()});
  return out;
}

void ExpectSame(const std::vector<TensorShape>& want, const std::vector<TensorShape>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].name, got[i].name) << "#" << i;
    EXPECT_EQ(want[i].shape, got[i].shape) << want[i].name;
  }
}

struct Config {
  const char* workload;
  const char* keys;
};

class ModelSpecMatchesWorkload : public ::testing::TestWithParam<Config> {};

TEST_P(ModelSpecMatchesWorkload, NamesShapesAndProbeOrder) {
  torch::set_num_threads(1);
  const Scenario s = Load(GetParam().workload, GetParam().keys);
  const ModelSpec spec = builtin_model(s.job.workload, s.workload);
  auto w = make_workload(s);

  // Modules: the names the forward pass really probes, in order (not the workload's own list).
  std::vector<std::string> probed;
  double probed_numel = 0;
  Batch b = w->make_batch(0, 0);
  w->prepare(b);
  torch::NoGradGuard no_grad;
  w->forward(b, [&](const std::string& name, torch::Tensor t) {
    probed.push_back(name);
    probed_numel += double(t.numel());
    return t;
  });
  EXPECT_EQ(spec.modules, probed);
  EXPECT_EQ(spec.modules, w->module_names());
  ExpectSame(spec.parameters, Shapes(w->parameters()));
  ExpectSame(spec.buffers, Shapes(w->buffers()));

  // The closed forms of the memory estimate equal the sums over the listed shapes.
  double params = 0, buffers = 0;
  for (const auto& p : spec.parameters) params += p.numel();
  for (const auto& p : spec.buffers) buffers += p.numel();
  const ParamCount c = count_parameters(s.job.workload, s.workload);
  EXPECT_EQ(c.parameters, params);
  EXPECT_EQ(c.buffers, buffers);
  // Activations: at least every probed output (the estimate adds the unprobed intermediates).
  const double acts = count_activations(s.job.workload, s.workload);
  EXPECT_GE(acts, probed_numel);
  if (s.job.workload == WorkloadKind::kMlp) {
    // mlp exactly: the probed outputs, the inputs and the loss's softmax (logits-sized).
    EXPECT_EQ(acts, probed_numel + double(b.inputs.numel()) +
                        double(s.workload.batch_size * s.workload.classes));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Workloads, ModelSpecMatchesWorkload,
    ::testing::Values(
        Config{"mlp", "layers = 1\nhidden = 5\nfeatures = 3\nclasses = 2\nbatch_size = 4\n"},
        Config{"mlp", "layers = 3\nhidden = 9\nfeatures = 7\nclasses = 5\nnorm = \"batchnorm\"\n"},
        Config{"mlp", "layers = 2\nhidden = 6\nnorm = \"layernorm\"\nloss = \"mse\"\n"},
        Config{"mlp", ""},
        Config{"transformer",
               "layers = 1\nhidden = 8\nheads = 2\nseq_len = 5\nvocab = 11\nbatch_size = 3\n"},
        Config{"transformer", "layers = 3\nhidden = 12\nheads = 3\nseq_len = 4\nvocab = 7\n"}));

TEST(ModelSpec, ExternalHasNoModelAndHugeModelsAreNotListed) {
  EXPECT_THROW(builtin_model(WorkloadKind::kExternal, WorkloadConfig{}), std::logic_error);
  Scenario s = Load("mlp", "layers = 4097\n");
  EXPECT_FALSE(listed_model(s).has_value());
  s = Load("mlp", "layers = 4096\n");
  ASSERT_TRUE(listed_model(s).has_value());
  EXPECT_EQ(listed_model(s)->modules.size(), size_t(2 * 4096 + 1));
}

}  // namespace
}  // namespace nanchaos::harness
