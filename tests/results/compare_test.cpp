// `nanchaos compare`: regression rules over hand-written report.json objects, the renderings,
// and input errors (missing or malformed file -> exit 2 naming the file).
#include "results/compare.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace nanchaos::results {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A report.json scenario: `trials` > 0 adds a stats block as `nanchaos run --trials` writes it.
json scenario(const std::string& name, const std::string& verdict, const std::string& detector,
              json rank, const std::string& cause, int steps, double p50_ms, int trials = 0,
              double p95_ms = -1) {
  json s = {{"name", name}, {"verdict", verdict}, {"reason", nullptr}};
  if (detector.empty()) {
    s["first_detection"] = nullptr;
  } else {
    s["first_detection"] = {{"detector", detector},   {"rank", rank},
                            {"layer", "layers.1"},    {"cause", cause},
                            {"latency_steps", steps}, {"latency_ms", p50_ms}};
  }
  if (trials > 0) {
    auto summary = [&](double p50, double p95) {
      return json{{"n", trials}, {"p50", p50}, {"p95", p95}, {"max", p95}};
    };
    s["stats"] = {{"trials", trials},
                  {"passed", verdict == "pass" ? trials : 0},
                  {"latency_steps", detector.empty() ? json(nullptr) : summary(steps, steps)},
                  {"latency_ms", detector.empty() ? json(nullptr)
                                                  : summary(p50_ms, p95_ms < 0 ? p50_ms : p95_ms)}};
  }
  return s;
}

json report(std::vector<json> scenarios) { return {{"suite", "t"}, {"scenarios", scenarios}}; }

std::vector<std::string> kinds(const Comparison& c) {
  std::vector<std::string> out;
  for (const auto& r : c.regressions) out.push_back(r.scenario + ":" + r.kind);
  return out;
}

TEST(Compare, IdenticalReportsHaveNoRegression) {
  const json r = report({scenario("a", "pass", "loss", 1, "activation", 0, 0.4, 5),
                         scenario("b", "pass", "", nullptr, "", 0, 0, 5)});
  const auto c = compare_reports(r, r);
  EXPECT_TRUE(c.regressions.empty());
  ASSERT_EQ(c.scenarios.size(), 2u);
  EXPECT_EQ(c.scenarios[0].attribution_match, true);
  EXPECT_DOUBLE_EQ(*c.scenarios[0].ratio, 1.0);
  EXPECT_FALSE(c.scenarios[1].attribution_match.has_value());
}

// A relaunched scenario with one trial per resume latency (ms): `trials` as --trials N writes it.
json restarted(const std::string& name, const std::vector<double>& resume_ms) {
  json s = scenario(name, "pass", "", nullptr, "", 0, 0);
  json trials = json::array();
  for (double ms : resume_ms) {
    json t = s;
    t["restarts"] = {{{"after_launch", 0}, {"resume_ms", ms}}};
    trials.push_back(t);
  }
  s["trials"] = trials;
  s["restarts"] = trials[0]["restarts"];
  return s;
}

TEST(Compare, RestartLatencyIsGatedOnItsPercentiles) {
  const json base = report({restarted("r", {500, 510, 520, 530}), restarted("q", {400, 400, 400})});
  // p50 and p95 of r more than doubled; q unchanged.
  const json slower =
      report({restarted("r", {1500, 1510, 1520, 1530}), restarted("q", {400, 400, 400})});
  const auto c = compare_reports(base, slower);
  EXPECT_EQ(kinds(c), (std::vector<std::string>{"r:restart_latency", "(suite):restart_latency"}));
  EXPECT_NE(c.regressions[0].detail.find("p50 510.0 → 1510.0 ms"), std::string::npos)
      << c.regressions[0].detail;
  EXPECT_NE(c.regressions[0].detail.find("p95 530.0 → 1530.0 ms"), std::string::npos);
  // Only the tail got slower: p95 alone trips it.
  const json tail =
      report({restarted("r", {500, 510, 520, 5000}), restarted("q", {400, 400, 400})});
  const auto t = compare_reports(base, tail);
  ASSERT_FALSE(t.regressions.empty());
  EXPECT_EQ(t.regressions[0].detail.find("p50"), std::string::npos) << t.regressions[0].detail;
  // Faster, the same, or too few restarts to gate (2 < min_trials): nothing.
  EXPECT_TRUE(compare_reports(slower, base).regressions.empty());
  EXPECT_TRUE(compare_reports(base, base).regressions.empty());
  EXPECT_TRUE(
      compare_reports(report({restarted("r", {500, 500})}), report({restarted("r", {5000, 5000})}))
          .regressions.empty());
  EXPECT_EQ(format_json(c)["scenarios"][0]["new"]["resume_ms"]["p50"], 1510);
}

