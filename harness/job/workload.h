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

/// Moves a batch made (and faulted) on the CPU to the rank's device; no-op on the CPU.
void to_device(Batch& b, torch::Device device);

/// The loss on the fixed held-out batch (make_batch(0, -1)) in eval mode, without probes; the
/// module is back in train mode after.
double eval_loss(Workload& w, torch::Device device);

/// In-place SUM all-reduce of `n` fp32 values at `data` across the ranks.
using AllReduceFloats = std::function<void(float* data, size_t n)>;

/// DDP's default (broadcast_buffers=True): rank 0's floating-point buffers (BatchNorm running
/// statistics) overwrite every rank's at step start, as one SUM all-reduce to which only rank 0
/// contributes (x + 0 == x, NaN stays NaN). No-op without buffers or with one rank.
void broadcast_buffers(Workload& w, int rank, int world, const AllReduceFloats& sum);

/// BatchNorm running statistics are the only state a forward pass changes before the update
/// (parameters and optimizer state change only in the update, after every check): a copy of
/// every buffer for the replay, and its restore.
std::vector<torch::Tensor> clone_buffers(Workload& w);
void restore_buffers(Workload& w, const std::vector<torch::Tensor>& copy);

/// The [workload] optimizer over `params` (forward order) at the base learning rate: SGD, Adam,
/// or AdamW with weight_decay 0.01 (LibTorch's optimizers, PyTorch's defaults otherwise).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& params,
                                                        const WorkloadConfig& w);

/// The learning rate of `step` before lr faults and lr_backoff: linear warmup over
/// warmup_steps (step + 1) / warmup_steps, then constant or cosine decay to 0 at [job].steps
/// (as torch.optim.lr_scheduler's CosineAnnealingLR with T_max = steps - warmup).
double scheduled_lr(const Scenario& s, int64_t step);

/// `nanchaos targets`: module and parameter names for the configured sizes.
struct TargetList {
  std::vector<std::string> modules;
  std::vector<std::string> parameters;
};
TargetList list_targets(const Scenario& s);

}  // namespace nanchaos::harness
