// The launcher's own crash at teardown: mpirun dying of SIGSEGV after every
// rank wrote its exit record is kept out of the verdict and the console and recorded in
// report.json `launcher_exit`; a launcher crash before the ranks finished stays the job's end.
// Judged on hand-written logs, and end to end with the real binary and a fake launcher (a script
// that runs the real mpirun, then kills itself with SIGSEGV) around a fake external agent.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "harness/controller/job_result.h"
#include "harness/controller/judge.h"
#include "harness/scenario/scenario.h"
#include "results/report.h"
#include "tests/harness/event_logs.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace nanchaos::harness {
namespace {

using test_util::judge_logs;
using test_util::kT0;
using test_util::read_report;
using test_util::run_cmd;
using test_util::write_file;

const std::string kBin = NANCHAOS_BINARY;

// A clean 2-rank run of 2 steps; each rank's exit record only when `exits`.
void clean_run(test_util::EventLogDir& d, bool exits) {
  for (int r = 0; r < 2; ++r) {
    d.ev(r, "start", 10, {{"rank", r}, {"world", 2}, {"pid", 100 + r}, {"host", "h"}});
    for (int64_t step = 0, seq = 0; step < 2; ++step) {
      const int64_t t = 1000 + step * 1000;
      d.ev(r, "step_begin", t, {{"step", step}});
      d.ev(r, "coll_enter", t + 10,
           {{"seq", seq},
            {"name", "grad_allreduce"},
            {"count", 12},
            {"dtype", "float32"},
            {"step", step}});
      d.ev(r, "coll_leave", t + 15, {{"seq", seq++}, {"name", "grad_allreduce"}, {"step", step}});
      d.ev(r, "step_end", t + 30,
           {{"step", step}, {"loss", 2.0}, {"lr", 1e-3}, {"action", "update"}});
    }
    d.ev(r, "final", 4000,
         {{"steps_completed", 2},
          {"eval_loss", 1.0},
          {"initial_eval_loss", 2.3},
          {"params_hash", "abc"},
          {"optim_hash", "def"},
          {"params_finite", true}});
    if (exits) d.ev(r, "exit", 4001, {{"code", 0}});
  }
}

JobResult reaped(int exit_code) {
  JobResult j;
  j.exit_code = exit_code;
  j.t0_us = kT0;
  j.t_end_us = kT0 + 5'000'000;
  return j;
}

Scenario scenario() {
  return load_scenario_string(
      "[scenario]\nname = \"t\"\n[job]\nworkload = \"mlp\"\nsteps = 2\nranks = 2\n"
      "[expect]\ndetected = false\n",  // no `outcome`: an unexplained crash fails it anyway
      "launcher_exit.toml");
}

TEST(LauncherExit, ASegfaultAfterEveryRankExitedIsNotTheJobs) {
  test_util::EventLogDir d("nanchaos_launcher_exit", "teardown");
  clean_run(d, true);
  const auto r = judge_logs(scenario(), d, reaped(139));
  EXPECT_EQ(r.outcome, results::Outcome::kCompleted);
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
  EXPECT_EQ(r.reason, "");
  EXPECT_EQ(nanchaos::results::to_json(r)["launcher_exit_code"], 139);
  EXPECT_EQ(nanchaos::results::to_json(r)["launcher_exit"],
            (json{{"status", 139},
                  {"signal", "SIGSEGV"},
                  {"after_ranks_exited", true},
                  {"counted", false},
                  {"note",
                   "the launcher died of SIGSEGV after every rank had written its exit record "
                   "(exit codes 0, 0): a crash in its own teardown, not the job's; the verdict "
                   "counts the ranks' codes"}}));
}

TEST(LauncherExit, ACrashBeforeTheRanksExitedStaysTheJobsEnd) {
  test_util::EventLogDir d("nanchaos_launcher_exit", "early");
  clean_run(d, false);  // no exit record: the launcher went first and took the ranks with it
  const auto r = judge_logs(scenario(), d, reaped(139));
  EXPECT_EQ(r.outcome, results::Outcome::kCrashed);
  EXPECT_EQ(r.verdict, results::Verdict::kFail);
  EXPECT_NE(r.reason.find("launcher exit status 139 (signal 11"), std::string::npos) << r.reason;
  EXPECT_EQ(nanchaos::results::to_json(r)["launcher_exit"]["after_ranks_exited"], false);
  EXPECT_EQ(nanchaos::results::to_json(r)["launcher_exit"]["counted"], true);
  EXPECT_TRUE(nanchaos::results::to_json(r)["launcher_exit"]["note"].is_null());
}

TEST(LauncherExit, OnlyACrashSignalAfterTheRanksIsForgiven) {
  test_util::EventLogDir d("nanchaos_launcher_exit", "other");
  clean_run(d, true);
  // An exit code (not a signal), and SIGKILL (someone killed it): both still count.
  for (const int status : {1, 137}) {
    const auto r = judge_logs(scenario(), d, reaped(status));
    EXPECT_EQ(r.outcome, results::Outcome::kCrashed) << status;
    EXPECT_EQ(nanchaos::results::to_json(r)["launcher_exit"]["counted"], true) << status;
  }
  // The controller ended the job itself: its kill is no teardown crash.
  JobResult timed_out = reaped(139);
  timed_out.timed_out = true;
  EXPECT_EQ(nanchaos::results::to_json(
                judge_logs(scenario(), d, timed_out))["launcher_exit"]["after_ranks_exited"],
            false);
}

// srun's output when Slurm cancelled the step from outside (scancel of the step; a node set down
// gives "... DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"), as slurm-wlm 22.05 wrote
// it in tests/slurm/slurm_test.py --phase failures, and when srun's --kill-on-bad-exit cancelled
// it after a task died (the task's failure first).
const char* kSlurmCancelledLog =
    "[launcher] srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n"
    "[launcher] slurmstepd-n1: error: *** STEP 4.0 ON n1 CANCELLED AT 2026-12-06T10:35:05 ***\n"
    "[launcher] srun: error: n2: tasks 2-3: Killed\n"
    "[launcher] srun: launch/slurm: _step_signal: Terminating StepId=4.0\n"
    "[launcher] srun: error: n1: tasks 0-1: Killed\n";
const char* kKillOnBadExitLog =
    "[launcher] srun: error: n2: task 1: Killed\n"
    "[launcher] srun: launch/slurm: _step_signal: Terminating StepId=7.1\n"
    "[launcher] slurmstepd-n1: error: *** STEP 7.1 ON n1 CANCELLED AT 2026-12-06T10:40:00 ***\n"
    "[launcher] srun: error: n1: tasks 0,2-3: Killed\n";
// A hung rank: the others' watchdog aborted (exit code 4) and srun ended the step; "Job step
// aborted" and the cancellation come first in srun's output (tests/slurm --phase faults).
const char* kWatchdogAbortLog =
    "[launcher] srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n"
    "[launcher] slurmstepd-n1: error: *** STEP 8.2 ON n1 CANCELLED AT 2026-12-06T10:37:07 ***\n"
    "[launcher] srun: error: n2: task 3: Exited with exit code 4\n"
    "[launcher] srun: error: n1: tasks 0-1: Exited with exit code 4\n"
    "[launcher] srun: error: n2: task 2: Killed\n";

TEST(LauncherExit, ASlurmCancellationFromOutsideLeadsTheReason) {
  test_util::EventLogDir d("nanchaos_launcher_exit", "slurm_cancelled");
  clean_run(d, false);  // no exit record: Slurm killed every rank
  d.ranks_log(kSlurmCancelledLog);
  const auto r = judge_logs(scenario(), d, reaped(137));
  EXPECT_EQ(r.outcome, results::Outcome::kCrashed);
  EXPECT_EQ(r.verdict, results::Verdict::kFail);
  EXPECT_EQ(r.reason.rfind("Slurm cancelled the job step from outside (*** STEP 4.0 ON n1 "
                           "CANCELLED AT 2026-12-06T10:35:05 *** in ranks/launcher.log",
                           0),
            0u)
      << r.reason;
  EXPECT_NE(r.reason.find("launcher exit status 137"), std::string::npos) << r.reason;
}

TEST(LauncherExit, KillOnBadExitAfterATaskFailedIsNotSlurmsDoing) {
  test_util::EventLogDir d("nanchaos_launcher_exit", "kill_on_bad_exit");
  clean_run(d, false);
  for (const char* log : {kKillOnBadExitLog, kWatchdogAbortLog}) {
    d.ranks_log(log);
    const auto r = judge_logs(scenario(), d, reaped(137));
    EXPECT_EQ(r.verdict, results::Verdict::kFail);
    EXPECT_EQ(r.reason.find("Slurm"), std::string::npos) << r.reason;
  }
  // A job that completed says nothing of Slurm whatever srun printed.
  test_util::EventLogDir ok("nanchaos_launcher_exit", "slurm_completed");
  clean_run(ok, true);
  ok.ranks_log(kSlurmCancelledLog);
  const auto done = judge_logs(scenario(), ok, reaped(0));
  EXPECT_EQ(done.verdict, results::Verdict::kPass) << done.reason;
  EXPECT_EQ(done.reason, "");
}

// Plays the agent: a clean run of $NANCHAOS_STEPS iterations, after $SLOW seconds.
const char* kFakeAgent = R"(#!/bin/sh
e="$NANCHAOS_EVENTS"
p=$$
printf '{"ev":"agent","t_us":1,"rank":%s,"pid":%s,"python":"sh","torch":"none"}\n' "$RANK" "$p" >> "$e"
printf '{"ev":"start","t_us":2,"rank":%s,"world":%s,"pid":%s,"host":"h","external":true,"modules":["net.0"],"parameters":["net.0.weight"]}\n' "$RANK" "$WORLD_SIZE" "$p" >> "$e"
sleep "${SLOW:-0}"
i=0
while [ $i -lt "$NANCHAOS_STEPS" ]; do
  printf '{"ev":"step_begin","t_us":%s,"step":%s}\n' $((10 + i)) $i >> "$e"
  printf '{"ev":"step_end","t_us":%s,"step":%s,"loss":1.5,"action":"update","lr":0.001}\n' $((11 + i)) $i >> "$e"
  i=$((i + 1))
done
printf '{"ev":"final","t_us":90,"steps_completed":%s,"eval_loss":1.0,"initial_eval_loss":2.0,"params_hash":"h1","optim_hash":"h2","params_finite":true}\n' "$NANCHAOS_STEPS" >> "$e"
printf '{"ev":"exit","t_us":91,"code":0}\n' >> "$e"
)";

