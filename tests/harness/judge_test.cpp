// The judge on hand-written event logs: outcome, detections and latency, consistency, injection
// verification, hang post-mortem, truncated logs, false positives and fault outcomes.
#include "harness/controller/judge.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/controller/job_result.h"
#include "harness/scenario/scenario.h"
#include "results/report.h"
#include "tests/harness/event_logs.h"

namespace nanchaos::harness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test_util::judge_logs;
using test_util::kT0;

// A run folder under the test temp dir with per-rank JSON-lines logs written by hand, in the
// format harness/job/runner.cpp writes.
class RunDir : public test_util::EventLogDir {
 public:
  explicit RunDir(const std::string& name) : EventLogDir("nanchaos_judge", name) {}

  // A rank's clean start.
  void start(int rank, int world, int64_t t = 10) {
    ev(rank, "start", t, {{"rank", rank}, {"world", world}, {"pid", 100 + rank}, {"host", "h"}});
  }
  // One clean step: consensus + grad all-reduce with enter/leave, step_end with `action`.
  void step(int rank, int64_t step, int64_t t, int64_t* seq, const std::string& action = "update") {
    ev(rank, "step_begin", t, {{"step", step}});
    coll(rank, (*seq)++, "consensus", step, t + 10, true);
    if (action == "update") coll(rank, (*seq)++, "grad_allreduce", step, t + 20, true);
    ev(rank, "step_end", t + 30, {{"step", step}, {"loss", 2.0}, {"lr", 1e-3}, {"action", action}});
  }
  void coll(int rank, int64_t seq, const std::string& name, int64_t step, int64_t t, bool leave) {
    ev(rank, "coll_enter", t,
       {{"seq", seq}, {"name", name}, {"count", 12}, {"dtype", "float32"}, {"step", step}});
    if (leave) ev(rank, "coll_leave", t + 5, {{"seq", seq}, {"name", name}, {"step", step}});
  }
  void final_ok(int rank, int64_t steps, int64_t t, const std::string& params_hash = "abc",
                bool params_finite = true, json eval_loss = 1.0) {
    ev(rank, "final", t,
       {{"steps_completed", steps},
        {"eval_loss", eval_loss},
        {"initial_eval_loss", 2.3},
        {"params_hash", params_hash},
        {"optim_hash", "def"},
        {"params_finite", params_finite}});
    ev(rank, "exit", t + 1, {{"code", 0}});
  }
};

JobResult Job(int exit_code = 0, int64_t t_end = 5'000'000, bool timed_out = false) {
  JobResult j;
  j.exit_code = exit_code;
  j.timed_out = timed_out;
  j.t0_us = kT0;
  j.t_end_us = kT0 + t_end;
  return j;
}

Scenario Load(const std::string& body, int64_t steps = 4, int64_t ranks = 2) {
  const std::string text =
      "[scenario]\nname = \"t\"\n[job]\nworkload = \"mlp\"\nsteps = " + std::to_string(steps) +
      "\nranks = " + std::to_string(ranks) + "\n" + body +
      // The loader refuses a fault with no [expect]; deadlock = false is what the judge checks
      // anyway, so these fixtures keep their meaning.
      (body.find("[expect]") == std::string::npos ? "[expect]\ndeadlock = false\n" : "");
  return load_scenario_string(text, "judge.toml");
}

const results::Check* FindCheck(const results::ScenarioResult& r, const std::string& key) {
  for (const auto& c : r.checks) {
    if (c.key == key) return &c;
  }
  return nullptr;
}

// A clean completed run of `steps` steps on `world` ranks.
void CleanRun(RunDir& d, int world, int64_t steps,
              const std::vector<std::string>& hashes = {"abc", "abc"}) {
  for (int r = 0; r < world; ++r) {
    d.start(r, world);
    int64_t seq = 0;
    for (int64_t s = 0; s < steps; ++s) d.step(r, s, 1000 + s * 1000, &seq);
    d.final_ok(r, steps, 1000 + steps * 1000, hashes[size_t(r)]);
  }
}

// (a)
TEST(JudgeOutcome, CleanCompletedRunPasses) {
  RunDir d("clean");
  CleanRun(d, 2, 4);
  const Scenario s = Load("[expect]\ndetected = false\n");
  const auto r = judge_logs(s, d, Job());
  EXPECT_EQ(r.outcome, results::Outcome::kCompleted);
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
  EXPECT_EQ(r.reason, "");
  EXPECT_EQ(r.steps_completed, 4);
  ASSERT_TRUE(r.final_loss.has_value());
  EXPECT_DOUBLE_EQ(*r.final_loss, 1.0);
  EXPECT_FALSE(r.first_detection.has_value());
  EXPECT_TRUE(r.detections.empty());
  EXPECT_EQ(r.fault_outcome, results::FaultOutcome::kNone);  // no fault
  EXPECT_DOUBLE_EQ(r.wall_ms, 5000.0);
  const auto* det = FindCheck(r, "detected");
  ASSERT_NE(det, nullptr);
  EXPECT_TRUE(det->pass);
  EXPECT_EQ(det->expected, false);
  EXPECT_EQ(det->actual, false);
  const auto* cons = FindCheck(r, "consistent");
  ASSERT_NE(cons, nullptr) << "consistent is checked by default when the job completes";
  EXPECT_TRUE(cons->pass);
  EXPECT_EQ(nanchaos::results::to_json(r)["consistent"], true);
  EXPECT_EQ(nanchaos::results::to_json(r)["deadlock"], false);
  EXPECT_EQ(nanchaos::results::to_json(r)["recovered"], true);
  EXPECT_EQ(nanchaos::results::to_json(r)["false_positives"], 0);
  EXPECT_EQ(nanchaos::results::to_json(r)["absent_ranks"], json::array());
}

