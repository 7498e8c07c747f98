// The reference stack: what a rank of the built-in jobs runs to detect, agree on and recover
// from a numerical fault (DESIGN.md "The step pipeline"; SCENARIO_FORMAT.md [detectors],
// [recovery]). The job owns the model, the data, the gradient bucket and the loop; it hands the
// stack a StepView at each hook point and asks it what to do. The stack owns:
//   - the enabled detectors (one file each, detectors/*.cpp) and this rank's consensus row;
//   - always-on localization (one fp32 sum per probed module output);
//   - the consensus rounds (consensus.h); the replay's checks (replay.h), its exchange and the
//     refinement of the decision;
//   - the fp16 dynamic loss scaler (GradScaler's found_inf rule);
//   - the recovery policies: skip, rollback (snapshots), lr_backoff, resync, abort, and the
//     max_consecutive escalation;
//   - every collective of the rank, through StackComm (with the watchdog).
// Every rank takes the same branches: a decision is made only from all-reduced data.
//
// Events written here: detect, decision, replica_check, recompute_check, detector_refused,
// scale_backoff, snapshot, rollback, resync (recovery.h), coll_enter/coll_leave (stack_comm.h).
// The job writes the rest.
// Thread-safety: the rank's one thread; nothing blocks except the collectives (watchdog-bounded
// when the `watchdog` detector is enabled).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "detectors/core/consensus.h"
#include "detectors/core/loss_scaler.h"
#include "detectors/core/replica.h"
#include "detectors/detector.h"
#include "detectors/stack/anomaly_engine.h"
#include "detectors/stack/recovery.h"
#include "detectors/stack/replay.h"
#include "detectors/stack/stack_comm.h"
#include "harness/comm/communicator.h"
#include "harness/evidence/events.h"
#include "harness/scenario/stack_config.h"

namespace nanchaos::detect {

/// The names the stack attributes to, fixed for the run.
struct JobLayout {
  std::vector<std::string> module_names;   ///< probed modules, forward order
  std::vector<std::string> grad_names;     ///< parameters, backward order (the bucket's order)
  std::vector<std::string> replica_names;  ///< parameters (forward), buffers, "training_state"
  bool cuda = false;                       ///< tensors on the rank's GPU (NCCL)
  std::optional<torch::ScalarType> half;   ///< precision fp16/bf16
};

/// Why the loop must stop: the `abort` event's reason and cause.
struct Stop {
  std::string reason;
  std::string cause;
};

/// The recovery state the stack carries from one step to the next: the lr_backoff factor, the
/// LR-raise tracker, a pending abort, the rollback snapshot (shared: a Snapshot never changes
/// once taken), the escalation counters and the last replica vote (resync's source).
struct Carry {
  double lr_scale = 1.0;
  harness::LrRaise lr_raise;
  bool aborting = false;
  std::string abort_cause;
  std::shared_ptr<const Snapshot> snapshot;
  int64_t consecutive = 0;  ///< detections in a row
  int64_t rollbacks = 0;    ///< since the count was last reset
  harness::ReplicaVote replica_vote;
};

/// Everything the stack carries from one step to the next, for an in-launch campaign's
/// checkpoint of the whole rank (harness/job/rank_runner.h): copies of the detectors (their
/// spike windows), the loss scaler, the Carry and the collective sequence number. The job's own
/// state (parameters, buffers, optimizer) is the job's Snapshot. Taken between steps only.
struct StackState {
  std::vector<std::shared_ptr<const Detector>> detectors;  ///< the stack's order
  std::optional<harness::LossScaler::State> scaler;
  Carry carry;
  int64_t seq = 0;  ///< StackComm's next collective number
};

class ReferenceStack {
 public:
  /// Makes the enabled detectors of `s` and the rank's StackComm over `comm`. `state` returns
  /// the job's training state (its scaler and lr_scale fields are filled in by the stack).
  /// `write_exit(code)` writes the job's `exit` event before a watchdog take-down.
  /// A recompute detector (Hook::kRecompute: sdc) on CUDA without the process's deterministic
  /// algorithms (at::globalContext().deterministicAlgorithms()) is refused: a
  /// `detector_refused {detector, reason}` event and a warning, and it never runs.
  ReferenceStack(const harness::StackConfig& s, harness::EventLog& log, harness::Communicator& comm,
                 JobLayout layout, torch::Device device, int watchdog_exit,
                 std::function<void(int)> write_exit, std::function<ModelState()> state);
  ~ReferenceStack();

