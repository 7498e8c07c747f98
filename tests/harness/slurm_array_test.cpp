// `campaign --slurm-array K` (harness/controller/slurm_array.h): the tasks' command lines and
// sbatch script, and the whole fan-out through a stand-in sbatch that runs the array's tasks one
// after another here (the real Slurm run is tests/slurm/slurm_test.py --phase campaign).
#include "harness/controller/slurm_array.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace nanchaos::harness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test_util::run_cmd;
using test_util::write_file;

const std::string kBin = NANCHAOS_BINARY;
const std::string kSrc = NANCHAOS_SOURCE_DIR;

CampaignOptions options() {
  CampaignOptions o;
  o.self_exe = "/opt/nanchaos/nanchaos";
  o.scenario = "/s/campaigns/mlp default.toml";
  o.faults = 200;
  o.seed = 2;
  o.kinds = {"tensor", "batch"};
  o.jobs = 2;
  o.out_dir = "/shared/c";
  o.host_limits.enabled = false;
  return o;
}

TEST(SlurmArray, EachTaskRunsItsShardIntoItsOwnFolder) {
  EXPECT_EQ(slurm_array_task_argv(options(), 3, 4),
            (std::vector<std::string>{
                "/opt/nanchaos/nanchaos", "campaign", "/s/campaigns/mlp default.toml", "--faults",
                "200", "--seed", "2", "--kinds", "tensor,batch", "--jobs", "2", "--no-host-limits",
                "--shard", "3/4", "--out", "/shared/c/shard-3"}));
}

TEST(SlurmArray, TheScriptTakesTheShardFromSlurmsTaskId) {
  const std::string s = slurm_array_script(options(), 4);
  EXPECT_EQ(s.rfind("#!/bin/sh\n", 0), 0u);
  EXPECT_NE(s.find("#SBATCH --array=1-4\n"), std::string::npos) << s;
  EXPECT_NE(s.find("'/s/campaigns/mlp default.toml'"), std::string::npos) << s;  // quoted
  EXPECT_NE(s.find("exec /opt/nanchaos/nanchaos campaign '/s/campaigns/mlp default.toml' --faults "
                   "200 --seed 2 --kinds tensor,batch --jobs 2 --no-host-limits \\\n  --shard "
                   "\"$SLURM_ARRAY_TASK_ID\"/4 --out /shared/c/shard-\"$SLURM_ARRAY_TASK_ID\"\n"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("shard-1"), std::string::npos) << s;
}

// A stand-in for `sbatch --wait --parsable SCRIPT`: prints a job id, runs every task of the
// array with its SLURM_ARRAY_TASK_ID, exits with the highest task exit code (as Slurm does).
const char* kFakeSbatch = R"(#!/bin/sh
for script; do :; done
n=$(sed -n 's/^#SBATCH --array=1-\([0-9]*\)$/\1/p' "$script")
echo 4242
rc=0
i=1
while [ "$i" -le "$n" ]; do
  SLURM_ARRAY_TASK_ID=$i sh "$script" >/dev/null 2>&1 || { r=$?; [ $r -gt $rc ] && rc=$r; }
  i=$((i + 1))
done
exit $rc
)";

TEST(SlurmArray, TheMergedArrayEqualsOneCampaignFaultForFault) {
  const auto dir = test_util::scratch_dir("nanchaos-array", "w");
  const auto sbatch = write_file(dir, "sbatch", kFakeSbatch);
  fs::permissions(sbatch, fs::perms::owner_all);
  const std::string common = " campaign " + kSrc +
                             "/campaigns/mlp-default.toml --faults 6 --seed 2 --kinds tensor,batch "
                             "--quiet --out ";
  auto single = run_cmd(kBin + common + dir + "/single");
  ASSERT_LE(single.code, 1) << single.output;
  auto array =
      run_cmd("NANCHAOS_SBATCH=" + sbatch + " " + kBin + common + dir + "/array --slurm-array 3");
  ASSERT_LE(array.code, 1) << array.output;
  EXPECT_EQ(array.code, single.code);
  EXPECT_TRUE(fs::exists(dir + "/array/slurm-array.sh"));
  const json one = json::parse(std::ifstream(dir + "/single/campaign.json"));
  const json merged = json::parse(std::ifstream(dir + "/array/campaign.json"));
  const json part = json::parse(std::ifstream(dir + "/array/shard-2/campaign.json"));
  ASSERT_EQ(part["faults"].size(), 2u);  // indices 1 and 4: index mod 3 = 1
  EXPECT_EQ(part["faults"][0]["index"], 1);
  ASSERT_EQ(merged["faults"].size(), one["faults"].size());
  auto row = [](json f) {
    for (const char* k : {"wall_ms", "latency_ms", "rerun"}) f.erase(k);
    if (f.contains("harness_named") && f["harness_named"].is_object()) {
      f["harness_named"].erase("latency_ms");
    }
    return f;
  };
  for (size_t i = 0; i < one["faults"].size(); ++i) {
    EXPECT_EQ(row(merged["faults"][i]), row(one["faults"][i])) << "fault " << i;
  }
  EXPECT_EQ(merged["summary"]["coverage"], one["summary"]["coverage"]);
  // The same --out again: refused before anything is submitted.
  auto again =
      run_cmd("NANCHAOS_SBATCH=" + sbatch + " " + kBin + common + dir + "/array --slurm-array 3");
  EXPECT_EQ(again.code, 2) << again.output;
  EXPECT_NE(again.output.find("holds an earlier campaign"), std::string::npos) << again.output;
}

TEST(SlurmArray, NoSbatchIsOneClearError) {
  const auto dir = test_util::scratch_dir("nanchaos-array", "none");
  auto r = run_cmd("NANCHAOS_SBATCH=/nonexistent/sbatch " + kBin + " campaign " + kSrc +
                   "/campaigns/mlp-default.toml --faults 2 --out " + dir + "/c --slurm-array 2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--slurm-array: cannot execute /nonexistent/sbatch"), std::string::npos)
      << r.output;
  r = run_cmd(kBin + " campaign " + kSrc +
              "/campaigns/mlp-default.toml --faults 2 --slurm-array 2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--slurm-array needs --out DIR"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace nanchaos::harness
