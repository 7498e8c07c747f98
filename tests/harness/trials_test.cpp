// End-to-end `nanchaos run --trials N`: the real binary runs a small 2-rank job N times; the
// assertions read report.json, the run folders and the progress lines.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using nanchaos::test_util::CmdResult;
using nanchaos::test_util::run_cmd;

std::string tmpdir(const std::string& name) {
  return nanchaos::test_util::scratch_dir("nanchaos-trials", name);
}

const std::string kBin = NANCHAOS_BINARY;

// A NaN activation on rank 1 of a 2-rank job, caught by the loss check at the faulty step.
const char* kScenario = R"(
[scenario]
name = "trials-nan-activation"
seed = 40
[job]
workload = "mlp"
steps = 8
[workload]
hidden = 16
features = 8
[[fault]]
kind = "tensor"
target = "activation:layers.1"
ranks = [1]
step = 3
[expect]
detected = true
first_detector = "loss"
within_steps = 0
rank = 1
)";

}  // namespace

TEST(Trials, EachTrialHasItsSeedRunFolderAndTheStatsSummariseThem) {
  const auto in = tmpdir("in");
  const auto out = tmpdir("out");
  std::ofstream(in + "/a.toml") << kScenario;
  auto r = run_cmd(kBin + " run " + in + "/a.toml --trials 3 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  // Not a terminal: one progress line, no status line.
  EXPECT_NE(r.output.find("[1/1] pass    trials-nan-activation  "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(3/3 trials passed)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("scenario 1 of 1"), std::string::npos) << r.output;

  std::ifstream rep_in(out + "/report.json");
  const json rep = json::parse(rep_in);
  EXPECT_EQ(rep["trials"], 3);
  ASSERT_EQ(rep["scenarios"].size(), 1u);
  const json& s = rep["scenarios"][0];
  EXPECT_EQ(s["verdict"], "pass");
  EXPECT_EQ(s["trial"], 0);  // every trial passed: the top level is trial 0
  EXPECT_EQ(s["seed"], 40);
  EXPECT_EQ(s["trial_count"], 3);
  ASSERT_EQ(s["trials"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const json& t = s["trials"][size_t(i)];
    EXPECT_EQ(t["trial"], i);
    EXPECT_EQ(t["seed"], 40 + i);
    EXPECT_EQ(t["first_detection"]["step"], 3);
    const std::string dir = out + "/trials-nan-activation/trial-" + std::to_string(i);
    EXPECT_EQ(t["run_dir"], dir);
    EXPECT_TRUE(fs::exists(dir + "/events/rank-1.jsonl")) << dir;
    // The rank ran with the trial's seed (its start event records it).
    std::ifstream ev(dir + "/events/rank-0.jsonl");
    std::string first;
    std::getline(ev, first);
    EXPECT_EQ(json::parse(first)["seed"], 40 + i) << first;
  }
  const json& st = s["stats"];
  EXPECT_EQ(st["trials"], 3);
  EXPECT_EQ(st["passed"], 3);
  EXPECT_EQ(st["pass_rate"], 1.0);
  EXPECT_EQ(st["first_detectors"], json({{"loss", 3}}));
  EXPECT_EQ(st["latency_steps"], json({{"n", 3}, {"p50", 0}, {"p95", 0}, {"max", 0}}));
  EXPECT_EQ(st["latency_ms"]["n"], 3);
  EXPECT_LE(st["latency_ms"]["p50"].get<double>(), st["latency_ms"]["p95"].get<double>());
  EXPECT_EQ(st["latency_ms"]["p95"], st["latency_ms"]["max"]);  // nearest rank, 3 samples
  EXPECT_EQ(st["by_detector"]["loss"]["n"], 3);
  EXPECT_EQ(rep["detectors"]["loss"]["scenarios"], json({"trials-nan-activation"}));
  EXPECT_TRUE(fs::exists(out + "/report.html"));

  // The same report compared with itself has no regression.
  auto same = run_cmd(kBin + " compare " + out + "/report.json " + out + "/report.json");
  EXPECT_EQ(same.code, 0) << same.output;
}

TEST(Trials, QuietRunPrintsNoProgressAndZeroTrialsIsAUsageError) {
  const auto in = tmpdir("in");
  const auto out = tmpdir("out");
  std::ofstream(in + "/a.toml") << kScenario;
  auto bad = run_cmd(kBin + " run " + in + "/a.toml --trials 0 --out " + out);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--trials"), std::string::npos) << bad.output;
  // A count that is no whole number says so (CLI11's range check alone said "not in range").
  for (const std::string arg : {"--trials 1.5", "--jobs abc"}) {
    bad = run_cmd(kBin + " run " + in + "/a.toml " + arg + " --out " + out);
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_NE(bad.output.find(": not a whole number: " + arg.substr(arg.find(' ') + 1)),
              std::string::npos)
        << bad.output;
  }
  // A count past int64 says so (CLI11 alone let --max-ranks 2^64+1 through, unchecked).
  bad = run_cmd(kBin + " run " + in + "/a.toml --max-ranks 18446744073709551617 --out " + out);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--max-ranks: out of range: 18446744073709551617"), std::string::npos)
      << bad.output;
  auto quiet = run_cmd(kBin + " run " + in + "/a.toml --quiet --out " + out);
  EXPECT_EQ(quiet.code, 0) << quiet.output;
  // No progress lines, no table: the one summary line only.
  EXPECT_EQ(quiet.output,
            "nanchaos run: 1 scenario: 1 passed, 0 failed, 0 errors, 0 skipped; "
            "reports: " +
                out + "/report.json\n");
  // One trial keeps the folder layout of before: <out>/<name>/events.
  EXPECT_TRUE(fs::exists(out + "/trials-nan-activation/events/rank-0.jsonl"));
  std::ifstream rep_in(out + "/report.json");
  const json s = json::parse(rep_in)["scenarios"][0];
  EXPECT_FALSE(s.contains("trials"));
  EXPECT_EQ(s["stats"]["trials"], 1);
}
