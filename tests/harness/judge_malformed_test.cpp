// Regression tests for what nanchaos_fuzz_report found (docs/fuzzing.md): event logs the judge
// reads must give a verdict or a clear error, never an exception out of judge().
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "harness/controller/judge.h"
#include "harness/evidence/events.h"
#include "harness/scenario/scenario.h"
#include "tests/harness/event_logs.h"

namespace nanchaos::harness {
namespace {

using test_util::EventLogDir;
using test_util::judge_logs;
using test_util::kT0;

const char* kScenario = R"([scenario]
name = "judge-malformed"
seed = 3
[job]
workload = "mlp"
ranks = 2
steps = 4
[expect]
detected = false
)";

JobResult clean_job() {
  JobResult j;
  j.exit_code = 0;
  j.t0_us = kT0;
  j.t_end_us = kT0 + 2'000'000;
  return j;
}

// A clean two-rank run as the ranks log it.
void clean_run(EventLogDir& d) {
  for (int r = 0; r < 2; ++r) {
    d.ev(r, "start", 10, {{"rank", r}, {"world", 2}, {"pid", 100 + r}, {"seed", 3}});
    for (int st = 0; st < 4; ++st) {
      d.ev(r, "step_begin", 100 + 100 * st, {{"step", st}});
      d.ev(r, "step_end", 150 + 100 * st,
           {{"step", st}, {"loss", 2.0 - 0.1 * st}, {"action", "update"}});
    }
    d.ev(r, "final", 600,
         {{"steps_completed", 4},
          {"eval_loss", 1.5},
          {"initial_eval_loss", 2.0},
          {"params_hash", "00000000000000aa"},
          {"optim_hash", "00000000000000bb"},
          {"params_finite", true}});
    d.ev(r, "exit", 700, {{"code", 0}});
  }
}

// clean_run() with `tail` written after rank `rank`'s lines, flushed to the files (judge_run).
void clean_run_then(EventLogDir& d, int rank, const std::string& tail) {
  clean_run(d);
  d.raw(rank, tail);
  d.flush();
}

TEST(JudgeMalformedLogs, LinesThatAreNotObjectsAreSkipped) {
  // crash-4ba8b1e2 (fuzz): a line that parses as a JSON number made e.value() throw
  // type_error.306 out of the judge.
  EventLogDir d("nanchaos_judge_malformed", "not_objects");
  {
    std::ofstream(d.path() + "/events/rank-0.jsonl")
        << "12\n{\"ev\":\"start\",\"t_us\":1}\n[1,2]\n\"x\"\nnull\n";
  }
  const auto events = read_events(d.path() + "/events/rank-0.jsonl");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["ev"], "start");

  EventLogDir plain("nanchaos_judge_malformed", "plain");
  clean_run(plain);
  EventLogDir junk("nanchaos_judge_malformed", "junk");
  clean_run(junk);
  junk.raw(0, "7\n[\"step_end\"]\ntrue\n");
  const Scenario s = load_scenario_string(kScenario, "m.toml");
  const auto a = judge_logs(s, plain, clean_job());
  const auto b = judge_logs(s, junk, clean_job());
  EXPECT_EQ(a.verdict, results::Verdict::kPass) << a.reason;
  EXPECT_EQ(b.verdict, results::Verdict::kPass) << b.reason;
  EXPECT_EQ(b.outcome, results::Outcome::kCompleted);
  EXPECT_EQ(b.steps_completed, 4);
}

