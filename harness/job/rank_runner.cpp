// RankRunner's set-up and the job's state as the agent and the stack see it (rank_runner.h):
// the constructor, parameters and gradients by name, optimizer state, the `state` kind's hook,
// the ModelState view, and the end records (final, exit, abort).
#include "harness/job/rank_runner.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <mutex>

#include "detectors/detector.h"
#include "harness/common/blas_threads.h"
#include "harness/common/check.h"
#include "harness/common/log.h"
#include "harness/common/proc_status.h"
#include "harness/common/rank_host.h"
#include "harness/common/run_delay.h"
#include "harness/evidence/clock_sync.h"
#include "harness/evidence/event_paths.h"
#include "harness/evidence/event_types.h"
#include "harness/job/runner.h"
#include "harness/scenario/registry.h"
#include "harness/tensor/optim_state.h"

namespace nanchaos::harness {
namespace {

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// LibTorch warnings (anomaly mode prints a forward traceback per detection) are debug lines
// (NANCHAOS_LOG=debug); at the default level they would drown the launcher log.
void torch_warning(const std::string& msg) { log::debug("torch warning: {}", first_line(msg)); }

}  // namespace

using inject::NamedTensors;

RankRunner::RankRunner(Scenario s, std::unique_ptr<Communicator> comm, const std::string& run_dir)
    : s_(std::move(s)), run_dir_(run_dir), comm_(std::move(comm)) {
  rank_ = comm_->rank();
  set_check_rank(rank_);  // check messages name this rank (harness/common/check.h)
  world_ = comm_->world_size();
  std::filesystem::create_directories(events_dir(run_dir));
  log_ = std::make_unique<EventLog>(event_log_path(run_dir, rank_));
  StartEvent start;
  start.rank = rank_;
  start.world = world_;
  start.pid = getpid();
  start.host = this_host();
  start.pidns = this_pid_namespace();
  start.seed = s_.seed;
  write_event(*log_, start);
  // Against the controller's clock (clock_sync.h): ranks on other hosts are put on its timeline.
  log_clock_from_env([&](nlohmann::json fields) { log_->write("clock", std::move(fields)); });
  if (world_ != s_.job.ranks) {
    throw std::runtime_error(fmt::format("{}: [job].ranks is {} but the job has {} ranks", s_.file,
                                         s_.job.ranks, world_));
  }
  torch::set_num_threads(1);
  pin_blas_threads(1);  // OpenBLAS's own pool, which set_num_threads misses (blas_threads.h)
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
  install_faults(s_);
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
      harness::stack_config(s_), *log_, *comm_, std::move(layout), device_, kRankExitWatchdog,
      [this](int code) { write_exit(code); }, [this] { return model_state(); });
  detect::StackComm& coll = stack_->comm();
  phases_ = std::make_unique<PhaseClock>(PhaseClock::Sources{
      monotonic_ns, [&coll] { return coll.run_delay().ns(); },
      [&coll] { return coll.waited().wall_ns; }, [&coll] { return coll.waited().run_delay_ns; }});
}

void RankRunner::install_faults(const Scenario& s) {
  faults_ = std::make_unique<inject::Faults>(s, *log_, rank_, world_);
  faults_->set_device_stall([this](int64_t ms) { return comm_->enqueue_stall(ms); });
  stage_send_ =
      cuda_ && harness::any_fault_kind(s.faults, &harness::FaultKindInfo::edits_send_buffer);
  has_state_faults_ =
      harness::any_fault_kind(s.faults, &harness::FaultKindInfo::edits_training_state);
  has_optimizer_faults_ = faults_->has_optimizer_targets();
}

/// The names every hook's view carries; the hook's own pointers are set by the caller.
detect::StepView RankRunner::step_view(int64_t step) const {
  detect::StepView view;
  view.step = step;
  view.rank = rank_;
  view.world = world_;
  view.module_names = &module_names_;
  view.grad_names = &bwd_names_;
  return view;
}

