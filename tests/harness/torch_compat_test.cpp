// harness/tensor/torch_compat.h against the LibTorch this binary is built with (Debian's 1.13 in
// CI, a pip-installed 2.x under .ci/libtorch2-check): optimizer state keys, the warning handler,
// autocast state, anomaly mode's message, the CPU generator.
#include "harness/tensor/torch_compat.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "detectors/detector.h"

namespace nanchaos::compat {
namespace {

TEST(TorchCompat, OptimizerStateFoundForEveryParameterAfterAdamStep) {
  torch::manual_seed(1);
  torch::nn::Linear net(3, 2);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-2));
  for (const auto& p : net->parameters()) EXPECT_EQ(optimizer_state(opt, p), nullptr);
  net(torch::randn({4, 3})).sum().backward();
  opt.step();
  // The key is the one the optimizer itself uses: every parameter's state is found.
  ASSERT_EQ(opt.state().size(), net->parameters().size());
  for (const auto& p : net->parameters()) {
    auto* st = dynamic_cast<torch::optim::AdamParamState*>(optimizer_state(opt, p));
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(st->step(), 1);
    ASSERT_TRUE(st->exp_avg().defined());
    EXPECT_EQ(st->exp_avg().sizes(), p.sizes());
    EXPECT_EQ(st->exp_avg_sq().sizes(), p.sizes());
  }
}

TEST(TorchCompat, SetOptimizerStateReplacesAndRemoves) {
  torch::nn::Linear net(2, 2);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  net(torch::ones({1, 2})).sum().backward();
  opt.step();
  const auto w = net->weight;
  auto st = std::make_unique<torch::optim::SGDParamState>();
  st->momentum_buffer(torch::full_like(w, 7.0));
  set_optimizer_state(opt, w, std::move(st));
  auto* got = dynamic_cast<torch::optim::SGDParamState*>(optimizer_state(opt, w));
  ASSERT_NE(got, nullptr);
  EXPECT_TRUE(torch::equal(got->momentum_buffer(), torch::full_like(w, 7.0)));
  EXPECT_EQ(opt.state().size(), 2u);  // replaced, not added next to the optimizer's own
  set_optimizer_state(opt, w, nullptr);
  EXPECT_EQ(optimizer_state(opt, w), nullptr);
  EXPECT_NE(optimizer_state(opt, net->bias), nullptr);
}

std::vector<std::string>& Warnings() {
  static std::vector<std::string> w;
  return w;
}
void Collect(const std::string& msg) { Warnings().push_back(msg); }

TEST(TorchCompat, WarningSinkReceivesTorchWarnText) {
  static WarningSink sink(&Collect);
  Warnings().clear();
  set_warning_handler(&sink);
  TORCH_WARN("nanchaos compat check ", 42);
  set_warning_handler(nullptr);  // back to c10's default (stderr)
  ASSERT_EQ(Warnings().size(), 1u);
  EXPECT_EQ(Warnings()[0], "nanchaos compat check 42");
}

TEST(TorchCompat, CudaAutocastSetsAndRestoresThreadState) {
  // Only the thread-local autocast state: no CUDA device is needed.
  ASSERT_FALSE(cuda_autocast_enabled());
  const auto before = cuda_autocast_dtype();
  {
    CudaAutocast outer(at::kBFloat16);
    EXPECT_TRUE(cuda_autocast_enabled());
    EXPECT_EQ(cuda_autocast_dtype(), at::kBFloat16);
    {
      CudaAutocast inner(at::kHalf);
      EXPECT_EQ(cuda_autocast_dtype(), at::kHalf);
    }
    EXPECT_TRUE(cuda_autocast_enabled());
    EXPECT_EQ(cuda_autocast_dtype(), at::kBFloat16);
  }
  EXPECT_FALSE(cuda_autocast_enabled());
  EXPECT_EQ(cuda_autocast_dtype(), before);
}

TEST(TorchCompat, AnomalyModeNamesTheBackwardOpThatReturnedNan) {
  // sqrt(x) * 0 at x = 0: the forward is 0, sqrt's backward is 0 / (2 sqrt(0)) = NaN.
  auto x = torch::zeros({1}, torch::requires_grad());
  std::string message;
  static WarningSink sink(&Collect);  // anomaly mode also warns with the forward's traceback
  set_warning_handler(&sink);
  {
    torch::autograd::DetectAnomalyGuard guard;
    EXPECT_TRUE(torch::autograd::AnomalyMode::is_enabled());
    try {
      (torch::sqrt(x) * 0).sum().backward();
    } catch (const std::exception& e) {
      message = e.what();
    }
  }
  set_warning_handler(nullptr);
  EXPECT_FALSE(torch::autograd::AnomalyMode::is_enabled());
  EXPECT_NE(message.find("returned nan values"), std::string::npos) << message;
  EXPECT_EQ(detect::backward_op(message), "SqrtBackward0");
}

TEST(TorchCompat, CpuGeneratorIsSeeded) {
  auto a = torch::randn({5}, cpu_generator(9));
  auto b = torch::randn({5}, cpu_generator(9));
  auto c = torch::randn({5}, cpu_generator(10));
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::equal(a, c));
}

}  // namespace
}  // namespace nanchaos::compat
