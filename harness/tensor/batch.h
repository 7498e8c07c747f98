// One micro-batch as a rank's model receives it: the type the job makes, the agent's batch
// faults change and the stack's batch detector reads (so neither needs the job's headers).
//   mlp:         inputs float32 [batch, features]; labels int64 [batch] (cross_entropy,
//                naive_log_softmax) or float32 [batch, classes] (mse, masked_mse); no mask.
//   transformer: inputs int64 [batch, seq_len]; labels int64 [batch, seq_len] (next token);
//                mask float32 [batch, seq_len] (1 = counts in the loss).
// Shapes and contents: harness/job/workload.h.
#pragma once

#include <torch/torch.h>

namespace nanchaos::harness {

struct Batch {
  torch::Tensor inputs;
  torch::Tensor labels;
  torch::Tensor mask;  ///< transformer only; undefined for mlp
};

}  // namespace nanchaos::harness
