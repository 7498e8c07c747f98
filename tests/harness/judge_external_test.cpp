// The judge on hand-written logs of external jobs (the Python agent's events,
// docs/external-jobs.md): stack and observed detections, stack decisions, observed:exception
// attribution by the flight recorder, and the reasons of jobs that never attached.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/controller/job_result.h"
#include "harness/controller/judge.h"
#include "harness/scenario/scenario.h"
#include "tests/harness/event_logs.h"

namespace nanchaos::harness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test_util::judge_logs;
using test_util::kT0;

class RunDir : public test_util::EventLogDir {
 public:
  explicit RunDir(const std::string& name) : EventLogDir("nanchaos_judge_ext", name) {}
  void launch(int rank, int world) {
    ev(rank, "launch", 1,
       {{"rank", rank}, {"world", world}, {"pid", 100 + rank}, {"command", {"python3", "t.py"}}});
  }
  void agent(int rank) {
    ev(rank, "agent", 5, {{"rank", rank}, {"pid", 100 + rank}, {"python", "3.11"}, {"torch", "2"}});
  }
  void start(int rank, int world) {
    launch(rank, world);
    agent(rank);
    ev(rank, "start", 10,
       {{"rank", rank},
        {"world", world},
        {"pid", 100 + rank},
        {"host", "h"},
        {"external", true},
        {"modules", {"net.0", "net.1"}},
        {"parameters", {"net.0.weight"}}});
  }
  // One iteration with a DDP bucket all-reduce.
  void step(int rank, int64_t step, int64_t t, int64_t* seq, const std::string& action = "update") {
    ev(rank, "step_begin", t, {{"step", step}});
    coll(rank, (*seq)++, step, t + 10, true);
    ev(rank, "step_end", t + 30, {{"step", step}, {"loss", 2.0}, {"lr", 1e-3}, {"action", action}});
  }
  void coll(int rank, int64_t seq, int64_t step, int64_t t, bool leave) {
    ev(rank, "coll_enter", t,
       {{"seq", seq},
        {"name", "grad_allreduce"},
        {"bucket", 0},
        {"count", 12},
        {"dtype", "float32"},
        {"step", step}});
    if (leave) ev(rank, "coll_leave", t + 5, {{"seq", seq}, {"name", "grad_allreduce"}});
  }
  void final_ok(int rank, int64_t steps, int64_t t) {
    ev(rank, "final", t,
       {{"steps_completed", steps},
        {"eval_loss", 1.0},
        {"initial_eval_loss", 2.3},
        {"params_hash", "abc"},
        {"optim_hash", "def"},
        {"params_finite", true}});
    ev(rank, "exit", t + 1, {{"code", 0}, {"vm_hwm_kib", 1000}});
  }
  void inject(int rank, int64_t step, int64_t t, const std::string& kind = "tensor") {
    ev(rank, "inject", t,
       {{"fault", 0},
        {"kind", kind},
        {"step", step},
        {"target", kind == "tensor" ? "activation:net.1" : ""},
        {"detail", json::object()},
        {"replay", false}});
  }
};

JobResult Job(int exit_code = 0, int64_t t_end = 5'000'000) {
  JobResult j;
  j.exit_code = exit_code;
  j.t0_us = kT0;
  j.t_end_us = kT0 + t_end;
  return j;
}

Scenario Load(const std::string& body, int64_t steps = 4) {
  return load_scenario_string(
      "[scenario]\nname = \"t\"\n[job]\nworkload = \"external\"\ncommand = [\"python3\", "
      "\"t.py\"]\nsteps = " +
          std::to_string(steps) + "\nranks = 2\n" + body +
          // The loader refuses a fault with no [expect]; deadlock = false is checked anyway.
          (body.find("[expect]") == std::string::npos ? "[expect]\ndeadlock = false\n" : ""),
      "judge.toml");
}

const char* kTensorFault =
    "[[fault]]\nkind = \"tensor\"\ntarget = \"activation:net.1\"\nranks = [1]\nstep = 2\n";

// A 4-iteration run on 2 ranks; the fault fires on rank 1 at step 2; `at2` adds step-2 evidence.
template <typename F>
void FourIterations(RunDir& d, F at2) {
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    for (int64_t s = 0; s < 4; ++s) {
      if (s == 2 && r == 1) d.inject(r, 2, 3005);
      if (s == 2) at2(r);
      d.step(r, s, 1000 + s * 1000, &seq, s == 2 ? "skip" : "update");
    }
    d.final_ok(r, 4, 9000);
  }
}

