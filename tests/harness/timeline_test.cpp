// report.html's timeline as the judge builds it (harness/controller/timeline.h) from evidence
// held in memory: bars, marks, waits never left, point-to-point bars, and a remote rank's events
// moved by its clock offset.
#include "harness/controller/timeline.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/controller/judge.h"
#include "harness/scenario/scenario.h"
#include "results/html.h"

namespace nanchaos::harness {
namespace {

using nlohmann::json;

json ev(const std::string& type, int64_t t_us, json fields = json::object()) {
  fields["ev"] = type;
  fields["t_us"] = t_us;
  return fields;
}

JobResult local_job() {
  JobResult job;
  job.t0_us = 1000;
  job.t_end_us = 16'000;
  return job;
}

// Rank 0 leaves collective 0 and sits in collective 1 until it aborts; rank 1 is injected,
// decides and exits. The job started at t = 1000 us.
std::vector<RankEvidence> two_ranks(const JobResult& job) {
  return {
      rank_evidence_from_events({ev("start", 2000, {{"rank", 0}}),
                                 ev("coll_enter", 3000, {{"seq", 0}, {"name", "consensus"}}),
                                 ev("coll_leave", 4000, {{"seq", 0}, {"name", "consensus"}}),
                                 ev("coll_enter", 5000, {{"seq", 1}, {"name", "grad_allreduce"}}),
                                 ev("detect", 9000, {{"detector", "watchdog"}, {"step", 3}}),
                                 ev("abort", 9500, {{"step", 3}})},
                                job, std::nullopt),
      rank_evidence_from_events(
          {ev("start", 2100, {{"rank", 1}}), ev("inject", 2500, {{"kind", "hang"}, {"step", 3}}),
           ev("decision", 2600, {{"action", "skip_step"}, {"step", 3}}),
           ev("exit", 2700, {{"code", 4}})},
          job, std::nullopt)};
}

TEST(JobTimeline, BarsOpenCollectivesAndMarksInMsSinceJobStart) {
  const JobResult job = local_job();
  const results::Timeline t = job_timeline(two_ranks(job), 1000, std::nullopt);
  EXPECT_EQ(t.ranks, 2);
  ASSERT_EQ(t.bars.size(), 2u);
  EXPECT_EQ(t.bars[0].name, "consensus");
  EXPECT_DOUBLE_EQ(t.bars[0].t0_ms, 2.0);
  EXPECT_DOUBLE_EQ(t.bars[0].t1_ms, 3.0);
  EXPECT_FALSE(t.bars[0].open);
  EXPECT_FALSE(t.bars[0].p2p);
  // Never left: drawn to the rank's last event (the abort at 9500 us).
  EXPECT_EQ(t.bars[1].name, "grad_allreduce");
  EXPECT_TRUE(t.bars[1].open);
  EXPECT_DOUBLE_EQ(t.bars[1].t1_ms, 8.5);
  std::vector<std::string> kinds;
  for (const auto& m : t.marks) kinds.push_back(std::to_string(m.rank) + ":" + m.kind);
  EXPECT_EQ(kinds,
            (std::vector<std::string>{"0:detect", "0:abort", "1:inject", "1:decision", "1:exit"}));
  EXPECT_EQ(t.marks[2].label, "inject hang s3");
  EXPECT_EQ(t.marks[4].label, "exit 4");
  EXPECT_DOUBLE_EQ(t.begin_ms, 1.0);
  EXPECT_DOUBLE_EQ(t.end_ms, 8.5);
  // A rank that wrote no event is an empty lane, not an error.
  auto three = two_ranks(job);
  three.push_back(rank_evidence_from_events({}, job, std::nullopt));
  EXPECT_EQ(job_timeline(three, 1000, std::nullopt).ranks, 3);
}

TEST(JobTimeline, ARankKilledWhileWaitingGetsABarToTheJobsEnd) {
  const JobResult job = local_job();
  auto ranks = two_ranks(job);
  ranks.push_back(
      rank_evidence_from_events({ev("start", 2000, {{"rank", 2}}),
                                 ev("coll_enter", 4000, {{"seq", 0}, {"name", "grad_allreduce"}})},
                                job, std::nullopt));
  const results::Timeline t = job_timeline(ranks, 1000, std::nullopt);
  ASSERT_EQ(t.bars.size(), 3u);
  EXPECT_EQ(t.bars[2].rank, 2);
  EXPECT_TRUE(t.bars[2].open);
  EXPECT_DOUBLE_EQ(t.bars[2].t0_ms, 3.0);
  EXPECT_DOUBLE_EQ(t.bars[2].t1_ms, 8.5);  // the latest event of any rank, not its own enter
  // With the job's end known (the controller killed it at 15 ms), the wait lasts until then.
  const results::Timeline k = job_timeline(ranks, 1000, 15.0);
  EXPECT_DOUBLE_EQ(k.bars[2].t1_ms, 15.0);
  EXPECT_DOUBLE_EQ(k.end_ms, 15.0);
  EXPECT_DOUBLE_EQ(k.bars[1].t1_ms, 8.5);  // rank 0 left evidence after its enter: unchanged
}

// Two pipeline stages, stage 1 on host "far" whose monotonic clock runs 7 s behind the
// controller's (its clock event says so). The judge hands over a timeline with stage 1's
// events moved onto the controller's clock and the sends/receives drawn as bars.
TEST(JobTimeline, TheJudgesTimelineHasP2pBarsAndRemoteTimesShifted) {
  constexpr int64_t kSkew = 7'000'000, kT0 = 1'000'000'000;
  JobResult job;
  job.t0_us = kT0;
  job.t_end_us = kT0 + 20'000;
  job.exit_code = 0;
  job.host = "ctl";
  job.real_minus_mono_us = 2'000'000;
  job.remote_ranks = {1};
  auto stage = [&](int r) {
    const int64_t skew = r == 1 ? kSkew : 0;
    auto at = [&](const std::string& type, int64_t t, json f = json::object()) {
      return ev(type, kT0 + t - skew, std::move(f));
    };
    const std::string host = r == 1 ? "far" : "ctl";
    const int peer = 1 - r;
    return std::vector<json>{
        at("start", 100, {{"rank", r}, {"world", 2}, {"host", host}}),
        at("clock", 200,
           {{"offset_us", 0},
            {"rtt_us", 80},
            {"samples", 8},
            {"server", "10.77.0.1"},
            {"real_minus_mono_us", 2'000'000 + skew}}),
        at("p2p_enter", 1000,
           {{"seq", 0}, {"op", r == 0 ? "send" : "recv"}, {"peer", peer}, {"step", 0}}),
        at("p2p_leave", 3000, {{"seq", 0}, {"status", "ok"}}),
        at("coll_enter", 4000, {{"seq", 0}, {"name", "grad_allreduce"}, {"step", 0}}),
        at("coll_leave", 5000, {{"seq", 0}, {"name", "grad_allreduce"}}),
        at("final", 6000, {{"step", 0}}),
        at("exit", 7000, {{"code", 0}})};
  };
  JobEvidence evidence;
  evidence.run_dir = "/nonexistent/run";  // the judge and the timeline open nothing
  for (int r = 0; r < 2; ++r) {
    evidence.ranks.push_back(rank_evidence_from_events(stage(r), job, std::nullopt));
  }
  ASSERT_EQ(evidence.ranks[1].shift_us, kSkew);
  const Scenario s = load_scenario_string(
      "[scenario]\nname = \"pp\"\n[job]\nworkload = \"mlp\"\nsteps = 1\nranks = 2\n", "pp.toml");
  const results::ScenarioResult res = judge(s, evidence, job);
  const results::Timeline& t = res.timeline;
  ASSERT_EQ(t.bars.size(), 4u);
  // Bars in the order they closed, rank by rank: send, collective; receive, collective.
  EXPECT_TRUE(t.bars[0].p2p);
  EXPECT_EQ(t.bars[0].name, "send to 1");
  EXPECT_EQ(t.bars[2].name, "recv from 0");
  EXPECT_EQ(t.bars[2].rank, 1);
  // Stage 1's times are on the controller's clock: 1 ms and 3 ms, not 7 s earlier.
  EXPECT_DOUBLE_EQ(t.bars[2].t0_ms, 1.0);
  EXPECT_DOUBLE_EQ(t.bars[2].t1_ms, 3.0);
  EXPECT_DOUBLE_EQ(t.bars[3].t0_ms, 4.0);
  EXPECT_FALSE(t.bars[3].p2p);
  EXPECT_DOUBLE_EQ(t.begin_ms, 0.1);
  EXPECT_DOUBLE_EQ(t.end_ms, 7.0);
  const std::string script = results::timeline_script(t, "pp", "/tmp/pp.svg");
  EXPECT_NE(script.find("$p2p << EOD\n1 3 0\n1 3 1\nEOD\n"), std::string::npos) << script;
  EXPECT_NE(script.find("$coll << EOD\n4 5 0\n4 5 1\nEOD\n"), std::string::npos) << script;
  EXPECT_NE(script.find("title 'send/recv'"), std::string::npos);
}

}  // namespace
}  // namespace nanchaos::harness
