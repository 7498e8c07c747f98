// Optimizer state and final digests; see optim_state.h.
#include "harness/tensor/optim_state.h"

#include "harness/tensor/torch_compat.h"

namespace nanchaos::harness {

NamedStateTensors state_tensors(torch::optim::OptimizerParamState* st) {
  NamedStateTensors out;
  if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(st)) {
    out = {{"exp_avg", a->exp_avg()}, {"exp_avg_sq", a->exp_avg_sq()}};
  } else if (auto* w = dynamic_cast<torch::optim::AdamWParamState*>(st)) {
    out = {{"exp_avg", w->exp_avg()}, {"exp_avg_sq", w->exp_avg_sq()}};
  } else if (auto* m = dynamic_cast<torch::optim::SGDParamState*>(st)) {
    if (m->momentum_buffer().defined()) out = {{"momentum_buffer", m->momentum_buffer()}};
  }
  return out;
}

int64_t state_step(torch::optim::OptimizerParamState* st) {
  if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(st)) return a->step();
  if (auto* w = dynamic_cast<torch::optim::AdamWParamState*>(st)) return w->step();
  return -1;
}

void set_state_step(torch::optim::OptimizerParamState* st, int64_t step) {
  if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(st)) a->step(step);
  if (auto* w = dynamic_cast<torch::optim::AdamWParamState*>(st)) w->step(step);
}

std::unique_ptr<torch::optim::OptimizerParamState> initial_state(const torch::optim::Optimizer& opt,
                                                                 const torch::Tensor& p) {
  // As Adam::step / AdamW::step create it (torch/csrc/api/src/optim/adam.cpp): zeros in p's
  // memory format, step 0.
  const auto zeros = [&] { return torch::zeros_like(p, torch::MemoryFormat::Preserve); };
  const auto& group = opt.param_groups().front().options();
  if (dynamic_cast<const torch::optim::Adam*>(&opt) != nullptr) {
    auto st = std::make_unique<torch::optim::AdamParamState>();
    st->step(0).exp_avg(zeros()).exp_avg_sq(zeros());
    if (static_cast<const torch::optim::AdamOptions&>(group).amsgrad()) {
      st->max_exp_avg_sq(zeros());
    }
    return st;
  }
  if (dynamic_cast<const torch::optim::AdamW*>(&opt) != nullptr) {
    auto st = std::make_unique<torch::optim::AdamWParamState>();
    st->step(0).exp_avg(zeros()).exp_avg_sq(zeros());
    if (static_cast<const torch::optim::AdamWOptions&>(group).amsgrad()) {
      st->max_exp_avg_sq(zeros());
    }
    return st;
  }
  return nullptr;
}

std::unique_ptr<torch::optim::OptimizerParamState> deep_clone(
    const torch::optim::OptimizerParamState& st) {
  auto c = st.clone();  // copies tensor handles only: clone the tensors too
  if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(c.get())) {
    a->exp_avg(a->exp_avg().clone()).exp_avg_sq(a->exp_avg_sq().clone());
    if (a->max_exp_avg_sq().defined()) a->max_exp_avg_sq(a->max_exp_avg_sq().clone());
  } else if (auto* w = dynamic_cast<torch::optim::AdamWParamState*>(c.get())) {
    w->exp_avg(w->exp_avg().clone()).exp_avg_sq(w->exp_avg_sq().clone());
    if (w->max_exp_avg_sq().defined()) w->max_exp_avg_sq(w->max_exp_avg_sq().clone());
  } else if (auto* m = dynamic_cast<torch::optim::SGDParamState*>(c.get())) {
    if (m->momentum_buffer().defined()) m->momentum_buffer(m->momentum_buffer().clone());
  }
  return c;
}

void digest_tensor(Digest& d, const torch::Tensor& t) {
  auto c = t.contiguous().cpu();
  d.add_bytes(c.data_ptr(), c.nbytes());
}

FinalDigests final_digests(const std::vector<torch::Tensor>& params,
                           const std::vector<torch::Tensor>& buffers,
                           torch::optim::Optimizer* optimizer) {
  FinalDigests out;
  Digest ph, oh;
  for (const auto& p : params) {
    digest_tensor(ph, p.detach());
    out.params_finite = out.params_finite && torch::isfinite(p).all().item<bool>();
  }
  for (const auto& b : buffers) digest_tensor(ph, b);
  for (const auto& p : params) {
    auto* st = optimizer ? compat::optimizer_state(*optimizer, p) : nullptr;
    if (!st) continue;
    for (const auto& [name, t] : state_tensors(st)) digest_tensor(oh, t);
    if (state_step(st) >= 0) oh.add_u64(uint64_t(state_step(st)));
  }
  out.params_hash = ph.hex();
  out.optim_hash = oh.hex();
  return out;
}

}  // namespace nanchaos::harness