TEST(Compare, VerdictFlipAttributionChangeAndLaterDetectionAreRegressions) {
  const json base = report({scenario("flip", "pass", "loss", 1, "activation", 0, 1, 3),
                            scenario("blame", "pass", "loss", 1, "activation", 0, 1, 3),
                            scenario("late", "pass", "loss", 1, "activation", 0, 1, 3),
                            scenario("lost", "pass", "grad", 2, "gradient", 0, 1, 3)});
  const json fresh = report({scenario("flip", "fail", "loss", 1, "activation", 0, 1, 3),
                             scenario("blame", "pass", "loss", 0, "activation", 0, 1, 3),
                             scenario("late", "pass", "loss", 1, "activation", 2, 1, 3),
                             scenario("lost", "pass", "", nullptr, "", 0, 0, 3)});
  const auto c = compare_reports(base, fresh);
  EXPECT_EQ(kinds(c), (std::vector<std::string>{"flip:verdict", "blame:attribution",
                                                "late:detection", "lost:detection"}));
  EXPECT_NE(c.regressions[2].detail.find("0 → 2 steps"), std::string::npos)
      << c.regressions[2].detail;
  EXPECT_NE(c.regressions[3].detail.find("no longer detected"), std::string::npos);
  EXPECT_EQ(c.scenarios[1].attribution_match, false);
}

TEST(Compare, ImprovementsAndADetectorSwapWithTheSameBlameAreNotRegressions) {
  const json base = report({scenario("fixed", "fail", "loss", 1, "activation", 2, 5, 3),
                            scenario("swap", "pass", "loss", 1, "activation", 0, 5, 3),
                            scenario("earlier", "pass", "loss", 1, "activation", 3, 5, 3)});
  const json fresh = report({scenario("fixed", "pass", "loss", 1, "activation", 0, 1, 3),
                             scenario("swap", "pass", "grad", 1, "activation", 0, 5, 3),
                             scenario("earlier", "pass", "loss", 1, "activation", 1, 5, 3),
                             scenario("added", "pass", "", nullptr, "", 0, 0, 3)});
  const auto c = compare_reports(base, fresh);
  EXPECT_TRUE(c.regressions.empty()) << format_text(c);
  ASSERT_EQ(c.scenarios.size(), 4u);
  EXPECT_EQ(c.scenarios[3].name, "added");
  EXPECT_EQ(c.scenarios[3].notes, std::vector<std::string>{"only in NEW"});
  EXPECT_FALSE(c.scenarios[1].notes.empty());  // "first detector loss → grad"
}

TEST(Compare, AScenarioMissingFromNewIsARegression) {
  const json base = report(
      {scenario("a", "pass", "", nullptr, "", 0, 0), scenario("b", "pass", "", nullptr, "", 0, 0)});
  const json fresh = report({scenario("a", "pass", "", nullptr, "", 0, 0)});
  EXPECT_EQ(kinds(compare_reports(base, fresh)), std::vector<std::string>{"b:missing"});
}

TEST(Compare, PassThenSkippedIsAVerdictRegression) {
  const json base = report({scenario("gpu", "pass", "grad", 0, "gradient", 0, 1, 3)});
  const json fresh = report({scenario("gpu", "skipped", "", nullptr, "", 0, 0, 1)});
  const auto c = compare_reports(base, fresh);
  EXPECT_EQ(kinds(c), std::vector<std::string>{"gpu:verdict"}) << format_text(c);
}

TEST(Compare, SkippedOnBothSidesOrAfterAFailureIsANote) {
  const json base = report({scenario("gpu", "skipped", "", nullptr, "", 0, 0, 1),
                            scenario("flaky", "fail", "", nullptr, "", 0, 0, 1)});
  const json fresh = report({scenario("gpu", "skipped", "", nullptr, "", 0, 0, 1),
                             scenario("flaky", "skipped", "", nullptr, "", 0, 0, 1)});
  const auto c = compare_reports(base, fresh);
  EXPECT_TRUE(c.regressions.empty()) << format_text(c);
  EXPECT_EQ(c.scenarios[1].notes.front(), "skipped in NEW");
}

