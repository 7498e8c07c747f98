// report.html: timelines from hand-written event logs, gnuplot scripts, and the page with and
// without gnuplot.
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
    fs::create_directories(dir_ / "run" / "events");
    // Rank 0 leaves collective 0 and sits in collective 1 forever; rank 1 is injected, detects,
    // decides and exits. Times in us; the job started at t = 1000 us.
    std::ofstream(dir_ / "run" / "events" / "rank-0.jsonl")
        << R"({"ev":"start","t_us":2000,"rank":0})"
           "\n"
        << R"({"ev":"coll_enter","t_us":3000,"seq":0,"name":"consensus"})"
           "\n"
        << R"({"ev":"coll_leave","t_us":4000,"seq":0,"name":"consensus"})"
           "\n"
        << R"({"ev":"coll_enter","t_us":5000,"seq":1,"name":"grad_allreduce"})"
           "\n"
        << R"({"ev":"detect","t_us":9000,"detector":"watchdog","step":3})"
           "\n"
        << R"({"ev":"abort","t_us":9500,"step":3})"
           "\n"
        << R"({"ev":"coll_enter","t_us":99)";  // a rank killed mid-write
    std::ofstream(dir_ / "run" / "events" / "rank-1.jsonl")
        << R"({"ev":"start","t_us":2100,"rank":1})"
           "\n"
        << R"({"ev":"inject","t_us":2500,"kind":"hang","step":3})"
           "\n"
        << R"({"ev":"decision","t_us":2600,"action":"skip_step","step":3})"
           "\n"
        << R"({"ev":"exit","t_us":2700,"code":4})"
           "\n";
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
    r.run_dir = (dir_ / "run").string();
    r.extra["job_start_us"] = 1000;
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
  static std::string read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path dir_;
};

TEST_F(Html, TimelineHasBarsOpenCollectivesAndMarksInMsSinceJobStart) {
  const Timeline t = load_timeline((dir_ / "run").string(), 2, 1000);
  EXPECT_EQ(t.ranks, 2);
  ASSERT_EQ(t.bars.size(), 2u);
  EXPECT_EQ(t.bars[0].name, "consensus");
  EXPECT_DOUBLE_EQ(t.bars[0].t0_ms, 2.0);
  EXPECT_DOUBLE_EQ(t.bars[0].t1_ms, 3.0);
  EXPECT_FALSE(t.bars[0].open);
  // Never left: drawn to the rank's last event (the abort at 9500 us).
  EXPECT_EQ(t.bars[1].name, "grad_allreduce");
  EXPECT_TRUE(t.bars[1].open);
  EXPECT_DOUBLE_EQ(t.bars[1].t1_ms, 8.5);
  std::vector<std::string> kinds;
  for (const auto& m : t.marks) kinds.push_back(std::to_string(m.rank) + ":" + m.kind);
  EXPECT_EQ(kinds,
            (std::vector<std::string>{"0:detect", "0:abort", "1:inject", "1:decision", "1:exit"}));
  EXPECT_EQ(t.marks[4].label, "exit 4");
  EXPECT_DOUBLE_EQ(t.begin_ms, 1.0);
  EXPECT_DOUBLE_EQ(t.end_ms, 8.5);
  // Without the job start, the earliest event is time 0.
  EXPECT_DOUBLE_EQ(load_timeline((dir_ / "run").string(), 2, std::nullopt).bars[0].t0_ms, 1.0);
  // A rank that never wrote a log is an empty lane, not an error.
  EXPECT_EQ(load_timeline((dir_ / "run").string(), 3, 1000).ranks, 3);
}

TEST_F(Html, ARankKilledWhileWaitingGetsABarToTheJobsLastEvent) {
  std::ofstream(dir_ / "run" / "events" / "rank-2.jsonl")
      << R"({"ev":"start","t_us":2000,"rank":2})"
         "\n"
      << R"({"ev":"coll_enter","t_us":4000,"seq":0,"name":"grad_allreduce"})"
         "\n";
  const Timeline t = load_timeline((dir_ / "run").string(), 3, 1000);
  ASSERT_EQ(t.bars.size(), 3u);
  const auto& b = t.bars[2];
  EXPECT_EQ(b.rank, 2);
  EXPECT_TRUE(b.open);
  EXPECT_DOUBLE_EQ(b.t0_ms, 3.0);
  EXPECT_DOUBLE_EQ(b.t1_ms, 8.5);  // the latest event of any rank, not its own enter
  // With the job's end known (the controller killed it at 15 ms), the wait lasts until then.
  const Timeline k = load_timeline((dir_ / "run").string(), 3, 1000, 15.0);
  EXPECT_DOUBLE_EQ(k.bars[2].t1_ms, 15.0);
  EXPECT_DOUBLE_EQ(k.end_ms, 15.0);
  EXPECT_DOUBLE_EQ(k.bars[1].t1_ms, 8.5);  // rank 0 left evidence after its enter: unchanged
}

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
  const Timeline t = load_timeline((dir_ / "run").string(), 2, 1000);
  const std::string s = timeline_script(t, "x \"quoted\"", "/tmp/out.svg");
  EXPECT_NE(s.find("set terminal svg"), std::string::npos);
  EXPECT_NE(s.find("set output \"/tmp/out.svg\""), std::string::npos);
  EXPECT_NE(s.find("set title \"x 'quoted'\""), std::string::npos) << s;
  EXPECT_NE(s.find("title 'collective never left'"), std::string::npos);
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
