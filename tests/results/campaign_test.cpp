// Campaign scoring on hand-made evidence with known truth (no launches), the Wilson interval
// against published values, campaign.json's contract fields, and campaign compare's rules and
// exit codes on hand-made campaign files.
#include "results/campaign.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "results/campaign_compare.h"
#include "results/stats.h"
#include "tests/test_util.h"

namespace nanchaos::results {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

// Newcombe, "Two-sided confidence intervals for the single proportion: comparison of seven
// methods", Stat. Med. 17 (1998), table I, method 3 (Wilson score, no continuity correction).
TEST(Wilson, MatchesPublishedIntervals) {
  struct Case {
    int64_t k, n;
    double lo, hi;
  } cases[] = {{81, 263, 0.2553, 0.3662},
               {15, 148, 0.0624, 0.1605},
               {0, 20, 0.0, 0.1611},
               {1, 29, 0.0061, 0.1718}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::to_string(c.k) + "/" + std::to_string(c.n));
    const Interval i = wilson95(c.k, c.n);
    EXPECT_NEAR(i.lo, c.lo, 5e-5);
    EXPECT_NEAR(i.hi, c.hi, 5e-5);
  }
}

TEST(Wilson, SymmetricNeverEmptyAndRejectsBadCounts) {
  const Interval all = wilson95(10, 10), none = wilson95(0, 10);
  EXPECT_DOUBLE_EQ(all.hi, 1.0);
  EXPECT_NEAR(all.lo, 1.0 - none.hi, 1e-12);
  EXPECT_NEAR(all.lo, 0.7225, 5e-5);  // 10/10 is not "certainly 100 %"
  const Interval half = wilson95(5, 10);
  EXPECT_NEAR(half.lo + half.hi, 1.0, 1e-12);
  EXPECT_THROW(wilson95(1, 0), std::invalid_argument);
  EXPECT_THROW(wilson95(3, 2), std::invalid_argument);
  EXPECT_THROW(wilson95(-1, 2), std::invalid_argument);
}

TEST(CampaignScoring, LayerMatchesOnlyWhenEqual) {
  // The contract's campaign rule: "whose named X equals the truth" (a prefix either way
  // would count a module named for a parameter's fault as right).
  EXPECT_FALSE(layer_matches("layers.1.linear.weight", "layers.1.linear"));
  EXPECT_FALSE(layer_matches("layers.1.linear", "layers.1.linear.weight"));
  EXPECT_TRUE(layer_matches("head", "head"));
  EXPECT_TRUE(layer_matches("layers.1.linear.weight", "layers.1.linear.weight"));
  EXPECT_FALSE(layer_matches("layers.1", "layers.10"));
  EXPECT_FALSE(layer_matches("layers.1.linear", "layers.2.linear"));
  EXPECT_FALSE(layer_matches("loss", ""));
  EXPECT_FALSE(layer_matches("", ""));
}

// The judge's result of a job whose fault fired at `step` on `rank`.
ScenarioResult judged(FaultOutcome fo, Outcome outcome = Outcome::kCompleted) {
  ScenarioResult r;
  r.outcome = outcome;
  r.fault_outcome = fo;
  Injection inj;
  inj.kind = "tensor";
  inj.rank = 1;
  inj.step = 10;
  r.injections.push_back(inj);
  r.wall_ms = 1500;
  r.judged = JobFacts{};
  return r;
}

Detection detection(const std::string& det, std::vector<int64_t> ranks, const std::string& layer,
                    const std::string& cause, int64_t latency = 0) {
  Detection d;
  d.detector = det;
  d.ranks = std::move(ranks);
  d.step = 10 + latency;
  d.layer = layer;
  d.cause = cause;
  d.latency_steps = latency;
  d.latency_ms = 0.5;
  return d;
}

Truth truth(std::vector<int64_t> ranks, std::optional<std::string> layer, std::string cause) {
  Truth t;
  t.ranks = std::move(ranks);
  t.step = 10;
  t.layer = std::move(layer);
  t.cause = std::move(cause);
  return t;
}

const ojson kFault = {{"kind", "tensor"}, {"ranks", {1}}, {"step", 10}};

TEST(CampaignScoring, RightAttributionIsDetectedRecoveredAndCorrect) {
  ScenarioResult r = judged(FaultOutcome::kDetectedRecovered);
  r.first_detection = detection("loss", {1}, "layers.1", "activation");
  const auto f =
      score_fault(3, kFault, "tensor:activation", truth({1}, "layers.1", "activation"), r);
  ASSERT_TRUE(f.outcome.has_value());
  EXPECT_EQ(*f.outcome, CampaignOutcome::kDetectedRecovered);
  ASSERT_TRUE(f.named.has_value());
  EXPECT_EQ(f.named->detector, "loss");
  EXPECT_EQ(f.rank_ok, true);
  EXPECT_EQ(f.layer_ok, true);
  EXPECT_EQ(f.cause_ok, true);
  EXPECT_EQ(f.latency_steps, 0);
}

TEST(CampaignScoring, WithRestartsACrashRecoversOnlyWhenTheJobFinishedAsTheCleanRun) {
  const ojson crash = {{"kind", "crash"}, {"ranks", {1}}, {"step", 10}};
  const Truth t = truth({1}, std::nullopt, "rank_failure");
  ScoringRules restarts;
  restarts.restarts = 1;
  auto with_clean = [](ScenarioResult r, bool pass) {
    r.checks.push_back(Check{"final_matches_clean", true, pass, pass});
    return r;
  };
  // Relaunched, completed, ended as the clean run: recovered (though no detector named it).
  const auto ok =
      score_fault(0, crash, "crash", t, with_clean(judged(FaultOutcome::kMasked), true), restarts);
  EXPECT_EQ(ok.outcome, CampaignOutcome::kDetectedRecovered);
  // Completed with other final digests: not recovered.
  const auto differ =
      score_fault(0, crash, "crash", t, with_clean(judged(FaultOutcome::kMasked), false), restarts);
  EXPECT_EQ(differ.outcome, CampaignOutcome::kDetectedUnrecovered);
  // External jobs have no clean check: finishing is enough.
  EXPECT_EQ(score_fault(0, crash, "crash", t, judged(FaultOutcome::kMasked), restarts).outcome,
            CampaignOutcome::kDetectedRecovered);
  // The budget ran out: still a crash; and without restarts the rule does not apply.
  EXPECT_EQ(score_fault(0, crash, "crash", t,
                        with_clean(judged(FaultOutcome::kNone, Outcome::kCrashed), false), restarts)
                .outcome,
            CampaignOutcome::kCrash);
  EXPECT_EQ(
      score_fault(0, crash, "crash", t, with_clean(judged(FaultOutcome::kMasked), true)).outcome,
      CampaignOutcome::kMasked);
  // Other causes keep the judge's outcome under restarts.
  EXPECT_EQ(score_fault(3, kFault, "tensor:activation", truth({1}, "layers.1", "activation"),
                        judged(FaultOutcome::kSilentCorruption), restarts)
                .outcome,
            CampaignOutcome::kSilentCorruption);
}

