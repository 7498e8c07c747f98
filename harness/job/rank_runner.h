// RankRunner: one rank of a built-in job (the `mlp` and `transformer` workloads). Private to
// harness/job/ (runner.h is the public entry).
//
// The job owns the model, the data, the optimizer, the gradient bucket and the order of the
// steps; at each hook point of DESIGN.md "The step pipeline" it calls the agent's hook layer
// (inject/faults.h: what is injected) and the reference stack (detectors/stack/
// reference_stack.h: what is detected, agreed and recovered). Neither knows the other.
//   runner.cpp       the loop: run(), one step, its forward/backward, the replay (the
//                    orchestration, read top to bottom)
//   campaign_rank.cpp the in-launch campaign: checkpoint, fault windows, restore
//   rank_runner.cpp  set-up and the job's state for the agent and the stack: optimizer state,
//                    the `state` kind's hook, the ModelState view, the end records (final,
//                    exit, abort)
// Thread-safety: the rank's one thread; blocks only in the stack's collectives.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "detectors/stack/reference_stack.h"
#include "harness/comm/communicator.h"
#include "harness/evidence/event_types.h"
#include "harness/evidence/events.h"
#include "harness/job/grad_bucket.h"
#include "harness/job/phase_clock.h"
#include "harness/job/runner.h"
#include "harness/job/workload.h"
#include "harness/scenario/scenario.h"
#include "harness/tensor/torch_compat.h"
#include "inject/faults.h"

namespace nanchaos::harness {

class RankRunner {
 public:
  /// Writes `start` and `clock`, builds the workload, the bucket, the optimizer, the agent's
  /// faults and the stack. Throws std::runtime_error when the communicator's world size is not
  /// [job].ranks.
  RankRunner(Scenario s, std::unique_ptr<Communicator> comm, const std::string& run_dir);
  /// Runs [job].steps steps (rollbacks re-execute some); returns the rank's exit code (0, or
  /// kRankExitAborted after a coordinated abort).
  int run();
  /// The in-launch campaign's loop (runner.h run_campaign_on; campaign_rank.cpp).
  int run_campaign(const std::vector<InLaunchFault>& faults);

 private:
  // ---- an in-launch campaign (campaign_rank.cpp)
  /// The whole rank between steps: the job's model state and loop state, the stack's state.
  struct Checkpoint {
    std::unique_ptr<detect::Snapshot> model;
    detect::StackState stack;
    int64_t high_water = -1;
  };
  Checkpoint checkpoint(int64_t step);
  void restore(const Checkpoint& cp);
  /// The agent of `s` (its [[fault]]s) in place of the current one.
  void install_faults(const Scenario& s);
  void run_fault_window(const InLaunchFault& f, int64_t step);

  // ---- checkpoints on disk ([checkpoint], checkpoint_rank.cpp)
  /// Why a checkpoint was rejected: the first bad tensor ("fc1.weight", "" when the file itself
  /// does not load; a "dcp" shard that is missing or does not load: the first tensor it held), a
  /// short reason, and the rank whose shard holds it (format "dcp"; -1: "torch"'s one file).
  struct CheckpointRejection {
    std::string layer, why;
    int rank = -1;
  };
  /// The training state by name in the manifest's order (parameters, buffers, optimizer state,
  /// loss scaler, lr_backoff factor, CPU RNG); tensors share storage with the live state.
  std::vector<std::pair<std::string, torch::Tensor>> training_state_tensors();
  /// Writes the checkpoint at `step` (the state before step `step` runs) and prunes: format
  /// "torch": rank 0 alone; "dcp": every rank its shard, then rank 0 the metadata (collective).
  void save_checkpoint(int64_t step);
  void save_checkpoint_dcp(int64_t step);
  std::optional<CheckpointRejection> load_checkpoint(const std::filesystem::path& dir,
                                                     int64_t step);
  /// Format "dcp": reads every rank's shard (each rank decides alone, on the same files: the
  /// ranks agree without a collective).
  std::optional<CheckpointRejection> load_checkpoint_dcp(const std::filesystem::path& dir,
                                                         int64_t step);
  /// One tensor of a checkpoint into the live state: parameters and buffers by copy, the loss
  /// scaler and lr factor into `stack` (taken from the stack on first use), the CPU RNG state;
  /// optimizer tensors are the caller's.
  void restore_tensor(const std::string& name, torch::Tensor& live, const torch::Tensor& loaded,
                      std::optional<detect::StackState>& stack);
  /// The file ("torch") or folder ("dcp") of the checkpoint at `step`, as events name it.
  std::filesystem::path checkpoint_path(const std::filesystem::path& dir, int64_t step) const;
  /// Loads the newest good checkpoint under RUN/checkpoints; returns its step (0: none, the
  /// state as built).
  int64_t resume();

  // ---- the loop (runner.cpp)
  std::optional<detect::Stop> train(int64_t& step, int64_t to);
  int finish();
  bool run_step(int64_t step);
  bool forward_backward(int64_t step, detect::StepView& view, double* loss_value);
  ProbeFn probe();
  std::string backward(torch::Tensor& loss);
  detect::ReplayResult replay(int64_t step);
  void recompute(int64_t step, detect::StepView& view);
  bool early_return(int64_t step, double lr);
  void update(bool skip, double lr, const ScanStats& post);
  /// Ends a stretch of the step (phase_clock.h); nothing during a replay, whose re-run of the
  /// step's phases is part of the consensus it happens in.
  void mark(std::optional<StepPhase> phase);
  /// The step's phase times into `end` and to the stack (the next consensus carries them).
  void end_phases(StepEndEvent& end);

  // ---- set-up, state and records (rank_runner.cpp)
  detect::StepView step_view(int64_t step) const;
  inject::NamedTensors named_parameters() const;
  inject::NamedTensors gradients();
  inject::NamedTensors optimizer_states();
  void apply_state_faults();
  detect::ModelState model_state();
  AllReduceFloats buffer_sum(int64_t step);
  void autocast(std::optional<compat::CudaAutocast>& ac) const;
  /// forward + loss + the agent's loss faults (runner.cpp); `logits` gets the model's output.
  torch::Tensor forward_loss(const Batch& batch, torch::Tensor& logits);
  /// The generators a forward may draw from (dropout): the CPU's and, on CUDA, the device's.
  struct RngState {
    torch::Tensor cpu, cuda;
  };
  RngState rng_state() const;
  void set_rng_state(const RngState& st) const;
  void clip_gradients(double sq_norm);
  void zero_grads() { bucket_->zero(); }  // never Optimizer::zero_grad (2.x may undefine grads)
  void write_final(int64_t steps_completed);
  void write_exit(int code);
  int finish_abort(int64_t step, const std::string& reason, const std::string& cause);

  Scenario s_;
  std::string run_dir_;
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
  int64_t high_water_ = -1;     // highest step run so far (re-executions are steps <= this)
  bool checkpointing_ = false;  // run(): [checkpoint] saves (never in an in-launch campaign)
  int64_t resumed_from_ = -1;   // the step this launch resumed from (its checkpoint exists)
  std::vector<torch::Tensor> buffer_snapshot_;
  Batch step_batch_;   // the step's batch as the model received it (the recompute's)
  RngState step_rng_;  // the generators before the step's forward (a recompute's steps only)
  double initial_eval_ = 0;
  std::unique_ptr<PhaseClock> phases_;  // own time per phase of the step (the straggler's input)
};

}  // namespace nanchaos::harness
