// Host limits (harness/controller/host_limits.h): the memory estimate's numbers, the exact messages
// against a fixed host, the flags, and `nanchaos validate` / `nanchaos run` refusing before any
// job.
#include "harness/controller/host_limits.h"

#include <gtest/gtest.h>

#include <string>

#include "harness/comm/communicator.h"
#include "harness/scenario/scenario.h"
#include "tests/test_util.h"

namespace nanchaos::harness {
namespace {

using test_util::run_cmd;

// 23.1 GiB available, 2 cores: the brief's example host.
const HostResources kHost{23.1 * 1024 * 1024 * 1024, "MemAvailable", 2};

// [scenario] and [job] on lines 1-5; `job` goes on line 6, then [workload] on line 7 + `workload`.
Scenario Load(const std::string& job, const std::string& workload = "",
              const std::string& kind = "mlp") {
  return load_scenario_string(
      "[scenario]\n"    // 1
      "name = \"h\"\n"  // 2
      "[job]\n"         // 3
      "workload = \"" +
          kind +
          "\"\n"         // 4
          "steps = 2\n"  // 5
          + job +        // 6..
          "[workload]\n" + workload,
      "h.toml");
}

std::string ErrorOf(const Scenario& s, const HostLimitOptions& o = {},
                    const HostResources& host = kHost) {
  try {
    check_host_limits(s, host, o);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "no error";
}

TEST(HostLimits, DefaultMlpEstimateByPart) {
  const Scenario s = Load("");
  // P = 64*128 + 128 + 2*(128*128 + 128) + 128*10 + 10 = 42634; A = 32*64 + 32*128*3*2 + 2*32*10.
  EXPECT_EQ(count_parameters(s.job.workload, s.workload).parameters, 42634);
  EXPECT_EQ(count_activations(s.job.workload, s.workload), 27264);
  const MemoryEstimate e = estimate_rank_memory(s);
  EXPECT_EQ(e.parameters, 4 * 42634);
  EXPECT_EQ(e.gradients, 4 * 42634);
  EXPECT_EQ(e.optimizer, 8 * 42634);  // adam: two fp32 moments
  EXPECT_EQ(e.snapshot, 0);
  EXPECT_EQ(e.activations, 4 * 27264);
  EXPECT_FALSE(e.on_gpu);
  EXPECT_EQ(e.host(), e.total());
}

TEST(HostLimits, EstimateFollowsOptimizerWireRollbackAndDevice) {
  const double P = 42634;
  Scenario s = Load("grad_allreduce_dtype = \"fp16\"\n", "optimizer = \"sgd\"\n");
  MemoryEstimate e = estimate_rank_memory(s);
  EXPECT_EQ(e.optimizer, 0);              // the harness's SGD has no momentum
  EXPECT_EQ(e.gradients, 4 * P + 2 * P);  // bucket + fp16 wire copy
  s = Load("", "[recovery]\npolicy = \"rollback\"\n");
  e = estimate_rank_memory(s);
  EXPECT_EQ(e.snapshot, 4 * P + 8 * P);
  s = Load("device = \"cuda\"\nprecision = \"fp16\"\n");
  e = estimate_rank_memory(s);
  EXPECT_TRUE(e.on_gpu);
  EXPECT_EQ(e.activations, 2 * 27264);  // autocast keeps fp16 activations
  EXPECT_EQ(e.host(), e.parameters);
}

TEST(HostLimits, FormatBytes) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(23.1 * 1024 * 1024 * 1024), "23.1 GiB");
  EXPECT_EQ(format_bytes(3.0 * 1024 * 1024 * 1024 * 1024 * 1024 * 1024), "3.0 EiB");
  EXPECT_EQ(format_bytes(8e30), "6.94e+12 EiB");
}

TEST(HostLimits, OneRankTooBigNamesTheKeyTheEstimateAndTheLimit) {
  const Scenario s = Load("", "layers = 3\nhidden = 2000000000\n");
  EXPECT_EQ(ErrorOf(s),
            "h.toml:8:10: error: [workload] hidden = 2000000000: one rank needs ~111.0 EiB "
            "(parameters 27.8 EiB, gradients 27.8 EiB, optimizer state 55.5 EiB (adam: 2 moments), "
            "activations 1.4 TiB), this host has 23.1 GiB available (MemAvailable); "
            "--no-host-limits skips this check");
}

TEST(HostLimits, BlamesTheWrittenKeyThatMattersMost) {
  // batch_size and seq_len both written; the attention scores make seq_len the one to change.
  const Scenario s = Load("", "batch_size = 64\nseq_len = 100000\n", "transformer");
  const std::string err = ErrorOf(s);
  EXPECT_EQ(err.rfind("h.toml:8:11: error: [workload] seq_len = 100000: one rank needs ~", 0), 0u)
      << err;
}

TEST(HostLimits, TooManyRanksGivesLimitAndEstimate) {
  const Scenario s = Load("ranks = 100000\n");
  EXPECT_EQ(ErrorOf(s),
            "h.toml:6:9: error: [job] ranks = 100000: more ranks than this host can run (limit 64 "
            "= max(64, 8 x 2 cores); mpirun oversubscribes the cores); the job needs ~73.7 GiB "
            "(100000 ranks x 772.7 KiB per rank), this host has 23.1 GiB available (MemAvailable); "
            "with a real hostfile, raise the limit with --max-ranks N or lift the host checks with "
            "--no-host-limits");
}

TEST(HostLimits, SixtyFourRanksRunOnTwoCores) {
  EXPECT_EQ(ErrorOf(Load("ranks = 64\n")), "no error");
  EXPECT_EQ(default_max_ranks(2), 64);
  EXPECT_EQ(default_max_ranks(16), 128);
  EXPECT_EQ(ErrorOf(Load("ranks = 65\n")).find("h.toml:6:9: error: [job] ranks = 65: more ranks"),
            0u);
}

TEST(HostLimits, JobTotalBlamesRanks) {
  // ~520 MiB per rank fits; 64 of them do not.
  const Scenario s = Load("ranks = 64\n", "hidden = 4096\n");
  EXPECT_EQ(ErrorOf(s),
            "h.toml:6:9: error: [job] ranks = 64: the job needs ~32.5 GiB on this host (64 ranks "
            "x 519.8 MiB: parameters 129.2 MiB, gradients 129.2 MiB, optimizer state 258.4 MiB "
            "(adam: 2 moments), activations 3.0 MiB), this host has 23.1 GiB available "
            "(MemAvailable); with a real hostfile, raise the limit with --max-ranks N or lift the "
            "host checks with --no-host-limits");
}

TEST(HostLimits, FlagsLiftTheLimits) {
  HostLimitOptions more;
  more.max_ranks = 100;
  EXPECT_EQ(ErrorOf(Load("ranks = 100\n"), more), "no error");
  EXPECT_EQ(ErrorOf(Load("ranks = 101\n"), more)
                .find("h.toml:6:9: error: [job] ranks = 101: more "
                      "ranks than this host can run (limit 100 = "
                      "--max-ranks); the job needs"),
            0u);
  HostLimitOptions off;
  off.enabled = false;
  EXPECT_EQ(ErrorOf(Load("ranks = 100000\n", "hidden = 2000000000\n"), off), "no error");
}

TEST(HostLimits, UnknownMemorySkipsOnlyTheMemoryChecks) {
  const HostResources blind{0, "", 2};
  EXPECT_EQ(ErrorOf(Load("", "hidden = 2000000000\n"), {}, blind), "no error");
  EXPECT_EQ(ErrorOf(Load("ranks = 100000\n"), {}, blind),
            "h.toml:6:9: error: [job] ranks = 100000: more ranks than this host can run (limit 64 "
            "= max(64, 8 x 2 cores); mpirun oversubscribes the cores); the job needs ~73.7 GiB "
            "(100000 ranks x 772.7 KiB per rank); with a real hostfile, raise the limit with "
            "--max-ranks N or lift the host checks with --no-host-limits");
}

TEST(HostLimits, CudaJobChecksTheHostPartOnly) {
  const Scenario s = Load("device = \"cuda\"\n", "hidden = 2000000000\n");
  EXPECT_EQ(ErrorOf(s),
            "h.toml:8:10: error: [workload] hidden = 2000000000: one rank needs ~27.8 EiB of host "
            "memory (the parameters, built on the host before they move to the GPU; ~111.0 EiB in "
            "all on the GPU) (parameters 27.8 EiB, gradients 27.8 EiB, optimizer state 55.5 EiB "
            "(adam: 2 moments), activations 1.4 TiB), this host has 23.1 GiB available "
            "(MemAvailable); --no-host-limits skips this check");
}

TEST(HostLimits, ExternalJobsGetOnlyTheRanksCheck) {
  const std::string head =
      "[scenario]\nname = \"e\"\n[job]\nworkload = \"external\"\nsteps = 2\n"
      "command = [\"python3\", \"train.py\"]\n";
  EXPECT_EQ(ErrorOf(load_scenario_string(head + "ranks = 4\n", "e.toml")), "no error");
  EXPECT_EQ(ErrorOf(load_scenario_string(head + "ranks = 100000\n", "e.toml")),
            "e.toml:7:9: error: [job] ranks = 100000: more ranks than this host can run (limit 64 "
            "= max(64, 8 x 2 cores); mpirun oversubscribes the cores); with a real hostfile, raise "
            "the limit with --max-ranks N or lift the host checks with --no-host-limits");
}

TEST(HostLimits, ProbeReadsThisHost) {
  const HostResources h = probe_host();
  EXPECT_GT(h.memory_bytes, 0);
  EXPECT_EQ(h.memory_source, "MemAvailable");  // every kernel since 3.14
  EXPECT_GE(h.cores, 1);
}

TEST(HostLimits, EveryShippedScenarioFitsASmallHost) {
  // 2 cores and 8 GiB: the 64-rank scenarios included.
  const HostResources small{8.0 * 1024 * 1024 * 1024, "MemAvailable", 2};
  const std::string root = NANCHAOS_SOURCE_DIR;
  const auto files =
      expand_scenario_paths({root + "/scenarios", root + "/tests/cases", root + "/tests/data",
                             root + "/tests/weakened", root + "/examples"});
  ASSERT_GE(files.size(), 40u);
  for (const auto& f : files) {
    try {
      check_host_limits(load_scenario(f), small, {});
    } catch (const ScenarioError& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

// --- the command line ---------------------------------------------------------------------------

const std::string kBin = NANCHAOS_BINARY;

std::string ScenarioText(const std::string& job, const std::string& workload) {
  return "[scenario]\nname = \"big\"\n[job]\nworkload = \"mlp\"\nsteps = 2\n" + job +
         "[workload]\n" + workload;
}

TEST(HostLimitsCli, ValidateExitsTwoOnAbsurdHidden) {
  const std::string dir = test_util::scratch_dir("hostlim", "hidden");
  const std::string f =
      test_util::write_file(dir, "s.toml", ScenarioText("", "layers = 3\nhidden = 2000000000\n"));
  auto r = run_cmd(kBin + " validate " + f);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(f + ":8:10: error: [workload] hidden = 2000000000: one rank needs ~111.0 "
                              "EiB (parameters 27.8 EiB, gradients 27.8 EiB"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("available (MemAvailable)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 file(s), 0 valid, 1 invalid"), std::string::npos) << r.output;
  r = run_cmd(kBin + " validate --no-host-limits " + f);
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST(HostLimitsCli, ValidateExitsTwoOnHundredThousandRanks) {
  const std::string dir = test_util::scratch_dir("hostlim", "ranks");
  const std::string f = test_util::write_file(dir, "s.toml", ScenarioText("ranks = 100000\n", ""));
  auto r = run_cmd(kBin + " validate " + f);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(f + ":6:9: error: [job] ranks = 100000: more ranks than this host can "
                              "run (limit "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("the job needs ~73.7 GiB (100000 ranks x 772.7 KiB per rank)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(run_cmd(kBin + " validate --max-ranks 100000 --no-host-limits " + f).code, 0);
}

TEST(HostLimitsCli, RunRefusesBeforeAnyJob) {
  const std::string dir = test_util::scratch_dir("hostlim", "run");
  const std::string f = test_util::write_file(dir, "s.toml", ScenarioText("ranks = 100000\n", ""));
  auto r = run_cmd(kBin + " run --quiet --out " + dir + "/out " + f);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(":6:9: error: [job] ranks = 100000: more ranks"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("no job started"), std::string::npos) << r.output;
}

// A waiting rank polls on its core only when the launcher says this host's ranks fit its cores
// (the 2-rank jobs of a 2-core host); 64 ranks on 2 cores, or no count, sleep between tests.
TEST(RankKeepsCore, OnlyWhenTheHostsRanksFitItsCores) {
  EXPECT_TRUE(rank_keeps_core("2", 2));
  EXPECT_TRUE(rank_keeps_core("1", 2));
  EXPECT_FALSE(rank_keeps_core("3", 2));
  EXPECT_FALSE(rank_keeps_core("64", 2));
  EXPECT_FALSE(rank_keeps_core(nullptr, 2));
  EXPECT_FALSE(rank_keeps_core("", 2));
  EXPECT_FALSE(rank_keeps_core("0", 2));
  EXPECT_FALSE(rank_keeps_core("2(x3)", 8));  // srun's SLURM_TASKS_PER_NODE form: not a count
}

}  // namespace
}  // namespace nanchaos::harness
