// The built-in jobs' rank loop: the job (model, data, gradient bucket, step order) calling the
// agent (inject/faults.h) and the reference stack (detectors/stack/reference_stack.h) at the hook
// points of DESIGN.md "The step pipeline".
#include "harness/job/runner.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "detectors/core/half_round.h"
#include "detectors/detector.h"
#include "detectors/stack/reference_stack.h"
#include "harness/comm/collective.h"
#include "harness/comm/communicator.h"
#include "harness/comm/in_process.h"  // WorldAborted
#include "harness/common/check.h"
#include "harness/common/log.h"
#include "harness/common/proc_status.h"
#include "harness/common/rank_host.h"
#include "harness/evidence/clock_sync.h"
#include "harness/evidence/event_types.h"
#include "harness/evidence/events.h"
#include "harness/job/grad_bucket.h"
#include "harness/job/workload.h"
#include "harness/scenario/scenario.h"
#include "harness/tensor/optim_state.h"
#include "harness/tensor/torch_compat.h"
#include "inject/faults.h"

namespace nanchaos::harness {
namespace {

using detect::Hook;
using detect::StepView;
using inject::NamedTensors;

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// LibTorch warnings (anomaly mode prints a forward traceback per detection) are debug lines
// (NANCHAOS_LOG=debug); at the default level they would drown the launcher log.
void torch_warning(const std::string& msg) { log::debug("torch warning: {}", first_line(msg)); }

class RankRunner {
 public:
  RankRunner(Scenario s, std::unique_ptr<Communicator> comm, const std::string& run_dir)
      : s_(std::move(s)), comm_(std::move(comm)) {
    rank_ = comm_->rank();
    set_check_rank(rank_);  // check messages name this rank (harness/common/check.h)
    world_ = comm_->world_size();
    std::filesystem::create_directories(run_dir + "/events");
    log_ = std::make_unique<EventLog>(fmt::format("{}/events/rank-{}.jsonl", run_dir, rank_));
    log_->write("start", {{"rank", rank_},
                          {"world", world_},
                          {"pid", getpid()},
                          {"host", this_host()},
                          {"pidns", this_pid_namespace()},
                          {"seed", s_.seed}});
    // Against the controller's clock (clock_sync.h): ranks on other hosts are put on its timeline.
    log_clock_from_env([&](nlohmann::json fields) { log_->write("clock", std::move(fields)); });
    if (world_ != s_.job.ranks) {
      throw std::runtime_error(fmt::format("{}: [job].ranks is {} but the job has {} ranks",
                                           s_.file, s_.job.ranks, world_));
    }
    torch::set_num_threads(1);
    static compat::WarningSink quiet(&torch_warning);
    compat::set_warning_handler(&quiet);
    workload_ = make_workload(s_);
    if (s_.job.device == Device::kCuda) {
      // One GPU per rank: the communicator made the rank's device current.
      cuda_ = true;
      device_ = torch::Device(torch::kCUDA);
      workload_->module().to(device_);
    }
    for (auto& [name, p] : workload_->parameters()) {
      fwd_names_.push_back(name);
      fwd_params_.push_back(p);
    }
    // Backward order: the reverse of registration order (head first).
    bwd_names_.assign(fwd_names_.rbegin(), fwd_names_.rend());
    bwd_params_.assign(fwd_params_.rbegin(), fwd_params_.rend());
    bucket_ = std::make_unique<GradBucket>(bwd_params_, s_.job.grad_allreduce_dtype,
                                           s_.job.grad_predivide, world_, device_);
    opt_ = make_optimizer(fwd_params_, s_.workload);
    if (s_.job.precision == DType::kFp16) half_ = torch::kHalf;
    if (s_.job.precision == DType::kBf16) half_ = torch::kBFloat16;
    faults_ = std::make_unique<inject::Faults>(s_, *log_, rank_, world_);
    faults_->set_device_stall([this](int64_t ms) { return comm_->enqueue_stall(ms); });
    stage_send_ = cuda_ && faults_->has_kind("comm");
    has_state_faults_ = faults_->has_kind("state");
    has_optimizer_faults_ = faults_->has_optimizer_targets();
    module_names_ = workload_->module_names();
    detect::JobLayout layout;
    layout.module_names = module_names_;
    layout.grad_names = bwd_names_;
    layout.replica_names = fwd_names_;
    for (auto& [name, b] : workload_->buffers()) layout.replica_names.push_back(name);
    layout.replica_names.push_back("training_state");
    layout.cuda = cuda_;
    layout.half = half_;
    stack_ = std::make_unique<detect::ReferenceStack>(
        s_, *log_, *comm_, std::move(layout), device_, kRankExitWatchdog,
        [this](int code) { write_exit(code); }, [this] { return model_state(); });
  }