TEST(JudgeExternal, StackDetectionsAccumulateRanksAndTheStackDecisionSetsTheAction) {
  RunDir d("stack");
  FourIterations(d, [&](int r) {
    d.ev(r, "detect", 3100 + r * 100,
         {{"detector", "nan_check"},
          {"step", 2},
          {"layer", "net.1"},
          {"cause", "activation"},
          {"source", "stack"}});
    d.ev(r, "decision", 3400 + r * 10, {{"step", 2}, {"action", "skip_step"}, {"source", "stack"}});
  });
  const auto res = judge_logs(Load(std::string(kTensorFault) +
                                   "[expect]\ndetected = true\nfirst_detector = \"nan_check\"\n"
                                   "cause = \"activation\"\nlayer = \"net.1\"\nwithin_steps = 0\n"),
                              d, Job());
  ASSERT_EQ(res.detections.size(), 1u);
  const auto& fd = *res.first_detection;
  EXPECT_EQ(fd.detector, "nan_check");
  EXPECT_EQ(fd.ranks, std::vector<int64_t>({0, 1}));
  EXPECT_EQ(fd.action, "skip_step");
  EXPECT_EQ(fd.cause, "activation");
  EXPECT_EQ(fd.layer, "net.1");
  EXPECT_DOUBLE_EQ(*fd.latency_ms, 0.095);         // 3100 - 3005 us
  EXPECT_DOUBLE_EQ(*fd.decision_us, 3410 - 3100);  // first detect -> last stack decision
  EXPECT_EQ(res.outcome, results::Outcome::kCompleted);
  EXPECT_EQ(res.verdict, results::Verdict::kPass) << res.reason;
}

TEST(JudgeExternal, ObservedDetectionsCountAndSameStepOrdersByEarliestTime) {
  RunDir d("observed");
  FourIterations(d, [&](int r) {
    if (r == 0) {
      d.ev(r, "detect", 3900,
           {{"detector", "observed:skip"},
            {"step", 2},
            {"layer", ""},
            {"cause", ""},
            {"source", "observed"}});
    } else {
      d.ev(r, "detect", 3200,
           {{"detector", "zz_guard"},
            {"step", 2},
            {"layer", "net.1"},
            {"cause", "activation"},
            {"source", "stack"}});
    }
  });
  const auto res = judge_logs(
      Load(std::string(kTensorFault) + "[expect]\nfirst_detector = \"zz_guard\"\nrank = 1\n"), d,
      Job());
  ASSERT_EQ(res.detections.size(), 2u);
  EXPECT_EQ(res.detections[0].detector, "zz_guard");  // earlier, though it sorts after by name
  EXPECT_EQ(res.detections[1].detector, "observed:skip");
  EXPECT_EQ(res.detections[1].ranks, std::vector<int64_t>({0}));
  EXPECT_EQ(res.verdict, results::Verdict::kPass) << res.reason;
}

// A peer that ends the iteration sooner logs its observed:skip before the rank whose own check
// fired gets to report_detection (the synced stack: flag all-reduce, then report): the stack's
// report still comes first within the iteration.
TEST(JudgeExternal, SameStepStackReportPrecedesAnEarlierObservedSkipOfAPeer) {
  RunDir d("race");
  FourIterations(d, [&](int r) {
    if (r == 0) {
      d.ev(r, "detect", 3100,
           {{"detector", "observed:skip"},
            {"step", 2},
            {"layer", ""},
            {"cause", ""},
            {"source", "observed"}});
    } else {
      d.ev(r, "detect", 3600,
           {{"detector", "nan_check"},
            {"step", 2},
            {"layer", ""},
            {"cause", "loss_math"},
            {"source", "stack"}});
    }
  });
  const auto res = judge_logs(
      Load(std::string(kTensorFault) + "[expect]\nfirst_detector = \"nan_check\"\nrank = 1\n"
                                       "cause = \"loss_math\"\n"),
      d, Job());
  ASSERT_EQ(res.detections.size(), 2u);
  EXPECT_EQ(res.detections[0].detector, "nan_check");
  EXPECT_EQ(res.detections[1].detector, "observed:skip");
  EXPECT_EQ(res.verdict, results::Verdict::kPass) << res.reason;
}

TEST(JudgeExternal, AStackDecisionAloneIsNoDetection) {
  RunDir d("decision");
  FourIterations(d, [&](int r) {
    d.ev(r, "decision", 3400, {{"step", 2}, {"action", "skip_step"}, {"source", "stack"}});
  });
  const auto res =
      judge_logs(Load(std::string(kTensorFault) + "[expect]\ndetected = false\n"), d, Job());
  EXPECT_TRUE(res.detections.empty());
  EXPECT_EQ(nanchaos::results::to_json(res)["false_positives"], 0);
  EXPECT_EQ(res.verdict, results::Verdict::kPass) << res.reason;
}

