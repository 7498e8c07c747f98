// The replay's checks and the module localization they share with the step.
//
// After a detection every rank re-runs the flagged step from its pre-step state with a probe on
// every module and LibTorch's anomaly mode on (Megatron's rerun, fairseq's probes, PyTorch's
// anomaly mode; DESIGN.md "The step pipeline"). Persistent faults fire again, transient ones do
// not. Whether the fault came back is decided by the same detector classes that run on the step:
// every registration with `replay = true` (harness/scenario/registry.h: param, batch, activation,
// loss, grad, anomaly; stateless tests for a non-finite value), made for the replay whatever the
// scenario enables, so a replay's verdict never depends on the enabled set. The module it names
// comes from the same probe sums as always-on localization (ProbeSums).
// Thread-safety: the rank's one thread.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "detectors/detector.h"
#include "detectors/stack/anomaly_engine.h"

namespace nanchaos::detect {

/// What the replay of one step found on this rank (the stack exchanges and judges it).
struct ReplayResult {
  bool reproduced = false;  ///< a replay check flagged: batch, module, loss, gradient, anomaly
  int first_module = -1;    ///< first non-finite module output, forward index
  int first_grad = -1;      ///< first non-finite gradient, backward index
  int first_param = -1;     ///< first non-finite parameter at step start, backward index
  bool overflow = false;    ///< that module's output left the half range (fp16_overflow)
  std::string anomaly_op;   ///< the backward op anomaly mode named ("" when none)
};

/// One fp32 sum per probed module output, kept as 0-d tensors (no host sync until read; issue
/// 15's always-on localization). A sum is non-finite exactly when the output holds a NaN or
/// +-inf (barring a finite sum that overflows fp32, which needs |values| ~ 1e33), so the first
/// non-finite sum names the first module whose output went non-finite while its input, the
/// previous output, was finite.
class ProbeSums {
 public:
  struct First {
    int module = -1;        ///< forward index into the layout's module names; -1: all finite
    bool overflow = false;  ///< the half type's range was left there (DESIGN.md fp16_overflow)
  };

  void clear();
  /// `rounded`: the sum after the CPU path's half rounding of the same output.
  void add(const std::string& module, const torch::Tensor& out, bool rounded);
  bool empty() const { return pre_.empty(); }
  /// Reads the sums once (one device sync on CUDA). On the CPU path an output that was finite
  /// in fp32 and non-finite after the half rounding overflowed; under CUDA autocast the module
  /// computed in the half type itself, so an fp16/bf16 output whose sum is +-inf (no NaN)
  /// counts as an overflow.
  First first_nonfinite(const std::vector<std::string>& modules) const;

 private:
  std::vector<std::string> names_;
  std::vector<torch::Tensor> pre_, post_;
  std::vector<bool> half_typed_;  // the output's dtype is fp16 or bf16 (CUDA autocast)
};

/// The replay of one rank: its detectors, their findings and probe sums for the step being
/// replayed, and anomaly mode while it runs.
class ReplayChecks {
 public:
  /// Makes every registered detector with `replay = true` (keys from `s`).
  explicit ReplayChecks(const harness::StackConfig& s);

  /// Forgets the last replay's findings and probe sums, resets the detectors and turns on
  /// anomaly mode for the replay's forward and backward, until end().
  void begin();
  /// Between begin() and end().
  bool active() const { return anomaly_.has_value(); }
  /// The replay detectors of `hook` on `view` (no evidence, no consensus row).
  void check(Hook hook, const StepView& view);
  void on_activation(const std::string& module, const torch::Tensor& out);
  /// A module output's probe sum (ProbeSums::add).
  void note_output(const std::string& module, const torch::Tensor& out, bool rounded);
  /// Turns anomaly mode back off and returns the result: reproduced when any replay detector
  /// flagged; first_param, first_module and first_grad from the findings whose registered
  /// consensus column carries that index (param, activation, grad), overflow from the probe
  /// sums (`modules`: the probed modules, forward order) when they name the same module,
  /// anomaly_op from the anomaly detector.
  ReplayResult end(const std::vector<std::string>& modules);

 private:
  std::vector<std::unique_ptr<Detector>> detectors_;
  std::map<std::string, Finding> findings_;
  ProbeSums probes_;
  std::optional<AnomalyModeHold> anomaly_;
};

}  // namespace nanchaos::detect
