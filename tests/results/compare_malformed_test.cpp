// Regression test for what nanchaos_fuzz_report found in compare's reading of report.json
// (docs/fuzzing.md).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "results/compare.h"

namespace nanchaos::results {
namespace {

TEST(CompareMalformedReports, CountsOutsideAnyRangeFallBackToOneTrial) {
  // int(1e300) of stats.trials was undefined behaviour; such counts now give the default.
  const auto side = scenario_side(nlohmann::json::parse(
      R"({"name": "x", "verdict": "pass", "stats": {"trials": 1e300, "passed": -5}})"));
  EXPECT_EQ(side.trials, 1);
  EXPECT_EQ(side.passed, 1);
  const auto ok = scenario_side(nlohmann::json::parse(
      R"({"name": "x", "verdict": "fail", "stats": {"trials": 3, "passed": 2}})"));
  EXPECT_EQ(ok.trials, 3);
  EXPECT_EQ(ok.passed, 2);
}

}  // namespace
}  // namespace nanchaos::results
