// Recovery by restart ([job] restarts): the loader's keys and its "not implemented" refusals,
// drop_fired_faults, and the judge on hand-written evidence of several launches (built in
// memory, and read back from RUN/launches/K by read_job_evidence).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/controller/clean_run.h"
#include "harness/controller/exec_rank.h"
#include "harness/controller/judge.h"
#include "harness/controller/judge_internal.h"
#include "harness/controller/rank_evidence.h"
#include "harness/scenario/plan.h"
#include "harness/scenario/scenario.h"
#include "results/report.h"
#include "tests/harness/event_logs.h"
#include "tests/harness/loader_text.h"

namespace nanchaos::harness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test_util::kT0;

constexpr auto* ErrorOf = &test_util::loader_error;
std::string WithHead(const std::string& rest) { return test_util::with_head(rest, 8); }

// --- loader --------------------------------------------------------------------------------

TEST(RestartLoader, KeysAndDefaults) {
  const Scenario none = load_scenario_string(WithHead(""), "x.toml");
  EXPECT_EQ(none.job.restarts, 0);
  EXPECT_EQ(none.job.restart_delay_ms, 0);
  EXPECT_FALSE(none.expect.restarts);
  const Scenario s =
      load_scenario_string(WithHead("restarts = 2\nrestart_delay_ms = 250\n[expect]\nrestarts = 1\n"
                                    "resumed_from_step = 4\n"),
                           "x.toml");
  EXPECT_EQ(s.job.restarts, 2);
  EXPECT_EQ(s.job.restart_delay_ms, 250);
  EXPECT_EQ(s.expect.restarts, 1);
  EXPECT_EQ(s.expect.resumed_from_step, 4);
}

TEST(RestartLoader, ExternalJobsTakeThem) {
  const Scenario s = load_scenario_string(
      "[scenario]\nname = \"t\"\n[job]\nworkload = \"external\"\nsteps = 4\n"
      "command = [\"python3\", \"train.py\", \"--ckpt-dir\", \"{run_dir}/ckpt\"]\n"
      "restarts = 1\n",
      "x.toml");
  EXPECT_EQ(s.job.restarts, 1);
}

TEST(RestartLoader, NegativeAndAbsurdValuesAreRefused) {
  EXPECT_EQ(ErrorOf(WithHead("restarts = -1\n")),
            "x.toml:6:12: error: [job].restarts: expected integer in [0, 100], got -1");
  EXPECT_EQ(ErrorOf(WithHead("restart_delay_ms = -5\n")),
            "x.toml:6:20: error: [job].restart_delay_ms: expected integer in [0, 3600000], got -5");
  // No unbounded relaunch loop, no overflow of the delay's deadline (now_us() + ms * 1000).
  EXPECT_EQ(ErrorOf(WithHead("restarts = 1000000\n")),
            "x.toml:6:12: error: [job].restarts: expected integer in [0, 100], got 1000000");
  EXPECT_EQ(ErrorOf(WithHead("restart_delay_ms = 9223372036854775807\n")),
            "x.toml:6:20: error: [job].restart_delay_ms: expected integer in [0, 3600000], got "
            "9223372036854775807");
  // A delay with nothing to delay is a mistake, not a default: refused where it is written.
  EXPECT_EQ(ErrorOf(WithHead("restart_delay_ms = 500\n")),
            "x.toml:6:20: error: [job].restart_delay_ms: the wait between launches, and "
            "[job].restarts = 0 relaunches nothing (set restarts, or drop the key)");
  EXPECT_EQ(ErrorOf(WithHead("restarts = 1\nrestart_delay_ms = 500\n")), "no error");
}

TEST(RestartLoader, CheckpointTableIsCheckedKeyByKey) {
  EXPECT_EQ(ErrorOf(WithHead("[checkpoint]\nevery = 10\n")),
            "x.toml:7:9: error: [checkpoint].every: 10 is not below [job].steps = 8: no "
            "checkpoint would be written");
  EXPECT_NE(
      ErrorOf(WithHead("[checkpoint]\nevery = 0\n")).find("x.toml:7:9: error: [checkpoint].every"),
      std::string::npos);
  EXPECT_EQ(ErrorOf(WithHead("[checkpoint]\nevery = 2\nformat = \"zip\"\n")),
            "x.toml:8:10: error: [checkpoint].format: \"zip\" is not valid; did you mean \"dcp\"? "
            "choices: torch, dcp");
  // Format "dcp" (a shard per rank) is built (tests/job/checkpoint_dcp_test.cpp runs it).
  const Scenario dcp =
      load_scenario_string(WithHead("[checkpoint]\nevery = 2\nformat = \"dcp\"\n"), "x.toml");
  EXPECT_EQ(dcp.checkpoint.format, "dcp");
  EXPECT_EQ(dcp.checkpoint.every, 2);
  const Scenario s =
      load_scenario_string(WithHead("[checkpoint]\nevery = 2\nkeep = 3\n"), "x.toml");
  EXPECT_EQ(s.checkpoint.every, 2);
  EXPECT_EQ(s.checkpoint.keep, 3);
  EXPECT_TRUE(s.checkpoint.validate);
  EXPECT_EQ(s.checkpoint.format, "torch");
}

