// The rank loop: one training step through the hook points of DESIGN.md, with consensus.
#include "harness/job/runner.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "detectors/core/consensus.h"
#include "detectors/core/cuda_scan.h"
#include "detectors/core/fused_scan.h"
#include "detectors/core/half_round.h"
#include "detectors/core/loss_scaler.h"
#include "detectors/core/replica.h"
#include "detectors/detector.h"
#include "detectors/stack/recovery.h"
#include "detectors/stack/stack_comm.h"
#include "harness/comm/collective.h"
#include "harness/comm/communicator.h"
#include "harness/comm/in_process.h"
#include "harness/comm/nccl_communicator.h"
#include "harness/common/check.h"
#include "harness/common/cuda_device.h"
#include "harness/common/digest.h"
#include "harness/common/job_guard.h"
#include "harness/common/log.h"
#include "harness/common/proc_status.h"
#include "harness/common/rank_host.h"
#include "harness/evidence/clock_sync.h"
#include "harness/evidence/event_types.h"
#include "harness/evidence/events.h"
#include "harness/job/workload.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "harness/tensor/optim_state.h"
#include "harness/tensor/torch_compat.h"
#include "inject/faults.h"

namespace nanchaos::harness {
namespace {

using detect::Detector;
using detect::Finding;
using detect::Hook;
using detect::StepView;
using inject::NamedTensors;

WireType wire_of(DType d) {
  switch (d) {
    case DType::kFp16:
      return WireType::kFp16;
    case DType::kBf16:
      return WireType::kBf16;
    default:
      return WireType::kFp32;
  }
}
ElemType elem_of(WireType w) {
  switch (w) {
    case WireType::kFp16:
      return ElemType::kFloat16;
    case WireType::kBf16:
      return ElemType::kBFloat16;
    default:
      return ElemType::kFloat32;
  }
}
double wire_max(WireType w) {
  switch (w) {
    case WireType::kFp16:
      return 65504.0;
    case WireType::kBf16:
      return 3.3895313892515355e38;
    default:
      return 3.4028234663852886e38;
  }
}

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
      gpu_scan_ = std::make_unique<CudaScanner>();
    }
    for (auto& [name, p] : workload_->parameters()) {
      fwd_names_.push_back(name);
      fwd_params_.push_back(p);
    }
    // Backward order: the reverse of registration order (head first).
    bwd_names_.assign(fwd_names_.rbegin(), fwd_names_.rend());
    bwd_params_.assign(fwd_params_.rbegin(), fwd_params_.rend());
    size_t total = 0;
    for (auto& p : bwd_params_) total += size_t(p.numel());
    wire_ = wire_of(s_.job.grad_allreduce_dtype);
    // Gradients live as views into one flat fp32 bucket, in backward order (DDP's
    // gradient_as_bucket_view). With an fp32 wire and post-division the bucket IS the all-reduce
    // buffer: the always-on check is one read pass, with no pack copy.
    bucket_ = torch::zeros({int64_t(total)}, torch::TensorOptions(torch::kFloat32).device(device_));
    int64_t off = 0;
    for (auto& p : bwd_params_) {
      p.mutable_grad() = bucket_.narrow(0, off, p.numel()).view_as(p);
      off += p.numel();
    }
    in_place_ = wire_ == WireType::kFp32 && !s_.job.grad_predivide;
    if (!in_place_ && cuda_) {
      const auto wt = wire_ == WireType::kFp16   ? torch::kHalf
                      : wire_ == WireType::kBf16 ? torch::kBFloat16
                                                 : torch::kFloat32;
      wire_t_ = torch::zeros({int64_t(total)}, torch::TensorOptions(wt).device(device_));
    } else if (!in_place_) {
      wire_buf_.resize(total * wire_bytes(wire_));
    }
    make_optimizer();
    if (s_.job.precision == DType::kFp16) half_ = torch::kHalf;
    if (s_.job.precision == DType::kBf16) half_ = torch::kBFloat16;
    // Only fp16 needs a dynamic loss scaler (bf16 has fp32's exponent range), as with GradScaler.
    if (s_.job.precision == DType::kFp16) {
      scaler_.emplace(s_.recovery.scaler);
    }
    faults_ = std::make_unique<inject::Faults>(s_, *log_, rank_, world_);
    faults_->set_device_stall([this](int64_t ms) { return comm_->enqueue_stall(ms); });
    stage_send_ = cuda_ && faults_->has_kind("comm");
    has_state_faults_ = faults_->has_kind("state");
    has_optimizer_faults_ = faults_->has_optimizer_targets();
    for (const auto& name : s_.detectors.enabled) {
      const auto& info = detectors().at(name);
      if (!info.make) continue;  // optional, not built (the controller refused the rest)
      detectors_.push_back(info.make(s_));
    }
    consensus_ = s_.detectors.consensus && !detectors_.empty();
    // Without a watchdog a collective waits forever, as a stock c10d job does (until the
    // launcher's timeout); with one, it waits collective_timeout_ms.
    module_names_ = workload_->module_names();
    for (auto& d : detectors_) anomaly_mode_ |= d->wants_anomaly_mode();
    // Always-on anomaly mode (the `anomaly` detector): the costly baseline.
    if (anomaly_mode_) torch::autograd::AnomalyMode::set_enabled(true);
    has_watchdog_ = std::find(s_.detectors.enabled.begin(), s_.detectors.enabled.end(),
                              "watchdog") != s_.detectors.enabled.end();
    coll_ = std::make_unique<detect::StackComm>(
        *comm_, *log_, has_watchdog_ ? s_.detectors.collective_timeout_ms : 0, cuda_, device_,
        kRankExitWatchdog, [this](int code) { write_exit(code); });
    for (const auto& d : detectors_) has_post_reduce_ |= d->hook() == detect::Hook::kPostReduce;
    // The loss check's attribution gets the module on the step itself (transient faults too).
    for (const auto& d : detectors_) localize_ |= consensus_ && d->name() == "loss";
    for (const auto& d : detectors_) {
      if (d->hook() == Hook::kReplica) replica_ = d.get();
    }
    replica_names_ = fwd_names_;
    for (auto& [name, b] : workload_->buffers()) replica_names_.push_back(name);
    replica_names_.push_back("training_state");
  }

  int run() {
    initial_eval_ = eval_loss();
    // Detections in a row, counted across rollbacks: a clean step resets the count only when it
    // is new progress (past the highest step run so far). A clean re-executed step does not, so
    // a fault that returns on every re-execution reaches max_consecutive and escalates to abort
    // instead of rolling back until the job's timeout (SCENARIO_FORMAT.md, "Recovery must
    // terminate"; Megatron-LM 5281 looped on a corrupt restore point the same way).
    int64_t consecutive = 0;
    int64_t rollbacks = 0;  // since the count was last reset
    const bool rollback = s_.recovery.has(Policy::kRollback);
    for (int64_t step = 0; step < s_.job.steps;) {
      if (rollback && step % s_.recovery.snapshot_every == 0) take_snapshot(step);
      rollback_requested_ = false;
      const bool reexecuted = step <= high_water_;
      const bool detected = run_step(step);
      high_water_ = std::max(high_water_, step);
      if (detected) {
        ++consecutive;
      } else if (!reexecuted) {
        consecutive = 0;
        rollbacks = 0;
      }
      if (aborting_) return finish_abort(step, "policy abort", abort_cause_);
      if (detected && consecutive >= s_.recovery.max_consecutive) {
        const std::string reason =
            rollbacks == 0 ? fmt::format("{} consecutive detections (max_consecutive)", consecutive)
                           : fmt::format(
                                 "{} detections without a clean step past step {} ({} rollbacks; "
                                 "max_consecutive): the fault returns on every re-execution",
                                 consecutive, high_water_, rollbacks);
        return finish_abort(step, reason, abort_cause_);
      }
      if (rollback_requested_ && snapshot_) {
        // Re-execute from the last snapshot taken before the faulty step; persistent faults fire
        // again on the re-executed steps, transient ones do not.
        restore_snapshot();
        ++rollbacks;
        log_->write("rollback", {{"step", step}, {"to_step", snapshot_->step()}});
        step = snapshot_->step();
        continue;
      }
      ++step;
    }
    broadcast_buffers(s_.job.steps);  // as the next forward would: replicas end identical
    write_final(s_.job.steps);
    write_exit(0);
    return 0;
  }

 private:
  void make_optimizer() {
    std::vector<torch::Tensor> params = fwd_params_;
    const double lr = s_.workload.lr;
    switch (s_.workload.optimizer) {
      case Optimizer::kSgd:
        opt_ = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr));
        break;
      case Optimizer::kAdam:
        opt_ = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(lr));
        break;
      case Optimizer::kAdamW:
        opt_ = std::make_unique<torch::optim::AdamW>(
            params, torch::optim::AdamWOptions(lr).weight_decay(0.01));
        break;
    }
  }

  double scheduled_lr(int64_t step) const {
    const auto& w = s_.workload;
    if (w.warmup_steps > 0 && step < w.warmup_steps) {
      return w.lr * double(step + 1) / double(w.warmup_steps);
    }
    if (w.schedule == Schedule::kCosine) {
      const double span = double(std::max<int64_t>(1, s_.job.steps - w.warmup_steps));
      const double progress = double(step - w.warmup_steps) / span;
      return w.lr * 0.5 * (1.0 + std::cos(M_PI * progress));
    }
    return w.lr;
  }

  // Runs detectors of one hook; records findings into the local consensus row.
  void run_detectors(Hook hook, const StepView& view, std::vector<double>& row, int64_t step) {
    for (auto& d : detectors_) {
      if (d->hook() != hook) continue;
      auto finding = d->check(view);
      if (!finding) continue;
      const int bit = detector_bit(d->name());
      const auto bits = uint64_t(row[kBits]);
      if (!first_local_us_) first_local_us_ = now_us();
      row[kBits] = double(bits | (uint64_t(1) << bit));
      DetectEvent det;
      det.detector = d->name();
      det.step = step;
      det.layer = finding->layer;
      det.cause = finding->cause;
      write_event(*log_, det);
      // The finding's code travels in the detector's registered consensus column.
      const int column = detectors().at(d->name()).column;
      if (column >= 0) row[size_t(column)] = finding->code;
      local_findings_[d->name()] = *finding;
    }
  }

  void collective(const std::string& name, void* buf, size_t count, ElemType type, int64_t step) {
    coll_->collective(name, buf, count, type, step);
  }
  void allreduce_rows(std::vector<double>& rows, const std::string& name, int64_t step) {
    coll_->allreduce_rows(rows, name, step);
  }
  void allreduce_i64(int64_t* data, size_t n, const std::string& name, int64_t step) {
    coll_->allreduce_i64(data, n, name, step);
  }

  /// Always-on localization (issue 15): at every probe point one fp32 sum of the module's output,
  /// kept as a 0-d tensor (no host sync; on CUDA it stays on the device). A sum is non-finite
  /// exactly when the output holds a NaN or +-inf (barring a finite sum that overflows fp32,
  /// which needs |values| ~ 1e33), so the first non-finite sum names the first module whose
  /// output went non-finite while its input, the previous output, was finite. `rounded`: the
  /// sum after the CPU path's half rounding (precision fp16/bf16), so an output finite in fp32
  /// and non-finite after rounding is told apart as an fp16 overflow. Timed into localize_us_.
  void note_output(const std::string& name, const torch::Tensor& out, bool rounded) {
    const int64_t t0 = now_us();
    torch::NoGradGuard ng;
    auto s = out.detach().sum(torch::kFloat);
    if (rounded) {
      probe_post_.push_back(std::move(s));
    } else {
      probe_names_.push_back(name);
      probe_pre_.push_back(std::move(s));
    }
    localize_us_ += now_us() - t0;
  }

  /// Reads the probe sums once (one device sync on CUDA) and writes the first non-finite
  /// module (forward index) and whether it was an overflow of the half type into `row`. Under
  /// CUDA autocast the module computed in the half type itself: a sum that is +-inf (no NaN) in
  /// a half-typed output counts as an overflow, as the replay decides.
  void localize(std::vector<double>& row) {
    if (probe_pre_.empty()) return;
    const int64_t t0 = now_us();
    const auto pre = torch::stack(probe_pre_).cpu();
    const auto post =
        probe_post_.size() == probe_pre_.size() ? torch::stack(probe_post_).cpu() : torch::Tensor();
    const float* a = pre.data_ptr<float>();
    const float* b = post.defined() ? post.data_ptr<float>() : nullptr;
    for (size_t i = 0; i < probe_names_.size(); ++i) {
      const bool bad_pre = !std::isfinite(a[i]);
      const bool bad_post = b != nullptr && !std::isfinite(b[i]);
      if (!bad_pre && !bad_post) continue;
      const auto it = std::find(module_names_.begin(), module_names_.end(), probe_names_[i]);
      if (it == module_names_.end()) return;
      row[kModuleIdx] = double(it - module_names_.begin());
      const bool overflow = bad_pre ? cuda_ && half_ && std::isinf(a[i]) : true;
      row[kModuleOverflow] = overflow ? 1.0 : 0.0;
      break;
    }
    localize_us_ += now_us() - t0;
  }

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
    std::optional<double> scale;
    if (scaler_) scale = scaler_->scale();
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
    ts.lr_factor = &lr_scale_;
    ts.step_counters = &counters;
    faults_->training_state(ts);
    if (scale && *scale != scaler_->scale()) {
      LossScaler::State st = scaler_->state();
      st.scale = *scale;
      scaler_->restore(st);
    }
    for (size_t i = 0; i < states.size(); ++i) set_state_step(states[i], counters[i]);
  }

  /// The fixed-size summary round (consensus.h).
  void allreduce_counts(SummaryCounts& counts, const std::string& name, int64_t step) {
    allreduce_i64(counts.data(), counts.size(), name, step);
  }

  std::vector<uint64_t> allgather_u64(const std::vector<uint64_t>& mine, const std::string& name,
                                      int64_t step) {
    return coll_->allgather_u64(mine, name, step);
  }

  /// The training state as the stack's recovery sees it (detectors/recovery.h).
  detect::ModelState model_state() {
    detect::ModelState m;
    m.params = fwd_params_;
    for (auto& [name, b] : workload_->buffers()) m.buffers.push_back(b);
    m.optimizer = opt_.get();
    m.scaler = scaler_ ? &*scaler_ : nullptr;
    m.lr_scale = &lr_scale_;
    return m;
  }

  /// The `replica` detector's exchange (replica.h): one digest per rank; the per-tensor digests
  /// only when they differ. Every rank takes the same branches (same gathered data).
  void replica_round(StepView& view, std::vector<double>& row, int64_t step) {
    const int64_t t0 = now_us();
    const std::vector<uint64_t> mine = detect::replica_digests(model_state());
    Digest all;
    for (uint64_t v : mine) all.add_u64(v);
    const std::vector<uint64_t> combined = allgather_u64({all.value()}, "replica", step);
    replica_vote_ = replica_vote(combined);
    std::vector<uint64_t> per_tensor;
    if (replica_vote_.diverged) per_tensor = allgather_u64(mine, "replica_detail", step);
    view.replica_combined = &combined;
    view.replica_per_tensor = &per_tensor;
    view.replica_names = &replica_names_;
    run_detectors(Hook::kReplica, view, row, step);
    view.replica_combined = view.replica_per_tensor = nullptr;
    // Its cost (digest + exchange), read by bench/step_bench.cpp; on a divergence every entry
    // in which this rank differs from the source (a drifted training state shows here even
    // though `layer` names the first parameter it then changed).
    nlohmann::json differing = nlohmann::json::array();
    if (replica_vote_.diverged && rank_ != replica_vote_.source) {
      const size_t n = mine.size(), me = size_t(rank_) * n, src = size_t(replica_vote_.source) * n;
      for (size_t t = 0; t < n; ++t) {
        if (per_tensor[me + t] != per_tensor[src + t]) differing.push_back(replica_names_[t]);
      }
    }
    log_->write("replica_check", {{"step", step},
                                  {"us", now_us() - t0},
                                  {"diverged", replica_vote_.diverged},
                                  {"differing", std::move(differing)}});
  }

  /// Policy `resync` (detectors/recovery.h); layouts that differ abort the job.
  void resync(int64_t step) {
    const std::string why = detect::resync(model_state(), replica_vote_, *coll_, *log_, step);
    if (why.empty()) return;
    aborting_ = true;
    abort_cause_ = "replica_divergence";
  }

  /// Batches are made (and batch faults applied) on the CPU, then moved to the rank's device.
  void to_device(Batch& b) const {
    if (!cuda_) return;
    b.inputs = b.inputs.to(device_);
    b.labels = b.labels.to(device_);
    if (b.mask.defined()) b.mask = b.mask.to(device_);
  }

  /// Real autocast on CUDA for precision fp16/bf16 (the CPU path emulates it by rounding every
  /// probed module output through the half type instead).
  void autocast(std::optional<compat::CudaAutocast>& ac) const {
    if (cuda_ && half_) ac.emplace(*half_);
  }

  void apply_policy(const Decision& d, int64_t step, bool* skip) {
    const detect::PolicyAction act = detect::choose_action(s_.recovery, d.detector);
    const std::string& action = act.action;
    if (act.abort) {
      aborting_ = true;
      abort_cause_ = d.cause;
    }
    *skip = *skip || act.skip;
    rollback_requested_ = rollback_requested_ || act.rollback;
    resync_requested_ = resync_requested_ || act.resync;
    if (act.lr_factor != 1.0) lr_scale_ *= act.lr_factor;
    if (!d.cause.empty()) abort_cause_ = d.cause;
    DecisionEvent dec;
    dec.step = step;
    dec.detector = d.detector;
    dec.ranks = d.ranks;
    dec.layer = d.layer;
    dec.cause = d.cause;
    dec.action = action;
    dec.transient = d.transient;
    dec.flagged = d.flagged_detail;
    dec.first_local_us = first_local_us_.value_or(0);
    dec.t_us = decided_us_;
    write_event(*log_, dec);
  }

  /// One training step. Returns true when the stack detected something this step.
  bool run_step(int64_t step) {
    log_->write("step_begin", {{"step", step}, {"cpu_us", process_cpu_us()}});
    local_findings_.clear();
    first_local_us_.reset();
    for (auto& d : detectors_) d->reset();
    broadcast_buffers(step);
    snapshot_buffers();
    faults_->begin_step(step, /*reexecution=*/step <= high_water_);
    std::vector<double> rows(size_t(world_) * kRowWidth, 0.0);
    std::vector<double> row(kRowWidth, 0.0);
    row[kLogitsFinite] = 1.0;
    row[kModuleIdx] = -1.0;
    probe_names_.clear();
    probe_pre_.clear();
    probe_post_.clear();
    localize_us_ = 0;

    // step_start: faults on parameters, then the param detector.
    faults_->step_start();
    if (has_state_faults_) apply_state_faults();  // may change lr_scale_ from this step on
    double lr = scheduled_lr(step) * lr_scale_;
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
    run_detectors(Hook::kStepStart, view, row, step);
    if (replica_ && consensus_ && replica_->due(step)) replica_round(view, row, step);

    // batch
    Batch batch = workload_->make_batch(step, rank_);
    faults_->batch(batch);
    to_device(batch);
    workload_->prepare(batch);
    view.params = nullptr;
    view.batch = &batch;
    run_detectors(Hook::kBatch, view, row, step);
    view.batch = nullptr;

    // naive stack: a rank that sees something returns early from its step.
    const bool naive = !consensus_ && !detectors_.empty();
    if (naive && row[kBits] != 0) return early_return(step, lr);

    // forward + loss
    workload_->module().train();
    ProbeFn probe = [&](const std::string& name, torch::Tensor out) {
      out = faults_->activation(name, out);
      if (localize_) note_output(name, out, /*rounded=*/false);
      if (half_ && !cuda_) {
        out = round_through_half(out, *half_);
        if (localize_) note_output(name, out, /*rounded=*/true);
      }
      for (auto& d : detectors_) d->on_activation(name, out);
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
    run_detectors(Hook::kLoss, view, row, step);
    if (localize_ && local_findings_.count("loss") && local_findings_["loss"].code == 0) {
      localize(row);  // non-finite logits: which module, and was it the half rounding
    }
    view.loss = view.logits = nullptr;
    const double loss_value = loss.item<double>();
    if (naive && row[kBits] != 0) return early_return(step, lr);

    // backward, gradient faults, the fused pack + scan
    torch::Tensor scaled_loss = scaler_ ? loss * scaler_->scale() : loss;
    std::string anomaly_message = backward(scaled_loss);
    NamedTensors grads = gradients();
    faults_->gradients(grads);
    std::vector<ConstSpan> spans;
    for (auto& p : bwd_params_) spans.push_back({p.grad().data_ptr<float>(), size_t(p.numel())});
    ScanStats pre;
    const float pre_scale = s_.job.grad_predivide ? 1.0f / float(world_) : 1.0f;
    if (cuda_) {
      gpu_scan_->scan(spans, nullptr, &pre);  // one launch, one host sync
      if (!in_place_) {                       // cast / pre-divide on the device
        torch::NoGradGuard ng;
        wire_t_.copy_(pre_scale == 1.0f ? bucket_ : bucket_ * pre_scale);
      }
    } else if (in_place_) {
      // The bucket is the send buffer. With no detector (preset `none`) nothing reads the
      // statistics: the step is plain training, the baseline of bench/step_bench.cpp.
      if (!detectors_.empty()) scan(spans, &pre);
    } else {
      pack_and_scan(spans, wire_buf_.data(), wire_, pre_scale, &pre);  // cast / pre-divide
    }
    view.grad_stats = &pre;
    view.anomaly_message = &anomaly_message;
    run_detectors(Hook::kGradients, view, row, step);
    view.grad_stats = nullptr;
    // The scan's first non-finite gradient, for the loss scaler's found_inf even when no
    // detector at this hook flagged it (grad, loss_scale and grad_norm_spike wrote theirs).
    if (pre.first_nonfinite >= 0) row[kGradIdx] = pre.first_nonfinite;
    row[kMaxAbs] = double(pre.max_abs) * pre_scale;  // magnitude that enters the SUM
    if (naive && row[kBits] != 0) return early_return(step, lr);

    // consensus (consensus.h): a fixed-size summary every step; the [world x kRowWidth] detail
    // only when some rank flagged something. On a clean step `rows` stays zero.
    Decision decision;
    double global_max_abs = row[kMaxAbs];
    bool detail = false;  // rows hold every rank's row
    if (consensus_) {
      SummaryCounts counts = summary_counts(uint64_t(row[kBits]));
      allreduce_counts(counts, "consensus", step);
      if (summary_flagged(counts)) {
        std::copy(row.begin(), row.end(), rows.begin() + size_t(rank_) * kRowWidth);
        allreduce_rows(rows, "consensus_detail", step);
        detail = true;
        decision = decide(rows, world_, bwd_names_, module_names_, replica_names_);
        global_max_abs = harness::global_max_abs(rows, world_);
      }
      decided_us_ = now_us();  // every rank agrees here; the replay only refines attribution
      // The replay re-runs one step's computation: it cannot tell anything about state that
      // diverged over earlier steps.
      if (decision.flagged && s_.detectors.replay && decision.detector != "replica") {
        replay_and_refine(step, &decision);
      }
    }
    bool skip = false;
    bool detected = false;
    if (scaler_ && consensus_) update_scaler(rows, step, &decision, &skip);
    if (decision.flagged) {
      detected = true;
      apply_policy(decision, step, &skip);
      if (resync_requested_) {
        resync(step);
        resync_requested_ = false;
      }
    }

    if (!skip) {
      const size_t count = size_t(bucket_.numel());
      void* send = nullptr;
      if (cuda_) {
        torch::Tensor send_t = in_place_ ? bucket_ : wire_t_;
        send = send_t.data_ptr();
        if (stage_send_) {  // the comm fault edits a host copy of the wire buffer
          auto host = send_t.cpu();
          faults_->send_buffer(host.data_ptr(), count, wire_);
          send_t.copy_(host);
        }
      } else {
        send = in_place_ ? bucket_.data_ptr() : static_cast<void*>(wire_buf_.data());
        faults_->send_buffer(send, count, wire_);
      }
      faults_->before_collective("grad_allreduce");
      collective("grad_allreduce", send, count, elem_of(wire_), step);
      std::vector<MutSpan> outs;
      for (auto& p : bwd_params_) outs.push_back({p.grad().data_ptr<float>(), size_t(p.numel())});
      ScanStats post;
      float post_scale = s_.job.grad_predivide ? 1.0f : 1.0f / float(world_);
      if (scaler_) post_scale = float(double(post_scale) / scaler_->scale());  // unscale, fused
      if (cuda_) {
        if (!in_place_) bucket_.copy_(wire_t_);  // wire -> fp32, then scaled in the scan
        gpu_scan_->scale_and_scan(outs, post_scale, nullptr, &post);
      } else if (in_place_) {
        scale_and_scan(outs, post_scale, &post);
      } else {
        unpack_and_scan(wire_buf_.data(), wire_, post_scale, outs, &post);
      }
      view.reduce_stats = &post;
      if (consensus_ && !detail && post.any_nonfinite() && has_post_reduce_) {
        // The reduced buffer is the same on every rank, so every rank comes here: the largest
        // contribution (post_reduce tells a SUM overflow from corruption by it) is gathered
        // only now, on the rare step that needs it.
        std::vector<double> m(size_t(world_), 0.0);
        m[size_t(rank_)] = row[kMaxAbs];
        allreduce_rows(m, "max_abs", step);
        global_max_abs = *std::max_element(m.begin(), m.end());
      }
      view.global_max_abs = global_max_abs;
      view.wire = wire_;
      // post_reduce sees the same reduced buffer on every rank: its decision needs no consensus.
      for (auto& d : detectors_) {
        if (d->hook() != Hook::kPostReduce) continue;
        if (auto f = d->check(view)) {
          if (!first_local_us_) first_local_us_ = now_us();
          DetectEvent det;
          det.detector = d->name();
          det.step = step;
          det.layer = f->layer;
          det.cause = f->cause;
          write_event(*log_, det);
          if (!detected) {
            Decision pd;
            pd.flagged = true;
            pd.detector = d->name();
            pd.layer = f->layer;
            pd.cause = f->cause;
            detected = true;
            decided_us_ = now_us();
            apply_policy(pd, step, &skip);
          }
        }
      }
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
    end.loss_scale = scaler_ ? scaler_->scale() : kNoValue;
    end.localize_us = localize_us_;
    end.cpu_us = process_cpu_us();
    write_event(*log_, end);
    return detected;
  }

  /// GradScaler update from the consensus: found_inf is any rank's non-finite scaled gradient.
  /// The same matrix on every rank gives the same scale everywhere.
  void update_scaler(const std::vector<double>& rows, int64_t step, Decision* d, bool* skip) {
    const uint64_t inf_bits =
        (uint64_t(1) << detector_bit("grad")) | (uint64_t(1) << detector_bit("loss_scale"));
    bool found_inf = false, other = false;
    for (int r = 0; r < world_; ++r) {
      const auto bits = uint64_t(rows[size_t(r) * kRowWidth + kBits]);
      found_inf |= (bits & inf_bits) != 0;
      other |= (bits & ~inf_bits) != 0;
    }
    const double before = scaler_->scale();
    const auto result = scaler_->update(found_inf);
    if (!found_inf) return;
    const bool probe = result == LossScaler::Result::kProbe && !other;
    log_->write("scale_backoff",
                {{"step", step}, {"from", before}, {"to", scaler_->scale()}, {"probe", probe}});
    *skip = true;  // GradScaler skips optimizer.step() on found_inf
    if (probe) {
      *d = Decision{};  // the scaler probing its range after a growth: not a detection
      return;
    }
    if (d->detector == "grad") {  // under fp16 a non-finite gradient is the scaler's found_inf
      d->detector = "loss_scale";
      d->cause = "fp16_overflow";
    }
    if (result == LossScaler::Result::kBelowMin) {
      aborting_ = true;
      abort_cause_ = "fp16_overflow";
    }
  }

  /// Backward pass; under anomaly mode the first op that returns NaN raises, and its message is
  /// returned (the step's gradients are then incomplete, which the anomaly finding reports).
  std::string backward(torch::Tensor& loss) {
    zero_grads();
    try {
      loss.backward();
    } catch (const std::exception& e) {
      if (!anomaly_mode_) throw;
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
  void zero_grads() { bucket_.zero_(); }

  /// The gradients, each still a view into the bucket. Backward accumulates into a defined grad
  /// in place; should a LibTorch version ever replace the tensor, copy it back and re-alias.
  NamedTensors gradients() {
    NamedTensors grads;
    int64_t off = 0;
    for (size_t i = 0; i < bwd_params_.size(); ++i) {
      auto& p = bwd_params_[i];
      auto view = bucket_.narrow(0, off, p.numel()).view_as(p);
      off += p.numel();
      if (!p.grad().defined() || p.grad().data_ptr() != view.data_ptr()) {
        torch::NoGradGuard ng;
        if (p.grad().defined()) view.copy_(p.grad());
        p.mutable_grad() = view;
      }
    }
    for (size_t i = 0; i < fwd_params_.size(); ++i)
      grads.emplace_back(fwd_names_[i], fwd_params_[i].grad());
    return grads;
  }

  void take_snapshot(int64_t step) {
    snapshot_ = std::make_unique<detect::Snapshot>(step, model_state());
    log_->write("snapshot", {{"step", step}});
  }

  void restore_snapshot() {
    snapshot_->restore(model_state());
    zero_grads();
  }

  // DDP's default (broadcast_buffers=True): rank 0's buffers overwrite every rank's at step start.
  // Done as a SUM all-reduce where only rank 0 contributes (x + 0 == x, NaN stays NaN).
  void broadcast_buffers(int64_t step) {
    std::vector<torch::Tensor> floats;
    for (auto& [name, b] : workload_->buffers()) {
      if (b.is_floating_point()) floats.push_back(b);
    }
    if (floats.empty() || world_ == 1) return;
    torch::NoGradGuard ng;
    auto flat = torch::cat([&] {
      std::vector<torch::Tensor> v;
      for (auto& b : floats) v.push_back(b.reshape({-1}));
      return v;
    }());
    if (rank_ != 0) flat.zero_();
    collective("buffer_broadcast", flat.data_ptr<float>(), size_t(flat.numel()), ElemType::kFloat32,
               step);
    int64_t off = 0;
    for (auto& b : floats) {
      b.copy_(flat.narrow(0, off, b.numel()).view_as(b));
      off += b.numel();
    }
  }

  // BatchNorm running statistics are the only state a forward pass changes before the update;
  // parameters and optimizer state change only in the update, which comes after every check.
  void snapshot_buffers() {
    buffer_snapshot_.clear();
    for (auto& [name, b] : workload_->buffers()) buffer_snapshot_.push_back(b.clone());
  }
  void restore_buffers() {
    torch::NoGradGuard ng;
    size_t i = 0;
    for (auto& [name, b] : workload_->buffers()) b.copy_(buffer_snapshot_.at(i++));
  }

  /// The replay (Megatron's rerun idea, fairseq's probes, PyTorch's anomaly mode): every rank
  /// restores its pre-step state and re-runs the step with a probe on every module and anomaly
  /// mode on. Persistent faults fire again, transient ones do not. A second small all-reduce
  /// shares each rank's result, so every rank refines the decision identically.
  void replay_and_refine(int64_t step, Decision* d) {
    log_->write("replay_begin", {{"step", step}});
    restore_buffers();
    const bool again = faults_->reexecution();
    faults_->begin_step(step, /*reexecution=*/true);
    NamedTensors params = named_parameters();
    faults_->parameters(params);
    Batch batch = workload_->make_batch(step, rank_);
    faults_->batch(batch);
    to_device(batch);
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
        (scaler_ ? loss * scaler_->scale() : loss).backward();
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
    restore_buffers();
    faults_->begin_step(step, again);  // the step goes on as it was
    const bool reproduced =
        bad_batch || first_module >= 0 || bad_loss || first_grad >= 0 || !anomaly.empty();
    log_->write("replay_end", {{"step", step},
                               {"reproduced", reproduced},
                               {"module", first_module >= 0 ? module_names_[first_module] : ""},
                               {"anomaly_op", anomaly.empty() ? "" : detect::backward_op(anomaly)},
                               {"grad", first_grad >= 0 ? bwd_names_[first_grad] : ""}});
    // Share: [reproduced, first module, first grad, fp16 overflow] per rank.
    constexpr size_t kW = 4;
    std::vector<double> rows(size_t(world_) * kW, 0.0);
    rows[size_t(rank_) * kW + 0] = reproduced ? 1 : 0;
    rows[size_t(rank_) * kW + 1] = first_module;
    rows[size_t(rank_) * kW + 2] = first_grad;
    rows[size_t(rank_) * kW + 3] = overflow ? 1 : 0;
    allreduce_rows(rows, "replay", step);
    const size_t r0 = size_t(d->ranks.front());
    d->transient = rows[r0 * kW + 0] < 0.5;
    const int module = int(rows[r0 * kW + 1]);
    if (module >= 0 && rows[r0 * kW + 3] > 0.5 && d->detector != "batch") {
      d->cause = "fp16_overflow";
      d->layer = module_names_.at(size_t(module));
      return;
    }
    // DESIGN.md: a module whose output is non-finite while its input was finite is the cause;
    // the replay's probe sees the first such module in forward order.
    if (module >= 0 && (d->cause == "activation" || d->cause == "gradient") &&
        d->detector != "batch") {
      d->cause = "activation";
      d->layer = module_names_.at(size_t(module));
    }
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
    DecisionEvent dec;
    dec.step = step;
    dec.detector = local_findings_.begin()->first;
    dec.ranks = {rank_};
    dec.layer = local_findings_.begin()->second.layer;
    dec.cause = local_findings_.begin()->second.cause;
    dec.action = "early_return";
    dec.local = true;
    dec.first_local_us = first_local_us_.value_or(0);
    write_event(*log_, dec);
    StepEndEvent end;
    end.step = step;
    end.action = "early_return";
    end.lr = lr;
    end.cpu_us = process_cpu_us();
    write_event(*log_, end);
    return false;
  }

  double eval_loss() {
    torch::NoGradGuard ng;
    workload_->module().eval();
    Batch b = workload_->make_batch(0, -1);
    to_device(b);
    workload_->prepare(b);
    ProbeFn identity = [](const std::string&, torch::Tensor t) { return t; };
    auto l = workload_->loss(workload_->forward(b, identity), b).item<double>();
    workload_->module().train();
    return l;
  }

  void write_final(int64_t steps_completed) {
    const double ev = eval_loss();
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
    fin.loss_scale = scaler_ ? scaler_->scale() : kNoValue;
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
  std::unique_ptr<inject::Faults> faults_;  // the agent (inject/faults.h)
  std::vector<std::unique_ptr<Detector>> detectors_;
  std::map<std::string, Finding> local_findings_;
  std::optional<int64_t> first_local_us_;
  std::vector<uint8_t> wire_buf_;  // cast / pre-divided send buffer (not used in place)
  torch::Tensor wire_t_;           // the same on the device (device = cuda)
  bool cuda_ = false;              // device = cuda: tensors on the rank's GPU, NCCL, autocast
  torch::Device device_{torch::kCPU};
  std::unique_ptr<CudaScanner> gpu_scan_;
  bool stage_send_ = false;  // a comm fault edits the device send buffer through a host copy
  torch::Tensor bucket_;     // every gradient, flat, backward order
  bool in_place_ = true;
  WireType wire_ = WireType::kFp32;
  bool consensus_ = true;
  bool has_watchdog_ = false;
  bool has_post_reduce_ = false;            // a kPostReduce detector is enabled
  detect::Detector* replica_ = nullptr;     // the `replica` detector, when enabled
  std::vector<std::string> replica_names_;  // replica.h: parameters, buffers, training_state
  ReplicaVote replica_vote_;                // of the last replica round
  bool resync_requested_ = false;
  bool localize_ = false;  // always-on localization: probe sums (note_output, localize)
  std::vector<std::string> probe_names_;
  std::vector<torch::Tensor> probe_pre_, probe_post_;  // 0-d fp32 sums per probe point
  int64_t localize_us_ = 0;                            // this step's cost of the above
  bool has_state_faults_ = false;      // a `state` fault: its hook runs at step start
  bool has_optimizer_faults_ = false;  // an optimizer: target: its hook runs after the update
  bool anomaly_mode_ = false;
  bool rollback_requested_ = false;
  std::optional<torch::ScalarType> half_;  // precision fp16/bf16: rounding at every probe
  std::optional<LossScaler> scaler_;       // fp16 only
  double lr_scale_ = 1.0;                  // lr_backoff: cumulative factor
  int64_t high_water_ = -1;  // highest step run so far (re-executions are steps <= this)
  std::unique_ptr<detect::Snapshot> snapshot_;  // rollback
  int64_t decided_us_ = 0;
  std::vector<std::string> module_names_;
  std::vector<torch::Tensor> buffer_snapshot_;
  bool aborting_ = false;
  std::string abort_cause_;
  std::unique_ptr<detect::StackComm> coll_;  // every collective of the rank
  double initial_eval_ = 0;
};

}  // namespace

namespace {

// The rank's engine. NCCL: world size 1 needs no MPI at all (no launcher, no MPI_Init); otherwise
// MPI gives rank and size and carries the unique id. Local rank -> device.
std::unique_ptr<Communicator> make_communicator(const Scenario& s) {
  if (s.job.backend != Backend::kNccl) return make_mpi_communicator();
  if (!compat::cuda_available()) {
    throw std::runtime_error("device cuda: this LibTorch has no CUDA or sees no GPU");
  }
  NcclOptions o;
  o.world = int(s.job.ranks);
  if (o.world > 1) {
    mpi_world(&o.rank, &o.world);
    o.broadcast_id = [](void* data, size_t bytes) { mpi_broadcast_bytes(data, bytes, 0); };
    o.take_down = [](int code) { abort_world(code); };
  }
  int local = o.rank;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"}) {
    if (const char* v = std::getenv(var)) {
      local = std::atoi(v);
      break;
    }
  }
  const int devices = cuda_device_count();
  if (devices <= 0) throw std::runtime_error("device cuda: no CUDA device visible to this rank");
  o.device = local % devices;
  o.init_timeout_ms = std::max<int64_t>(60000, s.detectors.collective_timeout_ms);
  return make_nccl_communicator(o);
}

}  // namespace

int run_rank_on(Scenario s, std::unique_ptr<Communicator> comm, const std::string& run_dir) {
  try {
    RankRunner runner(std::move(s), std::move(comm), run_dir);
    return runner.run();
  } catch (const WorldAborted& e) {
    return e.exit_code;  // MPI_Abort's part: this rank ends where it stood
  }
}

int run_rank(const std::string& scenario_path, const std::string& run_dir,
             std::optional<uint64_t> seed) {
  // Before anything can hang (MPI_Init included): this rank ends itself if the controller or
  // the launcher dies, or the job outlives its deadline (job_guard.h).
  const char* launcher_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!launcher_rank) launcher_rank = std::getenv("SLURM_PROCID");
  start_job_guard(fmt::format("nanchaos rank {}", launcher_rank ? launcher_rank : "0"));
  std::unique_ptr<Communicator> comm;
  try {
    // The scenario picks the engine, so it loads first (every rank reads the same file, so a bad
    // file fails every rank alike).
    Scenario s = load_scenario(scenario_path);
    if (seed) s.seed = *seed;
    comm = make_communicator(s);
    RankRunner runner(std::move(s), std::move(comm), run_dir);
    const int code = runner.run();
    finalize_mpi();
    return code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nanchaos rank: error: %s\n", e.what());
    // Peers may already wait in a collective: take the whole job down rather than hang it.
    abort_world(kRankExitSetup);
  }
}

}  // namespace nanchaos::harness
