// The `sdc` detector on the built-in jobs (detectors/sdc.cpp, harness/job/runner.cpp
// recompute()): ranks as threads of an in-process world, judged from the event logs they wrote.
// A clean step's recompute matches bit for bit (mlp and transformer, several steps), the
// recompute changes nothing the step computes, and a finite flip in one rank's local gradient
// or module output is named on its step with its parameter or module.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "harness/comm/in_process.h"
#include "harness/controller/job_result.h"
#include "harness/controller/judge.h"
#include "harness/evidence/events.h"
#include "harness/job/runner.h"
#include "harness/scenario/scenario.h"

namespace nanchaos::harness {
namespace {

namespace fs = std::filesystem;

struct SdcRun {
  results::ScenarioResult res;
  std::vector<int> codes;                           // per rank
  std::vector<std::vector<nlohmann::json>> events;  // per rank
};

// Runs `toml` on [job].ranks threads and judges it as the controller would.
SdcRun RunSdc(const std::string& toml, const std::string& name) {
  const Scenario s = load_scenario_string(toml, name + ".toml");
  const std::string run_dir =
      (fs::path(::testing::TempDir()) / ("nanchaos_sdc_" + name + "_" + std::to_string(getpid())))
          .string();
  fs::remove_all(run_dir);
  fs::create_directories(run_dir);
  InProcessWorld world(int(s.job.ranks));
  SdcRun out;
  out.codes.assign(size_t(s.job.ranks), -1);
  JobResult job;
  job.t0_us = now_us();
  std::vector<std::thread> ranks;
  for (int r = 0; r < int(s.job.ranks); ++r) {
    ranks.emplace_back([&, r] {
      try {
        out.codes[size_t(r)] = run_rank_on(s, world.communicator(r), run_dir);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
        out.codes[size_t(r)] = kRankExitSetup;
        world.abort(kRankExitSetup);
      }
    });
  }
  for (auto& t : ranks) t.join();
  job.t_end_us = now_us();
  job.exit_code = 0;
  for (int c : out.codes) {
    if (c != 0 && job.exit_code == 0) job.exit_code = c;
  }
  out.res = judge_run(s, run_dir, job);
  for (int r = 0; r < int(s.job.ranks); ++r) {
    out.events.push_back(read_events(run_dir + "/events/rank-" + std::to_string(r) + ".jsonl"));
  }
  fs::remove_all(run_dir);
  return out;
}

std::vector<nlohmann::json> Named(const std::vector<nlohmann::json>& events,
                                  const std::string& ev) {
  std::vector<nlohmann::json> out;
  for (const auto& e : events) {
    if (e.value("ev", "") == ev) out.push_back(e);
  }
  return out;
}

std::string ParamsHash(const std::vector<nlohmann::json>& events) {
  const auto fin = Named(events, "final");
  return fin.empty() ? "" : fin.back().value("params_hash", "");
}

// Per rank: each step's action, its recompute checks and detections, and the final digests: what
// a failed verdict needs to be explained. (A CI run once saw `consistent` false here: a rank's
// recompute restored the shared default generator while the other rank's thread was drawing its
// initial weights; compat::default_generator_mutex() now orders them.)
std::string PerRank(const SdcRun& j) {
  std::string out;
  for (size_t r = 0; r < j.events.size(); ++r) {
    out += "\nrank " + std::to_string(r) + " (exit " + std::to_string(j.codes[r]) + "):";
    for (const auto& e : j.events[r]) {
      const std::string ev = e.value("ev", "");
      if (ev == "step_end") {
        out += " s" + std::to_string(e.value("step", -1)) + "=" + e.value("action", "?");
      } else if (ev == "recompute_check" && !e.value("match", true)) {
        out += " [recompute differs at " + std::to_string(e.value("step", -1)) + "]";
      } else if (ev == "detect" || ev == "decision" || ev == "abort") {
        out += " [" + e.dump() + "]";
      } else if (ev == "final") {
        out += " params " + e.value("params_hash", "") + " optim " + e.value("optim_hash", "");
      }
    }
  }
  return out;
}

const char* kMlp = R"([scenario]
name = "sdc-mlp"
seed = 7
[job]
workload = "mlp"
ranks = 2
steps = 6
[workload]
hidden = 32
features = 16
norm = "batchnorm"
)";

const char* kTransformer = R"([scenario]
name = "sdc-transformer"
seed = 8
[job]
workload = "transformer"
ranks = 2
steps = 4
[workload]
hidden = 32
layers = 2
heads = 2
seq_len = 8
vocab = 32
batch_size = 4
)";

const char* kSdcEveryStep = "[detectors]\nenabled = [\"sdc\"]\nsdc_every = 1\n";

