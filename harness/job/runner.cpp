// The built-in jobs' rank loop (rank_runner.h): the job calling the agent (inject/faults.h) and
// the reference stack (detectors/stack/reference_stack.h) at the hook points of DESIGN.md "The
// step pipeline". One function per phase; the step and its replay share forward_backward().
#include "harness/job/runner.h"

#include <fmt/format.h>

#include <cmath>

#include "detectors/core/half_round.h"
#include "harness/comm/in_process.h"  // WorldAborted
#include "harness/evidence/event_types.h"
#include "harness/job/rank_runner.h"

namespace nanchaos::harness {

using detect::Hook;
using detect::StepView;
using inject::NamedTensors;

int RankRunner::run() {
  initial_eval_ = eval_loss(*workload_, device_);
  int64_t step = 0;
  if (s_.checkpoint.on()) {
    checkpointing_ = true;
    step = resumed_from_ = resume();
  }
  if (auto stop = train(step, s_.job.steps)) return finish_abort(step, stop->reason, stop->cause);
  return finish();
}

/// Trains from `step` until `to` (rollbacks re-execute some steps); `step` ends at `to`, or at
/// the step the stack stopped the loop at (the Stop is returned).
std::optional<detect::Stop> RankRunner::train(int64_t& step, int64_t to) {
  while (step < to) {
    // [checkpoint]: the state before steps every, 2 every, ...; once per step (a rollback's
    // re-execution does not save again, nor does a launch at the step it resumed from).
    if (checkpointing_ && step > 0 && step % s_.checkpoint.every == 0 && step > high_water_ &&
        step != resumed_from_) {
      save_checkpoint(step);
    }
    stack_->before_step(step);
    const bool reexecuted = step <= high_water_;
    const bool detected = run_step(step);
    high_water_ = std::max(high_water_, step);
    if (auto stop = stack_->after_step(step, detected, reexecuted, high_water_)) return stop;
    if (auto back = stack_->rollback(step)) {
      zero_grads();
      step = *back;
      continue;
    }
    ++step;
  }
  return std::nullopt;
}

/// The end of a run through [job].steps: the last buffer broadcast, `final` and `exit` 0.
int RankRunner::finish() {
  // As the next forward would: replicas end identical.
  broadcast_buffers(*workload_, rank_, world_, buffer_sum(s_.job.steps));
  write_final(s_.job.steps);
  write_exit(0);
  return 0;
}

/// One training step through the hook points of DESIGN.md. Returns true when the stack
/// detected something this step.
bool RankRunner::run_step(int64_t step) {
  StepBeginEvent begin;
  begin.step = step;
  begin.cpu_us = process_cpu_us();
  write_event(*log_, begin);
  phases_->begin();
  stack_->begin_step(step);
  broadcast_buffers(*workload_, rank_, world_, buffer_sum(step));
  buffer_snapshot_ = clone_buffers(*workload_);
  faults_->begin_step(step, /*reexecution=*/step <= high_water_);

  // step_start: faults on parameters, then the param detector.
  faults_->step_start();
  if (has_state_faults_) apply_state_faults();  // may change the lr factor from this step on
  double lr = scheduled_lr(s_, step) * stack_->lr_scale();
  NamedTensors params = named_parameters();
  faults_->parameters(params);
  lr = faults_->scale_lr(lr);
  stack_->note_lr(step, lr);
  StepView view = step_view(step);
  view.params = &bwd_params_;
  stack_->check(Hook::kStepStart, view);
  stack_->replica_round(view);
  view.params = nullptr;

  double loss_value = 0;
  if (stack_->recompute_due()) step_rng_ = rng_state();  // what the forward may draw (dropout)
  // naive stack: a rank that sees something returns early from its step.
  if (!forward_backward(step, view, &loss_value)) return early_return(step, lr);
  if (stack_->recompute_due()) {
    recompute(step, view);
    if (stack_->wants_early_return()) return early_return(step, lr);
  }

  // consensus, the replay, the loss scaler and the policy
  Decision decision = stack_->decide(step, [this](int64_t st) { return replay(st); });
  bool skip = false;
  bool detected = stack_->recover(decision, step, &skip);

  if (!skip) {
    LossScaler* scaler = stack_->scaler();
    void* send = bucket_->send_buffer(
        [&](void* buf, size_t n, WireType w) { faults_->send_buffer(buf, n, w); }, stage_send_);
    faults_->before_collective("grad_allreduce");
    stack_->comm().collective("grad_allreduce", send, bucket_->count(), bucket_->elem(), step);
    const ScanStats post = bucket_->scan_reduced(scaler ? scaler->scale() : 1.0);
    view.reduce_stats = &post;
    view.wire = bucket_->wire();
    detected = stack_->post_reduce(view, step, detected, &skip);
    mark(StepPhase::kComm);
    update(skip, lr, post);
    mark(std::nullopt);
  } else {
    mark(StepPhase::kComm);
  }
  StepEndEvent end;
  end.step = step;
  end.action = skip ? "skip" : "update";
  end.loss = loss_value;
  end.lr = lr;
  end.loss_scale = stack_->scaler() ? stack_->scaler()->scale() : kNoValue;
  end.localize_us = stack_->localize_us();
  end.cpu_us = process_cpu_us();
  end_phases(end);
  write_event(*log_, end);
  return detected;
}

/// batch -> forward -> loss -> backward -> gradient faults and the fused scan, with the stack's
/// check at each hook point: the step's and, between begin_replay and end_replay, the
/// replay's (the stack then runs its replay checks). Returns false where the naive stack's
/// rank returns early from its step (never in a replay: a replay follows a consensus).
bool RankRunner::forward_backward(int64_t step, StepView& view, double* loss_value) {
  mark(StepPhase::kComm);  // step start: buffer broadcast, parameter checks, replica digests
  Batch batch = workload_->make_batch(step, rank_);
  faults_->batch(batch);
  to_device(batch, device_);
  workload_->prepare(batch);
  step_batch_ = batch;  // the recompute's (tensors shared: nothing changes them in place now)
  view.batch = &batch;
  stack_->check(Hook::kBatch, view);
  view.batch = nullptr;
  mark(StepPhase::kData);
  if (stack_->wants_early_return()) return false;

  torch::Tensor logits;
  torch::Tensor loss = forward_loss(batch, logits);
  view.loss = &loss;
  view.logits = &logits;
  stack_->check(Hook::kLoss, view);
  view.loss = view.logits = nullptr;
  *loss_value = loss.item<double>();
  mark(StepPhase::kCompute);
  if (stack_->wants_early_return()) return false;

  LossScaler* scaler = stack_->scaler();
  torch::Tensor scaled_loss = scaler ? loss * scaler->scale() : loss;
  const std::string anomaly_message = backward(scaled_loss);
  NamedTensors grads = gradients();
  faults_->gradients(grads);
  // With no detector (preset `none`) nothing reads the statistics: the step is plain training,
  // the baseline of bench/step_bench.cpp. A replay's scan leaves the step's send buffer alone.
  const ScanStats pre =
      stack_->replaying() ? bucket_->scan_only() : bucket_->scan_local(stack_->enabled());
  view.grad_stats = &pre;
  view.anomaly_message = &anomaly_message;
  stack_->check(Hook::kGradients, view);
  view.grad_stats = nullptr;
  view.anomaly_message = nullptr;
  stack_->note_gradient_scan(pre, bucket_->pre_scale());
  mark(StepPhase::kBackward);
  return !stack_->wants_early_return();
}

/// The step's forward in train mode (under autocast on CUDA), its loss, and the agent's loss
/// faults: the loss as the backward sees it (0-d float); `logits` gets the model's output.
torch::Tensor RankRunner::forward_loss(const Batch& batch, torch::Tensor& logits) {
  workload_->module().train();
  torch::Tensor loss;
  {
    std::optional<compat::CudaAutocast> ac;
    autocast(ac);
    logits = workload_->forward(batch, probe());
    loss = workload_->loss(logits, batch);
  }
  return faults_->loss(loss);
}

/// The recompute detectors' re-run of a due step (`sdc`; reference_stack.h begin_recompute):
/// the step's forward and backward again on the same batch, from the buffers and RNG state the
/// step's forward began with, with the agent in re-execution (a transient fault does not fire
/// again; a persistent one fires identically). The stack compares the two passes; the step's own
/// gradients and post-forward buffers are then put back: the recompute only looks.
void RankRunner::recompute(int64_t step, StepView& view) {
  stack_->begin_recompute();
  std::vector<torch::Tensor> first, again;
  {
    torch::NoGradGuard ng;
    for (auto& p : bwd_params_) first.push_back(p.grad().clone());
  }
  const std::vector<torch::Tensor> after_forward = clone_buffers(*workload_);
  restore_buffers(*workload_, buffer_snapshot_);
  set_rng_state(step_rng_);
  const bool reexecution = faults_->reexecution();
  faults_->begin_step(step, /*reexecution=*/true);

  torch::Tensor logits;
  torch::Tensor loss = forward_loss(step_batch_, logits);
  LossScaler* scaler = stack_->scaler();
  torch::Tensor scaled_loss = scaler ? loss * scaler->scale() : loss;
  backward(scaled_loss);
  NamedTensors grads = gradients();
  faults_->gradients(grads);
  for (auto& p : bwd_params_) again.push_back(p.grad());

  view.grads = &first;
  view.recomputed_grads = &again;
  stack_->end_recompute(view);
  view.grads = view.recomputed_grads = nullptr;
  {
    torch::NoGradGuard ng;
    for (size_t i = 0; i < bwd_params_.size(); ++i) bwd_params_[i].grad().copy_(first[i]);
  }
  restore_buffers(*workload_, after_forward);
  faults_->begin_step(step, reexecution);  // the step goes on as it was
}

/// Every module output: the agent's activation faults, the localization sums, the CPU path's
/// half rounding (precision fp16/bf16), then the stack's activation detectors.
ProbeFn RankRunner::probe() {
  return [this](const std::string& name, torch::Tensor out) {
    out = faults_->activation(name, out);
    if (stack_->localizing()) stack_->note_output(name, out, /*rounded=*/false);
    if (half_ && !cuda_) {
      out = round_through_half(out, *half_);
      if (stack_->localizing()) stack_->note_output(name, out, /*rounded=*/true);
    }
    stack_->on_activation(name, out);
    return out;
  };
}

/// Backward pass; under anomaly mode the first op that returns NaN raises, and its message is
/// returned (the step's gradients are then incomplete, which the anomaly finding reports).
std::string RankRunner::backward(torch::Tensor& loss) {
  zero_grads();
  try {
    loss.backward();
  } catch (const std::exception& e) {
    if (!stack_->anomaly_mode()) throw;
    const std::string what = e.what();
    return what.substr(0, what.find('\n'));
  }
  return "";
}

/// The replay (Megatron's rerun idea, fairseq's probes, PyTorch's anomaly mode): every rank
/// restores its pre-step buffers and re-runs the step's forward and backward, with the stack in
/// replay mode (detectors/stack/replay.h). Persistent faults fire again, transient ones do not.
/// The stack shares each rank's result, so every rank refines the decision identically.
detect::ReplayResult RankRunner::replay(int64_t step) {
  stack_->begin_replay(step);
  restore_buffers(*workload_, buffer_snapshot_);
  const bool again = faults_->reexecution();
  faults_->begin_step(step, /*reexecution=*/true);
  NamedTensors params = named_parameters();
  faults_->parameters(params);
  StepView view = step_view(step);
  view.params = &bwd_params_;
  stack_->check(Hook::kStepStart, view);  // the parameters the step began from
  view.params = nullptr;
  double loss_value = 0;
  forward_backward(step, view, &loss_value);
  zero_grads();
  restore_buffers(*workload_, buffer_snapshot_);
  faults_->begin_step(step, again);  // the step goes on as it was
  return stack_->end_replay(step);
}

/// The all-reduced gradients into the parameters (unless the stack skipped the update), then
/// the agent's optimizer-state faults.
void RankRunner::update(bool skip, double lr, const ScanStats& post) {
  if (!skip) {
    if (s_.workload.grad_clip > 0) clip_gradients(post.sq_norm);
    for (auto& group : opt_->param_groups()) group.options().set_lr(lr);
    opt_->step();
  }
  if (has_optimizer_faults_) {
    NamedTensors states = optimizer_states();
    faults_->optimizer_state(states);
  }
}

/// The naive stack's hand-written early return: skip backward/all-reduce/update on this rank.
bool RankRunner::early_return(int64_t step, double lr) {
  stack_->early_return(step);
  StepEndEvent end;
  end.step = step;
  end.action = "early_return";
  end.lr = lr;
  end.cpu_us = process_cpu_us();
  end_phases(end);
  write_event(*log_, end);
  return false;
}

void RankRunner::mark(std::optional<StepPhase> phase) {
  if (!stack_->replaying()) phases_->mark(phase);
}

void RankRunner::end_phases(StepEndEvent& end) {
  const StepTimes t = phases_->times();
  StepEndEvent::Phases p;
  for (size_t k = 0; k < kStepPhases; ++k) p.own_us[k] = std::llround(t.own_us[k]);
  p.wait_us = t.wait_us;
  p.run_delay_us = t.run_delay_us;
  end.phases = p;
  stack_->note_phase_times(t.own_us);
}

int run_rank_on(Scenario s, std::unique_ptr<Communicator> comm, const std::string& run_dir) {
  try {
    RankRunner runner(std::move(s), std::move(comm), run_dir);
    return runner.run();
  } catch (const WorldAborted& e) {
    return e.exit_code;  // MPI_Abort's part: this rank ends where it stood
  }
}

}  // namespace nanchaos::harness
