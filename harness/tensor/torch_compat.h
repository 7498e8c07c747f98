// Every LibTorch version difference lives here (Debian's 1.13 CPU build in CI, 2.x on GPU hosts).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <mutex>
#include <sstream>
#include <string>
#include <type_traits>

namespace nanchaos::compat {

/// A CPU generator with a fixed seed (the ATen factory's name is stable from 1.13 to 2.x).
inline at::Generator cpu_generator(uint64_t seed) { return at::detail::createCPUGenerator(seed); }

/// Held while a rank seeds LibTorch's process-wide default CPU generator and draws its initial
/// weights from it (make_workload), and while it saves or restores that generator's state (the
/// `sdc` recompute, checkpoints). Ranks that are threads of one process (an in-process world,
/// harness/comm/in_process.h) share that generator: one rank's restore between another's seed and
/// its last draw gave the two ranks different initial weights. The generator's own mutex only
/// makes each call atomic, not the seed-then-draw sequence.
inline std::mutex& default_generator_mutex() {
  static std::mutex m;
  return m;
}

/// The key of a parameter in Optimizer::state(): 1.13 keys the map by the TensorImpl address
/// printed as a string (c10::guts::to_string, i.e. `ostream << const void*`, which 2.x removed);
/// 2.x by the address itself.
template <typename Opt>
auto optimizer_state_key(Opt& opt, const torch::Tensor& p) {
  using Key = typename std::decay_t<decltype(opt.state())>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream os;
    os << static_cast<const void*>(p.unsafeGetTensorImpl());
    return Key(os.str());
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

/// Installs `h` as the process-wide c10 warning handler (not thread-safe; `h` must outlive its
/// use). 1.13 has it in namespace c10::Warning; 2.x made Warning a class and moved it to
/// c10::WarningUtils.
inline void set_warning_handler(c10::WarningHandler* h) {
#if TORCH_VERSION_MAJOR >= 2
  c10::WarningUtils::set_warning_handler(h);
#else
  c10::Warning::set_warning_handler(h);
#endif
}

/// Whether CUDA autocast is on in this thread, and the dtype it casts to (CudaAutocast's state).
inline bool cuda_autocast_enabled() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return at::autocast::is_enabled();
#endif
}
inline at::ScalarType cuda_autocast_dtype() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::get_autocast_dtype(at::kCUDA);
#else
  return at::autocast::get_autocast_gpu_dtype();
#endif
}

/// CUDA autocast (mixed precision) for the lifetime of the guard, like Python's
/// `torch.autocast("cuda", dtype)`: matmuls and linears run in `dtype` (kHalf or kBFloat16),
/// reductions such as log_softmax in fp32. On exit the cast cache is cleared (the fp16 copies of
/// the weights would otherwise outlive the optimizer step). 1.13 has set_enabled /
/// set_autocast_gpu_dtype; 2.4+ takes the device type. Not thread-safe (thread-local state).
class CudaAutocast {
 public:
  explicit CudaAutocast(at::ScalarType dtype)
      : prev_enabled_(cuda_autocast_enabled()), prev_dtype_(cuda_autocast_dtype()) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
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