TEST(CampaignScoring, LrBlowUpNamedActivationIsAWrongCauseWithNoLayerScored) {
  // The issue's example: an LR blow-up attributed as `activation` in layers.1.linear.
  ScenarioResult r = judged(FaultOutcome::kDetectedRecovered);
  r.first_detection = detection("loss", {0, 1}, "layers.1.linear", "activation", 2);
  const auto f = score_fault(0, {{"kind", "lr"}, {"ranks", "all"}, {"step", 10}}, "lr",
                             truth({0, 1}, std::nullopt, "gradient_explosion"), r);
  EXPECT_EQ(f.rank_ok, true);
  EXPECT_FALSE(f.layer_ok.has_value());  // lr faults have no true layer: not scored
  EXPECT_EQ(f.cause_ok, false);
  EXPECT_EQ(f.latency_steps, 2);
  Campaign c;
  c.faults = {f};
  c.summary = summarize_campaign(c.faults);
  const ojson j = to_json(c);
  EXPECT_EQ(j["faults"][0]["attribution_error"]["expected"]["cause"], "gradient_explosion");
  EXPECT_EQ(j["faults"][0]["attribution_error"]["named"]["cause"], "activation");
  EXPECT_EQ(c.summary.confusion.at("gradient_explosion").at("activation"), 1);
}

TEST(CampaignScoring, OutcomeClassesFromTheJudge) {
  const Truth t = truth({1}, "layers.1", "activation");
  // Not detected, the model ended non-finite.
  auto f = score_fault(0, kFault, "c", t, judged(FaultOutcome::kSilentCorruption));
  EXPECT_EQ(*f.outcome, CampaignOutcome::kSilentCorruption);
  EXPECT_FALSE(f.named.has_value());
  EXPECT_FALSE(f.cause_ok.has_value());
  // Masked.
  f = score_fault(0, kFault, "c", t, judged(FaultOutcome::kMasked));
  EXPECT_EQ(*f.outcome, CampaignOutcome::kMasked);
  // Hung (killed at the timeout) wins over anything else.
  f = score_fault(0, kFault, "c", t, judged(FaultOutcome::kHang, Outcome::kHung));
  EXPECT_EQ(*f.outcome, CampaignOutcome::kHang);
  // Crashed with no detection: crash; crashed after a detection: detected_unrecovered.
  f = score_fault(0, kFault, "c", t, judged(FaultOutcome::kSilentCorruption, Outcome::kCrashed));
  EXPECT_EQ(*f.outcome, CampaignOutcome::kCrash);
  ScenarioResult r = judged(FaultOutcome::kDetectedUnrecovered, Outcome::kCrashed);
  r.first_detection = detection("watchdog", {1}, "grad_allreduce", "hang");
  f = score_fault(0, kFault, "c", t, r);
  EXPECT_EQ(*f.outcome, CampaignOutcome::kDetectedUnrecovered);
  // Crashed, no detection, but the post-mortem names the dead rank: the harness explains it at
  // the survivors' last step; the stack named nothing, so it is no detection; outcome crash.
  r = judged(FaultOutcome::kSilentCorruption, Outcome::kCrashed);
  r.judged->postmortem.blame = Blame{{1}, "rank_failure"};
  r.judged->postmortem.last_collective = {{0, LastCollective{0, "consensus", 10, false}},
                                          {1, LastCollective{0, "grad_allreduce", 9, false}}};
  r.judged->abort_latency_ms = 1078.5;
  f = score_fault(0, {{"kind", "crash"}, {"ranks", {1}}, {"step", 10}}, "crash",
                  truth({1}, std::nullopt, "rank_failure"), r);
  EXPECT_EQ(*f.outcome, CampaignOutcome::kCrash);
  EXPECT_FALSE(f.named.has_value());
  EXPECT_EQ(f.named_by(), NamedBy::kHarness);
  ASSERT_TRUE(f.harness_named.has_value());
  EXPECT_EQ(f.harness_named->detector, "post-mortem");
  EXPECT_EQ(f.harness_named->step, 10);  // rank 0's, not the dead rank's
  EXPECT_FALSE(f.rank_ok.has_value());   // the stack's attribution: nothing to score
  EXPECT_FALSE(f.cause_ok.has_value());
  EXPECT_EQ(f.harness_rank_ok, true);
  EXPECT_EQ(f.harness_cause_ok, true);
  EXPECT_FALSE(f.latency_steps.has_value());
  EXPECT_EQ(f.harness_latency_steps, 0);
  EXPECT_EQ(f.harness_latency_ms, 1078.5);
  // A hang the post-mortem explains (no watchdog) is not a detection.
  r = judged(FaultOutcome::kHang, Outcome::kHung);
  r.judged->postmortem.blame = Blame{{1}, "hang"};
  f = score_fault(0, kFault, "hang", t, r);
  EXPECT_FALSE(f.named.has_value());
  EXPECT_EQ(*f.outcome, CampaignOutcome::kHang);
  // Never fired: an error row, out of every rate.
  ScenarioResult none = judged(FaultOutcome::kNone);
  none.injections.clear();
  none.reason = "injection not verified: ...";
  f = score_fault(0, kFault, "c", t, none);
  EXPECT_FALSE(f.outcome.has_value());
  EXPECT_EQ(f.error, "injection not verified: ...");
}

// The judge puts the flight recorder's collective_mismatch first when it came first (an external
// job's rank skipped a collective); the stack is scored on its own detection after it, and the
// mismatch is the harness's, beside it.
TEST(CampaignScoring, ACollectiveMismatchFirstIsTheHarnessesAndTheStackIsScoredOnItsOwn) {
  ScenarioResult r = judged(FaultOutcome::kDetectedUnrecovered, Outcome::kCrashed);
  r.first_detection = detection("collective_mismatch", {1}, "", "", 0);
  r.detections = {*r.first_detection, detection("observed:exception", {0}, "", "exception", 1)};
  auto f = score_fault(0, kFault, "tensor:activation", truth({1}, "layers.1", "activation"), r);
  ASSERT_TRUE(f.harness_named.has_value());
  EXPECT_EQ(f.harness_named->detector, "collective_mismatch");
  EXPECT_EQ(f.harness_rank_ok, true);
  EXPECT_EQ(f.harness_latency_steps, 0);
  ASSERT_TRUE(f.named.has_value());
  EXPECT_EQ(f.named->detector, "observed:exception");
  EXPECT_EQ(f.rank_ok, false);  // the stack blamed rank 0
  EXPECT_EQ(f.latency_steps, 1);
  EXPECT_EQ(*f.outcome, CampaignOutcome::kDetectedUnrecovered);
  // With nothing from the stack, the row is no detection at all.
  r = judged(FaultOutcome::kSilentCorruption);
  r.first_detection = detection("collective_mismatch", {1}, "", "", 0);
  r.detections = {*r.first_detection};
  f = score_fault(0, kFault, "tensor:activation", truth({1}, "layers.1", "activation"), r);
  EXPECT_FALSE(f.named.has_value());
  EXPECT_EQ(f.named_by(), NamedBy::kHarness);
  EXPECT_EQ(*f.outcome, CampaignOutcome::kSilentCorruption);
  Campaign c;
  c.faults = {f};
  c.summary = summarize_campaign(c.faults);
  EXPECT_EQ(c.summary.all.coverage.k, 0);
  EXPECT_TRUE(c.summary.detector_by_class.empty());
}