  int run() {
    initial_eval_ = eval_loss(*workload_, device_);
    for (int64_t step = 0; step < s_.job.steps;) {
      stack_->before_step(step);
      const bool reexecuted = step <= high_water_;
      const bool detected = run_step(step);
      high_water_ = std::max(high_water_, step);
      if (auto stop = stack_->after_step(step, detected, reexecuted, high_water_)) {
        return finish_abort(step, stop->reason, stop->cause);
      }
      if (auto to = stack_->rollback(step)) {
        zero_grads();
        step = *to;
        continue;
      }
      ++step;
    }
    broadcast_buffers(
        *workload_, rank_, world_,
        buffer_sum(s_.job.steps));  // as the next forward would: replicas end identical
    write_final(s_.job.steps);
    write_exit(0);
    return 0;
  }

 private:
  /// Every parameter's optimizer state tensors as PARAM.STATE (forward order), sharing storage.
  NamedTensors optimizer_states() {
    NamedTensors out;
    for (size_t i = 0; i < fwd_params_.size(); ++i) {
      for (auto& [name, t] : state_tensors(compat::optimizer_state(*opt_, fwd_params_[i]))) {
        out.emplace_back(fwd_names_[i] + "." + name, t);
      }
    }
    return out;
  }

  /// The `state` kind's hook: hands the faults the loss scale, the learning-rate factor and the
  /// step counters, then writes back what they changed.
  void apply_state_faults() {
    LossScaler* scaler = stack_->scaler();
    std::optional<double> scale;
    if (scaler) scale = scaler->scale();
    std::vector<int64_t> counters;
    std::vector<torch::optim::OptimizerParamState*> states;
    for (auto& p : fwd_params_) {
      auto* st = compat::optimizer_state(*opt_, p);
      if (state_step(st) < 0) continue;
      states.push_back(st);
      counters.push_back(state_step(st));
    }
    inject::TrainingState ts;
    ts.loss_scale = scale ? &*scale : nullptr;
    ts.lr_factor = &stack_->lr_scale();
    ts.step_counters = &counters;
    faults_->training_state(ts);
    if (scale && *scale != scaler->scale()) {
      LossScaler::State st = scaler->state();
      st.scale = *scale;
      scaler->restore(st);
    }
    for (size_t i = 0; i < states.size(); ++i) set_state_step(states[i], counters[i]);
  }

  /// The training state as the stack's recovery sees it (detectors/stack/recovery.h).
  detect::ModelState model_state() {
    detect::ModelState m;
    m.params = fwd_params_;
    for (auto& [name, b] : workload_->buffers()) m.buffers.push_back(b);
    m.optimizer = opt_.get();
    return m;  // the stack fills in its loss scaler and lr_backoff factor
  }

  /// The buffer broadcast's SUM all-reduce of fp32 values, through the stack's collectives.
  AllReduceFloats buffer_sum(int64_t step) {
    return [this, step](float* data, size_t n) {
      stack_->comm().collective("buffer_broadcast", data, n, ElemType::kFloat32, step);
    };
  }

  /// Real autocast on CUDA for precision fp16/bf16 (the CPU path emulates it by rounding every
  /// probed module output through the half type instead).
  void autocast(std::optional<compat::CudaAutocast>& ac) const {
    if (cuda_ && half_) ac.emplace(*half_);
  }