TEST(JudgeOutcome, CleanRunExpectingDetectionFails) {
  RunDir d("clean_fail");
  CleanRun(d, 2, 4);
  const Scenario s = Load("[expect]\ndetected = true\n");
  const auto r = judge_logs(s, d, Job());
  EXPECT_EQ(r.outcome, results::Outcome::kCompleted);
  EXPECT_EQ(r.verdict, results::Verdict::kFail);
  EXPECT_NE(r.reason.find("detected"), std::string::npos) << r.reason;
}

TEST(JudgeOutcome, NonZeroLauncherExitIsCrashed) {
  RunDir d("crashed");
  // rank 1 started, did a step, and vanished (no final, no exit, no abort).
  d.start(0, 2);
  d.start(1, 2);
  int64_t s0 = 0, s1 = 0;
  d.step(0, 0, 1000, &s0);
  d.step(1, 0, 1000, &s1);
  d.final_ok(0, 1, 3000);
  const Scenario s = Load("[[fault]]\nkind = \"crash\"\nranks = [1]\nstep = 0\n", 1);
  const auto r = judge_logs(s, d, Job(137));
  EXPECT_EQ(r.outcome, results::Outcome::kCrashed);
  EXPECT_EQ(nanchaos::results::to_json(r)["dead_ranks"], json::array({1}));
}

// A rank killed (crash fault) while the others' watchdog fires before the launcher's teardown:
// the job is `aborted`, and the rank whose process was gone before the first abort record is
// dead. A rank that merely hangs is gone only when the abort takes the job down: not dead.
TEST(JudgeOutcome, AbortedJobNamesTheRankThatDiedBeforeTheAbort) {
  for (const bool died_first : {true, false}) {
    RunDir d(died_first ? "abort_dead" : "abort_hang");
    for (int r = 0; r < 2; ++r) {
      d.start(r, 2);
      int64_t seq = 0;
      d.step(r, 0, 1000, &seq);
      if (r == 1) {
        d.ev(r, "inject", 2050,
             {{"fault", 0},
              {"kind", "crash"},
              {"step", 1},
              {"target", ""},
              {"detail", json::object()},
              {"replay", false}});
        continue;
      }
      d.coll(r, seq, "consensus", 1, 2100, false);
      d.ev(r, "detect", 1'002'100,
           {{"detector", "watchdog"}, {"step", 1}, {"layer", "consensus"}, {"cause", "hang"}});
      d.ev(r, "abort", 1'002'200, {{"step", 1}, {"reason", "watchdog"}, {"cause", "hang"}});
    }
    const Scenario s = Load("[[fault]]\nkind = \"crash\"\nranks = [1]\nstep = 1\n");
    JobResult job = Job(4, 1'500'000);
    job.rank_gone_us[0] = kT0 + 1'002'300;
    job.rank_gone_us[1] = kT0 + (died_first ? 2'100 : 1'002'300);
    const auto r = judge_logs(s, d, job);
    EXPECT_EQ(r.outcome, results::Outcome::kAborted);
    EXPECT_EQ(nanchaos::results::to_json(r)["dead_ranks"],
              died_first ? json::array({1}) : json::array())
        << nanchaos::results::to_json(r).dump();
  }
}

// (b)
std::string DetectScenario(const std::string& expect) {
  return "[[fault]]\nkind = \"tensor\"\ntarget = \"gradient:head.weight\"\nranks = [1]\nstep = 2\n"
         "[expect]\n" +
         expect;
}

void DetectionRun(RunDir& d) {
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    d.step(r, 1, 2000, &seq);
    // step 2: the fault fires on rank 1, rank 1 detects locally, both decide after consensus.
    d.ev(r, "step_begin", 3000, {{"step", 2}});
    if (r == 1) {
      d.ev(r, "inject", 3100,
           {{"fault", 0},
            {"kind", "tensor"},
            {"step", 2},
            {"target", "gradient:head.weight"},
            {"detail", {{"elements", 1}}},
            {"replay", false}});
      d.ev(r, "detect", 3600,
           {{"detector", "grad"}, {"step", 2}, {"layer", "head.weight"}, {"cause", "gradient"}});
    }
    d.coll(r, seq++, "consensus", 2, 3700, true);
    d.ev(r, "decision", r == 0 ? 3900 : 4000,
         {{"step", 2},
          {"detector", "grad"},
          {"ranks", {1}},
          {"layer", "head.weight"},
          {"cause", "gradient"},
          {"action", "skip_step"},
          {"flagged", json::array({{{"rank", 1}, {"detectors", {"grad"}}}})}});
    d.ev(r, "step_end", 4100, {{"step", 2}, {"loss", 2.0}, {"lr", 1e-3}, {"action", "skip"}});
    d.step(r, 3, 5000, &seq);
    d.final_ok(r, 4, 6000);
  }
}