// Coverage is the stack's own: a stack that detects nothing scores coverage 0 though the harness's
// post-mortem explains every crash; the harness's figure is beside it.
TEST(CampaignScoring, AStackThatNamesNothingScoresZeroThoughTheHarnessExplainsItsCrashes) {
  std::vector<CampaignFault> rows;
  for (int i = 0; i < 4; ++i) {
    ScenarioResult r = judged(FaultOutcome::kSilentCorruption, Outcome::kCrashed);
    r.judged->postmortem.blame = Blame{{1}, "rank_failure"};
    rows.push_back(score_fault(i, {{"kind", "crash"}, {"ranks", {1}}, {"step", 10}}, "crash",
                               truth({1}, std::nullopt, "rank_failure"), r));
  }
  rows.push_back(score_fault(4, kFault, "tensor:activation", truth({1}, "layers.1", "activation"),
                             judged(FaultOutcome::kSilentCorruption)));
  Campaign c;
  c.faults = rows;
  c.summary = summarize_campaign(rows);
  const ClassSummary& a = c.summary.all;
  EXPECT_EQ(a.coverage.k, 0);
  EXPECT_EQ(a.coverage.n, 5);
  EXPECT_EQ(a.coverage.rate, 0.0);
  EXPECT_EQ(a.detected, 0);
  EXPECT_EQ(a.rank.n, 0);
  EXPECT_EQ(a.cause.n, 0);
  EXPECT_EQ(a.harness_explained.k, 4);
  EXPECT_EQ(a.harness_explained.n, 5);
  EXPECT_EQ(a.harness_rank.k, 4);
  EXPECT_TRUE(c.summary.detector_by_class.empty());  // post-mortem is no detector of the stack
  EXPECT_EQ(c.summary.confusion.at("rank_failure").at("-"), 4);
  const ojson j = to_json(c);
  EXPECT_EQ(j["summary"]["coverage"], 0.0);
  EXPECT_EQ(j["summary"]["coverage_counts"]["k"], 0);
  EXPECT_EQ(j["summary"]["harness"]["explained"]["k"], 4);
  EXPECT_EQ(j["faults"][0]["named"], nullptr);
  EXPECT_EQ(j["faults"][0]["named_by"], "harness");
  EXPECT_EQ(j["faults"][0]["harness_named"]["detector"], "post-mortem");
  EXPECT_EQ(j["faults"][4]["named_by"], nullptr);
  // A [campaign] min_coverage cannot be met by the harness's explanations.
  EXPECT_NE(campaign_markdown(c).find("the harness's post-mortem explained 4"), std::string::npos)
      << campaign_markdown(c);
}

TEST(CampaignScoring, ADetectionAfterTheWindowIsNotTheFaults) {
  // A detection 15 steps after the fault (a later, unrelated check) is no detection of it.
  ScenarioResult r = judged(FaultOutcome::kDetectedRecovered);
  r.first_detection = detection("replica", {1}, "layers.1", "activation", 15);
  const Truth t = truth({1}, "layers.1", "activation");
  ScoringRules rules;
  rules.within_steps = 10;
  auto f = score_fault(0, kFault, "tensor:activation", t, r, rules);
  EXPECT_FALSE(f.named.has_value());
  ASSERT_TRUE(f.late.has_value());
  EXPECT_EQ(f.late->step, 25);
  EXPECT_FALSE(f.cause_ok.has_value());
  const CampaignSummary s = summarize_campaign({f});
  EXPECT_EQ(s.all.coverage.k, 0);
  EXPECT_EQ(s.all.late, 1);
  // At the window's edge it counts.
  rules.within_steps = 15;
  f = score_fault(0, kFault, "tensor:activation", t, r, rules);
  ASSERT_TRUE(f.named.has_value());
  EXPECT_EQ(f.named_by(), NamedBy::kStack);
  EXPECT_EQ(f.latency_steps, 15);
}

TEST(CampaignScoring, SummaryRatesCountOnlyWhatTheContractSays) {
  std::vector<CampaignFault> rows;
  const Truth act = truth({1}, "layers.1", "activation");
  // 1: detected, all right. 2: detected, wrong rank and layer. 3: silent. 4: masked. 5: error.
  ScenarioResult a = judged(FaultOutcome::kDetectedRecovered);
  a.first_detection = detection("loss", {1}, "layers.1", "activation", 0);
  rows.push_back(score_fault(0, kFault, "tensor:activation", act, a));
  ScenarioResult b = judged(FaultOutcome::kDetectedRecovered);
  b.first_detection = detection("grad", {0}, "head.weight", "activation", 1);
  rows.push_back(score_fault(1, kFault, "tensor:activation", act, b));
  rows.push_back(score_fault(2, kFault, "tensor:gradient", truth({1}, "head.bias", "gradient"),
                             judged(FaultOutcome::kSilentCorruption)));
  rows.push_back(score_fault(3, kFault, "tensor:gradient", act, judged(FaultOutcome::kMasked)));
  ScenarioResult e = judged(FaultOutcome::kNone);
  e.injections.clear();
  rows.push_back(score_fault(4, kFault, "tensor:gradient", act, e));
  const CampaignSummary s = summarize_campaign(rows);
  EXPECT_EQ(s.all.faults, 5);
  EXPECT_EQ(s.all.errors, 1);
  EXPECT_EQ(s.all.coverage.k, 2);  // detected
  EXPECT_EQ(s.all.coverage.n, 3);  // not masked, not errors
  EXPECT_EQ(s.all.rank.k, 1);
  EXPECT_EQ(s.all.rank.n, 2);
  EXPECT_EQ(s.all.layer.k, 1);
  EXPECT_EQ(s.all.cause.k, 2);
  EXPECT_EQ(s.all.outcomes.at("masked"), 1);
  EXPECT_EQ(s.all.outcomes.at("silent_corruption"), 1);
  EXPECT_EQ(s.all.outcomes.at("crash"), 0);
  EXPECT_EQ(s.by_class.at("tensor:activation").coverage.k, 2);
  EXPECT_EQ(s.by_class.at("tensor:gradient").worst, severity(CampaignOutcome::kSilentCorruption));
  EXPECT_EQ(s.detector_by_class.at("grad").at("tensor:activation"), 1);
  EXPECT_EQ(s.confusion.at("gradient").at("-"), 1);
  ASSERT_TRUE(s.latency_steps.has_value());
  EXPECT_EQ(s.latency_steps->max, 1);
  const Interval ci = *s.all.coverage.ci95;
  EXPECT_NEAR(ci.lo, wilson95(2, 3).lo, 1e-12);
}

