// Suite progress lines: one line per finished scenario, a status line only on a terminal,
// nothing when disabled (--quiet).
#include "harness/controller/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace nanchaos::harness {
namespace {

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

results::ScenarioResult result(const std::string& name, const std::string& verdict) {
  results::ScenarioResult r;
  r.name = name;
  r.verdict = *results::parse_verdict(verdict);
  return r;
}

TEST(Progress, OneLinePerFinishedScenarioWithoutStatusWhenNotATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p(2, true, f, 0);
    p.start(0, "nan-a", 0, 1);
    p.finish(0, result("nan-a", "pass"));
    p.start(1, "hang-b", 0, 1);
    auto r = result("hang-b", "fail");
    r.trial_count = 3;
    r.stats = {{"passed", 2}};
    p.finish(1, r);
  }
  const std::string s = contents(f);
  std::fclose(f);
  EXPECT_EQ(s.find('\r'), std::string::npos) << s;
  EXPECT_EQ(s.find("scenario 1 of 2"), std::string::npos) << s;
  EXPECT_EQ(s.rfind("[1/2] pass    nan-a  ", 0), 0u) << s;
  EXPECT_NE(s.find("\n[2/2] fail    hang-b  "), std::string::npos) << s;
  EXPECT_NE(s.find(" s  (2/3 trials passed)\n"), std::string::npos) << s;
}

TEST(Progress, TerminalGetsAStatusLineThatIsErasedBeforeEachResult) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p(32, true, f, 1);
    p.start(2, "nan-grad-rank1", 1, 5);
    p.finish(2, result("nan-grad-rank1", "pass"));
  }
  const std::string s = contents(f);
  std::fclose(f);
  EXPECT_EQ(s.rfind("\rscenario 3 of 32 · trial 2/5 · elapsed 0m00s · nan-grad-rank1\033[K", 0), 0u)
      << s;
  EXPECT_NE(s.find("\r\033[K[3/32] pass    nan-grad-rank1"), std::string::npos) << s;
}

// `run --jobs`: two scenarios at once share the status line; each finished line carries the
// scenario's own place in the suite, and the other one's status is drawn again after it.
TEST(Progress, ScenariosRunningTogetherShareTheStatusLine) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p(32, true, f, 1);
    p.start(2, "nan-a", 0, 1);
    p.start(3, "hang-b", 0, 1);
    p.finish(3, result("hang-b", "pass"));
    p.finish(2, result("nan-a", "fail"));
  }
  const std::string s = contents(f);
  std::fclose(f);
  EXPECT_NE(s.find("\rscenarios 3, 4 of 32 · elapsed 0m00s · nan-a, hang-b\033[K"),
            std::string::npos)
      << s;
  const size_t b = s.find("\r\033[K[4/32] pass    hang-b  ");
  ASSERT_NE(b, std::string::npos) << s;
  const size_t again = s.find("\rscenario 3 of 32 · elapsed 0m00s · nan-a\033[K", b);
  ASSERT_NE(again, std::string::npos) << s;
  EXPECT_NE(s.find("\r\033[K[3/32] fail    nan-a  ", again), std::string::npos) << s;
}

TEST(Progress, QuietPrintsNothing) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p(1, false, f, 1);
    p.start(0, "a", 0, 1);
    p.finish(0, result("a", "pass"));
  }
  EXPECT_EQ(contents(f), "");
  std::fclose(f);
}

TEST(Progress, ElapsedFormats) {
  EXPECT_EQ(format_elapsed(4.24), "4.2 s");
  EXPECT_EQ(format_elapsed(62.5), "1m02s");
  EXPECT_EQ(format_elapsed(3725), "1h02m05s");
  EXPECT_EQ(format_elapsed(-1), "0.0 s");
}

}  // namespace
}  // namespace nanchaos::harness
