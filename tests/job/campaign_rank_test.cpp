// The in-launch campaign of built-in jobs (harness/job/runner.h run_campaign_on), on the
// in-process world: the checkpoint of the whole rank restores bit-exact (the launch ends with the
// clean run's digests, with stateful detectors and rollback snapshots), and each fault's folder
// judges and scores as the fault's scenario run alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "harness/comm/in_process.h"
#include "harness/controller/campaign_draw.h"
#include "harness/controller/job_result.h"
#include "harness/controller/judge.h"
#include "harness/evidence/events.h"
#include "harness/job/runner.h"
#include "harness/scenario/scenario.h"
#include "results/campaign.h"

namespace nanchaos::harness {
namespace {

namespace fs = std::filesystem;

// Stateful detectors (preset full: loss_spike, grad_norm_spike), rollback snapshots every 4
// steps and lr_backoff: everything the stack carries across steps is in play.
const char* kBase = R"([scenario]
name = "inlaunch"
seed = 7
[job]
workload = "mlp"
ranks = 2
steps = 24
[workload]
hidden = 32
features = 16
[detectors]
preset = "full"
collective_timeout_ms = 5000
[recovery]
policy = ["rollback", "lr_backoff"]
snapshot_every = 4
)";

std::string temp_dir(const std::string& name) {
  const std::string dir = (fs::path(::testing::TempDir()) /
                           ("nanchaos_inlaunch_" + name + "_" + std::to_string(getpid())))
                              .string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Runs `rank_fn(r, comm)` on `ranks` threads of one in-process world; the first non-zero code.
template <class Fn>
int run_world(int ranks, Fn rank_fn) {
  InProcessWorld world(ranks);
  std::vector<int> codes(size_t(ranks), -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        codes[size_t(r)] = rank_fn(world.communicator(r));
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
        codes[size_t(r)] = kRankExitSetup;
        world.abort(kRankExitSetup);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int c : codes) {
    if (c != 0) return c;
  }
  return 0;
}

// Every rank's `final` digests, rank order.
std::vector<std::string> final_digests(const std::string& run_dir, int ranks) {
  std::vector<std::string> out;
  for (int r = 0; r < ranks; ++r) {
    for (const auto& e : read_events(run_dir + "/events/rank-" + std::to_string(r) + ".jsonl")) {
      if (e.value("ev", "") == "final") out.push_back(e.dump());
    }
  }
  return out;
}

std::string digests_only(const std::string& final_line) {
  const auto j = nlohmann::json::parse(final_line);
  return j.value("params_hash", "") + "/" + j.value("optim_hash", "") + "/" +
         std::to_string(j.value("steps_completed", int64_t(-1)));
}

// The judge's result of a fault run in `dir`, with the exit code its ranks wrote.
results::ScenarioResult judge_dir(const Scenario& s, const std::string& dir, int exit_code) {
  JobResult job;
  job.exit_code = exit_code;
  job.t0_us = 0;
  job.t_end_us = now_us();
  return judge_run(s, dir, job);
}

int exit_code_of(const std::string& dir, int ranks) {
  for (int r = 0; r < ranks; ++r) {
    for (const auto& e : read_events(dir + "/events/rank-" + std::to_string(r) + ".jsonl")) {
      if (e.value("ev", "") == "exit" && e.value("code", 0) != 0) return e.value("code", 0);
    }
  }
  return 0;
}

struct Drawn {
  std::vector<DrawnFault> drawn;
  std::vector<InLaunchFault> faults;
};

// `n` faults of the campaign draw over kinds that neither hang nor kill a rank, each written as
// its scenario under `dir`/faults/NNN.
Drawn draw(const Scenario& base, const std::string& dir, int n) {
  Drawn out;
  const CampaignTargets t = builtin_targets(base);
  std::vector<std::string> kinds;
  for (const auto& k : campaign_kinds(base, t, {})) {
    if (k != "hang" && k != "crash") kinds.push_back(k);
  }
  out.drawn = draw_faults(base, kBase, t, kinds, 11, n);
  for (const auto& d : out.drawn) {
    const std::string fdir = dir + "/faults/" + std::to_string(d.index);
    fs::create_directories(fdir);
    const std::string toml = fault_scenario_toml(base, kBase, d);
    out.faults.push_back({load_scenario_string(toml, fdir + "/scenario.toml"), fdir});
  }
  return out;
}

TEST(InLaunchCampaign, CheckpointRestoresTheWholeRankBitExact) {
  const Scenario base = load_scenario_string(kBase, "inlaunch.toml");
  const int ranks = int(base.job.ranks);
  const std::string clean_dir = temp_dir("clean");
  ASSERT_EQ(0, run_world(ranks,
                         [&](auto comm) { return run_rank_on(base, std::move(comm), clean_dir); }));
  const std::string camp_dir = temp_dir("campaign");
  Drawn d = draw(base, camp_dir, 4);
  ASSERT_EQ(0, run_world(ranks, [&](auto comm) {
              return run_campaign_on(base, d.faults, std::move(comm), camp_dir);
            }));
  const auto clean = final_digests(clean_dir, ranks);
  const auto launch = final_digests(camp_dir, ranks);
  ASSERT_EQ(clean.size(), size_t(ranks));
  ASSERT_EQ(launch.size(), size_t(ranks));
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(digests_only(clean[size_t(r)]), digests_only(launch[size_t(r)])) << "rank " << r;
  }
  // Each window ends with its own end records, in its folder.
  for (const auto& f : d.faults) EXPECT_EQ(final_digests(f.dir, ranks).size(), size_t(ranks));
  if (!std::getenv("NANCHAOS_KEEP_RUNS")) {
    fs::remove_all(clean_dir);
    fs::remove_all(camp_dir);
  }
}

TEST(InLaunchCampaign, RowsEqualOneLaunchPerFault) {
  const Scenario base = load_scenario_string(kBase, "inlaunch.toml");
  const int ranks = int(base.job.ranks);
  const std::string camp_dir = temp_dir("equiv");
  Drawn d = draw(base, camp_dir, 6);
  ASSERT_EQ(0, run_world(ranks, [&](auto comm) {
              return run_campaign_on(base, d.faults, std::move(comm), camp_dir);
            }));
  int named = 0, masked = 0;  // equal rows of masked faults only would prove nothing
  for (size_t i = 0; i < d.faults.size(); ++i) {
    const InLaunchFault& f = d.faults[i];
    const DrawnFault& df = d.drawn[i];
    const std::string alone = camp_dir + "/alone-" + std::to_string(i);
    fs::create_directories(alone);
    const int code =
        run_world(ranks, [&](auto comm) { return run_rank_on(f.s, std::move(comm), alone); });
    const auto a = results::score_fault(df.index, df.fault, df.fault_class, df.truth,
                                        judge_dir(f.s, alone, code));
    const auto b = results::score_fault(df.index, df.fault, df.fault_class, df.truth,
                                        judge_dir(f.s, f.dir, exit_code_of(f.dir, ranks)));
    SCOPED_TRACE(df.fault_class + " at step " + std::to_string(df.truth.step));
    EXPECT_EQ(code, exit_code_of(f.dir, ranks));
    ASSERT_EQ(a.outcome.has_value(), b.outcome.has_value()) << a.error << " / " << b.error;
    if (a.outcome) EXPECT_EQ(to_string(*a.outcome), to_string(*b.outcome));
    masked += a.outcome == results::CampaignOutcome::kMasked;
    named += a.named.has_value();
    ASSERT_EQ(a.named.has_value(), b.named.has_value());
    if (a.named) {
      EXPECT_EQ(a.named->detector, b.named->detector);
      EXPECT_EQ(a.named->ranks, b.named->ranks);
      EXPECT_EQ(a.named->step, b.named->step);
      EXPECT_EQ(a.named->layer, b.named->layer);
      EXPECT_EQ(a.named->cause, b.named->cause);
    }
    EXPECT_EQ(a.latency_steps, b.latency_steps);
    EXPECT_EQ(a.false_positives, b.false_positives);
    // The evidence itself: the same final digests on every rank.
    const auto fa = final_digests(alone, ranks), fb = final_digests(f.dir, ranks);
    ASSERT_EQ(fa.size(), fb.size());
    for (size_t r = 0; r < fa.size(); ++r) EXPECT_EQ(digests_only(fa[r]), digests_only(fb[r]));
  }
  EXPECT_GE(named, 2) << "the drawn faults must include some the stack detects";
  EXPECT_LT(masked, int(d.faults.size()));
  if (!std::getenv("NANCHAOS_KEEP_RUNS")) fs::remove_all(camp_dir);
}

}  // namespace
}  // namespace nanchaos::harness