  StackComm& comm() { return *coll_; }
  bool enabled() const { return !detectors_.empty(); }
  /// Anomaly mode is on for this backward (the `anomaly` detector, or a replay): a NaN raises
  /// there, and the job hands the message to check(kGradients) as `anomaly_message`.
  bool anomaly_mode() const { return anomaly_mode_ || replaying(); }
  /// Between begin_replay and end_replay.
  bool replaying() const { return replay_.active(); }
  /// The fp16 dynamic loss scaler (nullptr unless precision = fp16).
  harness::LossScaler* scaler() { return scaler_ ? &*scaler_ : nullptr; }
  /// lr_backoff's cumulative factor (1 until a backoff; a `state` fault may change it).
  double& lr_scale() { return carry_.lr_scale; }
  /// This step's cost of always-on localization (us).
  int64_t localize_us() const { return localize_us_; }

  // ---- an in-launch campaign's checkpoint (between steps)
  /// The stack's state now (see StackState).
  StackState checkpoint() const;
  /// Puts `st` back (fresh copies of its detectors: `st` can be restored again), bit-exact:
  /// the steps that follow run as they did after checkpoint().
  void restore(const StackState& st);

  // ---- between steps (the loop)
  /// Takes the rollback snapshot when `step` is due; forgets the last step's rollback request.
  void before_step(int64_t step);
  /// The escalation rules after a step: a policy abort, or max_consecutive detections in a row
  /// (counted across rollbacks: only a clean step past the high-water mark resets the count, so
  /// a fault that returns on every re-execution escalates instead of looping; SCENARIO_FORMAT.md
  /// "Recovery must terminate"). `high_water`: the highest step run so far.
  std::optional<Stop> after_step(int64_t step, bool detected, bool reexecuted, int64_t high_water);
  /// When the step asked for a rollback and a snapshot exists: restores it (bit-exact), writes
  /// `rollback` and returns the step to re-execute from.
  std::optional<int64_t> rollback(int64_t step);

  // ---- the step pipeline, in order
  /// Forgets the last step's findings and probe sums; resets the detectors.
  void begin_step(int64_t step);
  /// The learning rate this step applies (schedule x lr_backoff x faults), before its checks:
  /// a raise of >= 10x over the last step's travels in the consensus row, and a blow-up detected
  /// within 10 steps of it is attributed gradient_explosion (consensus.h LrRaise).
  void note_lr(int64_t step, double lr);
  /// Runs the detectors of `hook` on `view` into this rank's row (`detect` per finding). After
  /// kLoss, a non-finite-logits finding reads the probe sums to name the module.
  void check(Hook hook, const StepView& view);
  /// At step start: the `replica` detector's digest exchange, when enabled and due.
  void replica_round(StepView& view);
  /// Every probed module output (after the job's faults): the detectors' on_activation.
  void on_activation(const std::string& module, const torch::Tensor& out);
  /// Whether the job should hand its probe sums to note_output (always-on localization, and
  /// every replay; never in a recompute).
  bool localizing() const { return (localize_ || replaying()) && !recomputing_; }
  /// One fp32 sum of a module output, kept as a 0-d tensor (no host sync). `rounded`: the sum
  /// after the CPU path's half rounding.
  void note_output(const std::string& module, const torch::Tensor& out, bool rounded);
  /// The fused scan of the local gradients: first non-finite index and the magnitude that
  /// enters the SUM (max |g| x pre_scale) go into the row.
  void note_gradient_scan(const harness::ScanStats& pre, float pre_scale);
  /// The naive stack (no consensus): a rank that flagged something returns early from its
  /// step. Then call early_return, which writes the rank-local `decision`.
  bool wants_early_return() const;
  void early_return(int64_t step);
  /// The own time per phase of the step that just ended (harness/job/phase_clock.h, us): the
  /// next step's consensus summary carries it to every rank's kConsensus detectors.
  void note_phase_times(const harness::PhaseTimes& own_us) { phase_us_ = own_us; }
  /// The consensus: a fixed-size summary all-reduce every step, the [world x row] detail only
  /// when some rank flagged something, then the replay (`replay(step)`, the job's re-run of the
  /// step between begin_replay and end_replay) to refine attribution. Without consensus: no
  /// decision.
  harness::Decision decide(int64_t step, const std::function<ReplayResult(int64_t)>& replay);
  /// The loss scaler's update (found_inf from the consensus) and the policy's action on
  /// `decision`: sets *skip (no optimizer step) and returns whether the stack detected
  /// something this step to recover from (false for a report-only finding: a straggler).
  bool recover(harness::Decision& decision, int64_t step, bool* skip);
  /// After the gradient all-reduce: the post_reduce detectors on the reduced buffer's scan
  /// (`view.reduce_stats`), the same on every rank; a finding is decided without consensus.
  /// Returns `detected`, updated.
  bool post_reduce(StepView& view, int64_t step, bool detected, bool* skip);