TEST(CampaignScoring, JsonHasTheContractFields) {
  ScenarioResult a = judged(FaultOutcome::kDetectedRecovered);
  a.first_detection = detection("loss", {1}, "layers.1", "activation");
  Campaign c;
  c.scenario = "campaigns/x.toml";
  c.seed = 7;
  c.faults = {score_fault(0, kFault, "tensor:activation", truth({1}, "layers.1", "activation"), a)};
  c.summary = summarize_campaign(c.faults);
  const ojson j = to_json(c);
  for (const char* k : {"scenario", "seed", "faults", "summary"}) EXPECT_TRUE(j.contains(k)) << k;
  const ojson& f = j["faults"][0];
  for (const char* k : {"fault", "truth", "named", "outcome", "latency_steps", "latency_ms"}) {
    EXPECT_TRUE(f.contains(k)) << k;
  }
  for (const char* k : {"rank", "step", "layer", "cause"}) EXPECT_TRUE(f["truth"].contains(k)) << k;
  for (const char* k : {"detector", "rank", "step", "layer", "cause"}) {
    EXPECT_TRUE(f["named"].contains(k)) << k;
  }
  const ojson& s = j["summary"];
  for (const char* k : {"faults", "coverage", "coverage_ci95", "attribution", "outcomes",
                        "latency_steps", "false_positives"}) {
    EXPECT_TRUE(s.contains(k)) << k;
  }
  for (const char* k : {"rank", "layer", "cause"}) EXPECT_TRUE(s["attribution"].contains(k)) << k;
  for (const char* k : {"p50", "p95", "max"}) EXPECT_TRUE(s["latency_steps"].contains(k)) << k;
  EXPECT_EQ(s["coverage"], 1.0);
  EXPECT_EQ(j["faults"][0]["outcome"], "detected_recovered");
}

// A hand-made campaign.json: `rows` are (class, outcome, cause_ok) per fault; every fault is the
// same table except its index, so same-seed files have the same draws.
json campaign_file(uint64_t seed,
                   const std::vector<std::tuple<std::string, std::string, bool>>& rows,
                   const std::string& fault_kind = "tensor") {
  std::vector<CampaignFault> faults;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& [cls, outcome, cause_ok] = rows[i];
    ScenarioResult r = judged(outcome == "masked"              ? FaultOutcome::kMasked
                              : outcome == "silent_corruption" ? FaultOutcome::kSilentCorruption
                                                               : FaultOutcome::kDetectedRecovered);
    if (outcome == "detected_recovered") {
      r.first_detection = detection("loss", {1}, "layers.1", cause_ok ? "activation" : "gradient");
    }
    faults.push_back(score_fault(int(i),
                                 {{"kind", fault_kind}, {"ranks", {1}}, {"step", 10 + int(i)}}, cls,
                                 truth({1}, "layers.1", "activation"), r));
  }
  Campaign c;
  c.seed = seed;
  c.faults = faults;
  c.summary = summarize_campaign(faults);
  return json::parse(to_json(c).dump());
}

std::vector<std::tuple<std::string, std::string, bool>> rows(int detected, int silent,
                                                             int wrong_cause = 0) {
  std::vector<std::tuple<std::string, std::string, bool>> out;
  for (int i = 0; i < detected; ++i)
    out.emplace_back("tensor:activation", "detected_recovered", i >= wrong_cause);
  for (int i = 0; i < silent; ++i)
    out.emplace_back("tensor:activation", "silent_corruption", false);
  return out;
}

TEST(CampaignScoring, ConfusionLeavesOutMaskedFaultsNothingNamed) {
  // A masked fault with no detection had nothing to name: not a miss ("-"), as coverage says.
  ScenarioResult named = judged(FaultOutcome::kDetectedRecovered);
  named.first_detection = detection("loss", {1}, "layers.1", "activation");
  const std::vector<CampaignFault> faults = {
      score_fault(0, kFault, "tensor:activation", truth({1}, "layers.1", "activation"), named),
      score_fault(1, kFault, "tensor:activation", truth({1}, "layers.1", "activation"),
                  judged(FaultOutcome::kMasked)),
      score_fault(2, kFault, "tensor:activation", truth({1}, "layers.1", "activation"),
                  judged(FaultOutcome::kSilentCorruption))};
  const CampaignSummary sum = summarize_campaign(faults);
  ASSERT_EQ(sum.confusion.count("activation"), 1u);
  const auto& row = sum.confusion.at("activation");
  EXPECT_EQ(row.at("activation"), 1);
  EXPECT_EQ(row.at("-"), 1);  // the silent corruption only
  EXPECT_EQ(sum.all.outcomes.at("masked"), 1);
}

TEST(CampaignScoring, MarkdownOfAnInterruptedCampaignSaysHowManyWereMeasured) {
  Campaign c;
  c.name = "x";
  c.requested = 8;
  c.interrupted = true;
  c.faults = {score_fault(0, kFault, "tensor:activation", truth({1}, "layers.1", "activation"),
                          judged(FaultOutcome::kMasked))};
  c.summary = summarize_campaign(c.faults);
  EXPECT_NE(campaign_markdown(c).find(
                ", 8 faults drawn over  (1 at a time), 0.0 s, nanchaos . **Interrupted: 1 of the 8 "
                "faults requested were measured; the rows below are those.**"),
            std::string::npos)
      << campaign_markdown(c);
}

TEST(CampaignHtml, LatencyChartSetsDetectorNamesAsPlainText) {
  // Enhanced text would set post_reduce's underscore as a subscript; a quote in a job's own
  // detector name must not end the gnuplot string.
  const std::string dir = test_util::scratch_dir("campaign-html", "chart");
  Campaign c;
  c.name = "x";
  ScenarioResult a = judged(FaultOutcome::kDetectedRecovered);
  a.first_detection = detection("post_reduce", {1}, "layers.1", "activation");
  ScenarioResult b = judged(FaultOutcome::kDetectedRecovered);
  b.first_detection = detection("my \"check\"", {1}, "layers.1", "activation");
  c.faults = {score_fault(0, kFault, "comm", truth({1}, "layers.1", "activation"), a),
              score_fault(1, kFault, "comm", truth({1}, "layers.1", "activation"), b)};
  c.summary = summarize_campaign(c.faults);
  write_campaign_html(c, dir + "/campaign.html");
  std::ifstream in(dir + "/html/campaign-latency.gp");
  std::stringstream gp;
  gp << in.rdbuf();
  EXPECT_NE(gp.str().find(" noenhanced "), std::string::npos) << gp.str();
  EXPECT_NE(gp.str().find("\"post_reduce\" 0, \"my 'check'\" 1"), std::string::npos) << gp.str();
}

TEST(CampaignCompare, SameCampaignIsNoRegression) {
  const json a = campaign_file(1, rows(14, 2));
  EXPECT_TRUE(is_campaign_json(a));
  const auto c = compare_campaigns(a, a);
  EXPECT_FALSE(c.regressed()) << format_text(c);
  EXPECT_TRUE(c.same_draws);
  EXPECT_EQ(c.faults_compared, 16);
}

