// The job facts' wire format: written as report.json's keys, read back, and read from the
// reports committed under results/ (written before the facts were structs).
#include "results/job_facts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include "results/report.h"

namespace nanchaos::results {
namespace {

using json = nlohmann::json;

JobFacts sample() {
  JobFacts f;
  f.postmortem.blame = Blame{{1}, "rank_failure"};
  f.postmortem.last_collective = {{0, LastCollective{10, "consensus", 5, false}},
                                  {1, std::nullopt}};
  f.postmortem.collective_mismatch = CollectiveMismatch{
      2, {{0, 3, "grad_allreduce", 128}, {1, 4, "consensus", std::nullopt}}, {1}, 3};
  f.postmortem.absent_ranks = {1};
  f.postmortem.first_gap_collective = 10;
  f.postmortem.dead_ranks = {1};
  f.postmortem.longest_collective_wait_ms = 2000;
  f.abort_latency_ms = 12.5;
  f.false_positives = 2;
  f.consistent = false;
  f.launcher_exit_code = 139;
  f.launcher_exit = {139, "SIGSEGV", true, false, "a teardown crash"};
  Memory m;
  m.ranks_measured = 1;
  m.per_rank_max_mib = m.per_rank_mean_mib = m.total_mib = 170.5;
  m.per_rank_mib = {{0, 170.5}};
  m.measured_by = {{0, "exit_event"}, {1, "none"}};
  f.memory = m;
  ClockOffset c;
  c.host = "b";
  c.applied_shift_us = -40;
  c.offset_us = -40;
  c.rtt_us = 9;
  c.samples = 8;
  f.clock_offsets = {{1, c}};
  f.remote_ranks = {1};
  Launch l;
  l.outcome = "crashed";
  l.checkpoint_loaded = Launch::Checkpoint{"ckpt.pt", std::nullopt};
  f.launches = {{l}};
  Restart r;
  r.cause = "crashed";
  r.resume_ms = 100.5;
  f.restarts = {{r}};
  return f;
}

TEST(JobFacts, WrittenAsReportKeysAndReadBack) {
  json s = json::object();
  write_facts(sample(), s);
  EXPECT_EQ(s["postmortem"], json({{"ranks", {1}}, {"cause", "rank_failure"}}));
  EXPECT_EQ(s["last_collective"]["0"],
            json({{"seq", 10}, {"name", "consensus"}, {"step", 5}, {"left", false}}));
  EXPECT_TRUE(s["last_collective"]["1"].is_null());
  EXPECT_EQ(s["collective_mismatch"]["ranks"][0]["count"], 128);
  EXPECT_FALSE(s["collective_mismatch"]["ranks"][1].contains("count"));
  EXPECT_TRUE(s["longest_collective_wait_ms"].is_number_float());  // 2000.0, as always
  EXPECT_EQ(s["launcher_exit"]["signal"], "SIGSEGV");
  EXPECT_EQ(s["memory"]["source"], "VmHWM");
  EXPECT_EQ(s["clock_offsets"]["1"]["applied_shift_us"], -40);
  EXPECT_TRUE(s["launches"][0]["checkpoint_loaded"]["step"].is_null());
  EXPECT_TRUE(s["restarts"][0]["load_ms"].is_null());

  const auto back = read_job_facts(s);
  ASSERT_TRUE(back.has_value());
  json again = json::object();
  write_facts(*back, again);
  EXPECT_EQ(again, s);
  EXPECT_EQ(back->postmortem.last_collective.at(0)->name, "consensus");
  EXPECT_FALSE(back->postmortem.last_collective.at(1).has_value());
}

TEST(JobFacts, NullAndAbsentKeys) {
  JobFacts f;
  json s = json::object();
  write_facts(f, s);
  EXPECT_TRUE(s["postmortem"].is_null());
  EXPECT_TRUE(s["memory"].is_null());
  EXPECT_TRUE(s["clock_offsets"].is_null());
  EXPECT_TRUE(s["first_gap_collective"].is_null());
  EXPECT_FALSE(s.contains("launches"));  // only for a job with [job] restarts
  EXPECT_FALSE(read_job_facts(json{{"name", "skipped"}}).has_value());
  EXPECT_FALSE(read_controller_facts(json{{"name", "skipped"}}).has_value());
  EXPECT_FALSE(read_interpreter(json{{"name", "skipped"}}).has_value());
}

TEST(JobFacts, ControllerAndInterpreter) {
  ScenarioResult r;
  r.controller = ControllerFacts{1000, 0, 2048, 4096, 5};
  r.interpreter = Interpreter{"/usr/bin/python3", "2.3.0",
                              std::map<std::string, std::string>{{"numpy", "1.26.4"}}};
  const json s = to_json(r);
  EXPECT_EQ(s["job_start_us"], 1000);
  EXPECT_EQ(s["controller"], json({{"vm_rss_kib", 2048}, {"vm_hwm_kib", 4096}, {"fds", 5}}));
  EXPECT_EQ(s["python_packages"], json({{"numpy", "1.26.4"}}));
  EXPECT_EQ(read_controller_facts(s)->vm_hwm_kib, 4096);
  EXPECT_EQ(read_interpreter(s)->packages->at("numpy"), "1.26.4");
  EXPECT_FALSE(s.contains("postmortem"));  // not judged: no judge's facts
}

// `fresh` cut down to the keys `old` has, at every level of objects and arrays of equal length (a
// report written before a key existed: collective_mismatch gained `diverged` and `step`,
// restarts[] gained `import_ms`).
json keys_of(const json& fresh, const json& old) {
  if (fresh.is_array() && old.is_array() && fresh.size() == old.size()) {
    json out = json::array();
    for (size_t i = 0; i < fresh.size(); ++i) out.push_back(keys_of(fresh[i], old[i]));
    return out;
  }
  if (!fresh.is_object() || !old.is_object()) return fresh;
  json out = json::object();
  for (const auto& [k, v] : old.items()) {
    if (fresh.contains(k)) out[k] = keys_of(fresh[k], v);
  }
  return out;
}

// The committed baseline predates `launcher_exit` and `logs`: every scenario's facts read, and
// written again, give back what that file has.
TEST(JobFacts, ReadsTheCommittedBaselineReport) {
  std::ifstream in(std::string(NANCHAOS_SOURCE_DIR) + "/results/baselines/cpu-suite.json");
  ASSERT_TRUE(in) << "results/baselines/cpu-suite.json";
  const json report = json::parse(in);
  int judged = 0;
  for (const auto& s : report["scenarios"]) {
    const auto facts = read_job_facts(s);
    if (!facts) continue;
    ++judged;
    json again = json::object();
    write_facts(*facts, again);
    if (const auto c = read_controller_facts(s)) write_facts(*c, again);
    for (const auto& [k, v] : again.items()) {
      if (s.contains(k)) EXPECT_EQ(keys_of(v, s[k]), s[k]) << s["name"] << ": " << k;
    }
  }
  EXPECT_GT(judged, 10);
}

// The step-time table from hand-made phase times: rank 1 is 3x the others on steps 1 and 2,
// rank 2 logged no times (left out), step 3 only rank 0 logged (not compared).
TEST(JobFacts, StepTimesPerRank) {
  using Phases = harness::StepEndEvent::Phases;
  auto at = [](int64_t data, int64_t compute) { return Phases{{data, compute, 1000, 100}, 50, 7}; };
  std::vector<std::map<int64_t, Phases>> by_rank(4);
  for (int64_t step = 0; step < 3; ++step) {
    by_rank[0][step] = at(100, 800);
    by_rank[1][step] = step == 0 ? at(100, 800) : at(100, 4800);  // 2000 -> 6000 us total
    by_rank[3][step] = at(300, 800);
  }
  by_rank[0][3] = at(100, 800);
  const std::vector<RankStepTime> t = rank_step_times(by_rank);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].rank, 0);
  EXPECT_EQ(t[1].rank, 1);
  EXPECT_EQ(t[2].rank, 3);
  EXPECT_EQ(t[1].steps, 3);
  EXPECT_DOUBLE_EQ(t[1].own_p50_us[1], 4800);  // nearest rank: the 2nd of 3 sorted
  EXPECT_DOUBLE_EQ(t[1].own_total_p50_us, 6000);
  // The ranks' median at steps 1 and 2 is rank 3's 2200 us (nearest rank of 3 totals).
  EXPECT_DOUBLE_EQ(t[1].score_max, 6000.0 / 2200.0);
  EXPECT_EQ(t[1].slow_steps, 2);
  EXPECT_EQ(t[0].slow_steps, 0);
  ASSERT_TRUE(t[0].run_delay_p50_us);
  EXPECT_DOUBLE_EQ(*t[0].run_delay_p50_us, 7);
  // Written as report.json `step_times` and read back; absent when no rank logged times.
  JobFacts f;
  f.step_times = t;
  json s = json::object();
  write_facts(f, s);
  ASSERT_TRUE(s.contains("step_times"));
  EXPECT_EQ(s["step_times"][1]["own_p50_us"]["compute"], 4800);
  s["memory"] = nullptr;  // read_job_facts needs one of its keys
  const auto back = read_job_facts(s);
  ASSERT_TRUE(back);
  ASSERT_EQ(back->step_times.size(), 3u);
  EXPECT_EQ(back->step_times[1].slow_steps, 2);
  json none = json::object();
  write_facts(JobFacts{}, none);
  EXPECT_FALSE(none.contains("step_times"));
  EXPECT_TRUE(rank_step_times({{}, {}}).empty());
}

