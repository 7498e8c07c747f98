// report.html: the timeline script from a timeline held in memory, gnuplot scripts, and the page
// with and without gnuplot.
#include "results/html.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

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

TEST(HtmlEscape, EscapesMarkupCharacters) {
  EXPECT_EQ(html_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
}

}  // namespace
}  // namespace nanchaos::results