TEST(JudgeMalformedLogs, AFieldOfTheWrongTypeIsAnErrorNamingTheFolder) {
  // crash-fcd4b7dc (fuzz): "step": "x" made e.value("step", int64_t) throw type_error.302.
  EventLogDir d("nanchaos_judge_malformed", "wrong_type");
  // Read from the files, as after a job (judge_run).
  clean_run_then(d, 1, "{\"ev\":\"step_end\",\"step\":\"x\",\"t_us\":1000000500}\n");
  const Scenario s = load_scenario_string(kScenario, "m.toml");
  const auto res = judge_run(s, d.path(), clean_job());
  EXPECT_EQ(res.verdict, results::Verdict::kError);
  // The file, its line and the field (the log's last line: the clean run's lines come first).
  const std::string log = d.path() + "/events/rank-1.jsonl";
  std::ifstream in(log);
  int lines = 0;
  for (std::string l; std::getline(in, l);) ++lines;
  EXPECT_EQ(res.reason, "cannot judge: an event has a field of the wrong type: " + log + ":" +
                            std::to_string(lines) +
                            ": event \"step_end\", field \"step\": [json.exception.type_error.302] "
                            "type must be number, but is string")
      << res.reason;
  EXPECT_EQ(res.name, "judge-malformed");
  EXPECT_EQ(res.ranks, 2);
}

// A line that is no event with lines after it is a corrupted log, or a job writing something
// else into it: its events (a detection among them) cannot be vouched for, so the scenario is an
// error naming the file and line, never a verdict on what was left. A torn last line (a rank
// killed mid-write) is still skipped.
TEST(JudgeMalformedLogs, ALineThatIsNoEventBeforeTheLastIsAnErrorNamingTheFileAndLine) {
  const Scenario s = load_scenario_string(kScenario, "m.toml");
  const std::string plain_log = "/events/rank-1.jsonl";
  struct Case {
    std::string tail, why;
  };
  for (const Case& c :
       {Case{"garbage\n{\"ev\":\"x\",\"t_us\":1000000650}\n", "not JSON: \"garbage\""},
        Case{"[1,2]\n\n{\"ev\":\"x\",\"t_us\":1000000650}\n", "not a JSON object: \"[1,2]\""},
        Case{"{\"t_us\":1000000640,\"step\":2}\n{\"ev\":\"x\",\"t_us\":1}\n",
             "no string \"ev\": \"{\\\"t_us\\\":1000000640,\\\"step\\\":2}\""},
        Case{std::string(100, 'z') + "\n{}\n",
             "not JSON: \"" + std::string(80, 'z') + "\" (cut)"}}) {
    EventLogDir d("nanchaos_judge_malformed", "no_event");
    clean_run_then(d, 1, c.tail);
    const auto res = judge_run(s, d.path(), clean_job());
    EXPECT_EQ(res.verdict, results::Verdict::kError) << c.tail;
    // The clean run's 11 lines come first: the bad one is line 12.
    EXPECT_EQ(res.reason, "cannot judge: a line of a rank's event log is no event: " + d.path() +
                              plain_log + ":12: " + c.why)
        << res.reason;
  }
  // A whole last line (a newline ends it) that is no event: written so, not torn.
  EventLogDir whole("nanchaos_judge_malformed", "whole_last");
  clean_run_then(whole, 1, "{\"ev\":null}\n");
  const auto bad = judge_run(s, whole.path(), clean_job());
  EXPECT_EQ(bad.reason, "cannot judge: a line of a rank's event log is no event: " + whole.path() +
                            plain_log + ":12: no string \"ev\": \"{\\\"ev\\\":null}\"")
      << bad.reason;
  // Blanks after it do not make a whole line torn.
  EventLogDir blanks("nanchaos_judge_malformed", "blanks_after");
  clean_run_then(blanks, 1, "garbage\n\n  ");
  EXPECT_EQ(judge_run(s, blanks.path(), clean_job()).reason,
            "cannot judge: a line of a rank's event log is no event: " + blanks.path() + plain_log +
                ":12: not JSON: \"garbage\"");
  // The last line alone torn (no newline, or NUL bytes a killed writer left): skipped, the run
  // judged as before.
  EventLogDir nul("nanchaos_judge_malformed", "nul_tail");
  clean_run_then(nul, 1, std::string("{\"ev\":\"step_be\0\0\0", 15));
  EXPECT_EQ(judge_run(s, nul.path(), clean_job()).verdict, results::Verdict::kPass);
  EventLogDir torn("nanchaos_judge_malformed", "torn_last");
  clean_run_then(torn, 1, "{\"ev\":\"step_be");
  const auto ok = judge_run(s, torn.path(), clean_job());
  EXPECT_EQ(ok.verdict, results::Verdict::kPass) << ok.reason;
  EXPECT_EQ(ok.steps_completed, 4);
}

