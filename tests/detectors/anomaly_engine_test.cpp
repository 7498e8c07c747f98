// detectors/stack/anomaly_engine.h: LibTorch's engine with anomaly metadata that stores no
// forward backtrace still names the backward op that returned NaN, warns nothing, and computes
// the same gradients.
#include "detectors/stack/anomaly_engine.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "detectors/detector.h"
#include "harness/tensor/torch_compat.h"

namespace nanchaos::detect {
namespace {

std::vector<std::string>& Warnings() {
  static std::vector<std::string> w;
  return w;
}
void Collect(const std::string& msg) { Warnings().push_back(msg); }

// sqrt(x) * 0 at x = 0: the forward is 0, sqrt's backward is 0 / (2 sqrt(0)) = NaN. Returns the
// error's text; the warnings anomaly mode emitted land in Warnings().
std::string BackwardOfSqrtAtZero() {
  static compat::WarningSink sink(&Collect);
  Warnings().clear();
  compat::set_warning_handler(&sink);
  std::string message;
  {
    torch::autograd::DetectAnomalyGuard guard;
    auto x = torch::zeros({1}, torch::requires_grad());
    try {
      (torch::sqrt(x) * 0).sum().backward();
    } catch (const std::exception& e) {
      message = e.what();
    }
  }
  compat::set_warning_handler(nullptr);
  return message;
}

TEST(AnomalyEngine, NamesTheOpWithoutTheForwardBacktrace) {
  // LibTorch's own metadata first: the error names the op and a warning carries the traceback.
  // (CTest runs each case in its own process; a whole-binary run may have installed it earlier.)
  if (traceless_anomaly_metadata_in_use()) GTEST_SKIP() << "installed by an earlier case";
  EXPECT_EQ(&torch::autograd::Engine::get_default_engine(),
            &torch::autograd::Engine::get_base_engine());
  std::string stock = BackwardOfSqrtAtZero();
  EXPECT_EQ(backward_op(stock), "SqrtBackward0") << stock;
  ASSERT_FALSE(Warnings().empty());  // "Error detected in SqrtBackward0. Traceback of ..."

  use_traceless_anomaly_metadata();
  use_traceless_anomaly_metadata();  // idempotent
  EXPECT_TRUE(traceless_anomaly_metadata_in_use());
  EXPECT_NE(&torch::autograd::Engine::get_default_engine(),
            &torch::autograd::Engine::get_base_engine());
  std::string quiet = BackwardOfSqrtAtZero();
  EXPECT_EQ(backward_op(quiet), "SqrtBackward0") << quiet;
  EXPECT_TRUE(Warnings().empty()) << Warnings().front();
}

TEST(AnomalyEngine, GradientsEqualLibTorchsEngine) {
  if (traceless_anomaly_metadata_in_use()) GTEST_SKIP() << "installed by an earlier case";
  torch::manual_seed(3);
  torch::nn::Sequential net(torch::nn::Linear(8, 16), torch::nn::GELU(), torch::nn::Linear(16, 4));
  const auto x = torch::randn({5, 8});
  auto grads = [&] {
    net->zero_grad();
    torch::autograd::DetectAnomalyGuard guard;
    net->forward(x).pow(2).mean().backward();
    std::vector<torch::Tensor> g;
    for (const auto& p : net->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  const auto stock = grads();
  use_traceless_anomaly_metadata();
  const auto quiet = grads();
  ASSERT_EQ(stock.size(), quiet.size());
  for (size_t i = 0; i < stock.size(); ++i) EXPECT_TRUE(torch::equal(stock[i], quiet[i])) << i;
}

// Why holds are counted: LibTorch's guard turns the process-wide mode off when it goes, even
// while something else (an always-on detector, another rank's thread) still wants it on.
TEST(AnomalyModeHold, StaysOnUntilTheLastHoldGoesThenPutsBackWhatWasThere) {
  namespace ag = torch::autograd;
  // (LibTorch 1.13's and 2.15's DetectAnomalyGuard set the mode off in their destructor, whatever
  // it was before: anomaly_mode.h keeps only the previous NaN-check flag.)
  ag::AnomalyMode::set_enabled(false);
  ASSERT_EQ(anomaly_mode_holds(), 0);
  {
    std::optional<AnomalyModeHold> always_on(std::in_place);
    EXPECT_TRUE(ag::AnomalyMode::is_enabled());
    { AnomalyModeHold replay; }  // a replay ends while the always-on hold lives
    EXPECT_TRUE(ag::AnomalyMode::is_enabled());
    // Another thread (a rank of an in-process world) holds and lets go meanwhile.
    std::thread other([] { AnomalyModeHold h; });
    other.join();
    EXPECT_TRUE(ag::AnomalyMode::is_enabled());
    EXPECT_EQ(anomaly_mode_holds(), 1);
    always_on.reset();
    EXPECT_FALSE(ag::AnomalyMode::is_enabled()) << "the mode before the first hold was off";
  }
  // Whatever was there before the first hold comes back: here, on.
  ag::AnomalyMode::set_enabled(true);
  { AnomalyModeHold h; }
  EXPECT_TRUE(ag::AnomalyMode::is_enabled());
  ag::AnomalyMode::set_enabled(false);
}

}  // namespace
}  // namespace nanchaos::detect