// Rank 1 hangs before its step-1 bucket all-reduce; rank 0's process-group timeout raises and
// the agent records observed:exception on rank 0 (and, in the second case, on rank 1 too).
void HangRun(RunDir& d, bool both_raise) {
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    d.ev(r, "step_begin", 2000, {{"step", 1}});
    if (r == 1) {
      d.inject(r, 1, 2050, "hang");
      if (!both_raise) continue;
    } else {
      d.coll(r, seq, 1, 2100, false);
    }
    d.ev(r, "exception", 1'002'100 + r,
         {{"type", "DistBackendError"},
          {"message", "Watchdog caught collective operation timeout"}});
    d.ev(r, "detect", 1'002'100 + r,
         {{"detector", "observed:exception"},
          {"step", 1},
          {"layer", ""},
          {"cause", "exception"},
          {"source", "observed"},
          {"message", "Watchdog caught collective operation timeout"}});
    d.ev(r, "exit", 1'002'300, {{"code", 1}});
  }
}

TEST(JudgeExternal, ObservedExceptionBlamesTheRankThatStoppedWithCauseHang) {
  RunDir d("exc-hang");
  HangRun(d, /*both_raise=*/false);
  const auto res = judge_logs(
      Load("[[fault]]\nkind = \"hang\"\nranks = [1]\nstep = 1\nduration_ms = \"forever\"\n"
           "[detectors]\ncollective_timeout_ms = 1000\n"
           "[expect]\nfirst_detector = \"observed:exception\"\nrank = 1\ncause = \"hang\"\n"),
      d, Job(1, 1'500'000));
  ASSERT_TRUE(res.first_detection.has_value());
  EXPECT_EQ(res.first_detection->ranks, std::vector<int64_t>({1}));
  EXPECT_EQ(res.first_detection->cause, "hang");
  EXPECT_EQ(res.verdict, results::Verdict::kPass) << res.reason;
}

TEST(JudgeExternal, ObservedExceptionKeepsRaisingRanksThatWereAbsent) {
  RunDir d("exc-both");
  HangRun(d, /*both_raise=*/true);
  const auto res = judge_logs(
      Load("[[fault]]\nkind = \"hang\"\nranks = [1]\nstep = 1\nduration_ms = \"forever\"\n"
           "[expect]\nrank = 1\n"),
      d, Job(1, 1'500'000));
  ASSERT_TRUE(res.first_detection.has_value());
  EXPECT_EQ(res.first_detection->ranks, std::vector<int64_t>({1}));
  EXPECT_EQ(res.first_detection->cause, "exception");
  EXPECT_EQ(res.verdict, results::Verdict::kPass) << res.reason;
}

