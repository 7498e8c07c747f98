// A LibTorch optimizer's per-parameter state, read the same way by the built-in job
// (harness/job/runner.cpp: replica digests, resync, snapshots) and by the C++ agent of external
// programs (inject/agent.cpp: the `final` digests), plus the final-state digests themselves.
//
// Covers what the built-in job uses: torch::optim::Adam and AdamW (exp_avg, exp_avg_sq, the
// step counter PyTorch's bias correction divides by) and SGD (momentum_buffer when momentum is
// on). Other optimizers have no named state here (an empty list, step -1).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/common/digest.h"

namespace nanchaos::harness {

using NamedStateTensors = std::vector<std::pair<std::string, torch::Tensor>>;

/// A parameter's optimizer state as named tensors sharing storage with the optimizer's (Adam,
/// AdamW: exp_avg, exp_avg_sq; SGD: momentum_buffer when momentum is on); empty without state
/// (`st` null: the parameter has not been stepped yet).
NamedStateTensors state_tensors(torch::optim::OptimizerParamState* st);

/// Adam/AdamW's step counter (bias correction: PyTorch's `state["step"]`), -1 otherwise.
int64_t state_step(torch::optim::OptimizerParamState* st);
/// Sets it (Adam/AdamW); no-op for other states.
void set_state_step(torch::optim::OptimizerParamState* st, int64_t step);

/// The state `opt` would create for `p` at its first step (Adam/AdamW: zero exp_avg and
/// exp_avg_sq shaped like `p`, step 0; max_exp_avg_sq too with amsgrad), for a load that fills
/// it in place (a "dcp" checkpoint's shards); nullptr for optimizers whose state here is empty
/// (SGD: this job runs it without momentum).
std::unique_ptr<torch::optim::OptimizerParamState> initial_state(const torch::optim::Optimizer& opt,
                                                                 const torch::Tensor& p);

/// A copy that shares no tensor with `st` (OptimizerParamState::clone copies handles only).
std::unique_ptr<torch::optim::OptimizerParamState> deep_clone(
    const torch::optim::OptimizerParamState& st);

/// One tensor into a digest (harness/common/digest.h): its contiguous CPU bytes as one piece.
void digest_tensor(Digest& d, const torch::Tensor& t);

/// The `final` event's digests (harness/evidence/events.h), as 16 hex digits each.
/// params_hash: every parameter (in the given order), then every buffer. optim_hash: per
/// parameter with state, Adam/AdamW's exp_avg, exp_avg_sq and step, SGD's momentum buffer.
/// `params_finite`: no parameter holds a NaN or +-inf.
struct FinalDigests {
  std::string params_hash, optim_hash;
  bool params_finite = true;
};
FinalDigests final_digests(const std::vector<torch::Tensor>& params,
                           const std::vector<torch::Tensor>& buffers,
                           torch::optim::Optimizer* optimizer);

}  // namespace nanchaos::harness