TEST(JudgeDetection, DetectionAtFaultStepHasLatency) {
  RunDir d("detect");
  DetectionRun(d);
  const Scenario s = Load(DetectScenario(
      "detected = true\nfirst_detector = \"grad\"\nwithin_steps = 0\nrank = 1\nlayer = \"head\"\n"
      "cause = \"gradient\"\nwithin_ms = 1.0\nfault_outcome = \"detected_recovered\"\n"));
  const auto r = judge_logs(s, d, Job());
  EXPECT_EQ(r.outcome, results::Outcome::kCompleted);
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
  ASSERT_TRUE(r.first_detection.has_value());
  const auto& fd = *r.first_detection;
  EXPECT_EQ(fd.detector, "grad");
  EXPECT_EQ(fd.step, 2);
  EXPECT_EQ(fd.ranks, std::vector<int64_t>({1}));
  EXPECT_EQ(fd.layer, "head.weight");
  EXPECT_EQ(fd.cause, "gradient");
  EXPECT_EQ(fd.action, "skip_step");
  ASSERT_TRUE(fd.latency_steps.has_value());
  EXPECT_EQ(*fd.latency_steps, 0);
  ASSERT_TRUE(fd.latency_ms.has_value());
  EXPECT_DOUBLE_EQ(*fd.latency_ms, 0.5);  // detect 3600 - inject 3100 us
  ASSERT_TRUE(fd.decision_us.has_value());
  EXPECT_DOUBLE_EQ(*fd.decision_us, 400.0);  // last decision 4000 - first detect 3600 us
  // Consensus decisions are identical on both ranks: one detection, not two.
  EXPECT_EQ(r.detections.size(), 1u);
  ASSERT_EQ(r.injections.size(), 1u);
  EXPECT_EQ(r.injections[0].rank, 1);
  EXPECT_EQ(r.injections[0].step, 2);
  EXPECT_EQ(r.injections[0].target, "gradient:head.weight");
  EXPECT_DOUBLE_EQ(r.injections[0].t_ms, 3.1);
  EXPECT_EQ(r.fault_outcome, results::FaultOutcome::kDetectedRecovered);
  const auto* rank = FindCheck(r, "rank");
  ASSERT_NE(rank, nullptr);
  EXPECT_TRUE(rank->pass);
  EXPECT_EQ(rank->actual, 1);
}

TEST(JudgeDetection, WrongRankFailsTheRankCheck) {
  RunDir d("detect_wrong_rank");
  DetectionRun(d);
  const Scenario s = Load(DetectScenario("detected = true\nrank = 0\n"));
  const auto r = judge_logs(s, d, Job());
  EXPECT_EQ(r.verdict, results::Verdict::kFail);
  const auto* rank = FindCheck(r, "rank");
  ASSERT_NE(rank, nullptr);
  EXPECT_FALSE(rank->pass);
  EXPECT_EQ(rank->expected, 0);
  EXPECT_EQ(rank->actual, 1);
  EXPECT_NE(r.reason.find("rank"), std::string::npos) << r.reason;
  EXPECT_EQ(FindCheck(r, "detected")->pass, true);
}

TEST(JudgeDetection, TooSlowFailsWithinMs) {
  RunDir d("detect_slow");
  DetectionRun(d);
  const Scenario s = Load(DetectScenario("within_ms = 0.25\n"));
  const auto r = judge_logs(s, d, Job());
  EXPECT_EQ(r.verdict, results::Verdict::kFail);
  const auto* c = FindCheck(r, "within_ms");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->pass);
  EXPECT_DOUBLE_EQ(c->actual.get<double>(), 0.5);
}

TEST(JudgeDetection, LocalDecisionsMergeRanks) {
  // The naive stack: each rank decides alone (local = true); one detection per step, ranks merged.
  RunDir d("local");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    d.ev(r, "step_begin", 2000, {{"step", 1}});
    d.ev(r, "inject", 2010,
         {{"fault", 0},
          {"kind", "tensor"},
          {"step", 1},
          {"target", "loss"},
          {"detail", json::object()},
          {"replay", false}});
    d.ev(r, "detect", 2100 + r * 100,
         {{"detector", "loss"}, {"step", 1}, {"layer", "loss"}, {"cause", "loss_math"}});
    d.ev(r, "decision", 2200 + r * 100,
         {{"step", 1},
          {"detector", "loss"},
          {"ranks", {r}},
          {"layer", "loss"},
          {"cause", "loss_math"},
          {"action", "early_return"},
          {"local", true}});
    d.ev(r, "step_end", 2400, {{"step", 1}, {"lr", 1e-3}, {"action", "early_return"}});
    d.final_ok(r, 2, 3000);
  }
  const Scenario s = Load(
      "[[fault]]\nkind = \"tensor\"\ntarget = \"loss\"\nranks = \"all\"\nstep = 1\n"
      "[detectors]\npreset = \"naive\"\n[expect]\nrank = [0, 1]\n",
      2);
  const auto r = judge_logs(s, d, Job());
  ASSERT_EQ(r.detections.size(), 1u);
  ASSERT_TRUE(r.first_detection.has_value());
  EXPECT_EQ(r.first_detection->ranks, std::vector<int64_t>({0, 1}));
  EXPECT_EQ(r.first_detection->action, "early_return");
  EXPECT_DOUBLE_EQ(*r.first_detection->latency_ms, 0.09);    // 2100 - 2010 us
  EXPECT_DOUBLE_EQ(*r.first_detection->decision_us, 200.0);  // 2300 - 2100 us
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
}

// (c)
TEST(JudgeConsistency, DifferentParamsHashIsInconsistent) {
  RunDir d("inconsistent");
  CleanRun(d, 2, 3, {"aaaa", "bbbb"});
  const Scenario s = Load("", 3);
  const auto r = judge_logs(s, d, Job());
  EXPECT_EQ(r.outcome, results::Outcome::kCompleted);
  EXPECT_EQ(nanchaos::results::to_json(r)["consistent"], false);
  EXPECT_EQ(r.verdict, results::Verdict::kFail);
  EXPECT_NE(r.reason.find("consistent"), std::string::npos) << r.reason;
  const auto* c = FindCheck(r, "consistent");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->pass);
  EXPECT_EQ(c->expected, true);
  EXPECT_EQ(c->actual, false);
}

TEST(JudgeConsistency, DifferentStepActionsAreInconsistent) {
  RunDir d("inconsistent_actions");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq, r == 0 ? "update" : "early_return");
    d.final_ok(r, 1, 3000);
  }
  const auto r = judge_logs(Load("", 1), d, Job());
  EXPECT_EQ(nanchaos::results::to_json(r)["consistent"], false);
  EXPECT_EQ(r.verdict, results::Verdict::kFail);
}

TEST(JudgeConsistency, ExpectInconsistentPasses) {
  RunDir d("inconsistent_expected");
  CleanRun(d, 2, 3, {"aaaa", "bbbb"});
  const auto r = judge_logs(Load("[expect]\nconsistent = false\n", 3), d, Job());
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
}