// NUL bytes with lines after them are no killed writer's tail (break-it: the controller's trim cut
// the log at the first NUL, dropping 5 valid lines, and the run was judged "crashed"): trim leaves
// them, a line of NULs alone is a gap a writer left (skipped), NULs in a line with text are no
// event. A log that is no regular file is named as such.
TEST(JudgeMalformedLogs, NulBytesBeforeTheEndAreNoTailAndALogMustBeARegularFile) {
  const Scenario s = load_scenario_string(kScenario, "m.toml");
  EventLogDir gap("nanchaos_judge_malformed", "nul_gap");
  clean_run_then(gap, 1, std::string("\0\0\0\0\n{\"ev\":\"marker\",\"t_us\":1000000650}\n", 39));
  const std::string log = gap.path() + "/events/rank-1.jsonl";
  const auto size = std::filesystem::file_size(log);
  trim_event_log(log);
  EXPECT_EQ(std::filesystem::file_size(log), size);  // nothing cut
  const auto ok = judge_run(s, gap.path(), clean_job());
  EXPECT_EQ(ok.verdict, results::Verdict::kPass) << ok.reason;
  EXPECT_EQ(ok.steps_completed, 4);

  EventLogDir mixed("nanchaos_judge_malformed", "nul_mixed");
  clean_run_then(
      mixed, 1,
      std::string("{\"ev\":\"m\",\0\"t_us\":1}\n{\"ev\":\"marker\",\"t_us\":1000000650}\n", 55));
  trim_event_log(mixed.path() + "/events/rank-1.jsonl");
  EXPECT_EQ(
      judge_run(s, mixed.path(), clean_job()).reason,
      "cannot judge: a line of a rank's event log is no event: " + mixed.path() +
          "/events/rank-1.jsonl:12: not JSON: \"{\\\"ev\\\":\\\"m\\\",\\u0000\\\"t_us\\\":1}\"");

  // A killed writer's tail (NULs to the end, after a torn line) is still cut.
  EventLogDir tail("nanchaos_judge_malformed", "nul_tail_cut");
  clean_run_then(tail, 1, std::string("{\"ev\":\"ma\0\0\0\0", 13));
  const std::string tail_log = tail.path() + "/events/rank-1.jsonl";
  const auto before = std::filesystem::file_size(tail_log);
  trim_event_log(tail_log);
  EXPECT_EQ(std::filesystem::file_size(tail_log), before - 13);

  EventLogDir dir("nanchaos_judge_malformed", "log_is_a_dir");
  clean_run(dir);
  dir.flush();
  const std::string dir_log = dir.path() + "/events/rank-0.jsonl";
  std::filesystem::remove(dir_log);
  std::filesystem::create_directory(dir_log);
  trim_event_log(dir_log);  // no throw
  EXPECT_TRUE(read_events(dir_log).empty());
  EXPECT_EQ(judge_run(s, dir.path(), clean_job()).reason,
            "cannot judge: a rank's event log is no regular file (a directory, a device, a "
            "pipe): " +
                dir_log);
}

// "loss": "abc" read as absent made a step without a loss, silently (break-it); now the field of
// the wrong type it is, named with its file and line.
TEST(JudgeMalformedLogs, ALossWrittenAsTextIsAnErrorNamingTheField) {
  EventLogDir d("nanchaos_judge_malformed", "loss_text");
  clean_run_then(d, 0, "{\"ev\":\"step_end\",\"t_us\":1000000460,\"step\":4,\"loss\":\"abc\"}\n");
  const Scenario s = load_scenario_string(kScenario, "m.toml");
  const auto res = judge_run(s, d.path(), clean_job());
  EXPECT_EQ(res.verdict, results::Verdict::kError);
  EXPECT_EQ(res.reason, "cannot judge: an event has a field of the wrong type: " + d.path() +
                            "/events/rank-0.jsonl:12: event \"step_end\", field \"loss\": "
                            "[json.exception.type_error.302] type must be number, but is string")
      << res.reason;
}

