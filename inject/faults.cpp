// The agent's hook layer; see faults.h.
#include "inject/faults.h"

#include <stdexcept>

#include "harness/evidence/event_types.h"
#include "harness/scenario/registry.h"

namespace nanchaos::inject {

Faults::Faults(const harness::Scenario& s, harness::EventLog& log, int rank, int world)
    : log_(log) {
  for (const auto& f : s.faults) {
    const auto& info = harness::fault_kinds().at(f.kind);
    if (!info.make) throw std::runtime_error("fault kind " + f.kind + " is not implemented yet");
    injectors_.push_back(info.make(f, s));
    if (kinds_.size() <= size_t(f.index)) kinds_.resize(size_t(f.index) + 1);
    kinds_[size_t(f.index)] = f.kind;
    optimizer_targets_ |= f.target && f.target->where == harness::TargetWhere::kOptimizer;
  }
  ctx_.rank = rank;
  ctx_.world = world;
  ctx_.seed = s.seed;
  ctx_.step = -1;
  ctx_.fired = [this](int fault, const std::string& target, nlohmann::json detail) {
    harness::InjectEvent e;
    e.fault = fault;
    e.kind = kinds_.at(size_t(fault));
    e.step = ctx_.step;
    e.target = target;
    e.detail = std::move(detail);
    e.replay = ctx_.reexecution;
    harness::write_event(log_, e);
  };
}

Faults::~Faults() = default;

void Faults::begin_step(int64_t step, bool reexecution) {
  ctx_.step = step;
  ctx_.reexecution = reexecution;
}

void Faults::set_device_stall(std::function<bool(int64_t)> stall) {
  ctx_.stall_device = std::move(stall);
}

void Faults::step_start() {
  for (auto& inj : injectors_) inj->on_step_start(ctx_);
}

void Faults::training_state(TrainingState& st) {
  for (auto& inj : injectors_) inj->on_training_state(ctx_, st);
}

void Faults::parameters(NamedTensors& params) {
  for (auto& inj : injectors_) inj->on_parameters(ctx_, params);
}

double Faults::scale_lr(double lr) {
  for (auto& inj : injectors_) lr *= inj->lr_factor(ctx_);
  return lr;
}

void Faults::batch(harness::Batch& b) {
  for (auto& inj : injectors_) inj->on_batch(ctx_, b);
}

torch::Tensor Faults::activation(const std::string& module, torch::Tensor out) {
  for (auto& inj : injectors_) out = inj->on_activation(ctx_, module, out);
  return out;
}

torch::Tensor Faults::loss(torch::Tensor loss) {
  for (auto& inj : injectors_) loss = inj->on_loss(ctx_, loss);
  return loss;
}

void Faults::gradients(NamedTensors& grads) {
  for (auto& inj : injectors_) inj->on_gradients(ctx_, grads);
}

void Faults::send_buffer(void* buf, size_t count, harness::WireType wire) {
  for (auto& inj : injectors_) inj->on_send_buffer(ctx_, buf, count, wire);
}

void Faults::before_collective(const std::string& name) {
  for (auto& inj : injectors_) inj->on_before_collective(ctx_, name);
}

void Faults::checkpoint_saved(const CheckpointWritten& written) {
  for (auto& inj : injectors_) inj->on_checkpoint_saved(ctx_, written);
}

void Faults::optimizer_state(NamedTensors& states) {
  for (auto& inj : injectors_) inj->on_optimizer_state(ctx_, states);
}

}  // namespace nanchaos::inject
