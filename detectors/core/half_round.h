// Half-precision emulation on CPU: precision = "fp16" / "bf16" rounds every named module's output
// through the half type in forward and the incoming gradient in backward (docs/scenario-format.md
// [job].precision). The conversion is c10::Half's / c10::BFloat16's: round to nearest even, values
// whose magnitude rounds past the largest finite half (65504 for fp16) become +-inf, exactly as
// an fp16 autocast kernel's output would.
//
//   auto y = round_through_half(x, torch::kHalf);   // x: float32, any shape; y: float32, same
//   shape
#pragma once

#include <torch/torch.h>

namespace nanchaos::harness {

struct RoundThroughHalf : public torch::autograd::Function<RoundThroughHalf> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               int64_t type) {
    ctx->saved_data["type"] = type;
    return x.to(static_cast<torch::ScalarType>(type)).to(torch::kFloat32);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto type = static_cast<torch::ScalarType>(ctx->saved_data["type"].toInt());
    return {grad[0].to(type).to(torch::kFloat32), torch::Tensor()};
  }
};

inline torch::Tensor round_through_half(const torch::Tensor& x, torch::ScalarType type) {
  return RoundThroughHalf::apply(x, static_cast<int64_t>(type));
}

}  // namespace nanchaos::harness