// Pipeline parallelism, 4 stages, one per rank: stage 2 (rank 2) stops for good at the start of
// step 1. The ranks' sends and receives are numbered apart from the collectives (`p2p_enter`),
// and no collective shows a gap (nobody reached step 1's all-reduce), so the pairs decide: the
// n-th send from a to b pairs with b's n-th receive from a. Ranks 1 and 3 wait on 2, rank 0 on 1
// (which never sent its gradient back); 2 waits on no one and is blamed, cause hang.
TEST(JudgeExternal, APipelineStageThatStoppedIsTheOneTheOthersSendsAndReceivesWaitOn) {
  RunDir d("pp-hang");
  std::vector<int64_t> n(4, 0);
  auto p2p = [&](int r, const std::string& op, int peer, int64_t step, int64_t t) {
    d.ev(r, "p2p_enter", t,
         {{"seq", n[size_t(r)]},
          {"op", op},
          {"peer", peer},
          {"numel", 8},
          {"dtype", "float32"},
          {"step", step}});
    d.ev(r, "p2p_leave", t + 1, {{"seq", n[size_t(r)]++}, {"status", "async"}});
  };
  for (int r = 0; r < 4; ++r) {
    d.start(r, 4);
    int64_t seq = 0;
    d.ev(r, "step_begin", 1000, {{"step", 0}});
    if (r > 0) p2p(r, "recv", r - 1, 0, 1010);  // forward: activations in, then out
    if (r < 3) p2p(r, "send", r + 1, 0, 1020);
    if (r < 3) p2p(r, "recv", r + 1, 0, 1030);  // backward: gradients in, then out
    if (r > 0) p2p(r, "send", r - 1, 0, 1040);
    d.coll(r, seq++, 0, 1050, true);  // the job's all-reduce of the grad norm
    d.ev(r, "step_end", 1080, {{"step", 0}, {"loss", 2.0}, {"lr", 1e-3}, {"action", "update"}});
    d.ev(r, "step_begin", 2000, {{"step", 1}});
    if (r == 2) {
      d.inject(r, 1, 2005, "hang");
      continue;  // stopped: torn down later, no exit record
    }
    if (r == 0) p2p(r, "send", 1, 1, 2010);
    if (r == 0) p2p(r, "recv", 1, 1, 2020);  // stage 1 never sends this gradient
    if (r == 1) p2p(r, "recv", 0, 1, 2015);
    if (r == 1) p2p(r, "send", 2, 1, 2025);  // stage 2 never receives it
    if (r == 1) p2p(r, "recv", 2, 1, 2035);
    if (r == 3) p2p(r, "recv", 2, 1, 2030);
    d.ev(r, "exception", 1'002'100 + r,
         {{"type", "DistBackendError"}, {"message", "Timed out waiting for recv"}});
    d.ev(r, "detect", 1'002'100 + r,
         {{"detector", "observed:exception"},
          {"step", 1},
          {"layer", ""},
          {"cause", "exception"},
          {"source", "observed"}});
    d.ev(r, "exit", 1'002'300, {{"code", 1}});
  }
  const auto res = judge_logs(
      load_scenario_string(
          "[scenario]\nname = \"t\"\n[job]\nworkload = \"external\"\ncommand = [\"python3\", "
          "\"t.py\"]\nsteps = 4\nranks = 4\n[[fault]]\nkind = \"hang\"\nranks = [2]\nstep = 1\n"
          "duration_ms = \"forever\"\n[expect]\nrank = 2\ncause = \"hang\"\n",
          "judge.toml"),
      d, Job(1, 1'500'000));
  EXPECT_EQ(nanchaos::results::to_json(res)["absent_ranks"], json::array({2}));
  ASSERT_TRUE(res.first_detection.has_value());
  EXPECT_EQ(res.first_detection->ranks, std::vector<int64_t>({2}));
  EXPECT_EQ(res.first_detection->cause, "hang");
  EXPECT_EQ(res.verdict, results::Verdict::kPass) << res.reason;
}

// Rank 1 skips its step-2 update without telling rank 0 (Lightning's `return None`): its step-3
// bucket all-reduce meets rank 0's step-2 one as collective #2, and rank 0 later waits in #3
// until its process-group timeout. The flight recorder saw ranks disagree at step 2 long before
// the timeout: the first detection is that collective_mismatch (rank 1, step 2), not the hang.
TEST(JudgeExternal, ASkippedCollectiveIsFirstReportedAsACollectiveMismatch) {
  RunDir d("skip-coll");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    for (int64_t s = 0; s < 4; ++s) {
      const int64_t t = 1000 + s * 1000;
      if (r == 1 && s == 2) {
        d.inject(r, 2, t + 5);
        d.ev(r, "step_begin", t, {{"step", s}});
        d.ev(r, "step_end", t + 30, {{"step", s}, {"loss", 2.0}, {"lr", 1e-3}, {"action", "skip"}});
        continue;
      }
      if (r == 0 && s == 3) {
        d.ev(r, "step_begin", t, {{"step", s}});
        d.coll(r, seq, s, t + 10, false);
        break;
      }
      d.step(r, s, t, &seq);
    }
    if (r == 1) {
      d.final_ok(r, 4, 9000);
      continue;
    }
    d.ev(r, "exception", 1'004'100,
         {{"type", "DistBackendError"},
          {"message", "Watchdog caught collective operation timeout"}});
    d.ev(r, "detect", 1'004'100,
         {{"detector", "observed:exception"},
          {"step", 3},
          {"layer", ""},
          {"cause", "exception"},
          {"source", "observed"}});
    d.ev(r, "exit", 1'004'300, {{"code", 1}});
  }
  const auto res = judge_logs(Load(std::string(kTensorFault) +
                                   "[expect]\nfirst_detector = \"collective_mismatch\"\nrank = 1\n"
                                   "within_steps = 0\noutcome = \"crashed\"\n"),
                              d, Job(1, 1'500'000));
  ASSERT_TRUE(res.first_detection.has_value());
  EXPECT_EQ(res.first_detection->detector, "collective_mismatch");
  EXPECT_EQ(res.first_detection->ranks, std::vector<int64_t>({1}));
  EXPECT_EQ(res.first_detection->step, 2);
  EXPECT_EQ(res.first_detection->latency_steps, 0);
  EXPECT_EQ(nanchaos::results::to_json(res)["collective_mismatch"]["seq"], 2);
  EXPECT_EQ(nanchaos::results::to_json(res)["collective_mismatch"]["diverged"], json::array({1}));
  // The stack's own word came later (rank 0's exception at step 3): it is still in the list,
  // and what the fault did is scored on it, not on the harness's reading.
  ASSERT_EQ(res.detections.size(), 2u);
  EXPECT_EQ(res.detections[1].detector, "observed:exception");
  EXPECT_EQ(res.fault_outcome, results::FaultOutcome::kDetectedUnrecovered);
  EXPECT_EQ(res.verdict, results::Verdict::kPass) << res.reason;
}

