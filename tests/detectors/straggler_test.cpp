// Detector `straggler` (detectors/straggler.cpp): its check() on the ranks' phase times of the
// consensus row. The statistic itself is tested in tests/detectors/core/straggler_test.cpp.
#include "detectors/core/straggler.h"

#include <vector>

#include "harness/common/cause.h"
#include "tests/detectors/detector_test_util.h"
#include "tests/harness/loader_text.h"

namespace nanchaos::detect {
namespace {

using fixture::Make;
using harness::PhaseTimes;

constexpr size_t kWorld = 4;
// A usual step: data 200 us, compute 800 us, backward 1000 us, comm 100 us (2.1 ms).
constexpr PhaseTimes kUsual = {200, 800, 1000, 100};

// Every rank's usual times, rank `slow` (-1: none) with 10 ms more backward.
std::vector<PhaseTimes> Step(int slow) {
  std::vector<PhaseTimes> t(kWorld, kUsual);
  if (slow >= 0) t[size_t(slow)][size_t(harness::StepPhase::kBackward)] += 10000;
  return t;
}

// Runs `d` over the steps of `slow_at` (the slow rank at each step, -1: none) and returns the
// steps it reported at, with their findings.
std::vector<std::pair<int64_t, Finding>> Feed(Detector& d, const std::vector<int>& slow_at) {
  std::vector<std::pair<int64_t, Finding>> out;
  for (size_t step = 0; step < slow_at.size(); ++step) {
    const std::vector<PhaseTimes> times = Step(slow_at[step]);
    StepView v;
    v.step = int64_t(step);
    v.world = int(kWorld);
    v.rank_phase_us = &times;
    if (auto f = d.check(v)) out.emplace_back(int64_t(step), *f);
  }
  return out;
}

// `clean` usual steps, then `slow` steps with rank `rank` slow.
std::vector<int> Spell(size_t clean, size_t slow, int rank) {
  std::vector<int> s(clean, -1);
  s.insert(s.end(), slow, rank);
  return s;
}

TEST(StragglerDetector, ARankSlowForStragglerStepsIsNamedOnceWithThePhaseThatGrew) {
  auto d = Make("straggler");  // straggler_steps = 3
  EXPECT_EQ(d->hook(), Hook::kConsensus);
  // 20 clean steps (past the warm-up), then rank 2's backward 10 ms longer for 10 steps.
  const auto found = Feed(*d, Spell(20, 10, 2));
  ASSERT_EQ(found.size(), 1u) << "one report per slow spell, not one per slow step";
  EXPECT_EQ(found[0].first, 22);  // its third slow step in a row (steps 20, 21, 22)
  const Finding& f = found[0].second;
  EXPECT_EQ(f.ranks, std::vector<int64_t>{2});
  EXPECT_EQ(f.code, 2);
  EXPECT_EQ(f.layer, "backward");
  EXPECT_EQ(f.cause, harness::to_string(harness::Cause::kStraggler));
  EXPECT_EQ(f.cause, "straggler");
}

TEST(StragglerDetector, ReadsStragglerStepsFromItsKeys) {
  auto d = Make("straggler", "straggler_steps = 5");
  const auto found = Feed(*d, Spell(20, 10, 1));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].first, 24);  // steps 20..24
  EXPECT_EQ(found[0].second.ranks, std::vector<int64_t>{1});
}

TEST(StragglerDetector, CleanRanksAndShortSlowSpellsAreNotFlagged) {
  auto d = Make("straggler");
  EXPECT_TRUE(Feed(*d, std::vector<int>(200, -1)).empty());
  // Two slow steps in a row, then usual again, a few times: never three in a row.
  auto d2 = Make("straggler");
  std::vector<int> steps(20, -1);
  for (int k = 0; k < 5; ++k) {
    steps.insert(steps.end(), {3, 3, -1, -1, -1});
  }
  EXPECT_TRUE(Feed(*d2, steps).empty());
}

TEST(StragglerDetector, ARankBackToUsualIsReportedAgainInItsNextSpell) {
  auto d = Make("straggler");
  std::vector<int> steps = Spell(20, 10, 0);        // slow 20..29
  const std::vector<int> again = Spell(10, 10, 0);  // usual 30..39, slow 40..49
  steps.insert(steps.end(), again.begin(), again.end());
  const auto found = Feed(*d, steps);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].first, 22);
  EXPECT_EQ(found[1].first, 42);
  for (const auto& [step, f] : found) {
    EXPECT_EQ(f.ranks, std::vector<int64_t>{0}) << step;
    EXPECT_EQ(f.layer, "backward") << step;
  }
}

// A factor that can never be exceeded turns the detector off without saying so: refused.
TEST(StragglerDetector, FactorAboveOneHundredOrInfiniteIsRefused) {
  const auto with = [](const std::string& v) {
    return test_util::loader_error(
        test_util::with_head("[detectors]\nstraggler_factor = " + v + "\n"));
  };
  EXPECT_EQ(
      with("inf"),
      "x.toml:7:20: error: [detectors].straggler_factor: expected float in (1, 100], got inf");
  EXPECT_NE(with("1e308").find("expected float in (1, 100]"), std::string::npos);
  EXPECT_EQ(with("100.0"), "no error");
  EXPECT_EQ(with("2.5"), "no error");
}

}  // namespace
}  // namespace nanchaos::detect
