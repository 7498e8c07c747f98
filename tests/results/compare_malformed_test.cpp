// Regression test for what nanchaos_fuzz_report found in compare's reading of report.json
// (docs/fuzzing.md).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

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

TEST(CompareMalformedReports, ANumberTooLargeForADoubleIsAnInputError) {
  // crash-f05509df (fuzz): json::parse threw out_of_range.406 for 1e400, which load_report did
  // not catch: `nanchaos compare` died in std::terminate instead of exiting 2.
  const std::string path = ::testing::TempDir() + "/nanchaos_compare_1e400.json";
  { std::ofstream(path) << R"({"scenarios": [], "x": 1e400})"; }
  try {
    load_report(path);
    FAIL() << "no error";
  } catch (const CompareInputError& e) {
    EXPECT_EQ(std::string(e.what()),
              path +
                  ": not valid JSON: [json.exception.out_of_range.406] number overflow "
                  "parsing '1e400'");
  }
  std::ostringstream out, err;
  EXPECT_EQ(run_compare(path, path, {}, "md", out, err), 2);
}

}  // namespace
}  // namespace nanchaos::results