// Every step of every rank recomputed, every recompute bit-identical, nothing flagged; and the
// run ends where the same run without the detector ends (the recompute only looks: it puts the
// step's gradients and BatchNorm statistics back).
void ExpectCleanAndUnchanged(const std::string& job, const std::string& name, int64_t steps) {
  const SdcRun with = RunSdc(job + kSdcEveryStep, name + "_sdc");
  const SdcRun without = RunSdc(job + "[detectors]\npreset = \"none\"\n", name + "_none");
  ASSERT_EQ(with.codes, std::vector<int>(2, 0));
  ASSERT_EQ(without.codes, std::vector<int>(2, 0));
  for (size_t r = 0; r < with.events.size(); ++r) {
    const auto checks = Named(with.events[r], "recompute_check");
    ASSERT_EQ(int64_t(checks.size()), steps) << "rank " << r;
    for (const auto& c : checks) EXPECT_TRUE(c.value("match", false)) << c.dump();
    EXPECT_TRUE(Named(with.events[r], "detect").empty()) << "rank " << r;
    EXPECT_TRUE(Named(without.events[r], "recompute_check").empty()) << "rank " << r;
    EXPECT_FALSE(ParamsHash(with.events[r]).empty());
    EXPECT_EQ(ParamsHash(with.events[r]), ParamsHash(without.events[r])) << "rank " << r;
  }
  EXPECT_FALSE(with.res.first_detection.has_value());
}

TEST(SdcJob, CleanMlpStepsRecomputeBitForBitAndChangeNothing) {
  ExpectCleanAndUnchanged(kMlp, "mlp", 6);
}

TEST(SdcJob, CleanTransformerStepsRecomputeBitForBitAndChangeNothing) {
  ExpectCleanAndUnchanged(kTransformer, "transformer", 4);
}

TEST(SdcJob, RecomputesOnlyEverySdcEverySteps) {
  const SdcRun j =
      RunSdc(std::string(kMlp) + "[detectors]\nenabled = [\"sdc\"]\nsdc_every = 4\n", "every4");
  ASSERT_EQ(j.codes, std::vector<int>(2, 0));
  std::vector<int64_t> steps;
  for (const auto& c : Named(j.events[0], "recompute_check")) steps.push_back(c.value("step", -1));
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 4}));
}

// A flip of the lowest mantissa bit of one element of one rank's local gradient: finite, far
// below anything a magnitude check sees. sdc names the rank, the step and the parameter.
TEST(SdcJob, LowMantissaGradientFlipIsNamedWithItsParameterOnItsStep) {
  const SdcRun j = RunSdc(std::string(kMlp) + kSdcEveryStep + R"([[fault]]
kind = "bitflip"
target = "gradient:layers.1.linear.weight"
bit = 0
ranks = [1]
step = 3
[expect]
detected = true
first_detector = "sdc"
within_steps = 0
rank = 1
layer = "layers.1.linear.weight"
cause = "gradient"
max_false_positives = 0
)",
                          "gradflip");
  ASSERT_TRUE(j.res.first_detection.has_value()) << j.res.reason;
  const auto& d = *j.res.first_detection;
  EXPECT_EQ(d.detector, "sdc");
  EXPECT_EQ(d.step, 3);
  EXPECT_EQ(d.ranks, std::vector<int64_t>{1});
  EXPECT_EQ(d.layer, "layers.1.linear.weight");
  EXPECT_EQ(d.cause, "gradient");
  EXPECT_EQ(j.res.verdict, results::Verdict::kPass) << j.res.reason << PerRank(j);
  // Rank 0 computed the same thing twice at that step.
  for (const auto& c : Named(j.events[0], "recompute_check")) EXPECT_TRUE(c.value("match", false));
}

// A finite scale of one module output in the transformer: the activation sums differ first.
TEST(SdcJob, ScaledActivationIsCauseActivationAndNamesTheModule) {
  const SdcRun j = RunSdc(std::string(kTransformer) + kSdcEveryStep + R"([[fault]]
kind = "tensor"
target = "activation:blocks.1.mlp.fc1"
factor = 1.01
ranks = [0]
step = 2
[expect]
detected = true
first_detector = "sdc"
rank = 0
layer = "blocks.1.mlp.fc1"
cause = "activation"
)",
                          "actscale");
  ASSERT_TRUE(j.res.first_detection.has_value()) << j.res.reason;
  const auto& d = *j.res.first_detection;
  EXPECT_EQ(d.detector, "sdc");
  EXPECT_EQ(d.step, 2);
  EXPECT_EQ(d.ranks, std::vector<int64_t>{0});
  EXPECT_EQ(d.layer, "blocks.1.mlp.fc1");
  EXPECT_EQ(d.cause, "activation");
  EXPECT_EQ(j.res.verdict, results::Verdict::kPass) << j.res.reason << PerRank(j);
}

// A fault that fires identically on the recompute (persistent) computes the same wrong
// gradient twice: the recompute cannot see it (the detector's documented caveat).
TEST(SdcJob, PersistentFaultRecomputesIdenticallyAndIsNotSeen) {
  const SdcRun j = RunSdc(std::string(kMlp) + kSdcEveryStep + R"([[fault]]
kind = "tensor"
target = "gradient:head.weight"
factor = 3.0
ranks = [1]
step = 2
persistent = true
[expect]
detected = false
)",
                          "persistent");
  ASSERT_EQ(j.codes, std::vector<int>(2, 0));
  EXPECT_FALSE(j.res.first_detection.has_value());
  EXPECT_FALSE(Named(j.events[1], "inject").empty());
}

}  // namespace
}  // namespace nanchaos::harness
