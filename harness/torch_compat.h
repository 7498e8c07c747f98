// Every LibTorch version difference lives here (Debian's 1.13 CPU build in CI, 2.x on GPU hosts).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <string>
#include <type_traits>

namespace nanchaos::compat {

/// A CPU generator with a fixed seed (the ATen factory's name is stable from 1.13 to 2.x).
inline at::Generator cpu_generator(uint64_t seed) { return at::detail::createCPUGenerator(seed); }

/// The key of a parameter in Optimizer::state(): 1.13 keys the map by the TensorImpl address
/// printed as a string; 2.x by the address itself.
template <typename Opt>
auto optimizer_state_key(Opt& opt, const torch::Tensor& p) {
  using Key = typename std::decay_t<decltype(opt.state())>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    return Key(c10::guts::to_string(p.unsafeGetTensorImpl()));
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

/// The optimizer's per-parameter state, or nullptr before the first step.
template <typename Opt>
torch::optim::OptimizerParamState* optimizer_state(Opt& opt, const torch::Tensor& p) {
  auto it = opt.state().find(optimizer_state_key(opt, p));
  return it == opt.state().end() ? nullptr : it->second.get();
}

/// Replaces (or removes, with nullptr) a parameter's optimizer state.
template <typename Opt>
void set_optimizer_state(Opt& opt, const torch::Tensor& p,
                         std::unique_ptr<torch::optim::OptimizerParamState> st) {
  auto key = optimizer_state_key(opt, p);
  if (st) {
    opt.state()[key] = std::move(st);
  } else {
    opt.state().erase(key);
  }
}

/// A c10 warning handler that forwards the message text. 1.13 passes (location, msg, verbatim);
/// 2.x passes a c10::Warning object.
class WarningSink : public c10::WarningHandler {
 public:
  explicit WarningSink(void (*sink)(const std::string&)) : sink_(sink) {}
#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning& w) override { sink_(w.msg()); }
#else
  void process(const c10::SourceLocation&, const std::string& msg, const bool) override {
    sink_(msg);
  }
#endif

 private:
  void (*sink_)(const std::string&);
};

}  // namespace nanchaos::compat
