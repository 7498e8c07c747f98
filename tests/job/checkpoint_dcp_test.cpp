// [checkpoint] format = "dcp" on the built-in job (harness/job/checkpoint_rank.cpp), on the
// in-process world: the files as torch.distributed.checkpoint names them with the metadata
// renamed into place last, a resume that ends bit-identical to the run that never stopped, each
// `checkpoint` fault mode on one rank's shard rejected with that rank and the first bad tensor,
// and a writer that dies between a shard's write and its rename leaving the previous checkpoint
// the one loaded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness/comm/in_process.h"
#include "harness/evidence/events.h"
#include "harness/job/checkpoint_files.h"
#include "harness/job/runner.h"
#include "harness/scenario/scenario.h"

namespace nanchaos::harness {
namespace {

namespace fs = std::filesystem;

constexpr int kRanks = 4;

// Saves before steps 3, 6 and 9; keep = 2 leaves 9 and 6 after a full run. The tests launch
// the ranks again themselves; `restarts = 1` is what a scenario with a checkpoint fault must
// say (the loader refuses one that nothing relaunches).
std::string base_toml(const std::string& faults = "") {
  return R"([scenario]
name = "dcp"
seed = 3
[job]
workload = "mlp"
ranks = 4
steps = 12
restarts = 1
[workload]
hidden = 16
features = 8
optimizer = "adam"
[detectors]
collective_timeout_ms = 20000
[checkpoint]
every = 3
format = "dcp"
)" + faults +
         (faults.empty() ? "" : "[expect]\ndeadlock = false\n");
}

class DcpCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    dir_ =
        (fs::path(::testing::TempDir()) / ("nanchaos_dcp_" + name + "_" + std::to_string(getpid())))
            .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    set_checkpoint_rename_hook(nullptr);
    if (!std::getenv("NANCHAOS_KEEP_RUNS")) fs::remove_all(dir_);
  }

  // One launch of `toml` in dir_ (its checkpoints carry over to the next launch): every rank's
  // exit code, and each rank's error text when it threw.
  struct Launch {
    std::vector<int> codes;
    std::vector<std::string> errors;
  };
  Launch launch(const std::string& toml) {
    const Scenario s = load_scenario_string(toml, dir_ + "/scenario.toml");
    InProcessWorld world(kRanks);
    Launch out{std::vector<int>(kRanks, -1), std::vector<std::string>(kRanks)};
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        try {
          out.codes[size_t(r)] = run_rank_on(s, world.communicator(r), dir_);
        } catch (const std::exception& e) {
          out.errors[size_t(r)] = e.what();
          out.codes[size_t(r)] = kRankExitSetup;
          world.abort(kRankExitSetup);
        }
      });
    }
    for (auto& t : threads) t.join();
    return out;
  }
  static bool all_zero(const Launch& l) {
    for (int c : l.codes) {
      if (c != 0) return false;
    }
    return true;
  }
  std::vector<nlohmann::json> events(int rank, const std::string& ev) const {
    std::vector<nlohmann::json> out;
    for (auto& e : read_events(dir_ + "/events/rank-" + std::to_string(rank) + ".jsonl")) {
      if (e.value("ev", "") == ev) out.push_back(e);
    }
    return out;
  }
  nlohmann::json metadata(int64_t step) const {
    std::ifstream in(checkpoint_dcp_metadata(checkpoint_dir(dir_), step));
    return nlohmann::json::parse(in);
  }
  // The layer (as the loader names it) of the first tensor rank `rank`'s shard holds.
  std::string first_held(int64_t step, int rank) const {
    const nlohmann::json m = metadata(step);
    for (const auto& e : m["tensors"]) {
      if (e["rank"] == rank) {
        const std::string name = e["name"];
        return name.substr(name.find(':') + 1);
      }
    }
    return "";
  }
  std::string finals() const {
    std::string out;
    for (int r = 0; r < kRanks; ++r) {
      for (const auto& e : events(r, "final")) {
        out += e.value("params_hash", "") + "/" + e.value("optim_hash", "") + " ";
      }
    }
    return out;
  }

  std::string dir_;
};