  /// One training step through the hook points of DESIGN.md. Returns true when the stack
  /// detected something this step.
  bool run_step(int64_t step) {
    log_->write("step_begin", {{"step", step}, {"cpu_us", process_cpu_us()}});
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
    StepView view;
    view.step = step;
    view.rank = rank_;
    view.world = world_;
    view.module_names = &module_names_;
    view.grad_names = &bwd_names_;
    view.params = &bwd_params_;
    stack_->check(Hook::kStepStart, view);
    stack_->replica_round(view);

    // batch
    Batch batch = workload_->make_batch(step, rank_);
    faults_->batch(batch);
    to_device(batch, device_);
    workload_->prepare(batch);
    view.params = nullptr;
    view.batch = &batch;
    stack_->check(Hook::kBatch, view);
    view.batch = nullptr;
    // naive stack: a rank that sees something returns early from its step.
    if (stack_->wants_early_return()) return early_return(step, lr);

    // forward + loss
    workload_->module().train();
    ProbeFn probe = [&](const std::string& name, torch::Tensor out) {
      out = faults_->activation(name, out);
      if (stack_->localizing()) stack_->note_output(name, out, /*rounded=*/false);
      if (half_ && !cuda_) {
        out = round_through_half(out, *half_);
        if (stack_->localizing()) stack_->note_output(name, out, /*rounded=*/true);
      }
      stack_->on_activation(name, out);
      return out;
    };
    torch::Tensor logits, loss;
    {
      std::optional<compat::CudaAutocast> ac;
      autocast(ac);
      logits = workload_->forward(batch, probe);
      loss = workload_->loss(logits, batch);
    }
    loss = faults_->loss(loss);
    view.loss = &loss;
    view.logits = &logits;
    stack_->check(Hook::kLoss, view);
    view.loss = view.logits = nullptr;
    const double loss_value = loss.item<double>();
    if (stack_->wants_early_return()) return early_return(step, lr);

    // backward, gradient faults, the fused pack + scan
    LossScaler* scaler = stack_->scaler();
    torch::Tensor scaled_loss = scaler ? loss * scaler->scale() : loss;
    std::string anomaly_message = backward(scaled_loss);
    NamedTensors grads = gradients();
    faults_->gradients(grads);
    // With no detector (preset `none`) nothing reads the statistics: the step is plain
    // training, the baseline of bench/step_bench.cpp.
    const ScanStats pre = bucket_->scan_local(/*needed=*/stack_->enabled());
    view.grad_stats = &pre;
    view.anomaly_message = &anomaly_message;
    stack_->check(Hook::kGradients, view);
    view.grad_stats = nullptr;
    stack_->note_gradient_scan(pre, bucket_->pre_scale());
    if (stack_->wants_early_return()) return early_return(step, lr);

    // consensus, the replay, the loss scaler and the policy
    Decision decision = stack_->decide(step, [this](int64_t st) { return replay(st); });
    bool skip = false;
    bool detected = stack_->recover(decision, step, &skip);

    if (!skip) {
      void* send = bucket_->send_buffer(
          [&](void* buf, size_t n, WireType w) { faults_->send_buffer(buf, n, w); }, stage_send_);
      faults_->before_collective("grad_allreduce");
      stack_->comm().collective("grad_allreduce", send, bucket_->count(), bucket_->elem(), step);
      const ScanStats post = bucket_->scan_reduced(scaler ? scaler->scale() : 1.0);
      view.reduce_stats = &post;
      view.wire = bucket_->wire();
      detected = stack_->post_reduce(view, step, detected, &skip);
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
    StepEndEvent end;
    end.step = step;
    end.action = skip ? "skip" : "update";
    end.loss = loss_value;
    end.lr = lr;
    end.loss_scale = scaler ? scaler->scale() : kNoValue;
    end.localize_us = stack_->localize_us();
    end.cpu_us = process_cpu_us();
    write_event(*log_, end);
    return detected;
  }

  /// Backward pass; under anomaly mode the first op that returns NaN raises, and its message is
  /// returned (the step's gradients are then incomplete, which the anomaly finding reports).
  std::string backward(torch::Tensor& loss) {
    zero_grads();
    try {
      loss.backward();
    } catch (const std::exception& e) {
      if (!stack_->anomaly_mode()) throw;
      return first_line(e.what());
    }
    return "";
  }

  /// Parameters with their names, forward order (what parameter faults match against).
  NamedTensors named_parameters() const {
    NamedTensors params;
    for (size_t i = 0; i < fwd_params_.size(); ++i)
      params.emplace_back(fwd_names_[i], fwd_params_[i]);
    return params;
  }

  // Zeroes the bucket; never Optimizer::zero_grad, which may reset grads to undefined (2.x).
  void zero_grads() { bucket_->zero(); }

  /// The gradients, each a view into the bucket (forward order, what gradient faults match).
  NamedTensors gradients() {
    bucket_->realias();
    NamedTensors grads;
    for (size_t i = 0; i < fwd_params_.size(); ++i)
      grads.emplace_back(fwd_names_[i], fwd_params_[i].grad());
    return grads;
  }

  /// The replay (Megatron's rerun idea, fairseq's probes, PyTorch's anomaly mode): every rank
  /// restores its pre-step state and re-runs the step with a probe on every module and anomaly
  /// mode on. Persistent faults fire again, transient ones do not. The stack shares each rank's
  /// result, so every rank refines the decision identically (ReferenceStack::decide).
  detect::ReplayResult replay(int64_t step) {
    log_->write("replay_begin", {{"step", step}});
    restore_buffers(*workload_, buffer_snapshot_);
    const bool again = faults_->reexecution();
    faults_->begin_step(step, /*reexecution=*/true);
    NamedTensors params = named_parameters();
    faults_->parameters(params);
    Batch batch = workload_->make_batch(step, rank_);
    faults_->batch(batch);
    to_device(batch, device_);
    workload_->prepare(batch);
    bool bad_batch =
        batch.inputs.is_floating_point() && !torch::isfinite(batch.inputs).all().item<bool>();
    if (batch.labels.is_floating_point())
      bad_batch |= !torch::isfinite(batch.labels).all().item<bool>();
    if (batch.mask.defined()) bad_batch |= batch.mask.sum().item<double>() == 0.0;
    int first_module = -1, index = 0;
    bool overflow = false;
    ProbeFn probe = [&](const std::string& name, torch::Tensor out) {
      out = faults_->activation(name, out);
      const bool finite_fp32 = first_module >= 0 || torch::isfinite(out).all().item<bool>();
      if (half_ && !cuda_) out = round_through_half(out, *half_);
      if (first_module < 0 && !torch::isfinite(out).all().item<bool>()) {
        first_module = index;
        // The module's fp32 output was finite and the half rounding made it +-inf: the value
        // left the half range here (DESIGN.md fp16_overflow). Under CUDA autocast the module
        // computed in the half type itself: an overflow shows as +-inf without NaN in the first
        // non-finite output of a half-typed module (its input, the previous output, was finite).
        overflow = cuda_ ? out.scalar_type() == *half_ && !torch::isnan(out).any().item<bool>()
                         : finite_fp32 && half_.has_value();
      }
      ++index;
      return out;
    };
    std::string anomaly;
    int first_grad = -1;
    bool bad_loss = false;
    {
      torch::autograd::DetectAnomalyGuard anomaly_guard;
      torch::Tensor logits, loss;
      {
        std::optional<compat::CudaAutocast> ac;
        autocast(ac);
        logits = workload_->forward(batch, probe);
        loss = workload_->loss(logits, batch);
      }
      loss = faults_->loss(loss);
      bad_loss = !std::isfinite(loss.item<double>());
      zero_grads();
      try {
        LossScaler* scaler = stack_->scaler();
        (scaler ? loss * scaler->scale() : loss).backward();
      } catch (const std::exception& e) {
        anomaly = first_line(e.what());
      }
      NamedTensors grads = gradients();
      faults_->gradients(grads);
      for (size_t i = 0; i < bwd_params_.size() && first_grad < 0; ++i) {
        if (!torch::isfinite(bwd_params_[i].grad()).all().item<bool>()) first_grad = int(i);
      }
    }
    zero_grads();
    restore_buffers(*workload_, buffer_snapshot_);
    faults_->begin_step(step, again);  // the step goes on as it was
    const bool reproduced =
        bad_batch || first_module >= 0 || bad_loss || first_grad >= 0 || !anomaly.empty();
    log_->write("replay_end", {{"step", step},
                               {"reproduced", reproduced},
                               {"module", first_module >= 0 ? module_names_[first_module] : ""},
                               {"anomaly_op", anomaly.empty() ? "" : detect::backward_op(anomaly)},
                               {"grad", first_grad >= 0 ? bwd_names_[first_grad] : ""}});
    detect::ReplayResult r;
    r.reproduced = reproduced;
    r.first_module = first_module;
    r.first_grad = first_grad;
    r.overflow = overflow;
    return r;
  }

  // Global-norm clipping in fp64 from the post-reduce scan (never inf for finite gradients).
  void clip_gradients(double sq_norm) {
    const double norm = std::sqrt(sq_norm);
    const double coef = s_.workload.grad_clip / (norm + 1e-6);
    if (coef >= 1.0 || !std::isfinite(norm)) return;
    torch::NoGradGuard ng;
    for (auto& p : fwd_params_) p.grad().mul_(coef);
  }

  // The naive stack's hand-written early return: skip backward/all-reduce/update on this rank.
  bool early_return(int64_t step, double lr) {
    stack_->early_return(step);
    StepEndEvent end;
    end.step = step;
    end.action = "early_return";
    end.lr = lr;
    end.cpu_us = process_cpu_us();
    write_event(*log_, end);
    return false;
  }

  void write_final(int64_t steps_completed) {
    const double ev = eval_loss(*workload_, device_);
    std::vector<torch::Tensor> buffers;
    for (auto& [name, b] : workload_->buffers()) buffers.push_back(b);
    const FinalDigests fd = final_digests(fwd_params_, buffers, opt_.get());
    FinalEvent fin;
    fin.steps_completed = steps_completed;
    fin.eval_loss = ev;  // written as null when not finite
    fin.eval_loss_str = fmt::format("{}", ev);
    fin.initial_eval_loss = initial_eval_;
    fin.params_hash = fd.params_hash;
    fin.optim_hash = fd.optim_hash;
    fin.params_finite = fd.params_finite;
    fin.loss_scale = stack_->scaler() ? stack_->scaler()->scale() : kNoValue;
    write_event(*log_, fin);
  }

  // The last event of a rank, with its peak memory (the controller samples ranks that never
  // get here, e.g. a hung one killed at the deadline).
  void write_exit(int code) {
    ExitEvent ex;
    ex.code = code;
    ex.vm_hwm_kib = vm_hwm_kib();
    write_event(*log_, ex);
  }

  int finish_abort(int64_t step, const std::string& reason, const std::string& cause) {
    AbortEvent ab;
    ab.step = step;
    ab.reason = reason;
    ab.cause = cause;
    write_event(*log_, ab);
    write_final(step + 1);
    write_exit(kRankExitAborted);
    return kRankExitAborted;
  }

  Scenario s_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<EventLog> log_;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<Workload> workload_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  std::vector<std::string> fwd_names_, bwd_names_;
  std::vector<torch::Tensor> fwd_params_, bwd_params_;
  std::vector<std::string> module_names_;          // probed modules, forward order
  std::unique_ptr<inject::Faults> faults_;         // the agent (inject/faults.h)
  std::unique_ptr<detect::ReferenceStack> stack_;  // detectors, consensus, recovery, collectives
  bool cuda_ = false;  // device = cuda: tensors on the rank's GPU, NCCL, autocast
  torch::Device device_{torch::kCPU};
  std::unique_ptr<GradBucket> bucket_;  // every gradient, flat, backward order; the wire buffer
  bool stage_send_ = false;        // a comm fault edits the device send buffer through a host copy
  bool has_state_faults_ = false;  // a `state` fault: its hook runs at step start
  bool has_optimizer_faults_ = false;      // an optimizer: target: its hook runs after the update
  std::optional<torch::ScalarType> half_;  // precision fp16/bf16: rounding at every probe
  int64_t high_water_ = -1;  // highest step run so far (re-executions are steps <= this)
  std::vector<torch::Tensor> buffer_snapshot_;
  double initial_eval_ = 0;
};

}  // namespace

int run_rank_on(Scenario s, std::unique_ptr<Communicator> comm, const std::string& run_dir) {
  try {
    RankRunner runner(std::move(s), std::move(comm), run_dir);
    return runner.run();
  } catch (const WorldAborted& e) {
    return e.exit_code;  // MPI_Abort's part: this rank ends where it stood
  }
}

}  // namespace nanchaos::harness
