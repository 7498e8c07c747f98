// The agent's hook layer: one rank's faults, dispatched at the step pipeline's hook points
// (DESIGN.md "The rank side"), with the evidence of every firing.
//
// Both jobs call it: the built-in loop (harness/job/runner.cpp) at each hook of its step, and
// the step API an external LibTorch program calls (inject/agent.h), which sits on top of it. It
// owns the injectors and the step's FaultContext; each actual change is written as one
// `inject {fault, kind, step, target, detail, replay}` event (harness/evidence/events.h), with
// `replay` true on a re-executed step (after a rollback, or the stack's replay).
// It knows nothing of the stack: what was injected is never told to a detector.
// Thread-safety: the rank's one training thread. Hooks do not block, except the `hang` kind's.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/evidence/events.h"
#include "harness/scenario/scenario.h"
#include "inject/injector.h"

namespace nanchaos::inject {

class Faults {
 public:
  /// Builds one injector per fault of `s` (its registered kind's factory). Throws
  /// std::runtime_error for a kind that is declared but not implemented. `log` must outlive
  /// this object; `s` need not.
  Faults(const harness::Scenario& s, harness::EventLog& log, int rank, int world);
  ~Faults();
  Faults(const Faults&) = delete;
  Faults& operator=(const Faults&) = delete;

  /// Starts step `step` (0-based); `reexecution`: the step runs again (after a rollback, or
  /// the stack's replay of a detected step): persistent faults fire again, transient ones
  /// do not, and their events carry `replay = true`.
  void begin_step(int64_t step, bool reexecution);
  int64_t step() const { return ctx_.step; }
  bool reexecution() const { return ctx_.reexecution; }

  /// How a `hang` fault stalls the device ahead of the next collective
  /// (Communicator::enqueue_stall); without one a device hang is refused by the fault.
  void set_device_stall(std::function<bool(int64_t duration_ms)> stall);

  /// True when some fault targets an optimizer state tensor (`optimizer:` targets).
  bool has_optimizer_targets() const { return optimizer_targets_; }
  bool empty() const { return injectors_.empty(); }

  // The hooks, in pipeline order (inject/injector.h says what each may change).
  void step_start();
  void training_state(TrainingState& st);
  void parameters(NamedTensors& params);
  /// `lr` times each firing fault's factor on this step, in fault order (`lr` when none fires).
  double scale_lr(double lr);
  void batch(harness::Batch& b);
  torch::Tensor activation(const std::string& module, torch::Tensor out);
  torch::Tensor loss(torch::Tensor loss);
  void gradients(NamedTensors& grads);
  void send_buffer(void* buf, size_t count, harness::WireType wire);
  void before_collective(const std::string& name);  ///< may block (`hang`)
  void optimizer_state(NamedTensors& states);
  void checkpoint_saved(const CheckpointWritten& written);  ///< rank 0 wrote a checkpoint

 private:
  harness::EventLog& log_;
  std::vector<std::string> kinds_;  // by fault index
  std::vector<std::unique_ptr<Injector>> injectors_;
  FaultContext ctx_;
  bool optimizer_targets_ = false;
};

}  // namespace nanchaos::inject