// The same run without the job's exception: the harness's mismatch alone is no detection of the
// stack, so the fault is not `detected_*`.
TEST(JudgeExternal, ACollectiveMismatchAloneIsNotTheStacksDetection) {
  RunDir d("skip-coll-quiet");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    for (int64_t s = 0; s < 4; ++s) {
      if (r == 1 && s == 2) {
        d.inject(r, 2, 3005);
        d.ev(r, "step_begin", 3000, {{"step", s}});
        d.ev(r, "step_end", 3030, {{"step", s}, {"loss", 2.0}, {"lr", 1e-3}, {"action", "skip"}});
        continue;
      }
      if (r == 1 && s == 3) {  // rank 1 ran one all-reduce short: its peer gets the last one
        d.step(r, s, 1000 + s * 1000, &seq);
        continue;
      }
      d.step(r, s, 1000 + s * 1000, &seq);
    }
    d.final_ok(r, 4, 9000);
  }
  const auto res =
      judge_logs(Load(std::string(kTensorFault) + "[expect]\ndetected = false\n"), d, Job());
  ASSERT_TRUE(res.first_detection.has_value());
  EXPECT_EQ(res.first_detection->detector, "collective_mismatch");
  EXPECT_EQ(nanchaos::results::to_json(res)["false_positives"], 0);
  EXPECT_NE(res.fault_outcome, results::FaultOutcome::kDetectedRecovered);
  EXPECT_NE(res.fault_outcome, results::FaultOutcome::kDetectedUnrecovered);
}

// Rank 1 stalls before its step-1 all-reduce; rank 0 gives up on collective #1 with an error.
// A SIGTERM handler then revives rank 1 for one last broadcast (Lightning's), which the agent
// records as collective #1 too. That late entry took no part in #1: rank 1 is still the absent
// rank, its entry is no collective mismatch, and since it raised only after rank 0 gave up on
// it, the cause is hang.
TEST(JudgeExternal, AnEntryAfterThePeerGaveUpCountsAsAbsent) {
  RunDir d("late-entry");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    d.ev(r, "step_begin", 2000, {{"step", 1}});
    if (r == 1) {
      d.inject(r, 1, 2050, "hang");
      d.ev(r, "coll_enter", 1'003'000,
           {{"seq", seq}, {"name", "broadcast"}, {"count", 1}, {"dtype", "int64"}, {"step", 1}});
      d.ev(r, "coll_leave", 1'003'100, {{"seq", seq}, {"name", "broadcast"}, {"status", "error"}});
    } else {
      d.coll(r, seq, 1, 2100, false);
      d.ev(r, "coll_leave", 1'002'100,
           {{"seq", seq}, {"name", "grad_allreduce"}, {"status", "error"}});
    }
    d.ev(r, "exception", 1'003'200 + r,
         {{"type", "DistBackendError"},
          {"message", "Watchdog caught collective operation timeout"}});
    d.ev(r, "detect", 1'003'200 + r,
         {{"detector", "observed:exception"},
          {"step", 1},
          {"layer", ""},
          {"cause", "exception"},
          {"source", "observed"}});
    d.ev(r, "exit", 1'003'300, {{"code", 1}});
  }
  const auto res = judge_logs(
      Load("[[fault]]\nkind = \"hang\"\nranks = [1]\nstep = 1\nduration_ms = \"forever\"\n"
           "[detectors]\ncollective_timeout_ms = 1000\n"
           "[expect]\nfirst_detector = \"observed:exception\"\nrank = 1\n"),
      d, Job(1, 1'500'000));
  EXPECT_EQ(nanchaos::results::to_json(res)["absent_ranks"], json::array({1}));
  EXPECT_TRUE(nanchaos::results::to_json(res)["collective_mismatch"].is_null())
      << nanchaos::results::to_json(res)["collective_mismatch"];
  ASSERT_TRUE(res.first_detection.has_value());
  EXPECT_EQ(res.first_detection->ranks, std::vector<int64_t>({1}));
  EXPECT_EQ(res.first_detection->cause, "hang");  // it raised only after rank 0 gave up on it
  EXPECT_EQ(res.verdict, results::Verdict::kPass) << res.reason;
}

