// report.html: the timeline script from a timeline held in memory, gnuplot scripts, and the page
// with and without gnuplot.
#include "results/html.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "results/stats.h"

namespace nanchaos::results {
namespace {

namespace fs = std::filesystem;

class Html : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("nanchaos-html-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
            std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  SuiteReport suite() {
    SuiteReport s;
    s.suite = "html<&>";
    s.trials = 2;
    ScenarioResult r;
    r.name = "hang-<b>";
    r.verdict = results::Verdict::kPass;
    r.outcome = results::Outcome::kAborted;
    r.ranks = 2;
    r.run_dir = (dir_ / "run").string();  // never created: the page opens no event log
    r.timeline = timeline();
    Detection d;
    d.detector = "watchdog";
    d.ranks = {1};
    d.latency_steps = 0;
    d.latency_ms = 2000;
    r.first_detection = d;
    r.stats = scenario_stats({r, r});
    r.trial_count = 2;
    s.scenarios.push_back(r);
    ScenarioResult skipped;
    skipped.name = "gpu-only";
    skipped.verdict = results::Verdict::kSkipped;
    skipped.reason = "device cuda needs a GPU";
    s.scenarios.push_back(skipped);
    return s;
  }
  // What the judge hands over (harness/controller/timeline.h): rank 0 leaves a collective and
  // waits in the next until it aborts; rank 1 sends to rank 0, is injected, decides and exits.
  static Timeline timeline() {
    Timeline t;
    t.ranks = 2;
    t.begin_ms = 1.0;
    t.end_ms = 8.5;
    t.bars = {{0, 2.0, 3.0, "consensus", false, false},
              {0, 4.0, 8.5, "grad_allreduce", true, false},
              {1, 1.2, 1.4, "send to 0", false, true}};
    t.marks = {{0, 8.0, "detect", "detect watchdog"},
               {0, 8.5, "abort", "abort"},
               {1, 1.5, "inject", "inject hang s3"},
               {1, 1.6, "decision", "decision skip_step"},
               {1, 1.7, "exit", "exit 4"}};
    return t;
  }
  // Phase times of 4 ranks over 12 steps (us); rank 2's compute triples from step 5 on: a
  // persistent straggler (own total 7800 against the others' 3800).
  static std::vector<std::map<int64_t, harness::StepEndEvent::Phases>> slow_rank_phases() {
    using Phases = harness::StepEndEvent::Phases;
    std::vector<std::map<int64_t, Phases>> by_rank(4);
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t step = 0; step < 12; ++step) {
        const int64_t compute = r == 2 && step >= 5 ? 6000 : 2000;
        by_rank[size_t(r)][step] = Phases{{100, compute, 1500, 200}, 300, std::nullopt};
      }
    }
    return by_rank;
  }
  // suite() plus a scenario whose job logged phase times (what the judge hands over).
  SuiteReport suite_with_step_times() {
    SuiteReport s = suite();
    ScenarioResult r;
    r.name = "slow-rank";
    r.verdict = results::Verdict::kPass;
    r.outcome = results::Outcome::kCompleted;
    r.ranks = 4;
    r.run_dir = (dir_ / "run-slow").string();
    r.trial_count = 1;
    JobFacts f;
    f.step_times = rank_step_times(slow_rank_phases());
    f.step_scores = step_scores(slow_rank_phases());
    r.judged = f;
    s.scenarios.push_back(r);
    return s;
  }
  static std::string read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path dir_;
};

TEST_F(Html, MarksCloseInTimeShareOneLabel) {
  Timeline t;
  t.ranks = 1;
  t.end_ms = 1000;
  t.marks = {{0, 500, "detect", "detect loss"},
             {0, 510, "detect", "detect grad"},
             {0, 900, "detect", "detect param"},
             {0, 950, "detect", "detect loss"}};
  const std::string s = timeline_script(t, "x", "/tmp/x.svg");
  EXPECT_NE(s.find("500 0 \"detect loss, grad\"\n510 0 \"\"\n900 0 \"detect param\"\n950 0 \"\"\n"),
            std::string::npos)
      << s;
}

