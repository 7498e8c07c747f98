// 64 ranks on one host (issue 7): the shipped scale scenarios, run by the real binary under
// mpirun, judged from report.json. Registered as their own CTest tests (label `scale`), not
// through gtest discovery; each takes ~30-60 s on a 2-core host.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kBin = NANCHAOS_BINARY;
const std::string kSrc = NANCHAOS_SOURCE_DIR;

// Runs one shipped scenario; returns its report entry (and the exit code through `code`).
json run_scenario(const std::string& file, int* code) {
  const fs::path out =
      fs::temp_directory_path() /
      ("nanchaos-scale-" + fs::path(file).stem().string() + "-" + std::to_string(getpid()));
  fs::remove_all(out);
  const std::string cmd =
      kBin + " run " + kSrc + "/scenarios/" + file + " --quiet --out " + out.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string output;
  std::array<char, 4096> buf{};
  for (size_t n; p && (n = fread(buf.data(), 1, buf.size(), p)) > 0;) output.append(buf.data(), n);
  const int st = p ? pclose(p) : -1;
  *code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream in(out / "report.json");
  if (!in) {
    ADD_FAILURE() << "no report.json; output:\n" << output;
    return json::object();
  }
  json report = json::parse(in);
  json s = report["scenarios"].at(0);
  fs::remove_all(out);  // 64 event logs per run: keep /tmp small
  return s;
}

void expect_memory_of_every_rank(const json& s) {
  const json& m = s["memory"];
  ASSERT_TRUE(m.is_object()) << s.dump();
  EXPECT_EQ(m["ranks_measured"], 64);
  ASSERT_EQ(m["per_rank_mib"].size(), 64u);
  double total = 0;
  for (const auto& [rank, mib] : m["per_rank_mib"].items()) {
    EXPECT_GT(mib.get<double>(), 1.0) << "rank " << rank;
    total += mib.get<double>();
  }
  EXPECT_NEAR(m["total_mib"].get<double>(), total, 64 * 0.05 + 1e-6);
  EXPECT_GE(m["per_rank_max_mib"].get<double>(), m["per_rank_mean_mib"].get<double>());
}

TEST(Scale64Ranks, NanOnRank37DetectedSameStepNamedAndConsistent) {
  int code = -1;
  const json s = run_scenario("scale-64ranks-nan-rank37.toml", &code);
  EXPECT_EQ(code, 0) << s.dump(1);
  EXPECT_EQ(s["verdict"], "pass") << s["reason"];
  EXPECT_EQ(s["ranks"], 64);
  EXPECT_EQ(s["outcome"], "completed");
  const json& fd = s["first_detection"];
  ASSERT_TRUE(fd.is_object()) << s.dump(1);
  EXPECT_EQ(fd["rank"], 37);
  EXPECT_EQ(fd["step"], 3);
  EXPECT_EQ(fd["latency_steps"], 0);
  EXPECT_EQ(s["consistent"], true);
  EXPECT_EQ(s["deadlock"], false);
  EXPECT_EQ(s["steps_completed"], 6);
  expect_memory_of_every_rank(s);
}

TEST(Scale64Ranks, HangOnRank50AbortedWithinDeadlineAndNamed) {
  int code = -1;
  const json s = run_scenario("scale-64ranks-hang-rank50.toml", &code);
  EXPECT_EQ(code, 0) << s.dump(1);
  EXPECT_EQ(s["verdict"], "pass") << s["reason"];
  EXPECT_EQ(s["outcome"], "aborted");
  EXPECT_EQ(s["deadlock"], false);
  EXPECT_EQ(s["absent_ranks"], json::array({50}));
  ASSERT_TRUE(s["abort_latency_ms"].is_number()) << s.dump(1);
  EXPECT_LE(s["abort_latency_ms"].get<double>(), 8000.0);  // the scenario's abort_within_ms
  // The hung rank never writes its exit event: its figure comes from the controller's samples.
  expect_memory_of_every_rank(s);
  EXPECT_TRUE(s["memory"]["per_rank_mib"].contains("50"));
}

}  // namespace
