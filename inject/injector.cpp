// Common injector logic: arming (window, ranks, persistence, probability) and element choice.
#include "inject/injector.h"

#include <cmath>
#include <optional>

#include "harness/common/rng.h"
#include "harness/scenario/plan.h"

namespace nanchaos::inject {

// Both draws come from the portable generator (rng.h), so the Python agent makes the same ones.
bool Injector::armed(const FaultContext& ctx) const {
  if (!spec_.in_window(ctx.step)) return false;
  if (!spec_.ranks.contains(ctx.rank)) return false;
  if (ctx.reexecution && !spec_.persistent) return false;
  return fires(ctx.seed, spec_.index, ctx.step, ctx.rank, spec_.probability);
}

std::vector<int64_t> Injector::pick_elements(int64_t numel, const FaultContext& ctx) const {
  return inject::pick_elements(ctx.seed, spec_.index, ctx.step, numel,
                               harness::fault_element_count(spec_, numel));
}
}  // namespace nanchaos::inject

namespace nanchaos::inject {

TargetedInjector::TargetedInjector(const harness::FaultSpec& spec)
    : Injector(spec), target_(spec.target.value()) {}

nlohmann::json TargetedInjector::corrupt_anywhere(torch::Tensor t,
                                                  const std::vector<int64_t>& idx) {
  if (!t.is_cuda() && t.scalar_type() == torch::kFloat32 && t.is_contiguous())
    return corrupt(t, idx);
  // CUDA tensors and autocast's half outputs: corrupt an fp32 host copy, then write it back (a
  // fault is rare; its cost does not matter). A bit flip then flips the fp32 word's bit.
  torch::NoGradGuard no_grad;
  auto host = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  auto detail = corrupt(host, idx);
  t.detach().copy_(host.view(t.sizes()));
  return detail;
}

void TargetedInjector::hit_named(FaultContext& ctx, NamedTensors& tensors) {
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : tensors) {
    if (!match_target(target_.pattern, name)) continue;
    auto idx = pick_elements(t.numel(), ctx);
    auto detail = corrupt_anywhere(t, idx);
    detail["elements"] = idx.size();
    ctx.fired(spec_.index, std::string(to_string(target_.where)) + ":" + name, std::move(detail));
  }
}

void TargetedInjector::on_optimizer_state(FaultContext& ctx, NamedTensors& states) {
  if (target_.where == harness::TargetWhere::kOptimizer && armed(ctx)) hit_named(ctx, states);
}

void TargetedInjector::on_parameters(FaultContext& ctx, NamedTensors& params) {
  if (target_.where == harness::TargetWhere::kParameter && armed(ctx)) hit_named(ctx, params);
}

void TargetedInjector::on_gradients(FaultContext& ctx, NamedTensors& grads) {
  if (target_.where == harness::TargetWhere::kGradient && armed(ctx)) hit_named(ctx, grads);
}

torch::Tensor TargetedInjector::on_activation(FaultContext& ctx, const std::string& module,
                                              torch::Tensor out) {
  if (target_.where != harness::TargetWhere::kActivation ||
      !match_target(target_.pattern, module) || !armed(ctx))
    return out;
  // Out of place, so autograd still sees the module's own output for the untouched elements.
  auto values = out.detach().clone().contiguous();
  auto idx = pick_elements(values.numel(), ctx);
  auto detail = corrupt_anywhere(values, idx);
  auto mask = torch::zeros({values.numel()}, torch::kBool);
  for (int64_t i : idx) mask[i] = true;
  mask = mask.to(values.device());
  detail["elements"] = idx.size();
  ctx.fired(spec_.index, "activation:" + module, std::move(detail));
  return torch::where(mask.view(values.sizes()), values, out);
}

torch::Tensor TargetedInjector::on_loss(FaultContext& ctx, torch::Tensor loss) {
  if (target_.where != harness::TargetWhere::kLoss || !armed(ctx)) return loss;
  auto value = loss.detach().clone().reshape({1});
  auto detail = corrupt_anywhere(value, {0});
  ctx.fired(spec_.index, "loss", std::move(detail));
  const double before = loss.item<double>();
  const double after = value.item<double>();
  // Scale the loss so its value becomes `after` and its gradient follows (NaN stays NaN in
  // backward, as a NaN produced by the loss computation would).
  if (std::isfinite(before) && before != 0.0 && std::isfinite(after))
    return loss * (after / before);
  return loss * after;
}

}  // namespace nanchaos::inject