TEST(RestartLoader, StepsLostAndResumeBoundsAreCheckedWhereWritten) {
  const Scenario s = load_scenario_string(
      WithHead("restarts = 1\n[expect]\nsteps_lost_max = 5\nresume_ms_max = 2000.5\n"), "x.toml");
  EXPECT_EQ(s.expect.steps_lost_max, 5);
  EXPECT_EQ(s.expect.resume_ms_max, 2000.5);
  EXPECT_EQ(ErrorOf(WithHead("[expect]\nrestarts = 1\nsteps_lost_max = -1\n")),
            "x.toml:8:18: error: [expect].steps_lost_max: expected integer >= 0, got -1");
  EXPECT_EQ(ErrorOf(WithHead("[expect]\nresume_ms_max = \"fast\"\n")),
            "x.toml:7:17: error: [expect].resume_ms_max: expected float >= 0, got string");
  // Expectations the job can never meet: more relaunches than [job] restarts allows, a resumed
  // step past the last step.
  EXPECT_EQ(ErrorOf(WithHead("[expect]\nrestarts = 1\n")),
            "x.toml:7:12: error: [expect].restarts = 1 can never hold: [job] restarts = 0 allows "
            "at most 0 relaunch(es)");
  EXPECT_EQ(ErrorOf(WithHead("restarts = 1\n[expect]\nresumed_from_step = 8\n")),
            "x.toml:8:21: error: [expect].resumed_from_step = 8 is not a step of the job "
            "([job].steps = 8: steps 0 to 7)");
}

TEST(RestartLoader, CheckpointFaultNeedsCheckpointsAndOneSave) {
  const std::string fault = "[[fault]]\nkind = \"checkpoint\"\nmode = \"nan\"\n";
  EXPECT_EQ(ErrorOf(WithHead(fault + "step = 2\n[expect]\ndeadlock = false\n")),
            "x.toml:6:1: error: [[fault]] #1: kind \"checkpoint\" needs a [checkpoint] table (the "
            "built-in job writes no checkpoint without one)");
  // Without a relaunch nothing loads the corrupted checkpoint.
  EXPECT_EQ(ErrorOf(WithHead("[checkpoint]\nevery = 2\n" + fault +
                             "save = 1\n[expect]\ndeadlock = false\n")),
            "x.toml:8:1: error: [[fault]] #1: kind \"checkpoint\" needs [job] restarts >= 1 (the "
            "built-in job reads a checkpoint only when it is relaunched: without a relaunch the "
            "corrupted file is never loaded and the fault tests nothing)");
  const std::string ckpt = "restarts = 1\n[checkpoint]\nevery = 2\n";
  EXPECT_NE(ErrorOf(WithHead(ckpt + fault + "[expect]\ndeadlock = false\n"))
                .find("give exactly one of `save` (1-based) and `step`"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithHead(ckpt + fault + "step = 3\n[expect]\ndeadlock = false\n"))
                .find("#1.step: no save is made before step 3"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithHead(ckpt + fault + "save = 4\n[expect]\ndeadlock = false\n"))
                .find("#1.save: no save is made at step 8"),
            std::string::npos);
  EXPECT_EQ(ErrorOf(WithHead(ckpt + fault + "save = 1\n[expect]\ndeadlock = false\n")), "no error");
  // Faults that could never fire: stale on the first save (no earlier one to put in its
  // place), `ranks` without rank 0 on the torch format (one file, rank 0's).
  const std::string stale = "[[fault]]\nkind = \"checkpoint\"\nmode = \"stale\"\n";
  EXPECT_NE(ErrorOf(WithHead(ckpt + stale + "save = 1\n[expect]\ndeadlock = false\n"))
                .find("mode \"stale\" replaces a save by the one before it, and the first save "
                      "(before step 2) has none"),
            std::string::npos);
  EXPECT_EQ(ErrorOf(WithHead(ckpt + stale + "save = 2\n[expect]\ndeadlock = false\n")), "no error");
  EXPECT_NE(ErrorOf(WithHead(ckpt + fault + "save = 1\nranks = [1]\n[expect]\ndeadlock = false\n"))
                .find("#1.ranks: the torch format's checkpoint is one file that rank 0 writes"),
            std::string::npos);
}

