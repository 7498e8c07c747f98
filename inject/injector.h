// Injector: one fault of a scenario, acting at the step pipeline's hook points (DESIGN.md).
//
// The runner owns the loop and calls every injector at every hook; an injector acts only when
// armed() says this (step, rank) is one it fires on, and reports each actual change through
// FaultContext::fired (which logs an `inject` event: "every fault must be seen to fire").
// Element choice derives from (scenario seed, fault index, step) only, so every hit rank hits the
// same elements; the probability draw derives from (seed, fault index, step, rank).
// Thread-safety: called from the rank's single thread. Hooks must not block (except `hang`).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "harness/common/wire.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/scenario_schema.h"
#include "harness/tensor/batch.h"

namespace nanchaos::inject {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

/// A rank's training state that a `state` fault changes (not a tensor). Pointers are null where
/// the state does not exist: no loss scaler outside fp16, no step counter for SGD.
struct TrainingState {
  double* loss_scale = nullptr;  ///< the dynamic loss scaler's current scale
  double* lr_factor = nullptr;   ///< factor on the scheduled learning rate, from now on
  /// Adam/AdamW's step counter per parameter with state (PyTorch's `state["step"]`, which the
  /// bias correction divides by); written back by the runner after the hook.
  std::vector<int64_t>* step_counters = nullptr;
};

/// A checkpoint the built-in job just wrote ([checkpoint], the `checkpoint` kind's hook): the
/// archive's path, the previous save's ("" for the first save), its 1-based save number, and
/// the saved tensors by name ("parameter:fc1.weight", "optimizer:fc1.weight.exp_avg"; an
/// undefined tensor for an unknown name), whose bytes are in the archive as saved.
/// Format "dcp": every rank gets its own shard: `archive` is that shard (__RANK_0.distcp),
/// `previous_archive` the same rank's shard of the previous save, `tensors` the ones it holds,
/// `shard` the rank, and `owners` which rank's shard holds each tensor of the whole state (-1:
/// every shard, each rank's own copy: "rng:cpu").
struct CheckpointWritten {
  int64_t save = 0;
  std::string archive;
  std::string previous_archive;
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  int shard = -1;  ///< dcp: the rank whose shard `archive` is; -1: format "torch"'s one file
  std::vector<std::pair<std::string, int>> owners;  ///< dcp only
};

struct FaultContext {
  int64_t step = 0;
  int rank = 0;
  int world = 1;
  bool reexecution = false;  ///< the step is being re-run (replay or rollback)
  uint64_t seed = 0;
  /// Logs the firing: target ("" when none) and free-form detail.
  std::function<void(int fault, const std::string& target, nlohmann::json detail)> fired;
  /// Enqueues a device-side stall of `duration_ms` (< 0: forever) ahead of the next collective
  /// (Communicator::enqueue_stall); returns false on an engine without a device stream. Set by
  /// the runner; empty in unit tests.
  std::function<bool(int64_t duration_ms)> stall_device;
};

class Injector {
 public:
  explicit Injector(const harness::FaultSpec& spec) : spec_(spec) {}
  virtual ~Injector() = default;
  const harness::FaultSpec& spec() const { return spec_; }

  /// True when the fault fires on ctx.step at ctx.rank: inside [step, step+repeat), rank in the
  /// set, persistent or not a re-execution, and the seeded probability draw succeeds.
  bool armed(const FaultContext& ctx) const;

  virtual void on_step_start(FaultContext&) {}
  /// Parameters, before the forward pass (parameter targets).
  virtual void on_parameters(FaultContext&, NamedTensors&) {}
  /// The training state at step start, before the parameters (the `state` kind).
  virtual void on_training_state(FaultContext&, TrainingState&) {}
  /// Optimizer state tensors named PARAM.STATE (exp_avg, exp_avg_sq, momentum_buffer), after the
  /// optimizer step (optimizer: targets).
  virtual void on_optimizer_state(FaultContext&, NamedTensors&) {}
  /// The raw batch, before normalization and before the batch detector.
  virtual void on_batch(FaultContext&, harness::Batch&) {}
  /// A module's forward output; returns the (possibly replaced) output.
  virtual torch::Tensor on_activation(FaultContext&, const std::string&, torch::Tensor out) {
    return out;
  }
  virtual torch::Tensor on_loss(FaultContext&, torch::Tensor loss) { return loss; }
  /// Gradients after backward, before any check or reduction.
  virtual void on_gradients(FaultContext&, NamedTensors&) {}
  /// Just before the rank enters a collective ("consensus", "grad_allreduce"). May block
  /// (the `hang` fault).
  virtual void on_before_collective(FaultContext&, const std::string&) {}
  /// This rank's all-reduce send buffer, after the rank's own checks.
  virtual void on_send_buffer(FaultContext&, void*, size_t, harness::WireType) {}
  /// A checkpoint was written before step ctx.step (format "torch": rank 0, its one file;
  /// "dcp": every rank, its own shard).
  virtual void on_checkpoint_saved(FaultContext&, const CheckpointWritten&) {}
  /// Multiplier of the scheduled learning rate on this step.
  virtual double lr_factor(FaultContext&) { return 1.0; }

 protected:
  /// `count` (or `fraction` x numel, at least 1) distinct flat indices in [0, numel), from
  /// (seed, fault index, step): identical on every rank.
  std::vector<int64_t> pick_elements(int64_t numel, const FaultContext& ctx) const;

  harness::FaultSpec spec_;
};

using harness::match_target;  // harness/scenario/scenario_schema.h

}  // namespace nanchaos::inject

namespace nanchaos::inject {

/// Base of the kinds that hit a named tensor: `tensor` and `bitflip`. Dispatches on the fault's
/// parsed target (FaultSpec::target: activation:MODULE, parameter:NAME, gradient:NAME,
/// optimizer:PARAM.STATE, loss; required, the loader sets it) to the right hook; subclasses only
/// say how elements change.
class TargetedInjector : public Injector {
 public:
  explicit TargetedInjector(const harness::FaultSpec& spec);
  void on_parameters(FaultContext& ctx, NamedTensors& params) override;
  torch::Tensor on_activation(FaultContext& ctx, const std::string& module,
                              torch::Tensor out) override;
  torch::Tensor on_loss(FaultContext& ctx, torch::Tensor loss) override;
  void on_gradients(FaultContext& ctx, NamedTensors& grads) override;
  void on_optimizer_state(FaultContext& ctx, NamedTensors& states) override;

 protected:
  /// Changes elements `idx` of `t` (float32, contiguous, outside autograd) in place; returns a
  /// short description for the injection event (old and new value of the first element).
  virtual nlohmann::json corrupt(torch::Tensor t, const std::vector<int64_t>& idx) = 0;
  /// corrupt() on any tensor: contiguous fp32 CPU tensors directly, others (CUDA, fp16/bf16
  /// under autocast) through an fp32 host copy written back in place.
  nlohmann::json corrupt_anywhere(torch::Tensor t, const std::vector<int64_t>& idx);

 private:
  /// Hits every tensor the target's pattern matches; the event names it "<where>:<name>".
  void hit_named(FaultContext& ctx, NamedTensors& tensors);
  harness::Target target_;
};

}  // namespace nanchaos::inject