TEST(JudgeMalformedLogs, AHugeCollectiveSequenceNumberIsJudgedAtOnce) {
  // timeout-4c436c5c (fuzz): the first-gap search walked every number up to the highest `seq`
  // any rank logged, so a corrupted "seq": 4e15 kept the judge busy for days.
  const int64_t huge = 4'000'000'000'000'000;
  EventLogDir both("nanchaos_judge_malformed", "huge_seq_both");
  clean_run(both);
  for (int r = 0; r < 2; ++r) {
    both.ev(r, "coll_enter", 200, {{"seq", huge}, {"name", "grad_allreduce"}, {"step", 1}});
    both.ev(r, "coll_leave", 210, {{"seq", huge}, {"name", "grad_allreduce"}, {"status", "ok"}});
  }
  const Scenario s = load_scenario_string(kScenario, "m.toml");
  const auto a = judge_logs(s, both, clean_job());
  EXPECT_TRUE(nanchaos::results::to_json(a)["first_gap_collective"].is_null());

  EventLogDir one("nanchaos_judge_malformed", "huge_seq_one");
  clean_run(one);
  one.ev(0, "coll_enter", 200, {{"seq", huge}, {"name", "grad_allreduce"}, {"step", 1}});
  const auto b = judge_logs(s, one, clean_job());
  EXPECT_EQ(nanchaos::results::to_json(b)["first_gap_collective"], huge);
}

TEST(JudgeMalformedLogs, AFinalEventWithoutEvalLossIsNotReadOutOfBounds) {
  // crash-0bb299fb (fuzz, ASan heap-use-after-free): const json operator[] on the missing key
  // "eval_loss" of a `final` event read freed memory.
  EventLogDir d("nanchaos_judge_malformed", "final_without_loss");
  for (int r = 0; r < 2; ++r) {
    d.ev(r, "start", 10, {{"rank", r}, {"world", 2}, {"pid", 100 + r}, {"seed", 3}});
    for (int st = 0; st < 4; ++st) {
      d.ev(r, "step_end", 150 + 100 * st, {{"step", st}, {"loss", 1.0}, {"action", "update"}});
    }
    d.ev(r, "final", 600, {{"steps_completed", 4}, {"params_hash", "aa"}, {"optim_hash", "bb"}});
    d.ev(r, "exit", 700, {{"code", 0}});
  }
  const Scenario s = load_scenario_string(kScenario, "m.toml");
  const auto res = judge_logs(s, d, clean_job());
  ASSERT_TRUE(res.final_loss.has_value());
  EXPECT_TRUE(std::isnan(*res.final_loss));
  EXPECT_EQ(res.outcome, results::Outcome::kCompleted);
  EXPECT_EQ(res.steps_completed, 4);
}

TEST(JudgeMalformedLogs, AnIntegerFieldWrittenAsAHugeFloatIsIgnored) {
  // crash-f23ff3ba (fuzz, UBSan): value<int64_t>() of "seq": 2.2e120 converted a double that
  // int64 cannot hold (undefined behaviour). Such a field now counts as absent; a float that
  // fits is taken.
  EventLogDir d("nanchaos_judge_malformed", "huge_float");
  clean_run(d);
  d.raw(0,
        "{\"ev\":\"coll_enter\",\"seq\":2.2e120,\"t_us\":1000000200}\n"
        "{\"ev\":\"step_end\",\"step\":2.5e120,\"t_us\":1000000300}\n");
  const Scenario s = load_scenario_string(kScenario, "m.toml");
  const auto res = judge_logs(s, d, clean_job());
  EXPECT_EQ(res.steps_completed, 4);
  EXPECT_EQ(nanchaos::results::to_json(res)["first_gap_collective"],
            0);  // seq counted as 0, which rank 1 never entered
}

}  // namespace
}  // namespace nanchaos::harness