TEST(CampaignCompare, CoverageFellBeyondTheIntervalsIsARegression) {
  // Different seeds: rates and per-class worst outcomes. 30/30 -> 10/30: Wilson [88.6, 100] vs
  // [19.2, 51.2]: B's upper bound is below A's lower bound.
  const auto c = compare_campaigns(campaign_file(1, rows(30, 0)), campaign_file(2, rows(10, 20)));
  EXPECT_TRUE(c.regressed());
  EXPECT_TRUE(c.rates[0].regressed) << format_text(c);
  EXPECT_EQ(c.rates[0].metric, "coverage");
  EXPECT_FALSE(c.same_draws);
  ASSERT_EQ(c.outcome_regressions.size(), 1u);  // the class's worst outcome became silent
  EXPECT_NE(format_markdown(c).find("- **coverage**: "), std::string::npos);
}

TEST(CampaignCompare, ADropWithinTheIntervalsIsNoise) {
  // 15/16 -> 13/16 with the same worst outcome: the intervals overlap, not a regression.
  const auto c = compare_campaigns(campaign_file(1, rows(15, 1)), campaign_file(2, rows(13, 3)));
  EXPECT_FALSE(c.rates[0].regressed);
  EXPECT_FALSE(c.regressed()) << format_text(c);
}

TEST(CampaignCompare, CauseRateFellIsARegression) {
  const auto c =
      compare_campaigns(campaign_file(1, rows(30, 0, 0)), campaign_file(2, rows(30, 0, 25)));
  EXPECT_FALSE(c.rates[0].regressed);  // coverage unchanged
  EXPECT_TRUE(c.rates[3].regressed);   // attribution.cause: 30/30 -> 5/30
  EXPECT_TRUE(c.regressed());
}

TEST(CampaignCompare, SameDrawsComparedFaultByFault) {
  // One fault of the same draws went from detected to silent: the rates' intervals overlap, the
  // per-fault rule still flags it.
  const json a = campaign_file(5, rows(16, 0));
  auto r = rows(16, 0);
  std::get<1>(r[7]) = "silent_corruption";
  const auto c = compare_campaigns(a, campaign_file(5, r));
  EXPECT_TRUE(c.same_draws);
  EXPECT_FALSE(c.rates[0].regressed);
  ASSERT_EQ(c.outcome_regressions.size(), 1u);
  EXPECT_EQ(c.outcome_regressions[0],
            "f007 tensor:activation: detected_recovered -> silent_corruption");
  // Other faults drawn (another kind in every table): per class, and the classes do not meet.
  const auto d = compare_campaigns(a, campaign_file(5, r, "bitflip"));
  EXPECT_FALSE(d.same_draws);
}

TEST(McNemar, ExactOneSidedPValues) {
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(0, 0), 1.0);
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(5, 0), 1.0 / 32);
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(4, 0), 1.0 / 16);
  EXPECT_NEAR(mcnemar_exact_p(3, 1), 5.0 / 16, 1e-12);  // (C(4,3) + C(4,4)) / 2^4
  EXPECT_NEAR(mcnemar_exact_p(0, 3), 1.0, 1e-12);
  // Large counts stay finite: 60 of 100 discordant pairs worse, p = 0.0284 (binomial tail).
  EXPECT_NEAR(mcnemar_exact_p(60, 40), 0.028444, 1e-5);
  EXPECT_THROW(mcnemar_exact_p(-1, 2), std::invalid_argument);
}

// Rows by detection: true -> detected_recovered with the right cause, false -> silent.
std::vector<std::tuple<std::string, std::string, bool>> rows_of(const std::vector<bool>& hit) {
  std::vector<std::tuple<std::string, std::string, bool>> out;
  for (bool h : hit) {
    out.emplace_back("tensor:activation", h ? "detected_recovered" : "silent_corruption", true);
  }
  return out;
}

TEST(CampaignCompare, SameDrawsPairedTestFlagsAStackThatLostFiveFaults) {
  // At the CI size (12 faults), a stack with one detector removed that misses 5 faults the
  // baseline caught: Wilson intervals overlap (12/12 [75.8, 100] vs 7/12 [32.0, 80.7]), the
  // paired test does not (p = 1/32).
  std::vector<bool> a(12, true), b(12, true);
  for (int i = 0; i < 5; ++i) b[size_t(2 * i)] = false;
  const json fa = campaign_file(3, rows_of(a)), fb = campaign_file(3, rows_of(b));
  const auto c = compare_campaigns(fa, fb);
  ASSERT_TRUE(c.same_draws);
  EXPECT_TRUE(c.rates[0].paired);
  EXPECT_EQ(c.rates[0].pairs, 12);
  EXPECT_EQ(c.rates[0].worse, 5);
  EXPECT_EQ(c.rates[0].better, 0);
  EXPECT_TRUE(c.rates[0].regressed) << format_text(c);
  EXPECT_NE(format_markdown(c).find("McNemar p = 0.0312"), std::string::npos) << format_markdown(c);
  // The same counts on different draws: the Wilson rule, which cannot tell.
  const auto d = compare_campaigns(fa, campaign_file(4, rows_of(b)));
  EXPECT_FALSE(d.same_draws);
  EXPECT_FALSE(d.rates[0].regressed) << format_text(d);
  // Four lost and one gained: p = 6/32 = 0.19, not a rate regression.
  b[1] = true;
  b[0] = true;
  std::vector<bool> a2 = a;
  a2[11] = false;
  const auto e = compare_campaigns(campaign_file(3, rows_of(a2)), campaign_file(3, rows_of(b)));
  EXPECT_EQ(e.rates[0].worse, 4);
  EXPECT_EQ(e.rates[0].better, 1);
  EXPECT_FALSE(e.rates[0].regressed) << format_text(e);
}

TEST(CampaignCompare, PairedTestCountsOnlyWhatTheStackNamed) {
  // B's stack lost 5 crash faults to the launcher, which the harness's post-mortem explains:
  // they are misses of B's stack, and compare says so.
  std::vector<CampaignFault> fa, fb;
  for (int i = 0; i < 8; ++i) {
    const ojson fault = {{"kind", "crash"}, {"ranks", {1}}, {"step", 10 + i}};
    const Truth t = truth({1}, std::nullopt, "rank_failure");
    ScenarioResult ra = judged(FaultOutcome::kDetectedUnrecovered, Outcome::kAborted);
    ra.first_detection = detection("watchdog", {1}, "", "rank_failure");
    fa.push_back(score_fault(i, fault, "crash", t, ra));
    ScenarioResult rb = judged(FaultOutcome::kSilentCorruption, Outcome::kCrashed);
    rb.judged->postmortem.blame = Blame{{1}, "rank_failure"};
    fb.push_back(score_fault(i, fault, "crash", t, i < 5 ? rb : ra));
  }
  auto file = [](const std::vector<CampaignFault>& rows) {
    Campaign c;
    c.seed = 9;
    c.faults = rows;
    c.summary = summarize_campaign(rows);
    return json::parse(to_json(c).dump());
  };
  const auto c = compare_campaigns(file(fa), file(fb));
  EXPECT_EQ(c.fresh_harness, 5);
  EXPECT_EQ(c.rates[0].worse, 5);
  EXPECT_TRUE(c.rates[0].regressed) << format_text(c);
  // A file written before named_by: a "post-mortem" in `named` is not the stack's either.
  json old = file(fb);
  for (auto& row : old["faults"]) {
    if (row["named_by"] == "harness") row["named"] = row["harness_named"];
    row.erase("named_by");
  }
  const auto d = compare_campaigns(file(fa), old);
  EXPECT_EQ(d.rates[0].worse, 5);
  EXPECT_EQ(d.fresh_harness, 5);
}