// (d)
TEST(JudgeVerification, FaultThatNeverFiredIsError) {
  RunDir d("unverified");
  CleanRun(d, 2, 4);
  const Scenario s = Load(
      "[[fault]]\nkind = \"tensor\"\ntarget = \"activation:layers.1\"\nranks = [1]\nstep = 2\n"
      "[expect]\ndetected = false\n");
  const auto r = judge_logs(s, d, Job());
  EXPECT_EQ(r.verdict, results::Verdict::kError);
  EXPECT_EQ(r.reason.rfind("injection not verified", 0), 0u) << r.reason;
  EXPECT_NE(r.reason.find("[[fault]] #1"), std::string::npos) << r.reason;
  EXPECT_TRUE(r.injections.empty());
}

TEST(JudgeVerification, ProbabilisticFaultThatNeverFiredIsNotError) {
  RunDir d("unverified_prob");
  CleanRun(d, 2, 4);
  const Scenario s = Load(
      "[[fault]]\nkind = \"tensor\"\ntarget = \"activation:head\"\nstep = 2\nprobability = 0.5\n"
      "[expect]\ndetected = false\n");
  const auto r = judge_logs(s, d, Job());
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
}

// (e)
TEST(JudgeHang, TimedOutRankStuckInCollectiveIsDeadlock) {
  RunDir d("hang");
  // 1 s collective timeout; rank 0 enters collective #5 (step 2's grad all-reduce) at 1.0 s and
  // never leaves; rank 1 never enters it (it hangs at step 2 before its grad all-reduce). The
  // controller kills the job at 5 s: rank 0 waited 4 s > 1 s + 1 s.
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    d.step(r, 1, 2000, &seq);
    d.ev(r, "step_begin", 3000, {{"step", 2}});
    d.coll(r, seq++, "consensus", 2, 3010, true);
    if (r == 1) {
      d.ev(r, "inject", 3050,
           {{"fault", 0},
            {"kind", "hang"},
            {"step", 2},
            {"target", ""},
            {"detail", json::object()},
            {"replay", false}});
    } else {
      d.coll(r, seq++, "grad_allreduce", 2, 1'000'000, false);
    }
  }
  const Scenario s = Load(
      "[[fault]]\nkind = \"hang\"\nranks = [1]\nstep = 2\nduration_ms = \"forever\"\n"
      "[detectors]\ncollective_timeout_ms = 1000\n"
      "[expect]\noutcome = \"hung\"\ndeadlock = true\nrank = 1\ncause = \"hang\"\n"
      "fault_outcome = \"hang\"\n");
  const auto r = judge_logs(s, d, Job(137, 5'000'000, /*timed_out=*/true));
  EXPECT_EQ(r.outcome, results::Outcome::kHung);
  EXPECT_EQ(nanchaos::results::to_json(r)["deadlock"], true);
  EXPECT_EQ(nanchaos::results::to_json(r)["absent_ranks"], json::array({1}));
  EXPECT_EQ(nanchaos::results::to_json(r)["first_gap_collective"], 5);
  EXPECT_DOUBLE_EQ(nanchaos::results::to_json(r)["longest_collective_wait_ms"].get<double>(),
                   4000.0);
  EXPECT_EQ(nanchaos::results::to_json(r)["last_collective"]["0"]["seq"], 5);
  EXPECT_EQ(nanchaos::results::to_json(r)["last_collective"]["0"]["name"], "grad_allreduce");
  EXPECT_EQ(nanchaos::results::to_json(r)["last_collective"]["0"]["left"], false);
  EXPECT_EQ(nanchaos::results::to_json(r)["last_collective"]["1"]["seq"], 4);
  EXPECT_EQ(nanchaos::results::to_json(r)["last_collective"]["1"]["left"], true);
  EXPECT_TRUE(nanchaos::results::to_json(r)["dead_ranks"].empty());
  EXPECT_EQ(r.fault_outcome, results::FaultOutcome::kHang);
  EXPECT_FALSE(r.first_detection.has_value());
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
  EXPECT_EQ(FindCheck(r, "consistent"), nullptr) << "not checked unless the job completes";
}

// A job killed at timeout_ms before the fault's step: the reason says so, not "check the
// target's name" (a 4-rank campaign on a loaded host: 6 s a step, killed at step 7 of 12).
TEST(JudgeVerdict, FaultNotReachedBeforeTheTimeoutSaysSo) {
  RunDir d("timeout_before_fault");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    d.step(r, 1, 2000, &seq);
  }
  const Scenario s = Load(
      "timeout_ms = 20000\n[[fault]]\nkind = \"tensor\"\ntarget = \"activation:layers.1\"\n"
      "ranks = [1]\nstep = 3\n",
      6);
  const auto r = judge_logs(s, d, Job(137, 20'000'000, /*timed_out=*/true));
  EXPECT_EQ(r.verdict, results::Verdict::kError);
  EXPECT_EQ(r.reason,
            "injection not verified: [[fault]] #1 (tensor, step 3: [job].timeout_ms (20000 ms) "
            "expired after 2 iteration(s), before step 3 came) never fired");
}

TEST(JudgeHang, ShortWaitIsNoDeadlock) {
  RunDir d("hang_short");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    if (r == 0) d.coll(r, seq++, "consensus", 1, 3'500'000, false);
  }
  // An unexplained hang fails `outcome` unless asked for (AnUnexplainedCrashFailsOutcome...).
  const Scenario s =
      Load("[detectors]\ncollective_timeout_ms = 1000\n[expect]\noutcome = \"hung\"\n");
  // killed at 5 s; rank 0 waited 1.5 s < 2 s.
  const auto r = judge_logs(s, d, Job(137, 5'000'000, true));
  EXPECT_EQ(r.outcome, results::Outcome::kHung);
  EXPECT_EQ(nanchaos::results::to_json(r)["deadlock"], false);
  EXPECT_EQ(nanchaos::results::to_json(r)["absent_ranks"], json::array({1}));
  EXPECT_EQ(r.verdict, results::Verdict::kPass)
      << r.reason;  // deadlock = false is checked by default
}

