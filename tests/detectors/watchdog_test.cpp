// Detector `watchdog` (detectors/watchdog.cpp): no per-step check; enabling it arms every
// collective's deadline (its finding is StackComm's, tests/job/in_process_test.cpp).
#include "tests/detectors/detector_test_util.h"

namespace nanchaos::detect {
namespace {

using fixture::Make;

TEST(WatchdogDetector, NeverFlagsAStepAndArmsTheCollectiveDeadline) {
  auto d = Make("watchdog", "collective_timeout_ms = 250");
  EXPECT_EQ(d->hook(), Hook::kCollective);
  StepView v;
  EXPECT_FALSE(d->check(v));
  const auto& info = harness::detectors().at("watchdog");
  EXPECT_TRUE(info.arms_collective_deadline);
  // Its deadline is read from the detectors' Params, as written.
  EXPECT_EQ(fixture::StackOf("collective_timeout_ms = 250")
                .detectors.params.get_int("collective_timeout_ms"),
            250);
  int arming = 0;
  for (const auto& [name, i] : harness::detectors()) arming += i.arms_collective_deadline;
  EXPECT_EQ(arming, 1);  // one detector names an expired collective
}

}  // namespace
}  // namespace nanchaos::detect