TEST(Compare, LatencyIsGatedOnlyWithEnoughTrialsPastRatioAndDelta) {
  CompareOptions o;
  o.max_slowdown = 2.0;
  o.min_trials = 3;
  o.min_delta_ms = 1.0;
  auto run = [&](double base_ms, double new_ms, int base_trials, int new_trials) {
    return compare_reports(
        report({scenario("s", "pass", "loss", 1, "activation", 0, base_ms, base_trials)}),
        report({scenario("s", "pass", "loss", 1, "activation", 0, new_ms, new_trials)}), o);
  };
  EXPECT_EQ(kinds(run(10, 25, 3, 5)), std::vector<std::string>{"s:latency"});
  EXPECT_TRUE(run(10, 19, 3, 5).regressions.empty());    // ratio 1.9 <= 2
  EXPECT_TRUE(run(10, 25, 2, 5).regressions.empty());    // base has too few trials
  EXPECT_TRUE(run(10, 25, 3, 1).regressions.empty());    // new has too few trials
  EXPECT_TRUE(run(0.1, 0.5, 5, 5).regressions.empty());  // x5 but only 0.4 ms: noise
  EXPECT_DOUBLE_EQ(*run(0.1, 0.5, 5, 5).scenarios[0].ratio, 5.0);
  o.max_slowdown = 10;
  EXPECT_TRUE(run(10, 25, 3, 5).regressions.empty());
}

TEST(Compare, ASlowdownOnTooFewTrialsIsANoteNotASilentPass) {
  const auto c =
      compare_reports(report({scenario("s", "pass", "loss", 1, "activation", 0, 10, 1)}),
                      report({scenario("s", "pass", "loss", 1, "activation", 0, 25, 1)}));
  EXPECT_TRUE(c.regressions.empty());
  ASSERT_EQ(c.scenarios[0].notes.size(), 1u);
  EXPECT_EQ(c.scenarios[0].notes[0],
            "latency_ms not gated (1 < 3 trials): latency_ms p50 10.00 → 25.00 ms (x2.50 > x2.00)");
  EXPECT_NE(format_markdown(c).find("latency_ms not gated"), std::string::npos);
  // No slowdown: no note.
  EXPECT_TRUE(compare_reports(report({scenario("s", "pass", "loss", 1, "activation", 0, 10, 1)}),
                              report({scenario("s", "pass", "loss", 1, "activation", 0, 11, 1)}))
                  .scenarios[0]
                  .notes.empty());
}

TEST(Compare, DecisionAndAbortLatencyAreGatedLikeDetectionLatency) {
  auto with = [](double decision_us, double abort_ms) {
    json s = scenario("s", "pass", "loss", 1, "activation", 0, 10, 4);
    s["stats"]["decision_us"] = {{"n", 4}, {"p50", decision_us}, {"p95", decision_us}};
    s["stats"]["abort_latency_ms"] = {{"n", 4}, {"p50", abort_ms}, {"p95", abort_ms}};
    return report({s});
  };
  EXPECT_TRUE(compare_reports(with(300, 40), with(500, 70)).regressions.empty());
  EXPECT_EQ(kinds(compare_reports(with(300, 40), with(5000, 40))),
            std::vector<std::string>{"s:decision"});
  EXPECT_EQ(kinds(compare_reports(with(300, 40), with(300, 400))),
            std::vector<std::string>{"s:abort_latency"});
  // x5 and 1.2 ms slower (1200 us > min_delta_ms 1 ms): gated; x9 but 0.8 ms: noise.
  EXPECT_EQ(kinds(compare_reports(with(300, 40), with(1500, 40))),
            std::vector<std::string>{"s:decision"});
  EXPECT_TRUE(compare_reports(with(100, 40), with(900, 40)).regressions.empty());  // 0.8 ms
  const json j = format_json(compare_reports(with(300, 40), with(5000, 40)));
  EXPECT_EQ(j["scenarios"][0]["new"]["decision_us_p50"], 5000);
  EXPECT_EQ(j["scenarios"][0]["base"]["abort_latency_ms_p50"], 40);
}

