// The reference stack's recovery state: what `rollback`, `resync` and the `replica` detector
// read and write of a rank's training state (SCENARIO_FORMAT.md "More detectors and recovery").
//
// ModelState is a view the job hands over: the parameters and buffers (tensor handles, updated
// in place), the optimizer, the fp16 loss scaler and the lr_backoff factor. Nothing here keeps
// it; every call reads it afresh.
// Thread-safety: the rank's one thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "detectors/core/loss_scaler.h"
#include "detectors/core/replica.h"
#include "detectors/stack/stack_comm.h"
#include "harness/evidence/events.h"
#include "harness/scenario/stack_config.h"

namespace nanchaos::detect {

struct ModelState {
  std::vector<torch::Tensor> params;   ///< forward (registration) order
  std::vector<torch::Tensor> buffers;  ///< the model's buffers (BatchNorm running statistics)
  torch::optim::Optimizer* optimizer = nullptr;
  harness::LossScaler* scaler = nullptr;  ///< fp16 only
  double* lr_scale = nullptr;             ///< lr_backoff's cumulative factor (never null)
};

/// The largest optimizer step counter over `m.params` (Adam's `step`); -1 when the optimizer
/// keeps none (SGD) or there is no optimizer.
int64_t max_step_counter(const ModelState& m);

/// One XXH3 digest per replica entry (replica.h), in the contract's order: each parameter with
/// its optimizer state (tensors and step counter), each buffer, then the training state (loss
/// scale, learning-rate factor): params.size() + buffers.size() + 1 values.
std::vector<uint64_t> replica_digests(const ModelState& m);

/// An in-memory copy of a rank's state for `rollback`: parameters, buffers, optimizer state
/// (deep copies) and the loss scaler's state, at the start of `step` (the data position: batches
/// derive from (seed, rank, step), and no op draws from the global RNG). Restoring is bit-exact.
class Snapshot {
 public:
  Snapshot(int64_t step, const ModelState& m);
  ~Snapshot();
  int64_t step() const { return step_; }
  /// Copies the state back into `m` (which must be the state it was taken from).
  void restore(const ModelState& m) const;

 private:
  int64_t step_;
  std::vector<torch::Tensor> params_, buffers_;
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> optim_;  // forward order
  std::optional<harness::LossScaler::State> scaler_;
};

/// What the `[recovery] policy` list does about one detection (SCENARIO_FORMAT.md "[recovery]"):
/// `abort` wins; `none` trains on; otherwise the step is skipped, `rollback` re-executes from the
/// last snapshot, `resync` applies to a detection whose ranks are a vote's minority (`by_vote`:
/// the registry's `ranks_by_vote`, the replica detector), and `lr_backoff` multiplies the
/// learning rate by lr_backoff_factor from now on (combined as "rollback+lr_backoff").
struct PolicyAction {
  std::string action;  ///< the `decision` event's action: skip_step, rollback, resync, abort, none
  bool skip = false;   ///< no optimizer step this step
  bool abort = false;
  bool rollback = false;
  bool resync = false;
  double lr_factor = 1.0;  ///< onto the cumulative lr_backoff factor
};
PolicyAction choose_action(const harness::RecoveryConfig& pol, bool by_vote);

/// Policy `resync`: the minority ranks of `vote` receive parameters, buffers, optimizer state
/// (tensors and step counters), the loss scaler's state and the learning-rate factor from the
/// vote's source, bit-exact (a SUM where only the source contributes, as int64; two collectives,
/// `resync_layout` and `resync`). Every rank must hold the same layout (the same optimizer state
/// tensors): when one does not, nothing is copied and the reason is returned (the job must
/// abort); "" on success. Writes the `resync` event either way.
std::string resync(const ModelState& m, const harness::ReplicaVote& vote, StackComm& comm,
                   harness::EventLog& log, int64_t step);

}  // namespace nanchaos::detect