TEST(JudgeExternal, AttachErrorIsTheSetupReason) {
  RunDir d("attach-error");
  d.start(0, 2);
  d.launch(1, 2);
  d.ev(1, "attach_error", 20,
       {{"rank", 1}, {"reason", "cannot execute ./x.py: Permission denied"}});
  const auto res = judge_logs(Load(""), d, Job(1));
  EXPECT_EQ(res.verdict, results::Verdict::kError);
  EXPECT_EQ(res.reason, "rank 1: cannot execute ./x.py: Permission denied");
}

TEST(JudgeExternal, NeverLoadedAgentNamesTheRankExitCodeAndLastLogLine) {
  RunDir d("never-loaded");
  d.launch(0, 2);
  d.launch(1, 2);
  d.ranks_log("hello\nbash: line 1: train: command not found\n\n");
  const auto res = judge_logs(Load(""), d, Job(127));
  EXPECT_EQ(res.verdict, results::Verdict::kError);
  EXPECT_EQ(res.reason,
            "rank 0: the nanchaos agent never loaded (no `agent` event): the command is not a "
            "Python program or its interpreter did not run the bootstrap, nor a LibTorch program "
            "that constructs nanchaos::Agent; launcher exit status "
            "127; last line of ranks.log: bash: line 1: train: command not found");
}

TEST(JudgeExternal, TheControllersAttachFailureIsUsed) {
  RunDir d("controller-kill");
  d.launch(0, 2);
  d.launch(1, 2);
  JobResult job = Job(143);
  job.attach_failure =
      "rank 0: the nanchaos agent never loaded (no `agent` event): the command is not a Python "
      "program or its interpreter did not run the bootstrap, nor a LibTorch program that "
      "constructs nanchaos::Agent (attach_timeout_ms = 2000 ms passed)";
  const auto res = judge_logs(Load(""), d, job);
  EXPECT_EQ(res.verdict, results::Verdict::kError);
  EXPECT_EQ(res.reason, job.attach_failure + "; launcher exit status 143");
}

TEST(JudgeExternal, AgentWithoutStartNeverAttachedToAModel) {
  RunDir d("no-model");
  for (int r = 0; r < 2; ++r) {
    d.launch(r, 2);
    d.agent(r);
    d.ev(r, "exit", 100, {{"code", 0}});
  }
  const auto res = judge_logs(Load(""), d, Job(0));
  EXPECT_EQ(res.verdict, results::Verdict::kError);
  EXPECT_EQ(res.reason,
            "rank 0: the agent loaded but never attached to a model (no DistributedDataParallel "
            "and no optimizer created); launcher exit status 0");
}

// A script that fails before building its model (a SyntaxError, an ImportError): the reason is
// the exception, not "never attached".
TEST(JudgeExternal, AnExceptionBeforeAttachIsTheSetupReason) {
  RunDir d("exc-before-attach");
  for (int r = 0; r < 2; ++r) {
    d.launch(r, 2);
    d.agent(r);
    d.ev(r, "exception", 50,
         {{"type", "ModuleNotFoundError"},
          {"message", "ModuleNotFoundError: No module named 'torchvision_nope'"}});
    d.ev(r, "exit", 60, {{"code", 1}});
  }
  const auto res = judge_logs(Load(""), d, Job(1));
  EXPECT_EQ(res.verdict, results::Verdict::kError);
  EXPECT_EQ(res.reason,
            "rank 0: the job raised before the agent attached to a model: ModuleNotFoundError: "
            "No module named 'torchvision_nope'");
}