TEST(CampaignCompare, PairedTestFalseAlarmRateAndPowerBySimulation) {
  // Two campaigns of the same stack on the same draws: each fault is caught on either side with
  // its own probability (faults differ, runs of one fault differ only by chance). The paired
  // test may flag at most ~5% of such pairs; a stack that lost 40 points of detection on every
  // fault must be flagged nearly always at 30 faults.
  std::mt19937_64 rng(20261203);
  std::uniform_real_distribution<double> u(0, 1);
  const int sims = 400, n = 30;
  int false_alarms = 0, caught = 0;
  for (int sim = 0; sim < sims; ++sim) {
    std::vector<bool> a(n), same(n), worse(n);
    for (int i = 0; i < n; ++i) {
      const double p = 0.5 + 0.5 * u(rng);
      a[size_t(i)] = u(rng) < p;
      same[size_t(i)] = u(rng) < p;
      worse[size_t(i)] = u(rng) < p - 0.4;
    }
    const json fa = campaign_file(1, rows_of(a));
    false_alarms += compare_campaigns(fa, campaign_file(1, rows_of(same))).rates[0].regressed;
    caught += compare_campaigns(fa, campaign_file(1, rows_of(worse))).rates[0].regressed;
  }
  EXPECT_LE(false_alarms, sims * 7 / 100) << false_alarms << " of " << sims;
  EXPECT_GE(caught, sims * 9 / 10) << caught << " of " << sims;
}

TEST(CampaignCompare, NotesDifferentScenariosSeedsAndInterruptedSides) {
  json a = campaign_file(1, rows(3, 1));
  json b = campaign_file(2, rows(3, 1));
  a["name"] = "mlp-default";
  b["name"] = "tf-full";
  b["interrupted"] = true;
  b["faults_requested"] = 10;
  const auto c = compare_campaigns(a, b);
  EXPECT_EQ(c.notes, (std::vector<std::string>{
                         "A and B are campaigns of different scenarios (mlp-default and tf-full)",
                         "A and B have different seeds (1 and 2): different draws",
                         "B was interrupted: 4 of 10 faults measured"}));
  b["interrupted"] = false;
  b["complete"] = false;  // what a controller killed with SIGKILL leaves
  EXPECT_EQ(compare_campaigns(a, b).notes.back(),
            "B is incomplete (its controller had not finished: still running, or it died): 4 of "
            "10 faults measured");
  EXPECT_NE(format_text(c).find("  note: A and B are campaigns of different scenarios"),
            std::string::npos);
  EXPECT_NE(format_markdown(c).find("Note: B was interrupted"), std::string::npos);
  EXPECT_TRUE(compare_campaigns(a, a).notes.empty());
}

TEST(CampaignCompare, ExitCodesOnFiles) {
  const std::string dir = test_util::scratch_dir("campaign-compare", "files");
  auto put = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  const std::string a = put("a.json", campaign_file(1, rows(30, 0)).dump());
  const std::string b = put("b.json", campaign_file(2, rows(10, 20)).dump());
  const std::string report = put("report.json", R"({"suite": "s", "scenarios": []})");
  std::ostringstream out, err;
  EXPECT_EQ(run_campaign_compare(a, a, "md", out, err), 0);
  EXPECT_EQ(run_campaign_compare(a, b, "md", out, err), 1);
  EXPECT_NE(out.str().find("**Regression.**"), std::string::npos);
  EXPECT_EQ(run_campaign_compare(a, b, "json", out, err), 1);
  EXPECT_EQ(run_campaign_compare(a, report, "text", out, err), 2);
  EXPECT_NE(err.str().find(report + ": not a campaign.json"), std::string::npos);
  EXPECT_EQ(run_campaign_compare(a, dir + "/missing.json", "text", out, err), 2);
  // Through the CLI: recognised by content, whatever the file is called.
  const auto cli =
      test_util::run_cmd(std::string(NANCHAOS_BINARY) + " compare " + a + " " + b + " --format md");
  EXPECT_EQ(cli.code, 1) << cli.output;
  EXPECT_NE(cli.output.find("nanchaos campaign compare"), std::string::npos) << cli.output;
}

TEST(CampaignCompare, DamagedFileIsAnErrorNamingTheFileAndField) {
  const std::string dir = test_util::scratch_dir("campaign-compare", "damaged");
  const json good = campaign_file(1, rows(3, 1));
  auto put = [&](const std::string& name, const json& doc) {
    std::ofstream(dir + "/" + name) << doc.dump();
    return dir + "/" + name;
  };
  const std::string a = put("a.json", good);
  json counts = good;
  counts["summary"]["attribution_counts"]["cause"] = "x";
  json outcome = good;
  outcome["faults"][2]["outcome"] = "exploded";  // never silently left out of the comparison
  json index = good;
  index["faults"][1].erase("index");
  const std::pair<json, std::string> cases[] = {
      {counts, "summary.attribution_counts.cause is not {\"k\": integer, \"n\": integer, ...}"},
      {outcome, "faults[2].outcome \"exploded\" is not an outcome class"},
      {index, "faults[1]: no integer \"index\""}};
  int i = 0;
  for (const auto& [doc, what] : cases) {
    const std::string b = put("b" + std::to_string(i++) + ".json", doc);
    std::ostringstream out, err;
    EXPECT_EQ(run_campaign_compare(a, b, "text", out, err), 2) << out.str();
    EXPECT_EQ(err.str(), "nanchaos compare: error: " + b + ": " + what + "\n");
  }
}

// campaign.json read back (campaign --shard + merge): the committed baseline's 50 real rows come
// back as written, and the summary and thresholds computed again from them equal the file's.
// A finite (or not) fault the stack named with `first` ("" = nothing named), outcome by it.
CampaignFault finite_row(int index, const std::string& first, bool finite = true,
                         const std::vector<std::string>& also = {}) {
  ScenarioResult r =
      judged(first.empty() ? FaultOutcome::kSilentCorruption : FaultOutcome::kDetectedRecovered);
  if (!first.empty()) {
    r.first_detection = detection(first, {1}, "layers.1", "activation");
    r.detections.push_back(*r.first_detection);
  }
  for (const auto& d : also) r.detections.push_back(detection(d, {0}, "", "straggler", 2));
  CampaignFault f = score_fault(index, {{"kind", "tensor"}, {"ranks", {1}}, {"step", 10 + index}},
                                "tensor:activation", truth({1}, "layers.1", "activation"), r);
  f.finite = finite;
  return f;
}

