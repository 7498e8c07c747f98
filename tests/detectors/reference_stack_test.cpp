// The reference stack (detectors/stack/reference_stack.h) on one in-process rank: what the naive
// stack's early return reports.
#include "detectors/stack/reference_stack.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "harness/comm/in_process.h"
#include "harness/scenario/scenario.h"
#include "tests/detectors/detector_test_util.h"
#include "tests/test_util.h"

namespace nanchaos::detect {
namespace {

// The log's events named `ev`.
std::vector<nlohmann::json> Events(const harness::EventLog& log, const std::string& ev) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(log.text());
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.value("ev", "") == ev) out.push_back(std::move(j));
  }
  return out;
}

// Two detectors flag at one hook: the decision names the first in pipeline order
// (detector_order(), the order decide() uses), not the first by name. `grad` (order 70) comes
// before `anomaly` (order 120), though "anomaly" sorts first by name.
TEST(ReferenceStack, EarlyReturnReportsTheFirstFindingInPipelineOrder) {
  const auto& order = harness::detector_order();
  ASSERT_LT(harness::detector_bit("grad"), harness::detector_bit("anomaly"));
  ASSERT_LT(std::string("anomaly"), std::string("grad"));
  ASSERT_FALSE(order.empty());
  const harness::StackConfig s =
      fixture::StackOf("preset = \"naive\"\nenabled = [\"anomaly\", \"grad\"]");
  ASSERT_FALSE(s.detectors.consensus);
  harness::InProcessWorld world(1);
  auto comm = world.communicator(0);
  harness::EventLog log(test_util::scratch_dir("stack", "log") + "/rank-0.jsonl");
  JobLayout layout;
  layout.grad_names = {"head.bias", "head.weight"};
  {
    ReferenceStack stack(
        s, log, *comm, layout, torch::kCPU, 4, [](int) {}, [] { return ModelState{}; });
    stack.begin_step(3);
    EXPECT_FALSE(stack.wants_early_return());
    const harness::ScanStats grads = fixture::Stats(2, 1);
    const std::string anomaly = "Function 'MulBackward0' returned nan values in its 0th output.";
    StepView v;
    v.step = 3;
    v.grad_stats = &grads;
    v.grad_names = &layout.grad_names;
    v.anomaly_message = &anomaly;
    stack.check(Hook::kGradients, v);
    ASSERT_TRUE(stack.wants_early_return());
    stack.early_return(3);
  }
  // The anomaly detector's hold on the mode went with the stack.
  EXPECT_FALSE(torch::autograd::AnomalyMode::is_enabled());
  const auto detects = Events(log, "detect");
  EXPECT_EQ(detects.size(), 2u);
  const auto decisions = Events(log, "decision");
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0]["detector"], "grad");
  EXPECT_EQ(decisions[0]["layer"], "head.weight");
  EXPECT_EQ(decisions[0]["cause"], "gradient");
  EXPECT_EQ(decisions[0]["action"], "early_return");
  EXPECT_EQ(decisions[0]["ranks"], nlohmann::json::array({0}));
}

}  // namespace
}  // namespace nanchaos::detect
