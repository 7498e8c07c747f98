// Trial statistics: nearest-rank percentiles, per-scenario and per-detector summaries, and the
// representative trial.
#include "results/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace nanchaos::results {
namespace {

using nlohmann::json;

ScenarioResult trial(const std::string& verdict, const std::string& detector, int64_t steps,
                     double ms, double decision_us, double wall_ms) {
  ScenarioResult r;
  r.name = "s";
  r.verdict = *results::parse_verdict(verdict);
  r.wall_ms = wall_ms;
  if (!detector.empty()) {
    Detection d;
    d.detector = detector;
    d.latency_steps = steps;
    d.latency_ms = ms;
    d.decision_us = decision_us;
    r.first_detection = d;
  }
  return r;
}

TEST(Percentile, NearestRankReturnsAMeasuredSample) {
  EXPECT_EQ(percentile({4, 1, 3, 2}, 50), 2);  // ceil(0.5*4) = 2nd smallest
  EXPECT_EQ(percentile({4, 1, 3, 2}, 51), 3);
  EXPECT_EQ(percentile({5, 1, 4, 2, 3}, 50), 3);
  EXPECT_EQ(percentile({5, 1, 4, 2, 3}, 95), 5);  // ceil(4.75) = 5th
  EXPECT_EQ(percentile({7}, 95), 7);
  EXPECT_EQ(percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, 95),
            19);
  EXPECT_EQ(percentile({3, 1, 2}, 100), 3);
}

TEST(Percentile, RejectsEmptyNaNAndOutOfRangeP) {
  EXPECT_THROW(percentile({}, 50), std::invalid_argument);
  EXPECT_THROW(percentile({1, 2}, 0), std::invalid_argument);
  EXPECT_THROW(percentile({1, 2}, 101), std::invalid_argument);
  EXPECT_THROW(percentile({1, std::nan("")}, 50), std::invalid_argument);
}

TEST(Summarize, DropsNonFiniteSamplesAndGivesNulloptForNone) {
  EXPECT_FALSE(summarize({}).has_value());
  EXPECT_FALSE(summarize({std::nan(""), std::numeric_limits<double>::infinity()}).has_value());
  auto s = summarize({10, std::nan(""), 30, 20});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->n, 3u);
  EXPECT_EQ(s->p50, 20);
  EXPECT_EQ(s->p95, 30);
  EXPECT_EQ(s->max, 30);
  EXPECT_TRUE(to_json(std::nullopt).is_null());
  EXPECT_EQ(to_json(s), json({{"n", 3}, {"p50", 20}, {"p95", 30}, {"max", 30}}));
}

TEST(ScenarioStats, PassRatePercentilesAndPerDetectorGroups) {
  std::vector<ScenarioResult> trials = {
      trial("pass", "loss", 0, 1.0, 100, 2000), trial("pass", "loss", 0, 3.0, 300, 2200),
      trial("fail", "grad", 1, 9.0, 50, 2100), trial("pass", "loss", 0, 2.0, 200, 1900),
      trial("pass", "", 0, 0, 0, 1800)};
  trials[2].judged = JobFacts{};
  trials[2].judged->abort_latency_ms = 1500.0;
  const json st = scenario_stats(trials);
  EXPECT_EQ(st["trials"], 5);
  EXPECT_EQ(st["passed"], 4);
  EXPECT_DOUBLE_EQ(st["pass_rate"].get<double>(), 0.8);
  EXPECT_EQ(st["verdicts"], json({{"pass", 4}, {"fail", 1}}));
  EXPECT_EQ(st["detected"], 4);
  EXPECT_EQ(st["first_detectors"], json({{"loss", 3}, {"grad", 1}}));
  // All four detections: ms {1,3,9,2} -> p50 2 (2nd of 4), p95 9, max 9.
  EXPECT_EQ(st["latency_ms"]["n"], 4);
  EXPECT_EQ(st["latency_ms"]["p50"], 2);
  EXPECT_EQ(st["latency_ms"]["p95"], 9);
  EXPECT_EQ(st["latency_steps"]["max"], 1);
  EXPECT_EQ(st["latency_steps"]["p50"], 0);
  EXPECT_EQ(st["decision_us"]["p50"], 100);
  EXPECT_EQ(st["abort_latency_ms"]["n"], 1);
  EXPECT_EQ(st["wall_ms"]["max"], 2200);
  EXPECT_EQ(st["by_detector"]["loss"]["n"], 3);
  EXPECT_EQ(st["by_detector"]["loss"]["latency_ms"]["p50"], 2);
  EXPECT_EQ(st["by_detector"]["loss"]["latency_ms"]["max"], 3);
  EXPECT_EQ(st["by_detector"]["grad"]["latency_steps"]["max"], 1);
  EXPECT_EQ(st["by_detector"]["grad"]["abort_latency_ms"]["p50"], 1500);
  EXPECT_TRUE(st["by_detector"]["loss"]["abort_latency_ms"].is_null());
  EXPECT_THROW(scenario_stats({}), std::invalid_argument);
}

