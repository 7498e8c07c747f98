// report.json read back (results/report_read.cpp): what a run wrote comes back field for field,
// non-finite numbers included, and a malformed report is refused naming the scenario and key.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "results/report.h"

namespace nanchaos::results {
namespace {

using json = nlohmann::json;

ScenarioResult full_result() {
  ScenarioResult r;
  r.name = "every-field";
  r.file = "scenarios/every-field.toml";
  r.verdict = Verdict::kFail;
  r.reason = "layer: expected head.weight, got fc1.weight";
  r.outcome = Outcome::kAborted;
  r.wall_ms = 1234.5;
  r.seed = 7;
  r.ranks = 4;
  r.checks.push_back({"layer", "head.weight", "fc1.weight", false});
  r.checks.push_back({"final_loss_finite", true, nullptr, true});
  r.fault_outcome = FaultOutcome::kDetectedUnrecovered;
  Detection d;
  d.detector = "grad";
  d.ranks = {1, 3};
  d.step = 5;
  d.layer = "fc1.weight";
  d.cause = "gradient";
  d.transient = false;
  d.latency_steps = 0;
  d.latency_ms = std::numeric_limits<double>::infinity();
  d.decision_us = 88.5;
  d.action = "abort";
  r.first_detection = d;
  r.detections = {
      d,
      Detection{
          "watchdog", {}, -1, "", "", std::nullopt, std::nullopt, std::nullopt, std::nullopt, ""}};
  r.injections.push_back({0, "tensor", 1, 5, "gradient:fc1.weight", 12.25, false});
  r.injections.push_back({0, "tensor", 1, 5, "gradient:fc1.weight", 14.5, true});
  r.steps_completed = 5;
  r.final_loss = std::numeric_limits<double>::quiet_NaN();
  r.run_dir = "/tmp/run/every-field";
  r.logs.merged = "ranks.log";
  r.logs.ranks.push_back({0, "ranks/rank-0.out", ""});
  r.dropped_events = 0;
  JobFacts f;
  f.false_positives = 2;
  f.consistent = true;
  f.abort_latency_ms = 40.5;
  f.launcher_exit_code = 1;
  f.remote_ranks = {2};
  r.judged = f;
  r.controller = ControllerFacts{100, 0, 2048, 4096, 12};
  r.interpreter = Interpreter{"/usr/bin/python3", "1.13.1", std::nullopt};
  r.interrupted_by = "SIGTERM";
  r.in_launch = "launch-3";
  r.stats = json{{"trials", 2}, {"pass_rate", 0.5}};
  r.trial_count = 2;
  ScenarioResult t0 = r, t1 = r;
  t0.stats = nullptr;
  t1.stats = nullptr;
  t0.trial_count = t1.trial_count = 2;
  t1.trial = 1;
  t1.verdict = Verdict::kPass;
  t1.run_dir = "/tmp/run/every-field/trial-1";
  r.trials = {t0, t1};
  return r;
}

TEST(ReportRead, EveryFieldComesBack) {
  const ScenarioResult r = full_result();
  const json written = to_json(r);
  const ScenarioResult back = scenario_from_json(written);
  EXPECT_EQ(to_json(back), written);
  EXPECT_TRUE(std::isnan(*back.final_loss));
  EXPECT_TRUE(std::isinf(*back.first_detection->latency_ms));
  EXPECT_EQ(back.first_detection->ranks, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(back.detections[1].step, -1);
  ASSERT_EQ(back.trials.size(), 2u);
  EXPECT_EQ(back.trials[1].verdict, Verdict::kPass);
  EXPECT_EQ(back.judged->false_positives, 2);
  EXPECT_EQ(back.interpreter->torch, "1.13.1");
}

TEST(ReportRead, SuiteWithShardComesBack) {
  SuiteReport s;
  s.suite = "scenarios";
  s.started = "2026-12-06T02:00:00Z";
  s.nanchaos_version = "0.1";
  s.host = "vm";
  s.scenarios = {full_result()};
  s.interrupted = true;
  s.interrupt_signal = "SIGINT";
  s.not_run = {"later"};
  s.shard = ShardInfo{2, 3, {"a", "every-field", "later"}};
  s.complete = false;
  s.pending = {"a"};
  const json written = to_json(s);
  const SuiteReport back = suite_from_json(written);
  EXPECT_EQ(to_json(back), written);
  EXPECT_FALSE(back.complete);
  EXPECT_EQ(back.pending, std::vector<std::string>{"a"});
  json older = written;  // written before the key existed: a finished run
  older.erase("complete");
  older.erase("pending");
  EXPECT_TRUE(suite_from_json(older).complete);
  ASSERT_TRUE(back.shard);
  EXPECT_EQ(back.shard->index, 2);
  EXPECT_EQ(back.shard->suite.size(), 3u);
}

TEST(ReportRead, MalformedReportsNameTheScenarioAndKey) {
  json j = to_json(full_result());
  j["verdict"] = "banana";
  try {
    scenario_from_json(j);
    ADD_FAILURE() << "accepted verdict banana";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("scenario every-field.verdict"), std::string::npos)
        << e.what();
  }
  j = to_json(full_result());
  j["outcome"] = "exploded";
  EXPECT_THROW(scenario_from_json(j), std::runtime_error);
  j = to_json(full_result());
  j["final_loss"] = "lots";
  EXPECT_THROW(scenario_from_json(j), std::runtime_error);
  j = to_json(full_result());
  j.erase("name");
  EXPECT_THROW(scenario_from_json(j), std::runtime_error);
  EXPECT_THROW(suite_from_json(json{{"suite", "x"}}), std::runtime_error);
}

TEST(ReportRead, TimelineComesBack) {
  Timeline t;
  t.ranks = 2;
  t.begin_ms = 1.5;
  t.end_ms = 99;
  t.bars.push_back({1, 2.0, 3.5, "grad_allreduce", true, false});
  t.bars.push_back({0, 2.0, 3.0, "send to 1", false, true});
  t.marks.push_back({1, 2.5, "inject", "inject tensor s3"});
  const json j = to_json(t);
  EXPECT_EQ(to_json(timeline_from_json(j)), j);
}

}  // namespace
}  // namespace nanchaos::results
