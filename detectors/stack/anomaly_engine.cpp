// The traceless anomaly metadata (anomaly_engine.h).
#include "detectors/stack/anomaly_engine.h"

#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/csrc/autograd/engine.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

namespace nanchaos::detect {
namespace {

namespace ag = torch::autograd;

// Stores no backtrace and warns nothing when a backward op fails: the error's own text names the
// op ("Function 'XBackward0' returned nan values ..."), which is all nanchaos reads.
// Only the two virtuals whose signatures LibTorch has kept from 1.x to 2.x are overridden.
// assign_parent (the double-backward parent link) is LibTorch's own, a pointer copy: its parameter
// is std::shared_ptr<Node> on 1.13 and c10::intrusive_ptr<Node> on 2.x, so an override of it
// builds on one of them only. .ci/libtorch2-guard compiles this file against 2.x.
struct TracelessAnomalyMetadata final : ag::AnomalyMetadata {
  void store_stack() override {}
  void print_stack(const std::string&) override {}
};

// LibTorch's engine but for the metadata it makes for anomaly mode. Made once and never destroyed
// (autograd's worker threads may outlive static destruction, as with LibTorch's own engine).
struct TracelessAnomalyEngine final : ag::Engine {
  std::unique_ptr<ag::AnomalyMetadata> make_anomaly_metadata() override {
    return std::make_unique<TracelessAnomalyMetadata>();
  }
};

std::atomic<bool> in_use{false};

ag::Engine& traceless_engine() {
  static auto* engine = new TracelessAnomalyEngine();
  return *engine;
}

}  // namespace

void use_traceless_anomaly_metadata() {
  static std::once_flag once;
  std::call_once(once, [] {
    traceless_engine();  // made before it becomes the default: no call sees it half-built
    ag::set_default_engine_stub(&traceless_engine);
    in_use = true;
  });
}

bool traceless_anomaly_metadata_in_use() { return in_use; }

namespace {

std::mutex holds_mutex;
int holds = 0;
bool before_enabled = false;  // the mode before the first hold
bool before_check_nan = true;

}  // namespace

AnomalyModeHold::AnomalyModeHold() {
  std::lock_guard<std::mutex> lock(holds_mutex);
  if (holds++ == 0) {
    before_enabled = ag::AnomalyMode::is_enabled();
    before_check_nan = ag::AnomalyMode::should_check_nan();
  }
  ag::AnomalyMode::set_enabled(true, /*check_nan=*/true);
}

AnomalyModeHold::~AnomalyModeHold() {
  std::lock_guard<std::mutex> lock(holds_mutex);
  if (--holds == 0) ag::AnomalyMode::set_enabled(before_enabled, before_check_nan);
}

int anomaly_mode_holds() {
  std::lock_guard<std::mutex> lock(holds_mutex);
  return holds;
}

}  // namespace nanchaos::detect