TEST(RestartLoader, CheckpointFaultOnExternalJobsNeedsNoTableButOneSave) {
  // External jobs checkpoint themselves: the agent corrupts the save it observed, so no
  // [checkpoint] table; `step` is the step the job's save records.
  const std::string head =
      "[scenario]\nname = \"t\"\n[job]\nworkload = \"external\"\nsteps = 12\n"
      "command = [\"python3\", \"train.py\"]\nrestarts = 1\n"
      "[[fault]]\nkind = \"checkpoint\"\n";
  const std::string tail = "[expect]\ndeadlock = false\n";
  const Scenario s = load_scenario_string(
      head + "mode = \"nan\"\nstep = 6\ntarget = \"parameter:head.weight\"\n" + tail, "x.toml");
  ASSERT_EQ(s.faults.size(), 1u);
  EXPECT_EQ(s.faults[0].kind, "checkpoint");
  EXPECT_EQ(s.faults[0].step, 6);
  EXPECT_EQ(ErrorOf(head + "mode = \"delete\"\nsave = 3\n" + tail), "no error");
  EXPECT_EQ(ErrorOf(head + "mode = \"nan\"\n" + tail),
            "x.toml:8:1: error: [[fault]] #1: give exactly one of `save` (1-based) and `step` "
            "(the step the save was made before)");
  EXPECT_EQ(ErrorOf(head + "mode = \"nan\"\nstep = 13\n" + tail),
            "x.toml:11:8: error: [[fault]] #1.step: 13 is past the end of the job ([job].steps = "
            "12, steps are 0-based); the fault could never fire");
  EXPECT_EQ(
      ErrorOf(head + "mode = \"truncate\"\nsave = 1\ntarget = \"parameter:head.weight\"\n" + tail),
      "x.toml:12:10: error: [[fault]] #1.target: only for mode nan, inf or bitflip");
  EXPECT_EQ(ErrorOf(head + "mode = \"truncate\"\nsave = 1\nbit = 3\n" + tail),
            "x.toml:12:7: error: [[fault]] #1.bit: only for mode bitflip (mode is \"truncate\")");
  EXPECT_EQ(ErrorOf(head + "mode = \"bitflip\"\nsave = 1\nbit = 3\n" + tail), "no error");
  const std::string grad =
      ErrorOf(head + "mode = \"nan\"\nsave = 1\ntarget = \"gradient:head.weight\"\n" + tail);
  EXPECT_EQ(grad.rfind("x.toml:12:10: error: ", 0), 0u) << grad;
  EXPECT_NE(grad.find("gradient"), std::string::npos) << grad;
}

TEST(RestartLoader, CheckpointFaultStepIsTheStepOfItsSave) {
  // The ground truth's step: the save made before step save x every, however the save is named.
  const std::string head =
      "restarts = 1\n[checkpoint]\nevery = 2\n[[fault]]\nkind = \"checkpoint\"\n"
      "mode = \"nan\"\n";
  const Scenario by_save =
      load_scenario_string(WithHead(head + "save = 3\n[expect]\ndeadlock = false\n"), "x.toml");
  ASSERT_EQ(by_save.faults.size(), 1u);
  EXPECT_EQ(by_save.faults[0].step, 6);
  EXPECT_EQ(compile_plan(by_save)["faults"][0]["step"], 6);
  const Scenario by_step =
      load_scenario_string(WithHead(head + "step = 4\n[expect]\ndeadlock = false\n"), "x.toml");
  EXPECT_EQ(by_step.faults[0].step, 4);
}

TEST(RestartSubstitution, RunDirAndLaunchInCommandAndEnv) {
  EXPECT_EQ(substitute_launch_vars("--ckpt-dir={run_dir}/ckpt-{launch}", "/r/x", 2),
            "--ckpt-dir=/r/x/ckpt-2");
  EXPECT_EQ(substitute_launch_vars("{run_dir}{run_dir}", "/a", 0), "/a/a");
  // Other braces stay as written (a Python format string, a JSON value).
  EXPECT_EQ(substitute_launch_vars("{step}-{launch", "/a", 1), "{step}-{launch");
  EXPECT_EQ(substitute_launch_vars("", "/a", 1), "");
}

// --- faults across launches ----------------------------------------------------------------

