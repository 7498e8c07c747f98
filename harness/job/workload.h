// Workloads: the models a rank trains (docs/scenario-format.md [job].workload, [workload]).
//
// Module and parameter names are part of the scenario contract and never change:
//   mlp:         layers.I (Linear -> norm -> GELU; layers.I.linear, layers.I.norm), head
//   transformer: embed, pos, blocks.I (ln1, attn (attn.qkv, attn.proj), ln2, mlp (mlp.fc1,
//                mlp.fc2)), ln_f, head
// LibTorch has no forward hooks, so each workload calls `probe(name, output)` at every named
// module's output, in forward order; the returned tensor replaces the output (that is how
// activation faults and probes see and change values).
//
// Data is synthetic, deterministic per (seed, rank, step) and learnable: a clean run's loss falls.
//   mlp:         inputs float32 [batch, features] ~ N(0,1); labels int64 [batch] = argmax of a
//                fixed random teacher x·W* (cross_entropy, naive_log_softmax), or float32
//                [batch, classes] = tanh(x·W*) (mse, masked_mse).
//   transformer: inputs int64 [batch, seq_len] from a fixed affine recurrence mod vocab with 10%
//                random tokens; labels int64 [batch, seq_len] = next token; mask float32
//                [batch, seq_len] (1 = counts in the loss).
// Thread-safety: one rank thread owns a workload.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/scenario/scenario.h"
#include "harness/tensor/batch.h"

namespace nanchaos::harness {

/// Called at each named module's output; returns the (possibly modified) output.
using ProbeFn = std::function<torch::Tensor(const std::string& module, torch::Tensor output)>;

class Workload {
 public:
  virtual ~Workload() = default;
  virtual torch::nn::Module& module() = 0;
  /// The raw batch of `rank` at `step` (before faults and normalization). rank = -1 gives the
  /// fixed held-out evaluation batch, identical on every rank.
  virtual Batch make_batch(int64_t step, int rank) = 0;
  /// Input preprocessing the model sees (normalize_inputs: per-feature batch standardization,
  /// (x - mean) / std, which gives 0/0 = NaN for a constant column, as the classic code does).
  virtual void prepare(Batch& batch) = 0;
  /// Forward pass to the logits, probing each named module.
  virtual torch::Tensor forward(const Batch& batch, const ProbeFn& probe) = 0;
  /// The scalar training loss from logits ([job] loss kind).
  virtual torch::Tensor loss(const torch::Tensor& logits, const Batch& batch) = 0;
  /// Named modules in forward order (the activation targets).
  virtual std::vector<std::string> module_names() const = 0;

  /// Named parameters in forward (registration) order.
  std::vector<std::pair<std::string, torch::Tensor>> parameters();
  /// Named buffers (BatchNorm running statistics), registration order.
  std::vector<std::pair<std::string, torch::Tensor>> buffers();
};

std::unique_ptr<Workload> make_workload(const Scenario& s);

/// `nanchaos targets`: module and parameter names for the configured sizes.
struct TargetList {
  std::vector<std::string> modules;
  std::vector<std::string> parameters;
};
TargetList list_targets(const Scenario& s);

}  // namespace nanchaos::harness