// The real mpirun, then the launcher's own SIGSEGV: at once when it returned (teardown), or while
// the ranks still run (EARLY: once both wrote `start`, i.e. attached; they sleep $SLOW s then).
const char* kCrashingLauncher = R"sh(#!/bin/bash
ulimit -c 0
if [ -n "$EARLY" ]; then
  mpirun "$@" &
  run=; prev=
  for a in "$@"; do [ "$prev" = --run-dir ] && run=$a; prev=$a; done
  for i in $(seq 300); do
    [ "$(cat "$run"/events/rank-*.jsonl 2>/dev/null | grep -c '"ev":"start"')" = 2 ] && break
    sleep 0.1
  done
  kill -SEGV $$
fi
mpirun "$@"
kill -SEGV $$
)sh";

struct CrashedRun {
  test_util::CmdResult cmd;
  json scenario;
};

CrashedRun run_with_crashing_launcher(const std::string& name, bool early) {
  const auto dir = fs::absolute(test_util::scratch_dir("nanchaos-lx", name + "-in")).string();
  const auto out = fs::absolute(test_util::scratch_dir("nanchaos-lx", name + "-out")).string();
  write_file(dir, "fake_agent.sh", kFakeAgent);
  const auto launcher = write_file(dir, "crashing-mpirun", kCrashingLauncher);
  fs::permissions(launcher, fs::perms::owner_all);
  const auto file = write_file(
      dir, "job.toml",
      "[scenario]\nname = \"" + name +
          "\"\nseed = 3\n[job]\nworkload = \"external\"\nranks = 2\nsteps = 3\n"
          "timeout_ms = 60000\ncommand = [\"sh\", \"fake_agent.sh\"]\nenv = { SLOW = \"" +
          (early ? "5" : "0") + "\" }\n[expect]\ndetected = false\nrecovered = true\n");
  CrashedRun r;
  r.cmd = run_cmd((early ? "EARLY=1 " : "") + kBin + " run " + file + " --launcher " + launcher +
                  " --out " + out);
  r.scenario = read_report(out)["scenarios"][0];
  return r;
}