TEST(JudgeHang, WatchdogAbortBlamesAbsentRank) {
  RunDir d("watchdog");
  // Rank 1 hangs at step 1 before its grad all-reduce; rank 0's watchdog fires after 1 s, logs the
  // detection, aborts and exits; the launcher then ends rank 1.
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    d.ev(r, "step_begin", 2000, {{"step", 1}});
    d.coll(r, seq++, "consensus", 1, 2010, true);
    if (r == 1) {
      d.ev(r, "inject", 2050,
           {{"fault", 0},
            {"kind", "hang"},
            {"step", 1},
            {"target", ""},
            {"detail", json::object()},
            {"replay", false}});
      continue;
    }
    d.coll(r, seq, "grad_allreduce", 1, 2100, false);
    d.ev(r, "detect", 1'002'100,
         {{"detector", "watchdog"},
          {"step", 1},
          {"layer", "grad_allreduce"},
          {"cause", "hang"},
          {"seq", seq},
          {"status", "timeout"}});
    d.ev(r, "abort", 1'002'200,
         {{"step", 1},
          {"reason", "watchdog: collective #3 grad_allreduce timeout"},
          {"cause", "hang"}});
    d.ev(r, "exit", 1'002'300, {{"code", 3}});
  }
  const Scenario s = Load(
      "[[fault]]\nkind = \"hang\"\nranks = [1]\nstep = 1\nduration_ms = \"forever\"\n"
      "[detectors]\ncollective_timeout_ms = 1000\n"
      "[expect]\noutcome = \"aborted\"\ndetected = true\nfirst_detector = \"watchdog\"\nrank = 1\n"
      "cause = \"hang\"\nwithin_steps = 0\nabort_within_ms = 2000\n");
  const auto r = judge_logs(s, d, Job(3, 1'500'000));
  EXPECT_EQ(r.outcome, results::Outcome::kAborted);
  ASSERT_TRUE(r.first_detection.has_value());
  EXPECT_EQ(r.first_detection->detector, "watchdog");
  EXPECT_EQ(r.first_detection->ranks, std::vector<int64_t>({1}));
  EXPECT_EQ(r.first_detection->action, "abort");
  EXPECT_EQ(r.first_detection->layer, "grad_allreduce");
  EXPECT_DOUBLE_EQ(*r.first_detection->latency_ms, 1000.05);  // 1'002'100 - 2050 us
  // rank 0 exited after its last event: it waited 1'002'300 - 2100 us, not until t_end.
  EXPECT_DOUBLE_EQ(nanchaos::results::to_json(r)["longest_collective_wait_ms"].get<double>(),
                   1000.2);
  EXPECT_EQ(nanchaos::results::to_json(r)["deadlock"], false);
  EXPECT_DOUBLE_EQ(nanchaos::results::to_json(r)["abort_latency_ms"].get<double>(),
                   (1'500'000 - 2050) / 1000.0);
  EXPECT_EQ(r.fault_outcome, results::FaultOutcome::kDetectedUnrecovered);
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
}

// (f)
TEST(JudgeLogs, TruncatedLastLineIsIgnored) {
  RunDir d("truncated");
  CleanRun(d, 2, 4);
  d.raw(1, R"({"ev":"step_end","t_us":12345,"st)");
  const Scenario s = Load("[expect]\ndetected = false\n");
  results::ScenarioResult r;
  ASSERT_NO_THROW(r = judge_logs(s, d, Job()));
  EXPECT_EQ(r.outcome, results::Outcome::kCompleted);
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
  EXPECT_EQ(r.steps_completed, 4);
}

// No unexplained crash passes: rank 1 was killed from outside (no fault, no exit
// record) and [expect] asks nothing about the outcome; the scenario still fails `outcome`, and
// the check says what the ranks said. The same log with a crash fault that fired passes.
TEST(JudgeOutcome, AnUnexplainedCrashFailsOutcomeEvenWhenNotAsked) {
  RunDir d("unexplained");
  d.start(0, 2);
  d.start(1, 2);
  int64_t s0 = 0, s1 = 0;
  d.step(0, 0, 1000, &s0);
  d.step(1, 0, 1000, &s1);
  d.final_ok(0, 1, 3000);
  const auto r = judge_logs(Load("", 1), d, Job(137));
  EXPECT_EQ(r.outcome, results::Outcome::kCrashed);
  EXPECT_EQ(r.verdict, results::Verdict::kFail);
  EXPECT_EQ(
      r.reason,
      "outcome: expected \"completed (no crash or hang fault explains another outcome)\", got "
      "\"crashed: rank(s) 1 ended with no exit record; launcher exit status 137 (signal 9: "
      "Killed)\"");

  RunDir e("explained");
  e.start(0, 2);
  e.start(1, 2);
  int64_t t0 = 0, t1 = 0;
  e.step(0, 0, 1000, &t0);
  e.step(1, 0, 1000, &t1);
  e.ev(1, "inject", 1900,
       {{"fault", 0},
        {"kind", "crash"},
        {"step", 1},
        {"target", "process"},
        {"detail", json::object()},
        {"replay", false}});
  e.final_ok(0, 1, 3000);
  const auto ok =
      judge_logs(Load("[[fault]]\nkind = \"crash\"\nranks = [1]\nstep = 1\n", 2), e, Job(137));
  for (const auto& c : ok.checks) EXPECT_NE(c.key, "outcome");
  EXPECT_EQ(ok.outcome, results::Outcome::kCrashed);
}