TEST_F(Html, TimelineScriptDrawsEveryKindItHas) {
  const std::string s = timeline_script(timeline(), "x \"quoted\"", "/tmp/out.svg");
  EXPECT_NE(s.find("set terminal svg"), std::string::npos);
  EXPECT_NE(s.find("set output \"/tmp/out.svg\""), std::string::npos);
  EXPECT_NE(s.find("set title \"x 'quoted'\""), std::string::npos) << s;
  EXPECT_NE(s.find("$coll << EOD\n2 3 0\nEOD\n"), std::string::npos) << s;
  EXPECT_NE(s.find("$p2p << EOD\n1.2 1.4 1\nEOD\n"), std::string::npos) << s;
  EXPECT_NE(s.find("$open << EOD\n4 8.5 0\nEOD\n"), std::string::npos) << s;
  EXPECT_NE(s.find("title 'send/recv'"), std::string::npos);
  EXPECT_NE(s.find("title 'never left'"), std::string::npos);
  EXPECT_NE(s.find("$inject << EOD"), std::string::npos);
  EXPECT_NE(s.find("\"exit 4\""), std::string::npos);
  EXPECT_NE(s.find("(\"rank 0\" 0, \"rank 1\" 1)"), std::string::npos);
}

TEST_F(Html, LatencyPointsComeFromEachScenariosDetectorStats) {
  const auto pts = latency_points(suite());
  ASSERT_EQ(pts.size(), 1u);
  EXPECT_EQ(pts[0].first, "watchdog");
  ASSERT_EQ(pts[0].second.size(), 1u);
  EXPECT_EQ(pts[0].second[0].scenario, "hang-<b>");
  EXPECT_DOUBLE_EQ(pts[0].second[0].p50_ms, 2000);
  EXPECT_EQ(pts[0].second[0].n, 2u);
  const std::string s = latency_script("watchdog", pts[0].second, "/tmp/l.svg");
  EXPECT_NE(s.find("yerrorbars"), std::string::npos);
}

TEST_F(Html, PageIsSelfContainedWithInlineSvgs) {
  if (system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed";
  const std::string page = (dir_ / "report.html").string();
  const std::string note = write_html(suite(), page);
  EXPECT_EQ(note, "");
  const std::string h = read(page);
  EXPECT_NE(h.find("<svg"), std::string::npos);
  EXPECT_NE(h.find("id=\"s-hang-&lt;b&gt;\""), std::string::npos);  // escaped, never raw
  EXPECT_EQ(h.find("<b>\""), std::string::npos);
  EXPECT_NE(h.find("id=\"s-gpu-only\""), std::string::npos);
  EXPECT_NE(h.find("html&lt;&amp;&gt;"), std::string::npos);
  EXPECT_EQ(h.find("http://"), h.find("http://www.w3.org"));  // only SVG namespaces, no fetches
  EXPECT_EQ(h.find("src=\"http"), std::string::npos);
  EXPECT_EQ(h.find("<?xml"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir_ / "html" / "timeline-hang-_b_.gp"));
  // The timeline drawn is the one the result carries (its run folder does not exist).
  EXPECT_NE(read(dir_ / "html" / "timeline-hang-_b_.gp").find("$p2p << EOD\n1.2 1.4 1\n"),
            std::string::npos);
}

TEST_F(Html, WithoutGnuplotThePageKeepsItsTablesAndSaysWhy) {
  const std::string page = (dir_ / "report.html").string();
  HtmlOptions o;
  o.gnuplot = "nanchaos-no-such-gnuplot";
  const std::string note = write_html(suite(), page, o);
  EXPECT_NE(note.find("charts and timelines omitted"), std::string::npos) << note;
  const std::string h = read(page);
  EXPECT_NE(h.find("class=\"note\""), std::string::npos);
  EXPECT_NE(h.find("charts and timelines omitted"), std::string::npos);
  EXPECT_NE(h.find("<table id=\"summary\">"), std::string::npos);
  EXPECT_NE(h.find("id=\"s-gpu-only\""), std::string::npos);
  EXPECT_EQ(h.find("<svg"), std::string::npos);
  // The summary row: pass rate over the trials, latency p50 in ms; the chart falls back to a table.
  EXPECT_NE(h.find("<td class=\"n\">2/2</td>"), std::string::npos) << h;
  EXPECT_NE(h.find("<td class=\"n\">2000.00</td>"), std::string::npos) << h;
  EXPECT_NE(h.find("<td>hang-&lt;b&gt;</td><td class=\"n\">2000.00</td>"), std::string::npos);
}

TEST_F(Html, StepChartsNameEveryRankAndTheThreshold) {
  const auto rows = rank_step_times(slow_rank_phases());
  const auto scores = step_scores(slow_rank_phases());
  ASSERT_EQ(rows.size(), 4u);
  ASSERT_TRUE(scores);
  const std::string split = step_split_script(rows, "slow \"x\"", "/tmp/split.svg");
  EXPECT_NE(split.find("set output \"/tmp/split.svg\""), std::string::npos);
  EXPECT_NE(split.find("set title \"slow 'x'\""), std::string::npos) << split;
  EXPECT_NE(split.find("(\"rank 0\" 0, \"rank 1\" 1, \"rank 2\" 2, \"rank 3\" 3)"),
            std::string::npos)
      << split;
  // Stacked from 0 in ms: data 0.1, then compute up to 2.1 (rank 2: its median compute, 6 ms).
  EXPECT_NE(split.find("$data << EOD\n0 0.1 0\n"), std::string::npos) << split;
  EXPECT_NE(split.find("$compute << EOD\n0.1 2.1 0\n0.1 2.1 1\n0.1 6.1 2\n0.1 2.1 3\n"),
            std::string::npos)
      << split;
  EXPECT_NE(split.find("$backward << EOD\n2.1 3.6 0\n"), std::string::npos) << split;
  // Waiting apart, from 0; the score labels at the end of each own bar.
  EXPECT_NE(split.find("$waiting << EOD\n0 0.3 0\n"), std::string::npos) << split;
  EXPECT_NE(split.find("title 'waiting in collectives'"), std::string::npos);
  EXPECT_NE(split.find("7.8 2 \"score p50 2.05, max 2.05, 7 slow\"\n"), std::string::npos) << split;
  EXPECT_NE(split.find("3.8 0 \"score p50 1.00, max 1.00\"\n"), std::string::npos) << split;

  const std::string sc = step_score_script(*scores, "scores", "/tmp/scores.svg");
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(sc.find("title 'rank " + std::to_string(r) + "'"), std::string::npos) << sc;
  }
  EXPECT_NE(sc.find("1.5 with lines dt 2"), std::string::npos) << sc;
  EXPECT_NE(sc.find("title 'threshold 1.5'"), std::string::npos) << sc;
  EXPECT_NE(sc.find("set xlabel \"step\"\n"), std::string::npos) << sc;
  // The onset: rank 2 (column 4) crosses the threshold at step 5.
  EXPECT_NE(sc.find("\n4 1 1 1 1\n5 1 1 2.053 1\n"), std::string::npos) << sc;
}