TEST(CampaignFinite, SummaryPerDetectorAndStragglerFalsePositivesFromHandMadeRows) {
  std::vector<CampaignFault> rows = {finite_row(0, "loss"), finite_row(1, "sdc"),
                                     finite_row(2, "loss"), finite_row(3, "")};
  rows.push_back(score_fault(4, kFault, "tensor:activation", truth({1}, "layers.1", "activation"),
                             judged(FaultOutcome::kMasked)));
  rows.back().finite = true;                     // masked: out of the finite coverage
  rows.push_back(finite_row(5, "grad", false));  // not finite: out of it
  ScenarioResult err = judged(FaultOutcome::kNone);
  err.injections.clear();
  rows.push_back(
      score_fault(6, kFault, "tensor:activation", truth({1}, "layers.1", "activation"), err));
  rows.back().finite = true;  // an error: out of every rate
  // A slow fault the straggler detector named: its job, not a false positive.
  rows.push_back(finite_row(7, "straggler", false));
  rows.back().slows = true;
  rows.back().truth.cause = "straggler";
  // The straggler detector fired after the loss detector on a tensor fault: a false positive.
  rows.push_back(finite_row(8, "loss", false, {"straggler"}));
  // A row read from a file without `detectors`: its first named detection decides.
  rows.push_back(finite_row(9, "straggler", false));
  rows.back().detectors.clear();
  EXPECT_EQ(rows[8].detectors, (std::vector<std::string>{"loss", "straggler"}));

  const CampaignSummary s = summarize_campaign(rows);
  EXPECT_EQ(s.finite_faults, 5);  // 0-4 (the error row is not measured)
  EXPECT_EQ(s.finite_coverage.k, 3);
  EXPECT_EQ(s.finite_coverage.n, 4);
  ASSERT_EQ(s.finite_by_detector.size(), 2u);  // grad named only a non-finite fault
  EXPECT_EQ(s.finite_by_detector.at("loss").k, 2);
  EXPECT_EQ(s.finite_by_detector.at("loss").n, 4);
  EXPECT_EQ(s.finite_by_detector.at("sdc").k, 1);
  EXPECT_NEAR(s.finite_by_detector.at("sdc").ci95->lo, wilson95(1, 4).lo, 1e-12);
  EXPECT_EQ(s.straggler_false_positives.k, 2);  // rows 8 and 9
  EXPECT_EQ(s.straggler_false_positives.n, 8);  // measured rows but the slow one

  Campaign c;
  c.name = "finite";
  c.values = "finite";
  c.faults = rows;
  c.summary = s;
  const ojson j = to_json(c);
  EXPECT_EQ(j["values"], "finite");
  EXPECT_EQ(j["faults"][1]["finite"], true);
  EXPECT_EQ(j["faults"][7]["slows"], true);
  EXPECT_EQ(j["summary"]["finite"]["faults"], 5);
  EXPECT_EQ(j["summary"]["finite"]["coverage_counts"]["k"], 3);
  EXPECT_EQ(j["summary"]["finite"]["by_detector"]["sdc"]["k"], 1);
  EXPECT_EQ(j["summary"]["finite"]["coverage"], 0.75);
  EXPECT_EQ(j["summary"]["straggler_false_positives"], 2);
  EXPECT_EQ(j["summary"]["no_slowness_faults"], 8);
  // Read back: the same rows, the same summary.
  const Campaign back = campaign_from_json(j);
  EXPECT_EQ(to_json(back)["faults"], j["faults"]);
  EXPECT_EQ(to_json(back)["summary"], j["summary"]);
  EXPECT_EQ(back.values, "finite");

  const std::string md = campaign_markdown(c);
  EXPECT_NE(md.find("## Finite faults per detector\n\n5 finite fault(s)"), std::string::npos) << md;
  EXPECT_NE(md.find("| sdc | 25.0 % ("), std::string::npos) << md;
  EXPECT_NE(md.find("| loss | 50.0 % ("), std::string::npos) << md;
  EXPECT_NE(md.find("| **any (finite coverage)** | 75.0 % ("), std::string::npos) << md;
  EXPECT_NE(md.find("the `straggler` detector fired on 2 of the 8 measured faults"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("with --values finite"), std::string::npos) << md;
  const std::string dir = test_util::scratch_dir("campaign-html", "finite");
  write_campaign_html(c, dir + "/campaign.html");
  std::ifstream in(dir + "/campaign.html");
  std::stringstream html;
  html << in.rdbuf();
  EXPECT_NE(html.str().find("<h2>Finite faults per detector</h2>"), std::string::npos);
  EXPECT_NE(html.str().find("<tr><td>sdc</td>"), std::string::npos) << html.str();
  EXPECT_NE(html.str().find("fired on 2 of the 8"), std::string::npos);
}

json finite_file(uint64_t seed, const std::vector<CampaignFault>& rows) {
  Campaign c;
  c.seed = seed;
  c.faults = rows;
  c.summary = summarize_campaign(rows);
  return json::parse(to_json(c).dump());
}

const CampaignRateDiff& rate_of(const CampaignComparison& c, const std::string& metric) {
  for (const auto& r : c.rates) {
    if (r.metric == metric) return r;
  }
  throw std::runtime_error("no metric " + metric);
}

TEST(CampaignFinite, CompareGatesFiniteCoveragePerDetectorBothWays) {
  // Same draws: 12 finite faults the sdc detector named; B lost 5 of them (named nothing).
  std::vector<CampaignFault> a, b;
  for (int i = 0; i < 12; ++i) {
    a.push_back(finite_row(i, "sdc"));
    b.push_back(finite_row(i, i % 2 == 0 && i < 10 ? "" : "sdc"));
  }
  const auto lost = compare_campaigns(finite_file(7, a), finite_file(7, b));
  ASSERT_TRUE(lost.same_draws);
  EXPECT_TRUE(rate_of(lost, "finite_coverage").regressed) << format_text(lost);
  EXPECT_TRUE(rate_of(lost, "finite_coverage.sdc").regressed) << format_text(lost);
  EXPECT_EQ(rate_of(lost, "finite_coverage.sdc").worse, 5);
  EXPECT_TRUE(lost.regressed());
  EXPECT_NE(format_markdown(lost).find("- **finite_coverage.sdc**: "), std::string::npos);
  // The other way: B found them again, no regression.
  const auto gained = compare_campaigns(finite_file(7, b), finite_file(7, a));
  EXPECT_FALSE(rate_of(gained, "finite_coverage.sdc").regressed);
  EXPECT_FALSE(gained.regressed()) << format_text(gained);
  // The loss detector named them in A; sdc, enabled in B, names them first: moved, not lost.
  std::vector<CampaignFault> by_loss;
  for (int i = 0; i < 12; ++i) by_loss.push_back(finite_row(i, "loss"));
  const auto moved = compare_campaigns(finite_file(7, by_loss), finite_file(7, a));
  EXPECT_EQ(rate_of(moved, "finite_coverage.loss").moved, 12);
  EXPECT_FALSE(rate_of(moved, "finite_coverage.loss").regressed);
  EXPECT_FALSE(moved.regressed()) << format_text(moved);
  // "Moved" is for the per-detector finite rates only: when another detector takes a fault over
  // and names the wrong cause, attribution.cause is worse, not moved (a bug once let a removed
  // detector pass the campaign gate this way).
  std::vector<CampaignFault> wrong_cause;
  for (int i = 0; i < 12; ++i) {
    CampaignFault f = finite_row(i, "grad");
    f.cause_ok = false;  // grad named the fault, with the wrong cause
    wrong_cause.push_back(f);
  }
  const auto worse = compare_campaigns(finite_file(7, by_loss), finite_file(7, wrong_cause));
  EXPECT_EQ(rate_of(worse, "attribution.cause").moved, 0);
  EXPECT_EQ(rate_of(worse, "attribution.cause").worse, 12);
  EXPECT_TRUE(rate_of(worse, "attribution.cause").regressed) << format_text(worse);
  // Different draws: the Wilson rule. 30/30 by sdc -> 10/30.
  std::vector<CampaignFault> many, few;
  for (int i = 0; i < 30; ++i) {
    many.push_back(finite_row(i, "sdc"));
    few.push_back(finite_row(i, i < 10 ? "sdc" : ""));
  }
  const auto wilson = compare_campaigns(finite_file(1, many), finite_file(2, few));
  EXPECT_FALSE(wilson.same_draws);
  EXPECT_TRUE(rate_of(wilson, "finite_coverage.sdc").regressed) << format_text(wilson);
  EXPECT_FALSE(compare_campaigns(finite_file(2, few), finite_file(1, many)).regressed());
  // Rows that are not finite: the finite rates have no sample and are not compared.
  std::vector<CampaignFault> plain = by_loss;
  for (auto& f : plain) f.finite = false;
  const auto none = compare_campaigns(finite_file(7, plain), finite_file(7, plain));
  EXPECT_FALSE(rate_of(none, "finite_coverage").compared);
}

TEST(CampaignFinite, CompareFlagsAnyRiseOfStragglerFalsePositives) {
  std::vector<CampaignFault> a, b;
  for (int i = 0; i < 16; ++i) {
    a.push_back(finite_row(i, "loss", false));
    b.push_back(
        finite_row(i, "loss", false,
                   i == 3 ? std::vector<std::string>{"straggler"} : std::vector<std::string>{}));
  }
  const auto rose = compare_campaigns(finite_file(7, a), finite_file(7, b));
  EXPECT_EQ(rose.base_straggler_fp, 0);
  EXPECT_EQ(rose.fresh_straggler_fp, 1);
  EXPECT_EQ(rose.fresh_no_slowness, 16);
  EXPECT_TRUE(rose.straggler_fp_rose);
  EXPECT_TRUE(rose.regressed()) << format_text(rose);
  EXPECT_NE(format_text(rose).find("straggler false positives: A 0/16, B 1/16  ROSE"),
            std::string::npos)
      << format_text(rose);
  EXPECT_EQ(format_json(rose)["straggler_false_positives"]["rose"], true);
  const auto fell = compare_campaigns(finite_file(7, b), finite_file(7, a));
  EXPECT_FALSE(fell.straggler_fp_rose);
  EXPECT_FALSE(fell.regressed()) << format_text(fell);
  // A slow fault the straggler named is its detection, not a false positive.
  std::vector<CampaignFault> slow = a;
  slow[5] = finite_row(5, "straggler", false);
  slow[5].slows = true;
  const auto own = compare_campaigns(finite_file(7, a), finite_file(7, slow));
  EXPECT_EQ(own.fresh_straggler_fp, 0);
  EXPECT_EQ(own.fresh_no_slowness, 15);
  EXPECT_FALSE(own.straggler_fp_rose);
  // On files: exit 1 when they rose.
  const std::string dir = test_util::scratch_dir("campaign-compare", "straggler");
  const std::string fa = test_util::write_file(dir, "a.json", finite_file(7, a).dump());
  const std::string fb = test_util::write_file(dir, "b.json", finite_file(7, b).dump());
  std::ostringstream out, err;
  EXPECT_EQ(run_campaign_compare(fa, fb, "text", out, err), 1) << out.str() << err.str();
  EXPECT_EQ(run_campaign_compare(fb, fa, "text", out, err), 0) << out.str() << err.str();
}

TEST(CampaignRead, TheBaselinesRowsSummaryAndThresholdsComeBack) {
  std::ifstream in(std::string(NANCHAOS_SOURCE_DIR) +
                   "/results/baselines/campaign-mlp-default.json");
  ASSERT_TRUE(in);
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(in);
  const Campaign c = campaign_from_json(j);
  ASSERT_EQ(c.faults.size(), j["faults"].size());
  const nlohmann::ordered_json back = to_json(c);
  // The baseline predates the rows' finite, slows and detectors and the summary's finite and
  // straggler figures: every key it has comes back equal, the newer ones as a file without
  // them reads (no finite fault, nothing slowed, no straggler detection).
  auto same_keys = [](const nlohmann::ordered_json& written, nlohmann::ordered_json read,
                      const std::vector<std::string>& newer) {
    for (const auto& key : newer) {
      EXPECT_FALSE(written.contains(key)) << key;
      read.erase(key);
    }
    return read;
  };
  for (size_t k = 0; k < c.faults.size(); ++k) {
    EXPECT_EQ(same_keys(j["faults"][k], back["faults"][k], {"finite", "slows", "detectors"}),
              j["faults"][k])
        << "fault " << k;
    EXPECT_EQ(back["faults"][k]["finite"], false);
    EXPECT_EQ(back["faults"][k]["slows"], false);
  }
  EXPECT_EQ(same_keys(j["summary"], back["summary"],
                      {"finite", "straggler_false_positives", "no_slowness_faults"}),
            j["summary"]);
  EXPECT_EQ(back["summary"]["finite"]["faults"], 0);
  EXPECT_EQ(back["summary"]["straggler_false_positives"], 0);
  EXPECT_EQ(back["summary"]["no_slowness_faults"], j["summary"]["faults"]);
  EXPECT_EQ(nlohmann::json::parse(back["thresholds"].dump()),
            recheck_thresholds(c.thresholds, c.summary));
  EXPECT_FALSE(c.shard);
}

TEST(CampaignRead, AMalformedRowNamesItsIndex) {
  nlohmann::ordered_json j = {{"seed", 1}, {"faults_requested", 1}, {"faults", {{{"index", 7}}}}};
  try {
    campaign_from_json(j);
    ADD_FAILURE() << "accepted a row without class";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("faults[index 7]"), std::string::npos) << e.what();
  }
  j = {{"seed", 1},
       {"faults_requested", 1},
       {"faults", nlohmann::ordered_json::array()},
       {"shard", {{"index", 2}, {"count", 4}}}};
  const Campaign c = campaign_from_json(j);
  ASSERT_TRUE(c.shard);
  EXPECT_EQ(c.shard->index, 2);
  EXPECT_EQ(to_json(c)["shard"]["count"], 4);
}

}  // namespace
}  // namespace nanchaos::results