TEST(JudgeLogs, MissingRankFileIsNeverStartedError) {
  RunDir d("missing");
  d.start(0, 2);
  const auto r = judge_logs(Load(""), d, Job(1));
  EXPECT_EQ(r.outcome, results::Outcome::kCrashed);
  EXPECT_EQ(r.verdict, results::Verdict::kError);
  EXPECT_NE(r.reason.find("never started"), std::string::npos) << r.reason;
}

// (g)
void EarlyDecisionRun(RunDir& d) {
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    // step 1: a spurious detection (before the fault at step 3)
    d.ev(r, "step_begin", 2000, {{"step", 1}});
    if (r == 0) {
      d.ev(r, "detect", 2100,
           {{"detector", "loss"}, {"step", 1}, {"layer", "loss"}, {"cause", "loss_math"}});
    }
    d.coll(r, seq++, "consensus", 1, 2200, true);
    d.ev(r, "decision", 2300,
         {{"step", 1},
          {"detector", "loss"},
          {"ranks", {0}},
          {"layer", "loss"},
          {"cause", "loss_math"},
          {"action", "skip_step"}});
    d.ev(r, "step_end", 2400, {{"step", 1}, {"loss", 2.0}, {"lr", 1e-3}, {"action", "skip"}});
    d.step(r, 2, 3000, &seq);
    d.ev(r, "step_begin", 4000, {{"step", 3}});
    if (r == 0) {
      d.ev(r, "inject", 4050,
           {{"fault", 0},
            {"kind", "tensor"},
            {"step", 3},
            {"target", "activation:head"},
            {"detail", json::object()},
            {"replay", false}});
    }
    d.coll(r, seq++, "consensus", 3, 4100, true);
    d.coll(r, seq++, "grad_allreduce", 3, 4200, true);
    d.ev(r, "step_end", 4300, {{"step", 3}, {"loss", 2.0}, {"lr", 1e-3}, {"action", "update"}});
    d.final_ok(r, 4, 5000);
  }
}

TEST(JudgeFalsePositives, DecisionBeforeFirstFaultIsFalsePositive) {
  RunDir d("false_positive");
  EarlyDecisionRun(d);
  const Scenario s = Load("[[fault]]\nkind = \"tensor\"\ntarget = \"activation:head\"\nstep = 3\n");
  const auto r = judge_logs(s, d, Job());
  EXPECT_EQ(nanchaos::results::to_json(r)["false_positives"], 1);
  EXPECT_FALSE(r.first_detection.has_value()) << "a false positive is not the first detection";
  EXPECT_EQ(r.detections.size(), 1u);
  EXPECT_EQ(r.verdict, results::Verdict::kFail);
  const auto* c = FindCheck(r, "max_false_positives");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->pass);
  EXPECT_EQ(c->expected, 0);
  EXPECT_EQ(c->actual, 1);
  EXPECT_NE(r.reason.find("max_false_positives"), std::string::npos) << r.reason;
}

TEST(JudgeFalsePositives, AllowedFalsePositivePasses) {
  RunDir d("false_positive_allowed");
  EarlyDecisionRun(d);
  const Scenario s = Load(
      "[[fault]]\nkind = \"tensor\"\ntarget = \"activation:head\"\nstep = 3\n"
      "[expect]\nmax_false_positives = 1\n");
  const auto r = judge_logs(s, d, Job());
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
  EXPECT_EQ(FindCheck(r, "max_false_positives")->pass, true);
}

TEST(JudgeFalsePositives, AnyDetectionWithoutFaultIsFalsePositive) {
  RunDir d("false_positive_nofault");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    d.ev(r, "decision", 1900,
         {{"step", 0},
          {"detector", "grad"},
          {"ranks", {1}},
          {"layer", "x"},
          {"cause", "gradient"},
          {"action", "none"}});
    d.final_ok(r, 1, 3000);
  }
  const auto r = judge_logs(Load("", 1), d, Job());
  EXPECT_EQ(nanchaos::results::to_json(r)["false_positives"], 1);
  EXPECT_EQ(r.verdict, results::Verdict::kFail);
}

// (h)
TEST(JudgeFaultOutcome, UndetectedNonFiniteParamsIsSilentCorruption) {
  RunDir d("silent");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    d.ev(r, "step_begin", 2000, {{"step", 1}});
    d.ev(r, "inject", 2050,
         {{"fault", 0},
          {"kind", "comm"},
          {"step", 1},
          {"target", "grad_allreduce"},
          {"detail", json::object()},
          {"replay", false}});
    d.coll(r, seq++, "consensus", 1, 2100, true);
    d.coll(r, seq++, "grad_allreduce", 1, 2200, true);
    d.ev(r, "step_end", 2300, {{"step", 1}, {"loss", 2.0}, {"lr", 1e-3}, {"action", "update"}});
    d.final_ok(r, 2, 3000, "abc", /*params_finite=*/false, json());
  }
  const Scenario s = Load(
      "[[fault]]\nkind = \"comm\"\nranks = \"all\"\nstep = 1\n"
      "[expect]\nfault_outcome = \"silent_corruption\"\nrecovered = false\ndetected = false\n",
      2);
  const auto r = judge_logs(s, d, Job());
  EXPECT_EQ(r.outcome, results::Outcome::kCompleted);
  EXPECT_FALSE(r.first_detection.has_value());
  EXPECT_EQ(r.fault_outcome, results::FaultOutcome::kSilentCorruption);
  EXPECT_EQ(nanchaos::results::to_json(r)["recovered"], false);
  ASSERT_TRUE(r.final_loss.has_value());
  EXPECT_TRUE(std::isnan(*r.final_loss));
  EXPECT_EQ(r.injections.size(), 2u);
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
}