TEST_F(DcpCheckpointTest, ShardPerRankNamedAsDcpAndMetadataRenamedLast) {
  std::mutex mu;
  std::vector<fs::path> renamed;  // final paths in rename order
  set_checkpoint_rename_hook([&](const fs::path& p) {
    std::lock_guard<std::mutex> lock(mu);
    renamed.push_back(p);
  });
  ASSERT_TRUE(all_zero(launch(base_toml())));
  const fs::path dir = checkpoint_dir(dir_);
  EXPECT_EQ(checkpoint_steps(dir), (std::vector<int64_t>{9, 6}));  // 3 pruned (keep = 2)
  EXPECT_FALSE(fs::exists(checkpoint_dcp_folder(dir, 3)));
  for (const int64_t step : {6, 9}) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::set<std::string> files;
    for (const auto& e : fs::directory_iterator(checkpoint_dcp_folder(dir, step))) {
      files.insert(e.path().filename().string());
    }
    EXPECT_EQ(files, (std::set<std::string>{".metadata", "__0_0.distcp", "__1_0.distcp",
                                            "__2_0.distcp", "__3_0.distcp"}));
    // .metadata is renamed after all four shards of its save.
    size_t meta_at = renamed.size(), shards_before = 0;
    for (size_t i = 0; i < renamed.size(); ++i) {
      if (renamed[i] == checkpoint_dcp_metadata(dir, step)) meta_at = i;
    }
    ASSERT_LT(meta_at, renamed.size());
    for (size_t i = 0; i < meta_at; ++i) {
      shards_before += renamed[i].parent_path() == checkpoint_dcp_folder(dir, step);
    }
    EXPECT_EQ(shards_before, size_t(kRanks));
    // The metadata: the shards' sizes as on disk; every tensor of the state in exactly one
    // shard, spread over all ranks, but each rank's own RNG state in its own shard.
    const nlohmann::json m = metadata(step);
    EXPECT_EQ(m["format"], "dcp");
    EXPECT_EQ(m["step"], step);
    EXPECT_EQ(m["world"], kRanks);
    ASSERT_EQ(m["shards"].size(), size_t(kRanks));
    for (const auto& sh : m["shards"]) {
      EXPECT_EQ(sh["bytes"].get<uintmax_t>(),
                fs::file_size(checkpoint_dcp_folder(dir, step) / sh["file"].get<std::string>()));
    }
    std::map<std::string, std::set<int>> holders;
    std::map<int, int> parameters;  // per shard
    for (const auto& e : m["tensors"]) {
      holders[e["name"]].insert(e["rank"].get<int>());
      parameters[e["rank"]] += e["name"].get<std::string>().rfind("parameter:", 0) == 0;
    }
    EXPECT_EQ(holders["rng:cpu"], (std::set<int>{0, 1, 2, 3}));
    for (const auto& [name, ranks] : holders) {
      if (name != "rng:cpu") EXPECT_EQ(ranks.size(), 1u) << name;
    }
    for (int r = 0; r < kRanks; ++r) EXPECT_GT(parameters[r], 0) << "rank " << r;
    EXPECT_TRUE(holders.count("optimizer:head.weight.exp_avg"));
  }
  const auto saves = events(0, "ckpt_save");
  ASSERT_EQ(saves.size(), 3u);
  EXPECT_EQ(saves[2]["path"], checkpoint_dcp_folder(dir, 9).string());
}