TEST(Compare, AFailingScenarioOnlyInNewIsANewFailure) {
  const json base = report({scenario("a", "pass", "", nullptr, "", 0, 0, 1)});
  json broken = scenario("added", "error", "", nullptr, "", 0, 0, 1);
  broken["reason"] = "rank 1 crashed";
  const json fresh = report({scenario("a", "pass", "", nullptr, "", 0, 0, 1), broken,
                             scenario("red", "fail", "", nullptr, "", 0, 0, 1),
                             scenario("green", "pass", "", nullptr, "", 0, 0, 1),
                             scenario("gpu", "skipped", "", nullptr, "", 0, 0, 1)});
  const auto c = compare_reports(base, fresh, {}, "base.json", "new.json");
  EXPECT_EQ(kinds(c), (std::vector<std::string>{"added:new_failure", "red:new_failure"}));
  EXPECT_EQ(c.regressions[0].detail, "only in new.json, and error (rank 1 crashed)");
  EXPECT_EQ(scenarios_with_findings(c), 2);
  CompareOptions common;
  common.common_only = true;  // --common compares the shared scenarios only
  EXPECT_TRUE(compare_reports(base, fresh, common).regressions.empty());
}

TEST(Compare, OldReportsWithoutStatsCountAsOneTrial) {
  const json s = scenario("a", "pass", "loss", 1, "activation", 2, 7.5);  // no stats block
  const ScenarioSide side = scenario_side(s);
  EXPECT_EQ(side.trials, 1);
  EXPECT_EQ(side.passed, 1);
  EXPECT_EQ(side.steps_max, 2);
  EXPECT_EQ(side.ms_p50, 7.5);
  EXPECT_EQ(side.detector, "loss");
  EXPECT_EQ(side.attribution, json({{"rank", 1}, {"layer", "layers.1"}, {"cause", "activation"}}));
}

TEST(Compare, RenderingsNameTheScenarioAndTheRegressionKind) {
  const json base = report({scenario("nan-x", "pass", "loss", 1, "activation", 0, 1, 3)});
  const json fresh = report({scenario("nan-x", "fail", "", nullptr, "", 0, 0, 3)});
  const auto c = compare_reports(base, fresh, {}, "base.json", "new.json");
  const std::string md = format_markdown(c);
  EXPECT_NE(md.find("| Scenario |"), std::string::npos) << md;
  EXPECT_NE(md.find("- `nan-x`: **verdict**"), std::string::npos) << md;
  EXPECT_NE(md.find("**2 finding(s) in 1 scenario(s)** fail the gate"), std::string::npos) << md;
  const std::string text = format_text(c);
  EXPECT_NE(text.find("REGRESSION nan-x: verdict: pass → fail"), std::string::npos) << text;
  EXPECT_NE(text.find("REGRESSION nan-x: detection: no longer detected"), std::string::npos)
      << text;
  const json j = format_json(c);
  EXPECT_EQ(j["regressed"], true);
  EXPECT_EQ(j["scenarios"][0]["regressions"], json({"verdict", "detection"}));
  EXPECT_EQ(j["base"], "base.json");
}

// Every rendering says how many scenarios the reports share; --common drops the rest.
TEST(Compare, OverlapIsCountedAndCommonComparesOnlySharedScenarios) {
  const json base = report({scenario("a", "pass", "", nullptr, "", 0, 0),
                            scenario("b", "pass", "", nullptr, "", 0, 0),
                            scenario("c", "pass", "", nullptr, "", 0, 0)});
  const json subset = report(
      {scenario("a", "pass", "", nullptr, "", 0, 0), scenario("d", "pass", "", nullptr, "", 0, 0)});
  const auto all = compare_reports(base, subset);
  EXPECT_EQ(all.shared, 1);
  EXPECT_EQ(all.only_base, 2);
  EXPECT_EQ(all.only_fresh, 1);
  EXPECT_EQ(kinds(all), (std::vector<std::string>{"b:missing", "c:missing"}));
  EXPECT_EQ(overlap_text(all), "1 shared scenario(s); 2 only in BASE; 1 only in NEW");

  CompareOptions o;
  o.common_only = true;
  const auto common = compare_reports(base, subset, o);
  EXPECT_TRUE(common.regressions.empty()) << format_text(common);
  ASSERT_EQ(common.scenarios.size(), 1u);
  EXPECT_EQ(common.scenarios[0].name, "a");
  EXPECT_EQ(overlap_text(common),
            "1 shared scenario(s); 2 only in BASE (not compared: --common); 1 only in NEW (not "
            "compared: --common)");
  const std::string text = format_text(common);
  EXPECT_EQ(text.substr(0, text.find('\n', text.find('\n') + 1) + 1),
            "nanchaos compare: BASE -> NEW\n1 shared scenario(s); 2 only in BASE (not compared: "
            "--common); 1 only in NEW (not compared: --common)\n");
  EXPECT_NE(format_markdown(common).find("1 shared scenario(s); 2 only in BASE"),
            std::string::npos);
  const json j = format_json(common);
  EXPECT_EQ(j["shared"], 1);
  EXPECT_EQ(j["only_base"], 2);
  EXPECT_EQ(j["only_new"], 1);
  EXPECT_EQ(j["common_only"], true);
  // A regression among the shared scenarios is still one under --common.
  const json worse = report({scenario("a", "fail", "", nullptr, "", 0, 0)});
  EXPECT_EQ(kinds(compare_reports(base, worse, o)), std::vector<std::string>{"a:verdict"});
}