TEST(JudgeFaultOutcome, UndetectedHarmlessFaultIsMasked) {
  RunDir d("masked");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    if (r == 0) {
      d.ev(r, "inject", 1500,
           {{"fault", 0},
            {"kind", "tensor"},
            {"step", 0},
            {"target", "activation:head"},
            {"detail", json::object()},
            {"replay", false}});
    }
    d.final_ok(r, 1, 3000);
  }
  const Scenario s = Load(
      "[[fault]]\nkind = \"tensor\"\ntarget = \"activation:head\"\nvalue = 0.5\nstep = 0\n", 1);
  const auto r = judge_logs(s, d, Job());
  EXPECT_EQ(r.fault_outcome, results::FaultOutcome::kMasked);
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
}

// Memory: a rank's own exit-event VmHWM, else the controller's /proc sample (a hung rank killed
// before it could write one); the larger of the two when both exist; sum, mean and max in MiB.
TEST(JudgeMemory, PerRankPeakFromExitEventsAndControllerSamples) {
  RunDir d("memory");
  for (int r = 0; r < 3; ++r) {
    d.start(r, 3);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    if (r == 2) continue;  // never writes final/exit
    d.ev(r, "final", 3000, {{"steps_completed", 1}, {"params_hash", "a"}, {"optim_hash", "b"}});
    d.ev(r, "exit", 3001, {{"code", 0}, {"vm_hwm_kib", (r + 1) * 102400}});  // 100, 200 MiB
  }
  JobResult job = Job(137);
  job.rank_vm_hwm_kib = {{1, 1024}, {2, 307200}};  // rank 1's sample is older (lower)
  const auto r = judge_logs(Load("", 1, 3), d, job);
  const json m = nanchaos::results::to_json(r)["memory"];
  ASSERT_TRUE(m.is_object()) << nanchaos::results::to_json(r).dump();
  EXPECT_EQ(m["source"], "VmHWM");
  EXPECT_EQ(m["ranks_measured"], 3);
  EXPECT_DOUBLE_EQ(m["per_rank_mib"]["0"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(m["per_rank_mib"]["1"].get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(m["per_rank_mib"]["2"].get<double>(), 300.0);
  EXPECT_DOUBLE_EQ(m["per_rank_max_mib"].get<double>(), 300.0);
  EXPECT_DOUBLE_EQ(m["per_rank_mean_mib"].get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(m["total_mib"].get<double>(), 600.0);
}

TEST(JudgeMemory, NullWhenNoRankWasMeasured) {
  RunDir d("memory_none");
  CleanRun(d, 2, 2);
  const auto r = judge_logs(Load("", 2), d, Job());
  EXPECT_TRUE(nanchaos::results::to_json(r)["memory"].is_null())
      << nanchaos::results::to_json(r)["memory"].dump();
}

// Phase times in step_end (the agent's and the runner's `own_us`): the judge hands the table and
// the per-step score series to the writers (report.html's charts read only these); rank 1's
// compute triples from step 2, so its score crosses 1.5 there. No phase times: neither key.
TEST(JudgeStepTimes, PhaseTimesGiveTheTableAndTheScoreSeries) {
  RunDir d("step_times");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    for (int64_t s = 0; s < 4; ++s) {
      const int64_t t = 1000 + s * 1000;
      const int64_t compute = r == 1 && s >= 2 ? 600 : 200;
      d.ev(r, "step_begin", t, {{"step", s}});
      d.coll(r, seq++, "consensus", s, t + 10, true);
      d.coll(r, seq++, "grad_allreduce", s, t + 20, true);
      d.ev(r, "step_end", t + 30,
           {{"step", s},
            {"loss", 2.0},
            {"lr", 1e-3},
            {"action", "update"},
            {"own_us", {{"data", 10}, {"compute", compute}, {"backward", 300}, {"comm", 40}}},
            {"wait_us", 5}});
    }
    d.final_ok(r, 4, 5000);
  }
  const auto r = judge_logs(Load("[expect]\ndetected = false\n"), d, Job());
  ASSERT_TRUE(r.judged);
  ASSERT_EQ(r.judged->step_times.size(), 2u);
  EXPECT_EQ(r.judged->step_times[1].slow_steps, 2);
  ASSERT_TRUE(r.judged->step_scores);
  const results::StepScores& sc = *r.judged->step_scores;
  EXPECT_EQ(sc.stride, 1);
  EXPECT_EQ(sc.steps, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(sc.ranks, (std::vector<int64_t>{0, 1}));
  // Own totals 550 us, then 950 us on rank 1; the median of two is the lower (nearest rank).
  EXPECT_EQ(sc.score[1], (std::vector<double>{1, 1, 1.727, 1.727}));
  EXPECT_EQ(sc.score[0], (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(nanchaos::results::to_json(r)["step_scores"]["score"][1][2], 1.727);

  RunDir clean("step_times_none");
  CleanRun(clean, 2, 2);
  const auto c = judge_logs(Load("", 2), clean, Job());
  ASSERT_TRUE(c.judged);
  EXPECT_FALSE(c.judged->step_scores);
  EXPECT_FALSE(nanchaos::results::to_json(c).contains("step_scores"));
}

// A rank whose log could not grow (events.h log_error / log_dropped).
TEST(JudgeEvidence, ALogThatCouldNotGrowIsAnErrorNamingPathAndErrno) {
  RunDir d("evidence_lost");
  d.start(0, 2);
  d.start(1, 2);
  int64_t seq0 = 0, seq1 = 0;
  d.step(0, 0, 1000, &seq0);
  d.step(1, 0, 1000, &seq1);
  d.ev(1, "log_error", 1500,
       {{"path", "/run/events/rank-1.jsonl"},
        {"errno", 28},
        {"error", "No space left on device"},
        {"op", "posix_fallocate"}});
  d.ev(1, "log_dropped", 9000, {{"count", 41}});
  d.step(0, 1, 2000, &seq0);
  d.final_ok(0, 2, 3000);
  const Scenario s = Load("[expect]\ndetected = false\n", 2);
  const auto r = judge_logs(s, d, Job());
  EXPECT_EQ(r.verdict, results::Verdict::kError);
  EXPECT_EQ(r.reason,
            "evidence lost: rank 1: cannot grow its event log /run/events/rank-1.jsonl: No space "
            "left on device (errno 28, posix_fallocate); 41 later event(s) dropped");
  EXPECT_EQ(r.dropped_events, 41);
  EXPECT_EQ(results::to_json(r)["dropped_events"], 41);
}

TEST(JudgeEvidence, ALossWithoutACountSaysTheCountIsUnknown) {
  RunDir d("evidence_lost_nocount");
  CleanRun(d, 2, 2);
  d.ev(0, "log_error", 9000,
       {{"path", "p"}, {"errno", 27}, {"error", "File too large"}, {"op", "write"}});
  const auto r = judge_logs(Load("[expect]\ndetected = false\n", 2), d, Job());
  EXPECT_EQ(r.verdict, results::Verdict::kError);
  EXPECT_EQ(r.reason,
            "evidence lost: rank 0: cannot grow its event log p: File too large (errno 27, "
            "write); later events dropped (count unknown: the rank did not close its log)");
  EXPECT_EQ(r.dropped_events, 0);
}

// judge() is a function of the evidence alone: what the run folder holds on
// disk does not enter the verdict, only what read_job_evidence (or a test) put in JobEvidence.
TEST(JudgePure, TheRunFolderIsNamedButNeverRead) {
  RunDir d("pure");
  d.start(0, 2);  // rank 1 never started
  d.ranks_log("[rank 1 err] fatal error: from the evidence\n");
  const Scenario s = Load("[expect]\ndetected = false\n", 2);
  // What lies in the folder now differs from the evidence in every file the judge once read.
  d.flush();
  std::ofstream(fs::path(d.path()) / "ranks.log") << "error: from the disk\n";
  std::ofstream(fs::path(d.path()) / "events" / "rank-1.jsonl")
      << R"({"ev":"start","t_us":1000000010,"rank":1,"world":2,"pid":101,"host":"h"})"
      << "\n";
  const auto r = judge_logs(s, d, Job(1));
  EXPECT_EQ(r.verdict, results::Verdict::kError);
  EXPECT_EQ(r.reason, "[rank 1 err] fatal error: from the evidence");
  EXPECT_EQ(r.run_dir, d.path());
  // Evidence of a folder that does not exist judges the same.
  JobEvidence ev = d.evidence(2, Job(1));
  ev.run_dir = "/nonexistent/nanchaos-run";
  const auto elsewhere = judge(s, ev, Job(1));
  EXPECT_EQ(elsewhere.reason, r.reason);
  EXPECT_EQ(elsewhere.run_dir, "/nonexistent/nanchaos-run");
}

// A full disk is read off the free-space sample taken when the job ended, not off the disk at
// judging time: the same logs judge differently by the sample alone.
TEST(JudgePure, AFullDiskComesFromTheEvidencesFreeSpaceSample) {
  RunDir d("full_disk");
  d.start(0, 2);
  d.start(1, 2);
  int64_t s0 = 0, s1 = 0;
  d.step(0, 0, 1000, &s0);
  d.step(1, 0, 1000, &s1);
  d.final_ok(0, 1, 3000);  // rank 1 has no exit record
  const Scenario s = Load("[expect]\ndetected = false\n", 1);
  d.free_bytes(4096);
  const auto full = judge_logs(s, d, Job(137));
  EXPECT_EQ(full.verdict, results::Verdict::kError);
  EXPECT_EQ(full.reason,
            "evidence lost: the filesystem of " + d.path() +
                " is full (4096 bytes free) and a rank's event log has no exit record");
  for (const std::optional<uint64_t> room :
       {std::optional<uint64_t>(uint64_t(1) << 30), std::optional<uint64_t>()}) {
    d.free_bytes(room);
    const auto r = judge_logs(s, d, Job(137));
    EXPECT_EQ(r.reason.rfind("evidence lost", 0), std::string::npos) << r.reason;
    EXPECT_EQ(r.outcome, results::Outcome::kCrashed);
  }
}

// The reader and the in-memory evidence agree: read_job_evidence on the flushed folder (events,
// a gone record, ranks.log) judges exactly as the evidence built in memory.
TEST(JudgePure, ReadJobEvidenceReadsWhatTheInMemoryEvidenceHolds) {
  RunDir d("reader");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    if (r == 0) d.final_ok(0, 1, 3000);
  }
  d.gone(1, 2500);
  d.ranks_log("line one\nerror: rank 1 lost\n\n");
  d.raw(1, R"({"ev":"step_end","t_us":12345,"st)");  // a torn last line, skipped by both
  d.flush();
  const Scenario s = Load("[[fault]]\nkind = \"crash\"\nranks = [1]\nstep = 0\n", 1);
  JobResult job = Job(137);
  const JobEvidence from_disk = read_job_evidence(2, d.path(), job);
  ASSERT_FALSE(from_disk.unreadable);
  EXPECT_EQ(from_disk.ranks_log_first_error, "error: rank 1 lost");
  EXPECT_EQ(from_disk.ranks_log_last_line, "error: rank 1 lost");
  ASSERT_TRUE(from_disk.ranks[1].gone_us);
  EXPECT_EQ(*from_disk.ranks[1].gone_us, kT0 + 2500);
  EXPECT_TRUE(from_disk.free_bytes);
  const auto a = judge(s, from_disk, job);
  const auto b = judge_logs(s, d, job);
  EXPECT_EQ(results::to_json(a).dump(), results::to_json(b).dump());
  EXPECT_EQ(nanchaos::results::to_json(a)["dead_ranks"], json::array({1}));
}

}  // namespace
}  // namespace nanchaos::harness