// Rank 1 was SIGKILLed (crash fault); rank 0's collective then failed ("connection reset by
// peer") and it raised. The absent rank is dead: rank_failure, not hang. The failed wait of rank
// 0 counts towards the longest collective wait.
TEST(JudgeExternal, ObservedExceptionBlamesADeadAbsentRankAsRankFailure) {
  RunDir d("exc-dead");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    d.ev(r, "step_begin", 2000, {{"step", 1}});
    if (r == 1) {
      d.inject(r, 1, 2050, "crash");
      continue;  // killed: no exit record
    }
    d.coll(r, seq, 1, 2100, false);
    d.ev(r, "coll_leave", 2'002'100,
         {{"seq", seq}, {"name", "grad_allreduce"}, {"status", "error"}});
    d.ev(r, "exception", 2'002'200,
         {{"type", "RuntimeError"}, {"message", "RuntimeError: Connection reset by peer"}});
    d.ev(r, "detect", 2'002'200,
         {{"detector", "observed:exception"},
          {"step", 1},
          {"layer", ""},
          {"cause", ""},
          {"source", "observed"}});
    d.ev(r, "exit", 2'002'300, {{"code", 1}});
  }
  JobResult job = Job(137, 2'100'000);
  job.rank_gone_us = {{1, kT0 + 2'060}, {0, kT0 + 2'002'400}};
  const auto res = judge_logs(Load("[[fault]]\nkind = \"crash\"\nranks = [1]\nstep = 1\n"
                                   "[expect]\nrank = 1\ncause = \"rank_failure\"\n"
                                   "outcome = \"crashed\"\n"),
                              d, job);
  ASSERT_TRUE(res.first_detection.has_value());
  EXPECT_EQ(res.first_detection->ranks, std::vector<int64_t>({1}));
  EXPECT_EQ(res.first_detection->cause, "rank_failure");
  EXPECT_NEAR(nanchaos::results::to_json(res)["longest_collective_wait_ms"].get<double>(), 2000.0,
              0.01);
  EXPECT_EQ(res.verdict, results::Verdict::kPass) << res.reason;
}

// An unplanned death (the OOM killer: no crash injection) that the controller's 10-ms pid watch
// saw only after the peer's exception, but before the peer's own process went: still a rank
// failure. A rank torn down after its raising peer is gone is a hang (the test above).
TEST(JudgeExternal, ARankSeenGoneBeforeTheRaisingPeerIsARankFailure) {
  RunDir d("oom");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    d.step(r, 0, 1000, &seq);
    d.ev(r, "step_begin", 2000, {{"step", 1}});
    if (r == 1) continue;  // killed from outside: no exit record, no injection
    d.coll(r, seq, 1, 2100, false);
    d.ev(r, "exception", 2200, {{"type", "RuntimeError"}, {"message", "Connection reset by peer"}});
    d.ev(r, "detect", 2200,
         {{"detector", "observed:exception"},
          {"step", 1},
          {"layer", ""},
          {"cause", ""},
          {"source", "observed"}});
    d.ev(r, "exit", 2300, {{"code", 1}});
  }
  JobResult job = Job(137, 100'000);
  job.rank_gone_us = {{1, kT0 + 2'250}, {0, kT0 + 12'300}};
  const auto res =
      judge_logs(Load("[expect]\nrank = 1\ncause = \"rank_failure\"\nmax_false_positives = 1\n"
                      "outcome = \"crashed\"\n"),
                 d, job);
  ASSERT_EQ(res.detections.size(), 1u);
  EXPECT_EQ(res.detections[0].ranks, std::vector<int64_t>({1}));
  EXPECT_EQ(res.detections[0].cause, "rank_failure");
  EXPECT_EQ(res.verdict, results::Verdict::kPass) << res.reason;
}

TEST(JudgeExternal, AFaultStepTheJobNeverReachedSaysSo) {
  RunDir d("short-job");
  FourIterations(d, [&](int) {});
  const auto res =
      judge_logs(Load(std::string(kTensorFault) +
                          "[[fault]]\nkind = \"tensor\"\ntarget = \"activation:net.1\"\n"
                          "ranks = [1]\nstep = 6\n",
                      /*steps=*/8),
                 d, Job());
  EXPECT_EQ(res.verdict, results::Verdict::kError);
  EXPECT_NE(res.reason.find("the job ran 4 iteration(s), so step 6 never came"), std::string::npos)
      << res.reason;
}

TEST(JudgeExternal, ATargetThatMatchesNoModuleGetsTheNearestName) {
  RunDir d("bad-target");
  FourIterations(d, [&](int) {});
  const auto res = judge_logs(Load(std::string(kTensorFault) +
                                   "[[fault]]\nkind = \"tensor\"\ntarget = \"activation:net.9\"\n"
                                   "ranks = [1]\nstep = 3\n"),
                              d, Job());
  EXPECT_EQ(res.verdict, results::Verdict::kError);
  EXPECT_NE(res.reason.find("[[fault]] #2 (tensor, step 3, target activation:net.9: it matches no "
                            "module (nor a probe that ran) of the model (did you mean "
                            "activation:net."),
            std::string::npos)
      << res.reason;
}

// A program that exits 0 before [job].steps without an abort ran less than the scenario asks: a
// `detected = false` would otherwise pass on zero steps (found by a new user's hostile job).
TEST(JudgeExternal, ACleanExitShortOfTheStepsIsAnError) {
  RunDir d("early-exit");
  FourIterations(d, [&](int) {});
  const auto res = judge_logs(Load("[expect]\ndetected = false\n", /*steps=*/12), d, Job());
  EXPECT_EQ(res.outcome, results::Outcome::kCompleted);
  EXPECT_EQ(res.verdict, results::Verdict::kError);
  EXPECT_NE(res.reason.find("the job exited 0 after 4 of the 12 steps of [job].steps"),
            std::string::npos)
      << res.reason;
}

// An accumulating job run with micro_batches left at 1: the agent counts every micro-batch as an
// iteration (8 for steps = 4); the reason leads with the likely cause and the fix.
TEST(JudgeExternal, AnIterationCountThatIsAMultipleOfTheStepsSuggestsMicroBatches) {
  RunDir d("accumulation");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    for (int64_t s = 0; s < 8; ++s) d.step(r, s, 1000 + s * 1000, &seq);
    d.final_ok(r, 8, 20000);
  }
  const auto res = judge_logs(Load("[expect]\ndetected = false\nrecovered = true\n"), d, Job());
  EXPECT_EQ(res.verdict, results::Verdict::kFail);
  EXPECT_EQ(res.reason.rfind("counted 8 iterations for steps = 4: does the job accumulate over 2 "
                             "micro-batches? set micro_batches = 2; recovered: expected true",
                             0),
            0u)
      << res.reason;
  // micro_batches = 4 for a job that does not accumulate: 4 iterations where 16 were asked.
  const auto under =
      judge_logs(Load("micro_batches = 4\n[expect]\ndetected = false\n", /*steps=*/16), d, Job());
  EXPECT_EQ(under.verdict, results::Verdict::kError);
  EXPECT_NE(under.reason.find("; counted 8 iterations for steps = 16 with micro_batches = 4: does "
                              "the job accumulate over 2 micro-batches? set micro_batches = 2"),
            std::string::npos)
      << under.reason;
  // Counts that agree, or that no accumulation factor explains, add nothing.
  const auto same = judge_logs(Load("[expect]\ndetected = false\n", /*steps=*/8), d, Job());
  EXPECT_EQ(same.verdict, results::Verdict::kPass);
  EXPECT_EQ(same.reason, "");
  const auto odd = judge_logs(Load("[expect]\nrecovered = true\n", /*steps=*/3), d, Job());
  EXPECT_EQ(odd.reason.find("counted"), std::string::npos) << odd.reason;
}