// A report a controller left before it finished (complete: false, what SIGKILL leaves) is named
// in every rendering; one without the key (older) or complete is not.
TEST(Compare, AnIncompleteSideIsNamedInTheOverlapLine) {
  const json base = report({scenario("a", "pass", "", nullptr, "", 0, 0)});
  json partial = base;
  partial["complete"] = false;
  partial["pending"] = {"b", "c"};
  const auto c = compare_reports(base, partial);
  EXPECT_EQ(c.incomplete, std::vector<std::string>{
                              "NEW is incomplete (its run had not finished: 2 scenario(s) not "
                              "judged)"});
  EXPECT_EQ(overlap_text(c),
            "1 shared scenario(s); NEW is incomplete (its run had not finished: 2 scenario(s) not "
            "judged)");
  EXPECT_EQ(format_json(c)["incomplete"].size(), 1u);
  // BASE's scenarios the unfinished run had not judged are still missing (nothing measured),
  // said as such.
  json more = report(
      {scenario("a", "pass", "", nullptr, "", 0, 0), scenario("b", "pass", "", nullptr, "", 0, 0)});
  const auto m = compare_reports(more, partial);
  ASSERT_EQ(m.regressions.size(), 1u);
  EXPECT_EQ(m.regressions[0].kind, "missing");
  EXPECT_EQ(m.regressions[0].detail,
            "in BASE, absent from NEW (not judged yet: its run had not finished)");
  json finished = base;
  finished["complete"] = true;
  EXPECT_TRUE(compare_reports(base, finished).incomplete.empty());
  EXPECT_TRUE(compare_reports(base, base).incomplete.empty());
  json stopped = partial;
  stopped["interrupted"] = true;
  stopped.erase("pending");
  stopped["not_run"] = {"c"};
  EXPECT_EQ(compare_reports(base, stopped).incomplete,
            std::vector<std::string>{
                "NEW is incomplete (its run was interrupted: 1 scenario(s) not judged)"});
}

class CompareFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nanchaos-compare-" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  int run(const std::string& a, const std::string& b, const std::string& format = "text",
          const CompareOptions& o = {}) {
    out_.str("");
    err_.str("");
    return run_compare(a, b, o, format, out_, err_);
  }
  fs::path dir_;
  std::ostringstream out_, err_;
};

TEST_F(CompareFiles, ExitCodesZeroOneAndTwoWithTheFileNamed) {
  const auto ok = write("ok.json", report({scenario("a", "pass", "", nullptr, "", 0, 0)}).dump());
  const auto bad = write("bad.json", report({scenario("a", "fail", "", nullptr, "", 0, 0)}).dump());
  EXPECT_EQ(run(ok, ok), 0) << err_.str();
  EXPECT_EQ(run(ok, bad, "md"), 1);
  EXPECT_NE(out_.str().find("**verdict**"), std::string::npos) << out_.str();

  const auto missing = (dir_ / "nope.json").string();
  EXPECT_EQ(run(ok, missing), 2);
  EXPECT_NE(err_.str().find(missing + ": cannot open"), std::string::npos) << err_.str();

  const auto garbled = write("garbled.json", "{\"scenarios\": [");
  EXPECT_EQ(run(garbled, ok), 2);
  EXPECT_NE(err_.str().find(garbled + ": not valid JSON"), std::string::npos) << err_.str();

  const auto folder = (dir_ / "a-folder").string();
  fs::create_directories(folder);
  EXPECT_EQ(run(folder, ok), 2);
  EXPECT_NE(err_.str().find(folder + ": is a directory"), std::string::npos) << err_.str();

  const auto empty = write("empty.json", "");
  EXPECT_EQ(run(ok, empty), 2);
  EXPECT_NE(err_.str().find(empty + ": empty file"), std::string::npos) << err_.str();

  const auto shape = write("shape.json", "{\"suite\": \"x\"}");
  EXPECT_EQ(run(ok, shape), 2);
  EXPECT_NE(err_.str().find(shape + ": not a nanchaos report.json"), std::string::npos);

  const auto twice = write("twice.json", report({scenario("a", "pass", "", nullptr, "", 0, 0),
                                                 scenario("a", "pass", "", nullptr, "", 0, 0)})
                                             .dump());
  EXPECT_EQ(run(ok, twice), 2);
  EXPECT_NE(err_.str().find("\"a\" appears twice"), std::string::npos) << err_.str();

  EXPECT_EQ(run(ok, ok, "yaml"), 2);
  EXPECT_NE(err_.str().find("--format yaml"), std::string::npos);
}

