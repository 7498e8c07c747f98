// Detector: a check at one hook point of the step pipeline (DESIGN.md).
//
// Detectors only look; the runner turns findings into the consensus bits, the decision and the
// recovery. A detector returns a Finding with what it can tell locally (layer, cause); the
// consensus round then makes every rank see every rank's findings.
// Each detector is one file: the class and its registration (harness/scenario/registry.h
// DetectorInfo: name, doc, keys, pipeline order, presets, consensus column, attribution rule). Its
// bit in the consensus word is its index in harness::detector_order(), the detectors sorted by that
// order. Thread-safety: called from the rank's single thread; must not block.
#pragma once

#include <torch/torch.h>

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "detectors/core/consensus.h"
#include "detectors/core/fused_scan.h"
#include "detectors/core/straggler.h"
#include "harness/scenario/detector_registry.h"
#include "harness/scenario/stack_config.h"
#include "harness/tensor/batch.h"

namespace nanchaos::detect {

using harness::detector_bit;

/// kCollective: not called per step; the detector's presence arms the collective deadline.
/// kReplica: at step start on the steps due() accepts, after the runner exchanged the ranks'
/// state digests (detectors/core/replica.h).
/// kRecompute: before the consensus, on the steps due() accepts, after the job recomputed the
/// step's forward and backward on the same batch (ReferenceStack::begin_recompute).
/// kConsensus: after the consensus summary round, with every rank's own phase times of the
/// previous step (`rank_phase_us`, which ride on the summary: no extra collective). Every rank
/// sees the same data, so its Finding (which names `ranks`) is decided without a second round,
/// as post_reduce's.
enum class Hook {
  kStepStart,
  kReplica,
  kBatch,
  kLoss,
  kGradients,
  kRecompute,
  kConsensus,
  kPostReduce,
  kCollective
};

struct Finding {
  std::string layer;           ///< "" when the detector cannot tell
  std::string cause;           ///< "" when the detector cannot tell
  int code = 0;                ///< detector-specific small integer that travels in the consensus
  std::vector<int64_t> ranks;  ///< kConsensus: the ranks it names, ascending (empty otherwise)
};

/// What a detector may look at. Pointers are null outside their hook.
struct StepView {
  int64_t step = 0;
  int rank = 0;
  int world = 1;
  const std::vector<std::string>* module_names = nullptr;  ///< probed modules, forward order
  const harness::Batch* batch = nullptr;                   ///< kBatch: as the model receives it
  const torch::Tensor* loss = nullptr;                     ///< kLoss: scalar float32
  const torch::Tensor* logits = nullptr;                   ///< kLoss
  const harness::ScanStats* grad_stats = nullptr;          ///< kGradients: backward order
  const std::vector<std::string>* grad_names = nullptr;  ///< kGradients/kStepStart: backward order
  const std::vector<torch::Tensor>* params = nullptr;    ///< kStepStart: backward order
  const harness::ScanStats* reduce_stats = nullptr;      ///< kPostReduce
  double global_max_abs = 0;                             ///< kPostReduce: max |g| over all ranks
  harness::WireType wire = harness::WireType::kFp32;
  const std::string* anomaly_message = nullptr;  ///< kGradients: anomaly mode's error, if any
  /// kReplica: every rank's whole-state digest (world entries, rank order).
  const std::vector<uint64_t>* replica_combined = nullptr;
  /// kReplica: [world x replica_names->size()] per-tensor digests, row-major; empty when every
  /// combined digest agreed (the detail is exchanged only then).
  const std::vector<uint64_t>* replica_per_tensor = nullptr;
  /// kReplica: the digested tensors: parameters (forward order), buffers, "training_state".
  const std::vector<std::string>* replica_names = nullptr;
  /// kReplica: how many of replica_names are parameters (the first ones).
  size_t replica_params = 0;
  /// kRecompute: the local gradients of the step's computation (after the agent's gradient
  /// faults) and of the recompute, backward order (grad_names), same shapes and dtypes.
  const std::vector<torch::Tensor>* grads = nullptr;
  const std::vector<torch::Tensor>* recomputed_grads = nullptr;
  /// kRecompute: the float64 sum of every probed module output of the step's forward and of
  /// the recompute's (0-d tensors, probe order; the stack collects them, ReferenceStack).
  const std::vector<torch::Tensor>* activation_sums = nullptr;
  const std::vector<torch::Tensor>* recomputed_activation_sums = nullptr;
  /// kRecompute: the probed module of each activation sum (probe order).
  const std::vector<std::string>* activation_modules = nullptr;
  /// kConsensus: every rank's own time per phase at the previous step (us; world entries, rank
  /// order; all zero before the first step ended). harness/job/phase_clock.h.
  const std::vector<harness::PhaseTimes>* rank_phase_us = nullptr;
};

/// The backward op an anomaly-mode message names ("MulBackward0"), or the message itself.
inline std::string backward_op(const std::string& message) {
  const auto a = message.find("Function '");
  if (a == std::string::npos) return message.substr(0, message.find('\n'));
  const auto b = message.find('\'', a + 10);
  return message.substr(a + 10, b == std::string::npos ? std::string::npos : b - a - 10);
}

class Detector {
 public:
  explicit Detector(std::string name) : name_(std::move(name)) {}
  virtual ~Detector() = default;
  const std::string& name() const { return name_; }
  virtual Hook hook() const = 0;
  /// Called before each step (and each replay) to forget per-step state.
  virtual void reset() {}
  /// Every named module's output, in forward order (probe points; see workload.h).
  virtual void on_activation(const std::string& /*module*/, const torch::Tensor& /*out*/) {}
  /// True for the detector that needs LibTorch's anomaly mode on for every backward.
  virtual bool wants_anomaly_mode() const { return false; }
  /// Whether the detector runs at `step` (kReplica: every replica_every steps).
  virtual bool due(int64_t /*step*/) const { return true; }
  virtual std::optional<Finding> check(const StepView& view) = 0;
  /// A copy of the detector with its state across steps (the spike windows): the stack's
  /// checkpoint of an in-launch campaign (reference_stack.h StackState). DetectorImpl writes it.
  virtual std::unique_ptr<Detector> clone() const = 0;

 private:
  std::string name_;
};

/// The base of every detector: clone() through the copy constructor, so a detector file stays
/// one class (`class LossSpikeDetector final : public DetectorImpl<LossSpikeDetector>`).
template <class Derived>
class DetectorImpl : public Detector {
 public:
  using Detector::Detector;
  std::unique_ptr<Detector> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

}  // namespace nanchaos::detect
