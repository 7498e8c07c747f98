// The report writers against a hand-built suite: one pass, one fail, one error, one skipped.
#include "results/report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "results/stats.h"
#include "results/text.h"

namespace nanchaos::results {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

SuiteReport make_suite() {
  SuiteReport suite;
  suite.suite = "smoke";
  suite.started = "2024-05-01T12:00:00Z";
  suite.nanchaos_version = "0.1.0";
  suite.host = "ci-runner";

  ScenarioResult pass;
  pass.name = "nan-input-one-rank";
  pass.file = "scenarios/nan_input.toml";
  pass.verdict = results::Verdict::kPass;
  pass.outcome = results::Outcome::kCompleted;
  pass.wall_ms = 1234.0;
  pass.seed = 42;
  pass.ranks = 2;
  pass.checks = {{"detected", true, true, true}, {"rank", 1, 1, true}};
  pass.fault_outcome = results::FaultOutcome::kDetectedRecovered;
  Detection d;
  d.detector = "batch";
  d.ranks = {1};
  d.step = 5;
  d.layer = "inputs";
  d.cause = "data";
  d.transient = false;
  d.latency_steps = 0;
  d.latency_ms = 3.5;
  d.decision_us = 180.0;
  d.action = "skip_step";
  pass.first_detection = d;
  pass.detections = {d};
  pass.injections = {{0, "batch", 1, 5, "inputs", 812.5, false}};
  pass.steps_completed = 20;
  pass.final_loss = 2.5;
  pass.run_dir = "results/runs/x/nan-input-one-rank";
  pass.judged = JobFacts{};
  pass.judged->abort_latency_ms = 12.5;
  pass.interrupted_by = "SIGINT";
  suite.scenarios.push_back(pass);

  ScenarioResult fail;
  fail.name = "fp16-ffn-overflow";
  fail.file = "scenarios/fp16.toml";
  fail.verdict = results::Verdict::kFail;
  fail.reason = "layer: expected <ffn> & \"fc1\"";
  fail.outcome = results::Outcome::kCompleted;
  fail.wall_ms = 2000;
  fail.seed = 7;
  fail.ranks = 4;
  fail.checks = {{"detected", true, true, true},
                 {"layer", "blocks.0.ffn", "blocks.0.attn", false},
                 {"within_steps", 1, nullptr, false}};
  fail.fault_outcome = results::FaultOutcome::kDetectedUnrecovered;
  Detection multi;
  multi.detector = "post_reduce";
  multi.ranks = {0, 2};
  multi.step = 9;
  multi.layer = "blocks.0.attn.qkv.weight";
  multi.cause = "reduce_overflow";
  multi.latency_steps = 2;
  multi.latency_ms = 40.0;
  multi.action = "abort";
  Detection unknown;
  unknown.detector = "watchdog";
  unknown.action = "abort";
  fail.first_detection = multi;
  fail.detections = {multi, unknown};
  fail.steps_completed = 9;
  fail.final_loss = std::numeric_limits<double>::quiet_NaN();
  suite.scenarios.push_back(fail);

  ScenarioResult error;
  error.name = "step-past-end";
  error.verdict = results::Verdict::kError;
  error.reason = "injection not verified";
  error.outcome = results::Outcome::kCompleted;
  error.wall_ms = 500;
  suite.scenarios.push_back(error);

  ScenarioResult skipped;
  skipped.name = "gpu-only";
  skipped.verdict = results::Verdict::kSkipped;
  skipped.reason = "needs device = \"cuda\"; host has no GPU";
  suite.scenarios.push_back(skipped);
  return suite;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}

// Display columns of UTF-8 text ("…" is three bytes, one column).
size_t columns(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

class ReportWriters : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("nanchaos-report-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST(ReportSummary, CountsEachVerdict) {
  const auto suite = make_suite();
  EXPECT_EQ(suite.passed(), 1);
  EXPECT_EQ(suite.failed(), 1);
  EXPECT_EQ(suite.errors(), 1);
  EXPECT_EQ(suite.skipped(), 1);
}

TEST(ReportJson, TopLevelShape) {
  const json j = to_json(make_suite());
  EXPECT_EQ(j["suite"], "smoke");
  EXPECT_EQ(j["started"], "2024-05-01T12:00:00Z");
  EXPECT_EQ(j["nanchaos_version"], "0.1.0");
  EXPECT_EQ(j["host"], "ci-runner");
  ASSERT_TRUE(j["scenarios"].is_array());
  EXPECT_EQ(j["scenarios"].size(), 4u);
  EXPECT_EQ(j["summary"], json({{"passed", 1}, {"failed", 1}, {"errors", 1}, {"skipped", 1}}));
}

TEST(ReportJson, PassingScenarioFields) {
  const json s = to_json(make_suite())["scenarios"][0];
  for (const char* key : {"name", "file", "verdict", "reason", "outcome", "wall_ms", "seed",
                          "ranks", "checks", "fault_outcome", "first_detection", "detections",
                          "injections", "steps_completed", "final_loss", "run_dir"}) {
    EXPECT_TRUE(s.contains(key)) << key;
  }
  EXPECT_EQ(s["verdict"], "pass");
  EXPECT_TRUE(s["reason"].is_null());
  EXPECT_DOUBLE_EQ(s["wall_ms"].get<double>(), 1234.0);
  EXPECT_EQ(s["seed"], 42u);
  EXPECT_EQ(s["checks"][1],
            json({{"key", "rank"}, {"expected", 1}, {"actual", 1}, {"pass", true}}));

  const json& fd = s["first_detection"];
  ASSERT_TRUE(fd.is_object());
  EXPECT_EQ(fd["detector"], "batch");
  ASSERT_TRUE(fd["rank"].is_number_integer());  // one blamed rank: a plain integer
  EXPECT_EQ(fd["rank"], 1);
  EXPECT_EQ(fd["step"], 5);
  EXPECT_EQ(fd["layer"], "inputs");
  EXPECT_EQ(fd["cause"], "data");
  EXPECT_EQ(fd["transient"], false);
  EXPECT_EQ(fd["latency_steps"], 0);
  EXPECT_DOUBLE_EQ(fd["latency_ms"].get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(fd["decision_us"].get<double>(), 180.0);
  EXPECT_EQ(fd["action"], "skip_step");
  EXPECT_EQ(s["detections"].size(), 1u);

  ASSERT_EQ(s["injections"].size(), 1u);
  EXPECT_EQ(s["injections"][0], json({{"fault", 0},
                                      {"kind", "batch"},
                                      {"rank", 1},
                                      {"step", 5},
                                      {"target", "inputs"},
                                      {"t_ms", 812.5},
                                      {"replay", false}}));
  EXPECT_EQ(s["steps_completed"], 20);
  EXPECT_DOUBLE_EQ(s["final_loss"].get<double>(), 2.5);
  // The job facts sit beside the contract fields.
  EXPECT_DOUBLE_EQ(s["abort_latency_ms"].get<double>(), 12.5);
  EXPECT_EQ(s["interrupted_by"], "SIGINT");
  EXPECT_TRUE(s["postmortem"].is_null());
  EXPECT_EQ(s["verdict"], "pass");
}

TEST(ReportJson, RankArrayAndNulls) {
  const json s = to_json(make_suite())["scenarios"][1];
  const json& fd = s["first_detection"];
  ASSERT_TRUE(fd["rank"].is_array());  // several blamed ranks: an array
  EXPECT_EQ(fd["rank"], json({0, 2}));
  EXPECT_TRUE(fd["transient"].is_null());
  EXPECT_TRUE(fd["decision_us"].is_null());

  const json& unknown = s["detections"][1];
  EXPECT_TRUE(unknown["rank"].is_null());  // nobody blamed: null
  EXPECT_TRUE(unknown["step"].is_null());
  EXPECT_TRUE(unknown["layer"].is_null());
  EXPECT_TRUE(unknown["cause"].is_null());
  EXPECT_TRUE(unknown["latency_steps"].is_null());
  EXPECT_TRUE(unknown["latency_ms"].is_null());

  EXPECT_TRUE(s["checks"][2]["actual"].is_null());
  EXPECT_EQ(s["checks"][2]["pass"], false);
  // A NaN loss must not read as "no loss".
  EXPECT_EQ(s["final_loss"], "nan");
  EXPECT_EQ(s["reason"], "layer: expected <ffn> & \"fc1\"");
}

TEST(ReportJson, ScenarioWithoutDetection) {
  const json s = to_json(make_suite())["scenarios"][2];
  EXPECT_EQ(s["verdict"], "error");
  EXPECT_TRUE(s["first_detection"].is_null());
  EXPECT_TRUE(s["detections"].is_array());
  EXPECT_TRUE(s["detections"].empty());
  EXPECT_TRUE(s["injections"].empty());
  EXPECT_TRUE(s["final_loss"].is_null());
  EXPECT_TRUE(s["fault_outcome"].is_null());
  EXPECT_TRUE(s["run_dir"].is_null());
  const json skipped = to_json(make_suite())["scenarios"][3];
  EXPECT_EQ(skipped["verdict"], "skipped");
  EXPECT_TRUE(skipped["outcome"].is_null());
}

TEST_F(ReportWriters, ReportJsonRoundTripsAndKeepsSpecOrder) {
  const auto path = dir_ / "report.json";
  write_report_json(make_suite(), path.string());
  const std::string text = slurp(path);
  const json j = json::parse(text);
  EXPECT_EQ(j, to_json(make_suite()));
  EXPECT_NE(text.find("\n  \"suite\": \"smoke\""), std::string::npos) << "2-space indent";
  EXPECT_LT(text.find("\"suite\""), text.find("\"scenarios\""));
  EXPECT_LT(text.find("\"scenarios\""), text.find("\"summary\""));
}

TEST_F(ReportWriters, Junit) {
  const auto path = dir_ / "junit.xml";
  write_junit(make_suite(), path.string());
  const std::string x = slurp(path);
  EXPECT_EQ(x.rfind("<?xml", 0), 0u);
  EXPECT_NE(x.find("<testsuite name=\"smoke\" tests=\"4\" failures=\"1\" errors=\"1\" "
                   "skipped=\"1\" time=\"3.734\""),
            std::string::npos)
      << x;
  EXPECT_EQ(count(x, "<testcase "), 4u);
  EXPECT_EQ(count(x, "</testsuite>"), 1u);
  EXPECT_NE(x.find("classname=\"nanchaos.smoke\" name=\"nan-input-one-rank\""), std::string::npos);
  EXPECT_NE(x.find("time=\"1.234\""), std::string::npos);
  EXPECT_EQ(count(x, "<failure "), 1u);
  EXPECT_EQ(count(x, "<error "), 1u);
  EXPECT_EQ(count(x, "<skipped "), 1u);
  // The reason's <&"> are escaped in the attribute, never raw.
  EXPECT_NE(x.find("message=\"layer: expected &lt;ffn&gt; &amp; &quot;fc1&quot;\""),
            std::string::npos)
      << x;
  EXPECT_EQ(x.find("<ffn>"), std::string::npos);
  // The failure body lists the failed checks, not the passing ones.
  EXPECT_NE(x.find("layer: expected blocks.0.ffn, actual blocks.0.attn"), std::string::npos) << x;
  EXPECT_NE(x.find("within_steps: expected 1, actual -"), std::string::npos) << x;
  EXPECT_EQ(x.find("detected: expected"), std::string::npos);
  EXPECT_NE(x.find("<error message=\"injection not verified\""), std::string::npos);
  EXPECT_NE(x.find("<skipped message=\"needs device = &quot;cuda&quot;; host has no GPU\""),
            std::string::npos);
}

// A report written while the run goes on (or left by a controller killed with SIGKILL): it says
// it is incomplete, and its JUnit file counts each scenario not judged yet as an error, so that
// it never reads as a pass.
TEST_F(ReportWriters, AnIncompleteRunSaysSoInEveryReport) {
  SuiteReport s = make_suite();
  EXPECT_EQ(to_json(s)["complete"], true);
  EXPECT_FALSE(to_json(s).contains("pending"));
  s.complete = false;
  s.pending = {"still-running", "queued"};
  const json j = to_json(s);
  EXPECT_EQ(j["complete"], false);
  EXPECT_EQ(j["pending"], json({"still-running", "queued"}));
  EXPECT_EQ(j["interrupted"], false);
  const auto path = dir_ / "junit.xml";
  write_junit(s, path.string());
  const std::string x = slurp(path);
  EXPECT_NE(x.find("tests=\"6\" failures=\"1\" errors=\"3\" skipped=\"1\""), std::string::npos)
      << x;
  EXPECT_EQ(count(x, "type=\"incomplete\""), 2u) << x;
  EXPECT_NE(x.find("name=\"queued\" time=\"0.000\">\n    <error message=\"not judged"),
            std::string::npos)
      << x;
  EXPECT_NE(x.find("<property name=\"complete\" value=\"false\"/>"), std::string::npos) << x;
  EXPECT_NE(summary_text(s).find("; INCOMPLETE: 2 not judged yet (still-running, queued)"),
            std::string::npos)
      << summary_text(s);
}

TEST_F(ReportWriters, Markdown) {
  const auto path = dir_ / "report.md";
  write_markdown(make_suite(), path.string());
  const std::string m = slurp(path);
  EXPECT_EQ(m.rfind("# ", 0), 0u);
  EXPECT_NE(m.find("4 scenarios: 1 passed, 1 failed, 1 error, 1 skipped"), std::string::npos);
  EXPECT_NE(m.find("| Verdict | Scenario |"), std::string::npos);
  EXPECT_NE(
      m.find(
          "| PASS | nan-input-one-rank | completed | batch | 1 | inputs | data | 0 | 3.5 | 1.2 |"),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("| FAIL | fp16-ffn-overflow | completed | post_reduce | 0,2 | "
                   "blocks.0.attn.qkv.weight | reduce_overflow | 2 | 40.0 | 2.0 |"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("| ERROR | step-past-end | completed | - | - | - | - | - | - | 0.5 |"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("| SKIP | gpu-only | - |"), std::string::npos) << m;
  EXPECT_NE(m.find("### fp16-ffn-overflow (fail)"), std::string::npos);
  EXPECT_NE(m.find("| layer | blocks.0.ffn | blocks.0.attn |"), std::string::npos) << m;
  EXPECT_NE(m.find("| within_steps | 1 | - |"), std::string::npos) << m;
  EXPECT_NE(m.find("### step-past-end (error)"), std::string::npos);
  EXPECT_EQ(m.find("### nan-input-one-rank"), std::string::npos);
  // A pull-request comment: what failed first, then the whole table folded (closed when
  // something failed), its latency columns defined, the skipped ones in a folded list.
  EXPECT_LT(m.find("## Failed or errored"), m.find("| Verdict | Scenario |"));
  EXPECT_LT(m.find("### step-past-end (error)"), m.find("<details><summary>All 4 scenarios"));
  EXPECT_NE(m.find("Latency (steps): steps from the first injection"), std::string::npos);
  EXPECT_NE(m.find("<details><summary>1 skipped</summary>\n\n- gpu-only: needs device"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("### gpu-only"), std::string::npos);
  SuiteReport green = make_suite();
  green.scenarios = {green.scenarios[0]};
  write_markdown(green, path.string());
  const std::string g = slurp(path);
  EXPECT_NE(g.find("<details open><summary>All 1 scenarios"), std::string::npos) << g;
  EXPECT_EQ(g.find("## Failed or errored"), std::string::npos);
}

// report.md's step-time table: one sparkline of the score per rank, from the judge's per-step
// series; "-" where a report has no series (written before it existed).
TEST_F(ReportWriters, MarkdownStepTimesCarryAScoreSparkline) {
  SuiteReport r = make_suite();
  JobFacts f;
  f.step_times.resize(2);
  f.step_times[0].rank = 0;
  f.step_times[1].rank = 1;
  StepScores sc;
  sc.steps = {0, 1, 2, 3, 4};
  sc.ranks = {0, 1};
  sc.score = {{1, 1, 1, 1, 1}, {1.0, 1.5, 1.51, 3.0, 0.2}};
  f.step_scores = sc;
  r.scenarios.at(0).judged = f;
  const auto path = dir_ / "report.md";
  write_markdown(r, path.string());
  std::string m = slurp(path);
  EXPECT_NE(m.find("## Step time per rank"), std::string::npos) << m;
  EXPECT_NE(m.find("| Slow steps | Score by step |"), std::string::npos) << m;
  // Up to 1.5 one of ▁▂▃▄; above it ▅ and up (█ from 3).
  EXPECT_NE(m.find("| 0 | `▃▃▃▃▃` |\n"), std::string::npos) << m;
  EXPECT_NE(m.find("| 0 | `▃▄▅█▁` |\n"), std::string::npos) << m;
  r.scenarios.at(0).judged->step_scores.reset();
  write_markdown(r, path.string());
  m = slurp(path);
  EXPECT_NE(m.find("| 0 | - |\n"), std::string::npos) << m;
  EXPECT_EQ(m.find("`▃"), std::string::npos) << m;
}

TEST(ReportConsole, ColumnsLineUp) {
  const auto suite = make_suite();
  const std::string header = console_header();
  const std::string row = console_row(suite.scenarios[0]);
  ASSERT_FALSE(row.empty());
  EXPECT_EQ(row.back(), '\n');
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(header.rfind("VERDICT", 0), 0u);
  EXPECT_EQ(row.rfind("PASS", 0), 0u);
  for (const char* col : {"DETECTOR", "RANK", "LAYER", "CAUSE", "LAT(steps)", "LAT(ms)"}) {
    EXPECT_NE(header.find(col), std::string::npos) << col;
  }
  // Values sit under their headers.
  EXPECT_EQ(row.find("batch"), header.find("DETECTOR"));
  EXPECT_EQ(row.find(" 1 ", header.find("RANK") - 1), header.find("RANK") - 1);
  EXPECT_EQ(row.find("inputs"), header.find("LAYER"));
  EXPECT_EQ(row.find("data"), header.find("CAUSE"));
  EXPECT_EQ(row.size(), header.size()) << "a passing row is exactly as wide as the header";
}

TEST(ReportConsole, MissingValuesAndLongNames) {
  auto suite = make_suite();
  const std::string err = console_row(suite.scenarios[2]);
  EXPECT_EQ(err.rfind("ERROR", 0), 0u);
  EXPECT_NE(err.find("injection not verified"), std::string::npos);
  EXPECT_NE(err.find(" - "), std::string::npos);

  const std::string fail = console_row(suite.scenarios[1]);
  EXPECT_NE(fail.find("post_reduce"), std::string::npos);
  EXPECT_NE(fail.find("0,2"), std::string::npos);
  EXPECT_NE(fail.find("qkv.weight"), std::string::npos);  // long layers keep their tail

  suite.scenarios[0].name = std::string(60, 'x');
  const std::string row = console_row(suite.scenarios[0]);
  EXPECT_EQ(row.find(std::string(40, 'x')), std::string::npos);
  EXPECT_NE(row.find("…"), std::string::npos);
  const std::string plain = console_row(make_suite().scenarios[0]);
  EXPECT_EQ(columns(plain.substr(0, plain.find("batch"))),
            columns(row.substr(0, row.find("batch"))));
}

TEST(ReportConsole, Footer) {
  EXPECT_EQ(console_footer(make_suite()),
            "--- 4 scenarios: 1 passed, 1 failed, 1 error, 1 skipped\n");
}

TEST(ReportWritersErrors, UnwritablePathThrowsWithPath) {
  const std::string path = "/proc/nonexistent/x.json";
  const auto suite = make_suite();
  for (auto* writer : {&write_report_json, &write_junit, &write_markdown}) {
    try {
      writer(suite, path);
      FAIL() << "expected std::runtime_error";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("cannot write /proc/nonexistent/x.json: "), std::string::npos) << what;
    }
  }
}

TEST_F(ReportWriters, MarkdownListsTrialPercentilesWhenTrialsRepeat) {
  SuiteReport r = make_suite();
  const auto path = dir_ / "report.md";
  write_markdown(r, path.string());
  EXPECT_EQ(slurp(path).find("## Trials"), std::string::npos);  // one trial: no section

  r.trials = 3;
  ScenarioResult& s = r.scenarios.at(0);
  ScenarioResult slower = s;
  slower.first_detection->latency_ms = 9.25;
  s.stats = scenario_stats({s, s, slower});
  write_markdown(r, path.string());
  const std::string m = slurp(path);
  EXPECT_NE(m.find("## Trials (3 per scenario"), std::string::npos) << m;
  // nearest rank over {3.5, 3.5, 9.25}: p50 3.5, p95 and max 9.25
  EXPECT_NE(m.find("| nan-input-one-rank | 3/3 | 0 / 0 / 0 | 3.50 / 9.25 / 9.25 |"),
            std::string::npos)
      << m;
}

TEST_F(ReportWriters, JunitTimesAllTrialsAndSaysHowManyPassed) {
  SuiteReport r = make_suite();
  r.trials = 3;
  ScenarioResult& fail = r.scenarios.at(1);
  ScenarioResult ok = fail;
  ok.verdict = Verdict::kPass;
  ok.wall_ms = 1000;
  fail.wall_ms = 2000;
  fail.trials = {ok, fail, fail};
  fail.stats = scenario_stats(fail.trials);
  const auto path = dir_ / "junit.xml";
  write_junit(r, path.string());
  const std::string x = slurp(path);
  // 1 + 2 + 2 s of the repeated scenario, not one trial's 2 s.
  EXPECT_NE(x.find("name=\"fp16-ffn-overflow\" file=\"scenarios/fp16.toml\" time=\"5.000\""),
            std::string::npos)
      << x;
  EXPECT_NE(x.find("<failure message=\"1/3 trials passed: "), std::string::npos) << x;
  EXPECT_EQ(count(x, "trials passed"), 1u);  // the one-trial error keeps its plain message
}

}  // namespace
}  // namespace nanchaos::results