/// Every parameter's optimizer state tensors as PARAM.STATE (forward order), sharing storage.
NamedTensors RankRunner::optimizer_states() {
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
void RankRunner::apply_state_faults() {
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
detect::ModelState RankRunner::model_state() {
  detect::ModelState m;
  m.params = fwd_params_;
  for (auto& [name, b] : workload_->buffers()) m.buffers.push_back(b);
  m.optimizer = opt_.get();
  return m;  // the stack fills in its loss scaler and lr_backoff factor
}

/// The buffer broadcast's SUM all-reduce of fp32 values, through the stack's collectives.
AllReduceFloats RankRunner::buffer_sum(int64_t step) {
  return [this, step](float* data, size_t n) {
    stack_->comm().collective("buffer_broadcast", data, n, DType::kFp32, step);
  };
}

/// Real autocast on CUDA for precision fp16/bf16 (the CPU path emulates it by rounding every
/// probed module output through the half type instead).
void RankRunner::autocast(std::optional<compat::CudaAutocast>& ac) const {
  if (cuda_ && half_) ac.emplace(*half_);
}

RankRunner::RngState RankRunner::rng_state() const {
  RngState st;
  auto cpu = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> ranks(compat::default_generator_mutex());
    std::lock_guard<std::mutex> lock(cpu.mutex());
    st.cpu = cpu.get_state();
  }
  if (cuda_) {
    auto gpu = at::globalContext().defaultGenerator(device_);
    std::lock_guard<std::mutex> lock(gpu.mutex());
    st.cuda = gpu.get_state();
  }
  return st;
}

void RankRunner::set_rng_state(const RngState& st) const {
  if (st.cpu.defined()) {
    auto cpu = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> ranks(compat::default_generator_mutex());
    std::lock_guard<std::mutex> lock(cpu.mutex());
    cpu.set_state(st.cpu);
  }
  if (st.cuda.defined()) {
    auto gpu = at::globalContext().defaultGenerator(device_);
    std::lock_guard<std::mutex> lock(gpu.mutex());
    gpu.set_state(st.cuda);
  }
}

/// Parameters with their names, forward order (what parameter faults match against).
NamedTensors RankRunner::named_parameters() const {
  NamedTensors params;
  for (size_t i = 0; i < fwd_params_.size(); ++i)
    params.emplace_back(fwd_names_[i], fwd_params_[i]);
  return params;
}

/// The gradients, each a view into the bucket (forward order, what gradient faults match).
NamedTensors RankRunner::gradients() {
  bucket_->realias();
  NamedTensors grads;
  for (size_t i = 0; i < fwd_params_.size(); ++i)
    grads.emplace_back(fwd_names_[i], fwd_params_[i].grad());
  return grads;
}

// Global-norm clipping in fp64 from the post-reduce scan (never inf for finite gradients).
void RankRunner::clip_gradients(double sq_norm) {
  const double norm = std::sqrt(sq_norm);
  const double coef = s_.workload.grad_clip / (norm + 1e-6);
  if (coef >= 1.0 || !std::isfinite(norm)) return;
  torch::NoGradGuard ng;
  for (auto& p : fwd_params_) p.grad().mul_(coef);
}

void RankRunner::write_final(int64_t steps_completed) {
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
void RankRunner::write_exit(int code) {
  ExitEvent ex;
  ex.code = code;
  ex.vm_hwm_kib = vm_hwm_kib();
  write_event(*log_, ex);
}

int RankRunner::finish_abort(int64_t step, const std::string& reason, const std::string& cause) {
  AbortEvent ab;
  ab.step = step;
  ab.reason = reason;
  ab.cause = cause;
  write_event(*log_, ab);
  write_final(step + 1);
  write_exit(kRankExitAborted);
  return kRankExitAborted;
}

}  // namespace nanchaos::harness