TEST_F(Html, StepScoreChartTitlesOnlySlowRanksBeyondSixteen) {
  StepScores sc;
  sc.steps = {0, 1, 2};
  for (int64_t r = 0; r < 20; ++r) {
    sc.ranks.push_back(r);
    sc.score.push_back(r == 7 ? std::vector<double>{1, 2.5, 3} : std::vector<double>{1, 1, 1});
  }
  const std::string s = step_score_script(sc, "many", "/tmp/m.svg");
  EXPECT_NE(s.find("title 'rank 7'"), std::string::npos) << s;
  EXPECT_EQ(s.find("title 'rank 6'"), std::string::npos) << s;
  EXPECT_NE(s.find("title 'other ranks'"), std::string::npos) << s;
  EXPECT_NE(s.find("threshold 1.5"), std::string::npos);
}

TEST_F(Html, StepTimeChartsOnlyWhereTheJobLoggedStepTimes) {
  const std::string page = (dir_ / "report.html").string();
  // Without gnuplot: the table stays, no chart.
  HtmlOptions none;
  none.gnuplot = "nanchaos-no-such-gnuplot";
  write_html(suite_with_step_times(), page, none);
  std::string h = read(page);
  EXPECT_NE(h.find("<table class=\"step-times\">"), std::string::npos);
  EXPECT_EQ(h.find("step-charts"), std::string::npos);
  if (system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed";
  EXPECT_EQ(write_html(suite_with_step_times(), page), "");
  h = read(page);
  // One pair of charts, in the section of the scenario with step times, before its table.
  const auto section = h.find("id=\"s-slow-rank\"");
  const auto charts = h.find("<div class=\"charts step-charts\">");
  ASSERT_NE(section, std::string::npos);
  ASSERT_NE(charts, std::string::npos);
  EXPECT_GT(charts, section);
  const std::string tag = "<div class=\"charts step-charts\">";
  EXPECT_EQ(h.find("step-charts", charts + tag.size()), std::string::npos);
  EXPECT_LT(charts, h.find("<table class=\"step-times\">"));
  EXPECT_NE(h.find("<svg", charts), std::string::npos);
  EXPECT_TRUE(fs::exists(dir_ / "html" / "steps-slow-rank.svg"));
  EXPECT_TRUE(fs::exists(dir_ / "html" / "scores-slow-rank.svg"));
  EXPECT_NE(read(dir_ / "html" / "scores-slow-rank.gp").find("title 'rank 2'"), std::string::npos);
  // The scenario without step times has none.
  EXPECT_FALSE(fs::exists(dir_ / "html" / "steps-hang-_b_.gp"));
  EXPECT_FALSE(fs::exists(dir_ / "html" / "scores-hang-_b_.gp"));
}

TEST(HtmlEscape, EscapesMarkupCharacters) {
  EXPECT_EQ(html_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
}

}  // namespace
}  // namespace nanchaos::results