TEST_F(DcpCheckpointTest, ResumeEndsBitIdenticalToTheRunThatNeverStopped) {
  ASSERT_TRUE(all_zero(launch(base_toml())));
  const std::string uninterrupted = finals();
  ASSERT_FALSE(uninterrupted.empty());
  // A second launch resumes from the newest checkpoint (step 9: every rank reads all four
  // shards, creates Adam's state and fills it) and runs steps 9..11 again.
  ASSERT_TRUE(all_zero(launch(base_toml())));
  for (int r = 0; r < kRanks; ++r) {
    const auto loads = events(r, "ckpt_load");
    ASSERT_EQ(loads.size(), 1u) << "rank " << r;
    EXPECT_EQ(loads[0]["step"], 9);
    EXPECT_TRUE(events(r, "ckpt_reject").empty());
  }
  EXPECT_EQ(finals(), uninterrupted);
}

// Each mode on rank 2's shard of the save before step 9: the next launch rejects that
// checkpoint on every rank (the same decision without a collective), blames rank 2 and the
// first tensor its shard held, and resumes from step 6.
class DcpCorruptionTest : public DcpCheckpointTest,
                          public ::testing::WithParamInterface<std::string> {};

TEST_P(DcpCorruptionTest, ShardOfRank2IsRejectedNamingRank2AndItsFirstTensor) {
  const std::string mode = GetParam();
  const std::string fault =
      "[[fault]]\nkind = \"checkpoint\"\nstep = 9\nranks = [2]\nmode = \"" + mode + "\"\n";
  ASSERT_TRUE(all_zero(launch(base_toml(fault))));
  const fs::path shard = checkpoint_dcp_shard(checkpoint_dir(dir_), 9, 2);
  const auto fired = events(2, "inject");
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0]["detail"]["shard"], 2) << fired[0].dump();
  for (const int r : {0, 1, 3}) EXPECT_TRUE(events(r, "inject").empty()) << "rank " << r;
  EXPECT_EQ(fs::exists(shard), mode != "delete");
  const std::string layer = first_held(9, 2);
  ASSERT_FALSE(layer.empty());

  ASSERT_TRUE(all_zero(launch(base_toml())));
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto rejects = events(r, "ckpt_reject");
    ASSERT_EQ(rejects.size(), 1u);
    EXPECT_EQ(rejects[0]["step"], 9);
    EXPECT_EQ(rejects[0]["shard_rank"], 2) << rejects[0].dump();
    EXPECT_EQ(rejects[0]["layer"], layer) << rejects[0].dump();
    // Which check caught it: the metadata's shard size, the shard's presence, or the digests.
    const std::string why = rejects[0]["why"];
    if (mode == "truncate") {
      EXPECT_EQ(why.rfind("shard __2_0.distcp holds ", 0), 0u) << why;
    } else if (mode == "delete") {
      EXPECT_EQ(why, "shard __2_0.distcp is missing");
    } else {
      EXPECT_EQ(why, "digest mismatch");
    }
    const auto decisions = events(r, "decision");
    ASSERT_FALSE(decisions.empty());
    EXPECT_EQ(decisions[0]["detector"], "checkpoint");
    EXPECT_EQ(decisions[0]["cause"], "checkpoint_corruption");
    EXPECT_EQ(decisions[0]["ranks"], nlohmann::json::array({2}));
    EXPECT_FALSE(decisions[0].value("local", false));  // the same decision on every rank
    EXPECT_EQ(decisions[0]["layer"], layer);
    const auto loads = events(r, "ckpt_load");
    ASSERT_EQ(loads.size(), 1u);
    EXPECT_EQ(loads[0]["step"], 6);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, DcpCorruptionTest,
                         ::testing::Values("nan", "inf", "bitflip", "truncate", "delete", "stale"),
                         [](const auto& info) { return info.param; });

