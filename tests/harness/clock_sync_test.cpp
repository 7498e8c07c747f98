// Clock offsets (clock_sync.h), rank locality (rank_host.h) and the judge on ranks that ran on
// another host: their events moved onto the controller's timeline, no pid watch, blame from the
// logs. The same paths with real hosts are tests/multinode/.
#include "harness/evidence/clock_sync.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "harness/common/rank_host.h"
#include "harness/controller/job_result.h"
#include "harness/controller/judge.h"
#include "harness/scenario/scenario.h"
#include "tests/harness/event_logs.h"

namespace nanchaos::harness {
namespace {

using nlohmann::json;
using test_util::kT0;
namespace fs = std::filesystem;

TEST(ClockSync, LoopbackMeasurementIsNearZeroWithinItsRoundTrip) {
  ClockServer srv;
  ASSERT_TRUE(srv.ok());
  const std::string spec = srv.spec();
  EXPECT_NE(spec.find("127.0.0.1:" + std::to_string(srv.port())), std::string::npos) << spec;
  const ClockMeasurement m = measure_clock("127.0.0.1:" + std::to_string(srv.port()));
  ASSERT_EQ(m.error, "");
  EXPECT_EQ(m.samples, 8);
  EXPECT_EQ(m.server, "127.0.0.1");
  EXPECT_GE(m.rtt_us, 0);
  // One clock on both ends: the true offset is 0, and NTP's estimate is within rtt/2 of the
  // truth (+1 us of rounding).
  EXPECT_LE(std::llabs(m.offset_us), m.rtt_us / 2 + 1) << m.to_json().dump();
  const json e = m.to_json();
  EXPECT_EQ(e["samples"], 8);
  EXPECT_TRUE(e.contains("real_minus_mono_us"));
}

TEST(ClockSync, UnansweredAddressFallsBackToTheNext) {
  ClockServer srv;
  ASSERT_TRUE(srv.ok());
  // 192.0.2.1 (TEST-NET-1) never answers; the loopback address after it does.
  const ClockMeasurement m =
      measure_clock("192.0.2.1,127.0.0.1:" + std::to_string(srv.port()), 3, 100);
  ASSERT_EQ(m.error, "");
  EXPECT_EQ(m.server, "127.0.0.1");
  EXPECT_EQ(m.samples, 3);
}

TEST(ClockSync, ErrorsNameWhatWasTried) {
  EXPECT_EQ(measure_clock("10.0.0.1").error,
            "bad NANCHAOS_CLOCK '10.0.0.1' (want ADDR[,ADDR...]:PORT)");
  int port = 0;
  {
    ClockServer gone;  // a port that was ours a moment ago: nothing answers there now
    port = gone.port();
  }
  const ClockMeasurement m = measure_clock("nohost,127.0.0.1:" + std::to_string(port), 2, 50);
  EXPECT_EQ(m.samples, 0);
  EXPECT_EQ(m.error, "no answer from the controller's clock service on port " +
                         std::to_string(port) +
                         ": nohost (not an IPv4 address), 127.0.0.1 (no answer in 50 ms)");
  EXPECT_EQ(m.to_json()["error"], m.error);
}

TEST(ClockSync, TimelineShiftComposesTheThreeClocks) {
  // Rank: realtime = mono + 5000; controller realtime = rank realtime + 300;
  // controller: realtime = mono + 1000. Rank mono t -> controller mono t + 5000 + 300 - 1000.
  const json clock = {{"ev", "clock"}, {"offset_us", 300},     {"rtt_us", 40},
                      {"samples", 8},  {"server", "10.0.0.1"}, {"real_minus_mono_us", 5000}};
  EXPECT_EQ(timeline_shift_us(clock, 1000), 4300);
  EXPECT_FALSE(timeline_shift_us({{"error", "no answer"}, {"real_minus_mono_us", 5}}, 0));
  EXPECT_FALSE(timeline_shift_us({{"offset_us", 1}}, 0));
  EXPECT_FALSE(timeline_shift_us(json(), 0));
}

// A rank's first event (`start` or `launch`) read as the controller reads it, then judged local.
bool first_event_local(const json& e, const std::string& host, const std::string& pidns) {
  const StartEvent id = parse_start(e);
  return rank_is_local(id.host, id.pidns.value_or(""), host, pidns);
}

TEST(RankHost, LocalOnlyOnTheSameHostAndPidNamespace) {
  const std::string ns = "pid:[4026531836]";
  EXPECT_TRUE(first_event_local({{"host", "a"}, {"pidns", ns}, {"pid", 5}}, "a", ns));
  EXPECT_FALSE(first_event_local({{"host", "nch2"}, {"pidns", ns}, {"pid", 5}}, "a", ns));
  EXPECT_FALSE(first_event_local({{"host", "a"}, {"pidns", "pid:[4026532000]"}}, "a", ns));
  EXPECT_TRUE(first_event_local({{"pid", 5}}, "a", ns));  // an older rank's event: as before
  EXPECT_TRUE(first_event_local({{"host", "a"}}, "a", ns));
  EXPECT_TRUE(rank_is_local(this_host(), this_pid_namespace()));
  EXPECT_FALSE(rank_is_local("not-" + this_host(), this_pid_namespace()));
  EXPECT_NE(this_pid_namespace().rfind("pid:[", 0), std::string::npos) << this_pid_namespace();
}

// Two ranks of a crash scenario, rank 1 on host "far" whose monotonic clock is 7 s behind the
// controller's (its clock event says so); the controller saw no process of it (remote).
class RemoteRun : public test_util::EventLogDir {
 public:
  static constexpr int64_t kSkewUs = 7'000'000;  // far's monotonic = controller's - 7 s
  RemoteRun() : EventLogDir("nanchaos_remote", "crash") {}
  // `t` on the controller's timeline (us after kT0); a far rank's line carries its own clock.
  void at(int rank, const std::string& type, int64_t t, json fields = json::object()) {
    ev(rank, type, t - (rank == 1 ? kSkewUs : 0), std::move(fields));
  }
};

// Two ranks, rank 1 on host "far" whose clock runs 7 s behind; rank 1 dies at 1.02 ms in
// collective #0 and its own process watch records that (proc_watch.h, on far's clock); rank 0 is
// torn down by the launcher 300 ms later. `with_inject`: rank 1's log also holds the crash
// injection (written just before its SIGKILL), which the blame must not need.
void WriteRemoteCrash(RemoteRun& d, bool with_inject) {
  for (int r = 0; r < 2; ++r) {
    const std::string host = r == 1 ? "far" : "ctl";
    d.at(r, "start", 10, {{"rank", r}, {"world", 2}, {"pid", 5}, {"host", host}});
    // far: realtime = its mono + 2'000'000 + kSkew; controller: realtime = mono + 2'000'000
    // (controller real - far real = 0: NTP-synced hosts, different boot times).
    d.at(r, "clock", 20,
         {{"offset_us", 0},
          {"rtt_us", 80},
          {"samples", 8},
          {"server", "10.77.0.1"},
          {"real_minus_mono_us", 2'000'000 + (r == 1 ? RemoteRun::kSkewUs : 0)}});
    d.at(r, "step_begin", 1000, {{"step", 0}});
    d.at(r, "coll_enter", 1010,
         {{"seq", 0}, {"name", "grad_allreduce"}, {"step", 0}, {"count", 4}, {"dtype", "f"}});
    if (r == 1 && with_inject) {
      d.at(r, "inject", 1015,
           {{"fault", 0},
            {"kind", "crash"},
            {"step", 0},
            {"target", ""},
            {"detail", json::object()},
            {"replay", false}});
    }
  }
  d.flush();
  std::ofstream(fs::path(d.path()) / "events" / "rank-1.gone.json")
      << json{{"ev", "gone"}, {"rank", 1}, {"pid", 5}, {"t_us", kT0 + 1020 - RemoteRun::kSkewUs}}
             .dump()
      << "\n";
}

JobResult RemoteCrashJob() {
  JobResult job;
  job.exit_code = 137;
  job.t0_us = kT0;
  job.t_end_us = kT0 + 301'015;  // the launcher was reaped 300 ms after the injection
  job.host = "ctl";
  job.real_minus_mono_us = 2'000'000;
  job.remote_ranks = {1};
  job.rank_gone_us = {{0, kT0 + 300'000}};  // rank 0 is local and was seen going
  return job;
}

const char* kRemoteCrashScenario =
    "[scenario]\nname = \"t\"\n[job]\nworkload = \"mlp\"\nsteps = 4\nranks = 2\n"
    "[[fault]]\nkind = \"crash\"\nranks = [1]\nstep = 0\n"
    "[expect]\nrank = 1\ncause = \"rank_failure\"\noutcome = \"crashed\"\n"
    "abort_within_ms = 1000\n";

// The injector's record is not evidence of who died. Without the `inject`
// event the blame is the same, from the remote rank's own process watch.
TEST(JudgeRemoteRanks, CrashBlameNeedsNoInjectEvent) {
  RemoteRun d;
  WriteRemoteCrash(d, /*with_inject=*/false);
  const auto r = judge_run(load_scenario_string(kRemoteCrashScenario, "remote.toml"), d.path(),
                           RemoteCrashJob());
  EXPECT_EQ(r.outcome, results::Outcome::kCrashed);
  EXPECT_EQ(nanchaos::results::to_json(r)["dead_ranks"], json::array({1}))
      << nanchaos::results::to_json(r).dump();
  EXPECT_EQ(nanchaos::results::to_json(r)["postmortem"],
            (json{{"ranks", {1}}, {"cause", "rank_failure"}}));
  EXPECT_TRUE(r.injections.empty());
}

// Without the watch's record, and with the injection in the log, nothing says which rank died
// first: both silent ranks are dead (the injection does not decide).
TEST(JudgeRemoteRanks, WithoutTheWatchRecordTheInjectionDoesNotDecide) {
  RemoteRun d;
  WriteRemoteCrash(d, /*with_inject=*/true);
  fs::remove(fs::path(d.path()) / "events" / "rank-1.gone.json");
  const auto r = judge_run(load_scenario_string(kRemoteCrashScenario, "remote.toml"), d.path(),
                           RemoteCrashJob());
  EXPECT_EQ(nanchaos::results::to_json(r)["dead_ranks"], json::array({0, 1}))
      << nanchaos::results::to_json(r).dump();
}

TEST(JudgeRemoteRanks, EventsMovedOntoTheControllerTimelineAndCrashBlamedFromTheWatch) {
  RemoteRun d;
  WriteRemoteCrash(d, /*with_inject=*/true);
  const Scenario s = load_scenario_string(kRemoteCrashScenario, "remote.toml");
  const JobResult job = RemoteCrashJob();
  const auto r = judge_run(s, d.path(), job);
  EXPECT_EQ(r.outcome, results::Outcome::kCrashed);
  EXPECT_EQ(nanchaos::results::to_json(r)["dead_ranks"], json::array({1}))
      << nanchaos::results::to_json(r).dump();
  ASSERT_EQ(r.injections.size(), 1u);
  EXPECT_DOUBLE_EQ(r.injections[0].t_ms, 1.015);  // on the controller's timeline, not -6999 ms
  EXPECT_DOUBLE_EQ(nanchaos::results::to_json(r)["abort_latency_ms"].get<double>(), 300.0);
  EXPECT_EQ(r.verdict, results::Verdict::kPass) << r.reason;
  const json c = nanchaos::results::to_json(r)["clock_offsets"];
  EXPECT_EQ(c["1"]["host"], "far");
  EXPECT_EQ(c["1"]["offset_us"], 0);
  EXPECT_EQ(c["1"]["rtt_us"], 80);
  EXPECT_EQ(c["1"]["applied_shift_us"], RemoteRun::kSkewUs);
  EXPECT_EQ(c["0"]["applied_shift_us"], nullptr);  // the controller's own host: its clock
  EXPECT_EQ(nanchaos::results::to_json(r)["remote_ranks"], json::array({1}));
  EXPECT_EQ(nanchaos::results::to_json(r)["memory"],
            nullptr);  // nobody wrote an exit event, nobody was sampled
}

TEST(JudgeRemoteRanks, MemoryFromExitEventsSaysHowEachRankWasMeasured) {
  test_util::EventLogDir d("nanchaos_remote", "memory");
  for (int r = 0; r < 3; ++r) {
    d.ev(r, "start", 10, {{"rank", r}, {"world", 3}, {"pid", 5}, {"host", r ? "far" : "ctl"}});
    if (r < 2) d.ev(r, "exit", 100, {{"code", 1}, {"vm_hwm_kib", 2048}});
  }
  d.flush();
  JobResult job;
  job.exit_code = 1;
  job.t0_us = kT0;
  job.t_end_us = kT0 + 1000;
  job.host = "ctl";
  job.remote_ranks = {1, 2};
  job.rank_vm_hwm_kib = {{0, 4096}};
  const auto r = judge_run(
      load_scenario_string(
          "[scenario]\nname = \"t\"\n[job]\nworkload = \"mlp\"\nsteps = 4\nranks = 3\n", "m.toml"),
      d.path(), job);
  const json m = nanchaos::results::to_json(r)["memory"];
  ASSERT_TRUE(m.is_object()) << nanchaos::results::to_json(r).dump();
  EXPECT_EQ(m["ranks_measured"], 2);
  EXPECT_EQ(m["measured_by"], (json{{"0", "controller_sample"},
                                    {"1", "exit_event"},
                                    {"2", "none (remote, no exit event)"}}));
  EXPECT_EQ(nanchaos::results::to_json(r)["clock_offsets"],
            nullptr);  // no rank logged a clock event
}

}  // namespace
}  // namespace nanchaos::harness
