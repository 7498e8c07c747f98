// Every LibTorch version difference lives here (Debian's 1.13 CPU build in CI, 2.x on GPU hosts).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
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

/// CUDA autocast (mixed precision) for the lifetime of the guard, like Python's
/// `torch.autocast("cuda", dtype)`: matmuls and linears run in `dtype` (kHalf or kBFloat16),
/// reductions such as log_softmax in fp32. On exit the cast cache is cleared (the fp16 copies of
/// the weights would otherwise outlive the optimizer step). 1.13 has set_enabled /
/// set_autocast_gpu_dtype; 2.4+ takes the device type. Not thread-safe (thread-local state).
class CudaAutocast {
 public:
  explicit CudaAutocast(at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    prev_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
    prev_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    prev_enabled_ = at::autocast::is_enabled();
    prev_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(true);
#endif
    at::autocast::increment_nesting();
  }
  ~CudaAutocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCUDA, prev_enabled_);
    at::autocast::set_autocast_dtype(at::kCUDA, prev_dtype_);
#else
    at::autocast::set_enabled(prev_enabled_);
    at::autocast::set_autocast_gpu_dtype(prev_dtype_);
#endif
  }
  CudaAutocast(const CudaAutocast&) = delete;
  CudaAutocast& operator=(const CudaAutocast&) = delete;

 private:
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kHalf;
};

/// Whether this LibTorch was built with CUDA and sees a device.
inline bool cuda_available() { return torch::cuda::is_available(); }

}  // namespace nanchaos::compat