// The per-step series: 450 steps on 2 ranks, rank 1 three times as slow at step 301 only. Cut to
// at most 200 points, the steps go in groups of 3 and each group keeps its max, so the one slow
// step survives; report.json carries it as `step_scores` and reads it back.
TEST(JobFacts, StepScoresDownsampleByTheMax) {
  using Phases = harness::StepEndEvent::Phases;
  std::vector<std::map<int64_t, Phases>> by_rank(2);
  for (int64_t step = 0; step < 450; ++step) {
    by_rank[0][step] = Phases{{0, 1000, 0, 0}, 10, std::nullopt};
    by_rank[1][step] = Phases{{0, step == 301 ? 3000 : 1000, 0, 0}, 10, std::nullopt};
  }
  const auto full = step_scores(by_rank, 1000);
  ASSERT_TRUE(full);
  EXPECT_EQ(full->stride, 1);
  EXPECT_EQ(full->steps.size(), 450u);
  const auto sc = step_scores(by_rank);  // kStepScorePoints = 200
  ASSERT_TRUE(sc);
  EXPECT_EQ(sc->stride, 3);
  ASSERT_EQ(sc->steps.size(), 150u);
  EXPECT_EQ(sc->steps[0], 0);
  EXPECT_EQ(sc->steps[100], 300);
  EXPECT_EQ(sc->ranks, (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(sc->score.size(), 2u);
  // Nearest-rank median of two totals is the lower one: rank 1 scores 3, rank 0 scores 1.
  EXPECT_DOUBLE_EQ(sc->score[1][100], 3.0);
  EXPECT_DOUBLE_EQ(sc->score[1][99], 1.0);
  EXPECT_DOUBLE_EQ(sc->score[0][100], 1.0);
  EXPECT_EQ(std::count_if(sc->score[1].begin(), sc->score[1].end(),
                          [](double x) { return x > kSlowScore; }),
            1);
  JobFacts f;
  f.step_scores = sc;
  json s = json::object();
  write_facts(f, s);
  ASSERT_TRUE(s.contains("step_scores"));
  EXPECT_EQ(s["step_scores"]["stride"], 3);
  EXPECT_EQ(s["step_scores"]["score"][1][100], 3.0);
  s["memory"] = nullptr;
  const auto back = read_job_facts(s);
  ASSERT_TRUE(back && back->step_scores);
  EXPECT_EQ(back->step_scores->steps, sc->steps);
  EXPECT_EQ(back->step_scores->score, sc->score);
  // No step logged by every rank: no series (and no key); 0 points is a caller's error.
  std::vector<std::map<int64_t, Phases>> apart(2);
  apart[0][0] = by_rank[0][0];
  apart[1][1] = by_rank[1][1];
  EXPECT_FALSE(step_scores(apart));
  json none = json::object();
  write_facts(JobFacts{}, none);
  EXPECT_FALSE(none.contains("step_scores"));
  EXPECT_THROW(step_scores(by_rank, 0), std::invalid_argument);
}

}  // namespace
}  // namespace nanchaos::results