TEST(ScenarioStats, NoDetectionGivesNullLatencies) {
  const json st = scenario_stats({trial("pass", "", 0, 0, 0, 1000)});
  EXPECT_TRUE(st["latency_ms"].is_null());
  EXPECT_TRUE(st["latency_steps"].is_null());
  EXPECT_TRUE(st["abort_latency_ms"].is_null());
  EXPECT_EQ(st["by_detector"], json::object());
  EXPECT_EQ(st["pass_rate"], 1.0);
}

TEST(RepresentativeTrial, FirstWorstVerdictElseTrialZero) {
  std::vector<ScenarioResult> all_pass = {trial("pass", "loss", 0, 1, 1, 1),
                                          trial("pass", "loss", 0, 2, 1, 1)};
  all_pass[0].trial = 0;
  all_pass[1].trial = 1;
  EXPECT_EQ(representative_trial(all_pass).trial, 0);
  std::vector<ScenarioResult> mixed = {trial("pass", "", 0, 0, 0, 1), trial("fail", "", 0, 0, 0, 1),
                                       trial("error", "", 0, 0, 0, 1),
                                       trial("error", "", 0, 0, 0, 1)};
  for (int i = 0; i < 4; ++i) mixed[size_t(i)].trial = i;
  const auto r = representative_trial(mixed);
  EXPECT_EQ(r.trial, 2);
  EXPECT_EQ(r.verdict, results::Verdict::kError);
  EXPECT_TRUE(r.trials.empty());
  EXPECT_THROW(representative_trial({}), std::invalid_argument);
}

TEST(SuiteDetectorStats, PoolsTrialsOfEveryScenarioByFirstDetector) {
  SuiteReport suite;
  ScenarioResult a = trial("pass", "loss", 0, 1.0, 10, 1);
  a.name = "a";
  a.trials = {trial("pass", "loss", 0, 1.0, 10, 1), trial("pass", "loss", 0, 5.0, 10, 1)};
  ScenarioResult b = trial("pass", "loss", 2, 3.0, 10, 1);  // a report without trials
  b.name = "b";
  ScenarioResult c = trial("pass", "watchdog", 0, 2000.0, 0, 1);
  c.name = "c";
  suite.scenarios = {a, b, c};
  const json d = suite_detector_stats(suite);
  ASSERT_TRUE(d.contains("loss"));
  EXPECT_EQ(d["loss"]["n"], 3);
  EXPECT_EQ(d["loss"]["scenarios"], json({"a", "b"}));
  EXPECT_EQ(d["loss"]["latency_ms"]["p50"], 3);
  EXPECT_EQ(d["loss"]["latency_steps"]["max"], 2);
  EXPECT_EQ(d["watchdog"]["scenarios"], json({"c"}));
}

TEST(ReportJson, TrialsAndStatsAreWrittenNextToTheListedFields) {
  SuiteReport suite;
  suite.trials = 2;
  ScenarioResult r = trial("pass", "loss", 0, 1.5, 10, 100);
  r.name = "x";
  r.trial_count = 2;
  r.trials = {r, trial("pass", "loss", 0, 2.5, 10, 100)};
  r.trials[1].trial = 1;
  r.trials[1].seed = 8;
  r.stats = scenario_stats(r.trials);
  suite.scenarios = {r};
  suite.detector_stats = suite_detector_stats(suite);
  const json j = to_json(suite);
  EXPECT_EQ(j["trials"], 2);
  const json& s = j["scenarios"][0];
  EXPECT_EQ(s["verdict"], "pass");  // listed fields unchanged
  EXPECT_EQ(s["first_detection"]["latency_ms"], 1.5);
  EXPECT_EQ(s["trial"], 0);
  EXPECT_EQ(s["trial_count"], 2);
  ASSERT_EQ(s["trials"].size(), 2u);
  EXPECT_EQ(s["trials"][1]["trial"], 1);
  EXPECT_EQ(s["trials"][1]["seed"], 8);
  EXPECT_EQ(s["stats"]["latency_ms"]["max"], 2.5);
  EXPECT_EQ(j["detectors"]["loss"]["n"], 2);
}

}  // namespace
}  // namespace nanchaos::results