TEST(LauncherExit, MpirunSegfaultAtTeardownStaysOutOfTheVerdictAndTheConsole) {
  const CrashedRun r = run_with_crashing_launcher("lx-teardown", false);
  EXPECT_EQ(r.cmd.code, 0) << r.cmd.output;
  EXPECT_EQ(r.scenario["verdict"], "pass") << r.scenario.dump(2);
  EXPECT_EQ(r.scenario["outcome"], "completed");
  EXPECT_EQ(r.scenario["launcher_exit_code"], 139);
  EXPECT_EQ(r.scenario["launcher_exit"]["status"], 139);
  EXPECT_EQ(r.scenario["launcher_exit"]["signal"], "SIGSEGV");
  EXPECT_EQ(r.scenario["launcher_exit"]["after_ranks_exited"], true);
  EXPECT_EQ(r.scenario["launcher_exit"]["counted"], false);
  EXPECT_NE(r.scenario["launcher_exit"]["note"].get<std::string>().find("teardown"),
            std::string::npos);
  for (const char* alarm : {"139", "SIGSEGV", "Segmentation", "crashed"}) {
    EXPECT_EQ(r.cmd.output.find(alarm), std::string::npos) << alarm << " in:\n" << r.cmd.output;
  }
}

TEST(LauncherExit, MpirunSegfaultWhileTheRanksRunStaysAFailure) {
  const CrashedRun r = run_with_crashing_launcher("lx-early", true);
  EXPECT_EQ(r.cmd.code, 1) << r.cmd.output;
  EXPECT_EQ(r.scenario["verdict"], "fail") << r.scenario.dump(2);
  EXPECT_EQ(r.scenario["outcome"], "crashed");
  EXPECT_EQ(r.scenario["launcher_exit"]["after_ranks_exited"], false);
  EXPECT_EQ(r.scenario["launcher_exit"]["counted"], true);
  EXPECT_NE(r.scenario["reason"].get<std::string>().find("launcher exit status 139"),
            std::string::npos)
      << r.scenario["reason"];
}

}  // namespace
}  // namespace nanchaos::harness