  // ---- the recompute of a due step (Hook::kRecompute detectors: sdc), before decide()
  /// Whether a recompute detector is due at `step` (fixed from begin_step on; false in a replay
  /// and for a refused detector). When it is, on_activation() also keeps a float64 sum of every
  /// module output of the step's forward.
  bool recompute_due() const { return recompute_due_; }
  /// Starts the recompute: until end_recompute, check() and note_output() do nothing,
  /// localizing() is false and on_activation() only keeps the recompute's sums. The job then
  /// re-runs the step's forward and backward on the same batch, from the same buffers and RNG
  /// state, with the agent in re-execution (a transient fault does not fire again).
  void begin_recompute();
  /// Ends the recompute and runs the recompute detectors on `view` (the job sets `grads` and
  /// `recomputed_grads`; the stack adds both passes' activation sums), into this rank's row;
  /// writes `recompute_check {step, us, match}` (us: from begin_recompute).
  void end_recompute(StepView& view);

  // ---- the replay of a flagged step (replay.h), called by the job inside decide()'s `replay`
  /// Writes `replay_begin` and turns on anomaly mode; until end_replay, check(), on_activation()
  /// and note_output() serve the replay checks (no `detect` event, the step's row untouched),
  /// note_gradient_scan() does nothing and localizing() is true. The job then re-runs the step
  /// from its pre-step state through the same hook points.
  void begin_replay(int64_t step);
  /// Ends the replay: what it found on this rank (also written as `replay_end`). The stack
  /// shares every rank's result; a non-finite parameter on the blamed rank makes the cause
  /// `parameter`, else a module's non-finite output `activation` or `fp16_overflow`.
  ReplayResult end_replay(int64_t step);

 private:
  void run_detectors(Hook hook, const StepView& view);
  void run_one(Detector& d, const StepView& view);  // its check, into the row and the log
  void apply_policy(const harness::Decision& d, bool* skip);
  void update_scaler(harness::Decision* d, bool* skip);
  void refine(const ReplayResult& mine, harness::Decision* d);
  void consensus_detectors(const harness::SummaryCounts& counts, harness::Decision* d);
  ModelState state();          // the job's, with the stack's scaler and lr factor
  void fill_training_state();  // this row's kLossScale and kStepCounter

  const harness::StackConfig s_;  ///< its own copy: no faults, no expectations (stack_config.h)
  harness::EventLog& log_;
  JobLayout layout_;
  std::function<ModelState()> job_state_;
  int64_t step_ = 0;  // the step being run (begin_step .. the next begin_step)
  std::unique_ptr<StackComm> coll_;
  std::vector<std::unique_ptr<Detector>> detectors_;
  Detector* replica_ = nullptr;  // the `replica` detector, when enabled
  bool consensus_ = true;
  bool has_post_reduce_ = false;
  bool has_consensus_hook_ = false;  // a kConsensus detector: phase times ride on the summary
  harness::PhaseTimes phase_us_{};   // this rank's own phase times of its last step (us)
  bool anomaly_mode_ = false;
  std::optional<AnomalyModeHold> anomaly_hold_;  // while anomaly_mode_: the mode stays on
  bool localize_ = false;
  // this step
  std::vector<double> row_;   // this rank's consensus row (consensus.h)
  std::vector<double> rows_;  // [world x kRowWidth], filled only on a flagged step
  bool detail_ = false;       // rows_ holds every rank's row
  double global_max_abs_ = 0;
  std::map<int, Finding> local_findings_;  // by consensus bit: begin() is the first in order
  std::optional<int64_t> first_local_us_;
  int64_t decided_us_ = 0;
  ProbeSums probes_;  // always-on localization's sums of this step
  int64_t localize_us_ = 0;
  // the recompute (Hook::kRecompute)
  std::vector<Detector*> recompute_;  // the recompute detectors not refused
  bool recompute_due_ = false;        // this step
  bool recomputing_ = false;          // between begin_recompute and end_recompute
  int64_t recompute_t0_ = 0;
  std::vector<std::string> sum_modules_;               // probe order
  std::vector<torch::Tensor> step_sums_, again_sums_;  // float64 sums of the two forwards
  // the replay
  ReplayChecks replay_;
  // recovery
  std::optional<harness::LossScaler> scaler_;
  Carry carry_;
  bool rollback_requested_ = false;
};

}  // namespace nanchaos::detect