// A verdict compare does not know (a typo, a report from another tool) is an input error naming
// the file and the scenario, never compared as text.
TEST_F(CompareFiles, AnUnknownVerdictNamesTheFileAndTheScenario) {
  const auto ok = write("ok.json", report({scenario("a", "pass", "", nullptr, "", 0, 0)}).dump());
  const auto odd =
      write("odd.json", report({scenario("a", "passed", "", nullptr, "", 0, 0)}).dump());
  EXPECT_EQ(run(ok, odd), 2);
  EXPECT_EQ(err_.str(), "nanchaos compare: error: " + odd +
                            ": scenario \"a\": unknown verdict \"passed\" (known: pass, fail, "
                            "error, skipped)\n");
  EXPECT_EQ(out_.str(), "");
  // Reports compared in memory: the label names the side.
  try {
    compare_reports(report({scenario("a", "pass", "", nullptr, "", 0, 0)}),
                    report({scenario("a", "PASS", "", nullptr, "", 0, 0)}), {}, "base.json",
                    "new.json");
    ADD_FAILURE() << "no error for verdict PASS";
  } catch (const CompareInputError& e) {
    EXPECT_STREQ(e.what(),
                 "new.json: scenario \"a\": unknown verdict \"PASS\" (known: pass, fail, error, "
                 "skipped)");
  }
  EXPECT_EQ(scenario_side(scenario("a", "skipped", "", nullptr, "", 0, 0)).verdict,
            Verdict::kSkipped);
}

// Two reports with no scenario in common are refused (exit 2), with or without
// --common, and nothing is printed on stdout; --common lets a subset pass against a baseline.
TEST_F(CompareFiles, NoSharedScenarioExitsTwoAndCommonComparesASubset) {
  const auto full = write("full.json", report({scenario("a", "pass", "", nullptr, "", 0, 0),
                                               scenario("b", "pass", "", nullptr, "", 0, 0)})
                                           .dump());
  const auto other =
      write("other.json", report({scenario("x", "pass", "", nullptr, "", 0, 0)}).dump());
  const auto subset =
      write("subset.json", report({scenario("a", "pass", "", nullptr, "", 0, 0)}).dump());
  for (bool common : {false, true}) {
    CompareOptions o;
    o.common_only = common;
    EXPECT_EQ(run(full, other, "text", o), 2);
    EXPECT_EQ(err_.str(), "nanchaos compare: error: " + full + " and " + other +
                              " share no scenario (2 in " + full + ", 1 in " + other +
                              "): nothing to compare\n");
    EXPECT_EQ(out_.str(), "");
  }
  EXPECT_EQ(run(full, subset), 1);  // b is missing
  EXPECT_NE(out_.str().find("1 shared scenario(s); 1 only in BASE\n"), std::string::npos)
      << out_.str();
  CompareOptions o;
  o.common_only = true;
  EXPECT_EQ(run(full, subset, "text", o), 0) << out_.str();
  EXPECT_NE(out_.str().find("1 shared scenario(s); 1 only in BASE (not compared: --common)\n"),
            std::string::npos)
      << out_.str();
  EXPECT_NE(out_.str().find("--- 1 scenarios compared: no regression\n"), std::string::npos);
}

}  // namespace
}  // namespace nanchaos::results