TEST(RestartFaults, FiredOneShotFaultsAreDroppedPersistentOnesStay) {
  Scenario s = load_scenario_string(
      WithHead("ranks = 2\n[[fault]]\nkind = \"crash\"\nranks = [1]\nstep = 3\n"
               "[[fault]]\nkind = \"crash\"\nranks = [0]\nstep = 5\npersistent = true\n"
               "[[fault]]\nkind = \"crash\"\nranks = [0]\nstep = 6\n"
               "[expect]\ndeadlock = false\n"),
      "x.toml");
  drop_fired_faults(s, {0, 1});
  ASSERT_EQ(s.faults.size(), 2u);
  EXPECT_EQ(s.faults[0].index, 1);  // persistent: fires again
  EXPECT_EQ(s.faults[1].index, 2);  // never fired
}

// --- the judge on several launches -----------------------------------------------------------

// One launch's logs, in the format the built-in ranks write.
class Launch : public test_util::EventLogDir {
 public:
  explicit Launch(const std::string& name) : EventLogDir("nanchaos_restart", name) {}
  void start(int rank, int64_t t) {
    ev(rank, "start", t, {{"rank", rank}, {"world", 2}, {"pid", 100 + rank}, {"host", "h"}});
  }
  void step(int rank, int64_t step, int64_t t) {
    ev(rank, "step_begin", t, {{"step", step}});
    ev(rank, "step_end", t + 30,
       {{"step", step}, {"loss", 2.0}, {"lr", 1e-3}, {"action", "update"}});
  }
  void final_ok(int rank, int64_t steps, int64_t t) {
    ev(rank, "final", t,
       {{"steps_completed", steps},
        {"eval_loss", 1.0},
        {"initial_eval_loss", 2.3},
        {"params_hash", "abc"},
        {"optim_hash", "def"},
        {"params_finite", true}});
    ev(rank, "exit", t + 1, {{"code", 0}});
  }
  // Both ranks run steps [from, to) from `t`, 1000 us apart.
  void steps(int64_t from, int64_t to, int64_t t) {
    for (int r = 0; r < 2; ++r) {
      for (int64_t s = from; s < to; ++s) step(r, s, t + (s - from) * 1000);
    }
  }
  // Rank 1 is killed at step `at` (its crash fault's injection), rank 0 exits with an error.
  void crash_at(int64_t at, int64_t t) {
    ev(1, "step_begin", t, {{"step", at}});
    ev(1, "inject", t + 5,
       {{"fault", 0}, {"kind", "crash"}, {"step", at}, {"target", ""}, {"replay", false}});
    gone(1, t + 10);
    ev(0, "exit", t + 500, {{"code", 1}});
  }
};

JobResult Reaped(int exit_code, int64_t t0, int64_t t_end) {
  JobResult j;
  j.exit_code = exit_code;
  j.t0_us = kT0 + t0;
  j.t_end_us = kT0 + t_end;
  j.t_gone_us = kT0 + t_end + 20;
  return j;
}

Scenario CrashScenario(const std::string& expect, int64_t restarts = 1, bool persistent = false) {
  return load_scenario_string(
      "[scenario]\nname = \"t\"\n[job]\nworkload = \"mlp\"\nsteps = 6\nranks = 2\nrestarts = " +
          std::to_string(restarts) +
          "\n[[fault]]\nkind = \"crash\"\nranks = [1]\nstep = 3\npersistent = " +
          (persistent ? "true" : "false") + "\n[expect]\n" + expect,
      "x.toml");
}

// A launch that crashes at step 3 from `t0` (us after kT0).
JobResult CrashedLaunch(Launch& l, int64_t t0) {
  l.start(0, t0 + 10);
  l.start(1, t0 + 10);
  l.steps(0, 3, t0 + 1000);
  l.crash_at(3, t0 + 4000);
  return Reaped(137, t0, t0 + 5000);
}