TEST_F(DcpCheckpointTest, TargetIsCorruptedInTheShardThatHoldsIt) {
  ASSERT_TRUE(all_zero(launch(base_toml())));  // learn which shard holds what
  std::string target;
  int holder = -1;
  const nlohmann::json m = metadata(9);
  for (const auto& e : m["tensors"]) {
    const std::string name = e["name"];
    if (name.rfind("optimizer:", 0) == 0 && name.find("exp_avg_sq") != std::string::npos &&
        e["rank"] != 0) {
      target = name;
      holder = e["rank"];
    }
  }
  ASSERT_GT(holder, 0) << m.dump();
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  // Not in `ranks`' shard: the fault says which rank to give.
  const std::string wrong =
      "[[fault]]\nkind = \"checkpoint\"\nstep = 9\nmode = \"inf\"\ntarget = \"" + target + "\"\n";
  const Launch refused = launch(base_toml(wrong));
  EXPECT_NE(refused.errors[0].find(target + " is in rank " + std::to_string(holder) + "'s shard"),
            std::string::npos)
      << refused.errors[0];
  EXPECT_NE(refused.errors[0].find("give ranks = [" + std::to_string(holder) + "]"),
            std::string::npos);
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  const std::string right =
      "[[fault]]\nkind = \"checkpoint\"\nstep = 9\nmode = \"inf\"\nranks = [0, " +
      std::to_string(holder) + "]\ntarget = \"" + target + "\"\n";
  ASSERT_TRUE(all_zero(launch(base_toml(right))));
  EXPECT_TRUE(events(0, "inject").empty());  // rank 0's shard does not hold it
  ASSERT_EQ(events(holder, "inject").size(), 1u);
  ASSERT_TRUE(all_zero(launch(base_toml())));
  const auto rejects = events(1, "ckpt_reject");
  ASSERT_EQ(rejects.size(), 1u);
  EXPECT_EQ(rejects[0]["shard_rank"], holder);
  EXPECT_EQ(rejects[0]["layer"], target.substr(target.find(':') + 1));
  EXPECT_EQ(rejects[0]["why"], "digest mismatch");
}

// A rank dies between writing a file of the save before step 9 and renaming it into place:
// that checkpoint never gets its .metadata, is never listed, and the next launch loads the one
// before it without rejecting anything.
class DcpAtomicSaveTest : public DcpCheckpointTest,
                          public ::testing::WithParamInterface<std::string> {};

TEST_P(DcpAtomicSaveTest, CrashBeforeRenameLeavesThePreviousNewestLoaded) {
  const fs::path victim = checkpoint_dcp_folder(checkpoint_dir(dir_), 9) / GetParam();
  set_checkpoint_rename_hook([&](const fs::path& p) {
    if (p == victim) throw std::runtime_error("killed before rename");
  });
  const Launch first = launch(base_toml());
  EXPECT_FALSE(all_zero(first));
  set_checkpoint_rename_hook(nullptr);
  const fs::path dir = checkpoint_dir(dir_);
  EXPECT_EQ(checkpoint_steps(dir), (std::vector<int64_t>{6, 3}));
  EXPECT_FALSE(fs::exists(checkpoint_dcp_metadata(dir, 9)));
  EXPECT_FALSE(fs::exists(victim));
  bool temporary = false;  // the file written but never renamed stays, as evidence
  for (const auto& e : fs::directory_iterator(checkpoint_dcp_folder(dir, 9))) {
    temporary |= e.path().filename().string().rfind(victim.filename().string() + ".tmp-", 0) == 0;
  }
  EXPECT_TRUE(temporary);

  ASSERT_TRUE(all_zero(launch(base_toml())));
  for (int r = 0; r < kRanks; ++r) {
    const auto loads = events(r, "ckpt_load");
    ASSERT_EQ(loads.size(), 1u);
    EXPECT_EQ(loads[0]["step"], 6);
    EXPECT_TRUE(events(r, "ckpt_reject").empty());
  }
  EXPECT_EQ(checkpoint_steps(dir), (std::vector<int64_t>{9, 6}));  // saved again, complete
}

INSTANTIATE_TEST_SUITE_P(Files, DcpAtomicSaveTest, ::testing::Values("__1_0.distcp", ".metadata"),
                         [](const auto& info) {
                           return info.param == ".metadata" ? std::string("metadata")
                                                            : std::string("shard_of_rank_1");
                         });

}  // namespace
}  // namespace nanchaos::harness
