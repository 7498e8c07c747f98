// Leveled diagnostics (harness/common/log.h): the NANCHAOS_LOG switch, and that a run's debug
// lines appear only when it is set, each naming its process.
#include "harness/common/log.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/test_util.h"

namespace nanchaos {
namespace {

using log::Level;

TEST(Log, LevelNamesAndTheDefault) {
  std::string complaint;
  EXPECT_EQ(log::parse_level(nullptr, &complaint), Level::kWarn);
  EXPECT_EQ(log::parse_level("", &complaint), Level::kWarn);
  EXPECT_EQ(log::parse_level("trace", &complaint), Level::kTrace);
  EXPECT_EQ(log::parse_level("debug", &complaint), Level::kDebug);
  EXPECT_EQ(log::parse_level("info", &complaint), Level::kInfo);
  EXPECT_EQ(log::parse_level("warn", &complaint), Level::kWarn);
  EXPECT_EQ(log::parse_level("error", &complaint), Level::kError);
  EXPECT_EQ(log::parse_level("off", &complaint), Level::kOff);
  EXPECT_TRUE(complaint.empty());
  EXPECT_EQ(log::parse_level("verbose", &complaint), Level::kWarn);
  EXPECT_EQ(complaint,
            "NANCHAOS_LOG=verbose: unknown level (one of: trace, debug, info, warn, error, off); "
            "using warn");
}

// End to end: `nanchaos run` with NANCHAOS_LOG=debug says how it launched and ended the job, each
// line with its level and process; at the default level it says none of that.
TEST(Log, DebugLinesOnlyWithTheSwitch) {
  const std::string dir = test_util::scratch_dir("log", "scenario");
  const std::string file = test_util::write_file(dir, "clean.toml", R"([scenario]
name = "log-clean"
[job]
workload = "mlp"
ranks = 2
steps = 3
[expect]
detected = false
)");
  const std::string bin = NANCHAOS_BINARY;
  auto quiet = test_util::run_cmd("env -u NANCHAOS_LOG " + bin + " run " + file +
                                  " --quiet --out " + dir + "/out-default");
  ASSERT_EQ(quiet.code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("[debug]"), std::string::npos) << quiet.output;
  auto debug = test_util::run_cmd("NANCHAOS_LOG=debug " + bin + " run " + file + " --quiet --out " +
                                  dir + "/out-debug");
  ASSERT_EQ(debug.code, 0) << debug.output;
  EXPECT_NE(debug.output.find("[debug] ["), std::string::npos) << debug.output;
  EXPECT_NE(debug.output.find(": launched pid "), std::string::npos) << debug.output;
  EXPECT_NE(debug.output.find("launcher exited with code 0"), std::string::npos) << debug.output;
}

}  // namespace
}  // namespace nanchaos