// Three launches 10 ms apart, each crashing at step 3 (the last one is Reaped(137, 20'000,
// 25'000)).
JobEvidence ThreeCrashedLaunches(const std::string& name) {
  Launch l0(name + "0"), l1(name + "1"), l2(name + "2");
  const JobResult j0 = CrashedLaunch(l0, 0);
  const JobResult j1 = CrashedLaunch(l1, 10'000);
  const JobResult j2 = CrashedLaunch(l2, 20'000);
  JobEvidence ev = l2.evidence(2, j2);
  ev.earlier.push_back({j0, l0.evidence(2, j0).ranks});
  ev.earlier.push_back({j1, l1.evidence(2, j1).ranks});
  return ev;
}

TEST(RestartJudge, OneShotCrashRelaunchedFromStepZeroCompletes) {
  const Scenario s = CrashScenario(
      "outcome = \"completed\"\nrestarts = 1\nresumed_from_step = 0\nrank = 1\n"
      "cause = \"rank_failure\"\nrecovered = true\n");
  Launch first("oneshot0"), last("oneshot1");
  const JobResult job0 = CrashedLaunch(first, 0);
  // The relaunch: started 100 ms after launch 0 ended, runs all 6 steps (nothing fires).
  for (int r = 0; r < 2; ++r) last.start(r, 105'000);
  last.steps(0, 6, 106'000);
  for (int r = 0; r < 2; ++r) last.final_ok(r, 6, 113'000);
  const JobResult job1 = Reaped(0, 105'000, 114'000);

  JobEvidence ev = last.evidence(2, job1);
  ev.earlier.push_back({job0, first.evidence(2, job0).ranks});
  const auto r = judge(s, ev, job1);
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
  EXPECT_EQ(r.outcome, results::Outcome::kCompleted);
  ASSERT_EQ(r.injections.size(), 1u);  // launch 0's crash, on the first launch's timeline
  EXPECT_DOUBLE_EQ(r.injections[0].t_ms, 4.005);
  const json launches = nanchaos::results::to_json(r).at("launches");
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0]["outcome"], "crashed");
  EXPECT_EQ(launches[0]["resumed_from_step"], nullptr);
  EXPECT_EQ(launches[1]["outcome"], "completed");
  EXPECT_EQ(launches[1]["resumed_from_step"], 0);
  EXPECT_DOUBLE_EQ(launches[1]["start_ms"].get<double>(), 105.0);
  const json restarts = nanchaos::results::to_json(r).at("restarts");
  ASSERT_EQ(restarts.size(), 1u);
  const json& rs = restarts[0];
  // Crash at 4.005 ms; rank 1 gone at 4.010; every process gone at 5.020; both ranks started at
  // 105.000; both completed their first step at 106.030.
  EXPECT_NEAR(rs["resume_ms"].get<double>(), 106.030 - 4.005, 1e-9);
  EXPECT_NEAR(rs["detect_ms"].get<double>(), 4.010 - 4.005, 1e-9);
  EXPECT_NEAR(rs["teardown_ms"].get<double>(), 5.020 - 4.010, 1e-9);
  EXPECT_NEAR(rs["relaunch_ms"].get<double>(), 105.000 - 5.020, 1e-9);
  EXPECT_EQ(rs["load_ms"], nullptr);
  EXPECT_NEAR(rs["first_step_ms"].get<double>(), 106.030 - 105.000, 1e-9);
  EXPECT_EQ(rs["cause"], "crashed");
}

TEST(RestartJudge, PersistentCrashExhaustsTheBudgetAndEndsCrashed) {
  const Scenario s = CrashScenario(
      "outcome = \"crashed\"\nrestarts = 2\nresumed_from_step = 0\nrank = 1\n"
      "cause = \"rank_failure\"\n",
      2, true);
  const auto r = judge(s, ThreeCrashedLaunches("persist"), Reaped(137, 20'000, 25'000));
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
  EXPECT_EQ(r.outcome, results::Outcome::kCrashed);
  EXPECT_EQ(r.injections.size(), 3u);
  EXPECT_EQ(nanchaos::results::to_json(r).at("restarts").size(), 2u);
}

TEST(RestartJudge, WrongRestartCountFails) {
  const Scenario s = CrashScenario("outcome = \"crashed\"\nrestarts = 1\n", 2, true);
  Launch l0("count0"), l1("count1");
  const JobResult j0 = CrashedLaunch(l0, 0);
  const JobResult j1 = CrashedLaunch(l1, 10'000);
  JobEvidence ev = l1.evidence(2, j1);
  ev.earlier.push_back({j0, l0.evidence(2, j0).ranks});
  ev.earlier.push_back({j0, l0.evidence(2, j0).ranks});
  const auto r = judge(s, ev, j1);
  EXPECT_EQ(r.verdict, results::Verdict::kFail);
  EXPECT_NE(r.reason.find("restarts: expected 1, got 2"), std::string::npos) << r.reason;
}

TEST(RestartJudge, ResumedStepFromTheLoadedCheckpoint) {
  const Scenario s =
      CrashScenario("outcome = \"completed\"\nrestarts = 1\nresumed_from_step = 2\n");
  Launch first("ckpt0"), last("ckpt1");
  const JobResult job0 = CrashedLaunch(first, 0);
  for (int r = 0; r < 2; ++r) {
    first.ev(r, "ckpt_save", 2100,
             {{"path", "/run/ckpt/step-2.pt"}, {"step", 2}, {"agent_step", 2}});
    last.start(r, 105'000);
    last.ev(r, "ckpt_load", 105'500, {{"path", "/run/ckpt/step-2.pt"}, {"step", 2}});
  }
  last.steps(2, 6, 106'000);
  for (int r = 0; r < 2; ++r) last.final_ok(r, 6, 111'000);
  const JobResult job1 = Reaped(0, 105'000, 112'000);
  JobEvidence ev = last.evidence(2, job1);
  ev.earlier.push_back({job0, first.evidence(2, job0).ranks});
  const auto r = judge(s, ev, job1);
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
  const json l1 = nanchaos::results::to_json(r).at("launches")[1];
  EXPECT_EQ(l1["resumed_from_step"], 2);
  EXPECT_EQ(l1["checkpoint_loaded"]["path"], "/run/ckpt/step-2.pt");
  EXPECT_NEAR(nanchaos::results::to_json(r).at("restarts")[0]["load_ms"].get<double>(),
              105.500 - 105.000, 1e-9);
  EXPECT_NEAR(nanchaos::results::to_json(r).at("restarts")[0]["first_step_ms"].get<double>(),
              106.030 - 105.500, 1e-9);
}

// Launch 0 crashes at step 3 (steps 0-2 done); launch 1 loads the checkpoint of step 2 and
// completes: 1 step lost, resumed 102.025 ms after the crash.
JobEvidence ResumedFromStep2(const std::string& name) {
  Launch first(name + "0"), last(name + "1");
  const JobResult job0 = CrashedLaunch(first, 0);
  for (int r = 0; r < 2; ++r) {
    last.start(r, 105'000);
    last.ev(r, "ckpt_load", 105'500, {{"path", "/run/ckpt/step-2.pt"}, {"step", 2}});
  }
  last.steps(2, 6, 106'000);
  for (int r = 0; r < 2; ++r) last.final_ok(r, 6, 111'000);
  JobEvidence ev = last.evidence(2, Reaped(0, 105'000, 112'000));
  ev.earlier.push_back({job0, first.evidence(2, job0).ranks});
  return ev;
}

// A Python job's import of torch (the agent's `imported`) is reported beside the phases, the
// longest rank's; a launch with no `imported` event (built-in ranks) has none.
TEST(RestartJudge, ImportTimeIsTheLongestRanksAndOnlyWhereLogged) {
  const Scenario s = CrashScenario("outcome = \"completed\"\nrestarts = 1\n");
  Launch first("import0"), last("import1");
  const JobResult job0 = CrashedLaunch(first, 0);
  last.start(0, 105'000);
  last.start(1, 105'000);
  last.ev(0, "imported", 105'100, {{"module", "torch"}, {"import_ms", 812.5}});
  last.ev(1, "imported", 105'200, {{"module", "torch"}, {"import_ms", 1204.0}});
  last.steps(0, 6, 106'000);
  for (int r = 0; r < 2; ++r) last.final_ok(r, 6, 111'000);
  const JobResult job1 = Reaped(0, 105'000, 112'000);
  JobEvidence ev = last.evidence(2, job1);
  ev.earlier.push_back({job0, first.evidence(2, job0).ranks});
  const json restart = nanchaos::results::to_json(judge(s, ev, job1)).at("restarts")[0];
  EXPECT_DOUBLE_EQ(restart.at("import_ms").get<double>(), 1204.0);

  const json builtin =
      nanchaos::results::to_json(judge(s, ResumedFromStep2("import_none"), job1)).at("restarts")[0];
  EXPECT_TRUE(builtin.at("import_ms").is_null());
}

const results::Check* CheckOf(const results::ScenarioResult& r, const std::string& key) {
  for (const auto& c : r.checks) {
    if (c.key == key) return &c;
  }
  return nullptr;
}

TEST(RestartJudge, StepsLostAndResumeLatencyAreJudged) {
  const JobResult job1 = Reaped(0, 105'000, 112'000);
  const auto pass =
      judge(CrashScenario("outcome = \"completed\"\nsteps_lost_max = 1\nresume_ms_max = 102.1\n"),
            ResumedFromStep2("lost_ok"), job1);
  EXPECT_EQ(pass.verdict, results::Verdict::kPass) << pass.reason;
  ASSERT_TRUE(CheckOf(pass, "steps_lost_max"));
  EXPECT_EQ(CheckOf(pass, "steps_lost_max")->actual, 1);
  EXPECT_NEAR(CheckOf(pass, "resume_ms_max")->actual.get<double>(), 106.030 - 4.005, 1e-9);
  EXPECT_EQ(nanchaos::results::to_json(pass).at("restarts")[0]["steps_lost"], 1);

  const auto fail =
      judge(CrashScenario("outcome = \"completed\"\nsteps_lost_max = 0\nresume_ms_max = 102.0\n"),
            ResumedFromStep2("lost_bad"), job1);
  EXPECT_EQ(fail.verdict, results::Verdict::kFail);
  EXPECT_FALSE(CheckOf(fail, "steps_lost_max")->pass);
  EXPECT_FALSE(CheckOf(fail, "resume_ms_max")->pass);
}

TEST(RestartJudge, StepsLostAddUpOverRestartsFromStepZero) {
  // Three launches, two crashes at step 3, each relaunch from step 0 (no checkpoint): 3 + 3.
  const Scenario s = CrashScenario("outcome = \"crashed\"\nsteps_lost_max = 5\n", 2, true);
  const auto r = judge(s, ThreeCrashedLaunches("sum"), Reaped(137, 20'000, 25'000));
  EXPECT_EQ(r.verdict, results::Verdict::kFail);
  EXPECT_EQ(CheckOf(r, "steps_lost_max")->actual, 6);
  EXPECT_FALSE(CheckOf(r, "steps_lost_max")->pass);
}

TEST(RestartJudge, NoRestartLosesNothingButHasNoResumeLatency) {
  const Scenario s = CrashScenario("steps_lost_max = 0\nresume_ms_max = 1000\n", 1);
  Launch only("norestart");
  for (int r = 0; r < 2; ++r) only.start(r, 10);
  only.steps(0, 6, 1000);
  for (int r = 0; r < 2; ++r) only.final_ok(r, 6, 8000);
  const JobResult job = Reaped(0, 0, 9000);
  const auto r = judge(s, only.evidence(2, job), job);
  EXPECT_EQ(CheckOf(r, "steps_lost_max")->actual, 0);
  EXPECT_TRUE(CheckOf(r, "steps_lost_max")->pass);
  EXPECT_EQ(CheckOf(r, "resume_ms_max")->actual, nullptr);
  EXPECT_FALSE(CheckOf(r, "resume_ms_max")->pass);
}

CleanReference Clean(const std::string& params1) {
  CleanReference c;
  c.key = "k";
  c.ranks = {std::pair<std::string, std::string>{"abc", "def"},
             std::pair<std::string, std::string>{params1, "def"}};
  return c;
}

TEST(RestartJudge, FinalDigestsAreComparedWithTheCleanRun) {
  const Scenario s = CrashScenario("outcome = \"completed\"\nfinal_matches_clean = true\n");
  const JobResult job1 = Reaped(0, 105'000, 112'000);
  JobEvidence ev = ResumedFromStep2("clean_same");
  ev.clean = Clean("abc");
  const auto same = judge(s, ev, job1);
  EXPECT_EQ(same.verdict, results::Verdict::kPass) << same.reason;
  EXPECT_EQ(CheckOf(same, "final_matches_clean")->actual, true);

  ev.clean = Clean("0123");  // rank 1's parameters differ from the clean run's
  const auto differ = judge(s, ev, job1);
  EXPECT_EQ(differ.verdict, results::Verdict::kFail);
  EXPECT_EQ(CheckOf(differ, "final_matches_clean")->actual, false);
  // `= false` asserts the opposite: passes on the same evidence.
  const auto want_differ =
      judge(CrashScenario("outcome = \"completed\"\nfinal_matches_clean = false\n"), ev, job1);
  EXPECT_TRUE(CheckOf(want_differ, "final_matches_clean")->pass);

  ev.clean = Clean("abc");
  ev.clean->error = "the clean run's rank(s) 1 wrote no final digests; see RUN/clean/ranks.log";
  const auto failed = judge(s, ev, job1);
  EXPECT_EQ(failed.verdict, results::Verdict::kFail);
  EXPECT_EQ(CheckOf(failed, "final_matches_clean")->actual, ev.clean->error);
  ev.clean.reset();
  EXPECT_EQ(CheckOf(judge(s, ev, job1), "final_matches_clean")->actual,
            "no clean run (RUN/clean/clean.json)");
}

TEST(RestartCleanRun, CachedReferenceIsReusedForTheSameScenarioAndSeed) {
  test_util::EventLogDir dir("nanchaos_restart", "clean_cache");
  const std::string run = dir.path();
  const std::string file = run + "/s.toml";
  fs::create_directories(run);
  std::ofstream(file) << WithHead("[expect]\nfinal_matches_clean = true\n");
  const Scenario s = load_scenario(file);
  fs::create_directories(clean_run_dir(run));
  std::ofstream(clean_run_dir(run) + "/clean.json") << json{
      {"key", clean_run_key(file, 7)},
      {"seed", 7},
      {"ranks", {{{"params_hash", "p0"}, {"optim_hash", "o0"}}, nullptr}},
      {"error", "rank 1 wrote none"}}.dump();
  // A launcher that cannot run: the reference must come from the cache, not a launch.
  LaunchContext ctx;
  ctx.launcher = "/nonexistent/mpirun";
  ctx.self_exe = "/nonexistent/nanchaos";
  const CleanReference c = run_clean_reference(s, run, ctx, "t-clean", 7);
  ASSERT_EQ(c.ranks.size(), 2u);
  EXPECT_EQ(c.ranks[0]->first, "p0");
  EXPECT_FALSE(c.ranks[1]);
  EXPECT_EQ(c.error, "rank 1 wrote none");
  EXPECT_EQ(read_job_evidence(2, run, JobResult{}).clean->key, c.key);
  // Another seed is another clean run: this launcher cannot start it, and says so.
  const CleanReference other = run_clean_reference(s, run, ctx, "t-clean", 8);
  EXPECT_NE(other.key, c.key);
  EXPECT_NE(other.error.find("clean run"), std::string::npos) << other.error;
}

TEST(RestartJudge, LoadWithoutStepTakesTheStepCountedAtItsSave) {
  Launch first("nostep0"), last("nostep1");
  first.ev(0, "ckpt_save", 100, {{"path", "ck.pt"}, {"step", nullptr}, {"agent_step", 3}});
  last.ev(0, "ckpt_load", 100, {{"path", "ck.pt"}, {"step", nullptr}});
  last.ev(0, "step_begin", 200, {{"step", 0}});
  const JobResult job = Reaped(0, 0, 1000);
  const auto a = first.evidence(2, job), b = last.evidence(2, job);
  const std::vector<LaunchView> views = {{&a.ranks, &job}, {&b.ranks, &job}};
  EXPECT_EQ(resumed_from_step(views, 1), 3);
  EXPECT_EQ(resumed_from_step(views, 0), std::nullopt);
}

TEST(RestartJudge, ResumedFromTheLastLoadBeforeTheFirstStep) {
  // A validating loader loads the newest checkpoint, finds a NaN in it and falls back to the
  // older one: the launch resumed from the older; a load after its first step (a best model
  // reloaded at the end) is no resume.
  Launch first("reject0"), last("reject1");
  first.ev(0, "ckpt_save", 100, {{"path", "s3.pt"}, {"step", 3}, {"agent_step", 3}});
  first.ev(0, "ckpt_save", 200, {{"path", "s6.pt"}, {"step", 6}, {"agent_step", 6}});
  last.ev(0, "ckpt_load", 100, {{"path", "s6.pt"}, {"step", 6}});
  last.ev(0, "ckpt_load", 150, {{"path", "s3.pt"}, {"step", 3}});
  last.steps(3, 5, 200);
  last.ev(0, "ckpt_load", 900, {{"path", "s6.pt"}, {"step", 6}});
  const JobResult job = Reaped(0, 0, 1000);
  const auto a = first.evidence(2, job), b = last.evidence(2, job);
  const std::vector<LaunchView> views = {{&a.ranks, &job}, {&b.ranks, &job}};
  EXPECT_EQ(resumed_from_step(views, 1), 3);
}

TEST(RestartJudge, LaunchOutcome) {
  Launch l("outcome");
  const JobResult crashed = CrashedLaunch(l, 0);
  EXPECT_EQ(launch_outcome(l.evidence(2, crashed).ranks, crashed), results::Outcome::kCrashed);
  JobResult hung = crashed;
  hung.timed_out = true;
  EXPECT_EQ(launch_outcome(l.evidence(2, hung).ranks, hung), results::Outcome::kHung);
}

TEST(RestartEvidence, ReaderReadsEveryLaunchFolder) {
  Launch first("read0"), last("read1");
  const JobResult job0 = CrashedLaunch(first, 0);
  for (int r = 0; r < 2; ++r) last.start(r, 105'000);
  last.steps(0, 6, 106'000);
  for (int r = 0; r < 2; ++r) last.final_ok(r, 6, 113'000);
  const JobResult job1 = Reaped(0, 105'000, 114'000);
  first.flush();
  last.flush();
  fs::create_directories(launch_dir(last.path(), 0));
  fs::rename(fs::path(first.path()) / "events", fs::path(launch_dir(last.path(), 0)) / "events");
  const JobEvidence ev = read_job_evidence(2, last.path(), job1, {job0});
  ASSERT_FALSE(ev.unreadable);
  ASSERT_EQ(ev.earlier.size(), 1u);
  ASSERT_EQ(ev.earlier[0].ranks.size(), 2u);
  EXPECT_EQ(ev.earlier[0].ranks[1].injections.size(), 1u);
  EXPECT_TRUE(ev.earlier[0].ranks[1].gone_us.has_value());
  EXPECT_EQ(ev.ranks[0].steps_done, 6);
  const auto r = judge(CrashScenario("outcome = \"completed\"\nrestarts = 1\n"), ev, job1);
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
}

}  // namespace
}  // namespace nanchaos::harness