// The agent refusing the job after `start` (a second model, a second Agent) is the scenario's
// error, not "injection not verified".
TEST(JudgeExternal, AnAttachErrorAfterStartIsTheReason) {
  RunDir d("late-attach-error");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    d.ev(r, "attach_error", 20,
         {{"rank", r}, {"reason", "attach() called again with a different model"}});
  }
  const auto res = judge_logs(Load(kTensorFault), d, Job(134));
  EXPECT_EQ(res.verdict, results::Verdict::kError);
  EXPECT_EQ(res.reason, "rank 0: attach() called again with a different model");
}

// Exit code 0 and no `final`: nothing crashed, the program never called finish(); the reason
// says so, and a fault that never fired leaves fault_outcome null.
TEST(JudgeExternal, NoFinalRecordSaysFinishWasNotCalledAndAFaultThatNeverFiredHasNoOutcome) {
  RunDir d("no-finish");
  for (int r = 0; r < 2; ++r) {
    d.start(r, 2);
    int64_t seq = 0;
    for (int64_t s = 0; s < 4; ++s) d.step(r, s, 1000 + s * 1000, &seq);
    d.ev(r, "exit", 9000, {{"code", 0}});
  }
  const auto res = judge_logs(Load(kTensorFault), d, Job());
  EXPECT_EQ(res.fault_outcome, results::FaultOutcome::kNone);  // the step-2 fault never fired
  EXPECT_EQ(res.verdict, results::Verdict::kError) << res.reason;
  // The same logs judged against a scenario without faults.
  const auto clean = judge_logs(Load("[expect]\ndetected = false\n"), d, Job());
  EXPECT_EQ(clean.verdict, results::Verdict::kFail);
  EXPECT_NE(clean.reason.find("rank(s) 0, 1 exited 0 without a `final` record"), std::string::npos)
      << clean.reason;
  EXPECT_NE(clean.reason.find("Agent::finish()"), std::string::npos) << clean.reason;
}

}  // namespace
}  // namespace nanchaos::harness
