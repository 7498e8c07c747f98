// External jobs in the scenario loader (docs/scenario-format.md "External jobs"): the keys, their
// defaults, and word-for-word refusals of what only the built-in job and stack have.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "harness/scenario/scenario.h"
#include "tests/harness/loader_text.h"

namespace nanchaos::harness {
namespace {

constexpr auto* ErrorOf = &test_util::loader_error;

// An external [scenario] + [job] head; `job` continues [job] on line 6, `rest` follows it.
std::string External(const std::string& job, const std::string& rest = "") {
  return "[scenario]\n"               // 1
         "name = \"ext\"\n"           // 2
         "[job]\n"                    // 3
         "workload = \"external\"\n"  // 4
         "steps = 30\n"               // 5
         + job + rest;
}

const char* kCommand = "command = [\"python3\", \"train.py\"]\n";

TEST(ScenarioExternal, AcceptsTheDocumentedKeysWithDefaults) {
  Scenario s = load_scenario_string(External(kCommand), "x.toml");
  EXPECT_TRUE(s.job.external());
  EXPECT_EQ(s.job.command, (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_TRUE(s.job.env.empty());
  EXPECT_EQ(s.job.micro_batches, 1);
  EXPECT_EQ(s.job.attach_timeout_ms, 30000);
  EXPECT_TRUE(s.detectors.enabled.empty());  // the job's own stack detects
  EXPECT_TRUE(unimplemented_features(s).empty());
}

// The variables exec-rank sets for every rank cannot be overridden: NANCHAOS_PLAN replaced by
// the scenario cut the agent off its plan with only "not JSON" to say why.
TEST(ScenarioExternal, RefusesEnvThatOverridesWhatNanchaosSets) {
  for (const char* name :
       {"NANCHAOS_PLAN", "RANK", "WORLD_SIZE", "MASTER_PORT", "NANCHAOS_EVENTS"}) {
    const std::string err = ErrorOf(
        External(std::string(kCommand) + "env = { " + name + " = \"{not json\" }\n"));  // line 7
    EXPECT_NE(err.find("x.toml:7"), std::string::npos) << err;
    EXPECT_NE(err.find(std::string("[job].env.") + name + ": set by nanchaos for every rank"),
              std::string::npos)
        << err;
  }
  EXPECT_NO_THROW(load_scenario_string(
      External(std::string(kCommand) + "env = { NANCHAOS_LOG = \"debug\" }\n"), "x.toml"));
}

TEST(ScenarioExternal, ReadsEnvMicroBatchesAttachTimeoutAndCollectiveTimeout) {
  Scenario s = load_scenario_string(
      External(std::string(kCommand) +
                   "env = { OMP_NUM_THREADS = \"1\", B = \"x=y\" }\nmicro_batches = 4\n"
                   "attach_timeout_ms = 2000\ndevice = \"cuda\"\n",
               "[detectors]\ncollective_timeout_ms = 3000\n"
               "[[fault]]\nkind = \"hang\"\nranks = [1]\nstep = 3\nduration_ms = \"forever\"\n"
               "[expect]\nfirst_detector = \"observed:exception\"\n"),
      "x.toml");
  EXPECT_EQ(s.job.env, (std::vector<std::pair<std::string, std::string>>{{"OMP_NUM_THREADS", "1"},
                                                                         {"B", "x=y"}}));
  EXPECT_EQ(s.job.micro_batches, 4);
  EXPECT_EQ(s.job.attach_timeout_ms, 2000);
  EXPECT_EQ(s.job.device, Device::kCuda);
  EXPECT_EQ(collective_timeout_ms(s.detectors), 3000);
  EXPECT_EQ(*s.expect.first_detector, "observed:exception");
}

TEST(ScenarioExternal, CommandIsRequiredAndNonEmpty) {
  EXPECT_EQ(ErrorOf(External("")),
            "x.toml:3:1: error: [job]: missing required key \"command\" for workload = "
            "\"external\" (array of strings: the program and its arguments, run once per rank)");
  EXPECT_EQ(ErrorOf(External("command = []\n")),
            "x.toml:6:11: error: [job].command: expected a non-empty array of strings (the "
            "program and its arguments), got an empty array");
  EXPECT_EQ(ErrorOf(External("command = [\"python3\", 3]\n")),
            "x.toml:6:23: error: [job].command[1]: expected string, got integer");
}

TEST(ScenarioExternal, EnvIsATableOfStrings) {
  EXPECT_EQ(ErrorOf(External(std::string(kCommand) + "env = { A = 1 }\n")),
            "x.toml:7:13: error: [job].env.A: expected string, got integer");
  EXPECT_EQ(ErrorOf(External(std::string(kCommand) + "env = [\"A=1\"]\n")),
            "x.toml:7:7: error: [job].env: expected table of strings, got array");
}

TEST(ScenarioExternal, ExternalKeysOnABuiltInWorkloadAreErrors) {
  const std::string head = "[scenario]\nname = \"t\"\n[job]\nworkload = \"mlp\"\nsteps = 30\n";
  EXPECT_EQ(ErrorOf(head + kCommand),
            "x.toml:6:11: error: [job].command: only for workload = \"external\" (workload is "
            "\"mlp\")");
  EXPECT_EQ(ErrorOf(head + "micro_batches = 2\n"),
            "x.toml:6:17: error: [job].micro_batches: only for workload = \"external\" (workload "
            "is \"mlp\")");
  EXPECT_EQ(ErrorOf(head + "attach_timeout_ms = 5\n"),
            "x.toml:6:21: error: [job].attach_timeout_ms: only for workload = \"external\" "
            "(workload is \"mlp\")");
  EXPECT_EQ(ErrorOf(head + "env = { A = \"1\" }\n"),
            "x.toml:6:7: error: [job].env: only for workload = \"external\" (workload is "
            "\"mlp\")");
}

TEST(ScenarioExternal, AttachTimeoutAndMicroBatchesAreAtLeastOne) {
  EXPECT_EQ(ErrorOf(External(std::string(kCommand) + "attach_timeout_ms = 0\n")),
            "x.toml:7:21: error: [job].attach_timeout_ms: expected integer >= 1, got 0");
  EXPECT_EQ(ErrorOf(External(std::string(kCommand) + "micro_batches = 0\n")),
            "x.toml:7:17: error: [job].micro_batches: expected integer >= 1, got 0");
}

TEST(ScenarioExternal, BuiltInStackKeysAreRefusedWithTheReason) {
  EXPECT_EQ(ErrorOf(External(std::string(kCommand) + "precision = \"fp16\"\n")),
            "x.toml:7:13: error: [job].precision: not accepted for workload = \"external\": the "
            "job brings its own model and stack");
  EXPECT_EQ(ErrorOf(External(std::string(kCommand) + "grad_predivide = true\n")),
            "x.toml:7:18: error: [job].grad_predivide: not accepted for workload = \"external\": "
            "the job brings its own model and stack");
  EXPECT_EQ(ErrorOf(External(kCommand, "[workload]\nhidden = 64\n")),
            "x.toml:8:1: error: [workload].hidden: not accepted for workload = \"external\": the "
            "job brings its own model and stack");
  EXPECT_EQ(ErrorOf(External(kCommand, "[recovery]\npolicy = \"rollback\"\n")),
            "x.toml:8:1: error: [recovery].policy: not accepted for workload = \"external\": the "
            "job brings its own model and stack");
  EXPECT_EQ(ErrorOf(External(kCommand,
                             "[detectors]\ncollective_timeout_ms = 5000\npreset = "
                             "\"full\"\n")),
            "x.toml:9:1: error: [detectors].preset: not accepted for workload = \"external\": the "
            "job brings its own model and stack (only collective_timeout_ms applies)");
}

TEST(ScenarioExternal, FaultsTheAgentCannotApplyAreRefused) {
  const std::string fault = "[[fault]]\nranks = [1]\nstep = 2\n";  // lines 7-9
  EXPECT_EQ(ErrorOf(External(kCommand, fault + "kind = \"batch\"\nmode = \"empty_mask\"\n")),
            "x.toml:11:8: error: [[fault]] #1: mode = \"empty_mask\" is not available for "
            "workload = \"external\" (it needs the built-in transformer's token mask)");
  EXPECT_EQ(
      ErrorOf(External(kCommand, fault + "kind = \"hang\"\nstall = \"device\"\nduration_ms = 5\n")),
      "x.toml:11:9: error: [[fault]] #1.stall: \"device\" is not available for workload = "
      "\"external\" (a CUDA stall of the built-in stack's gradient all-reduce); use "
      "\"host\"");
  // What the agent applies is accepted, with module names of the job's own model.
  Scenario s = load_scenario_string(
      External(kCommand, fault + "kind = \"tensor\"\ntarget = \"activation:net.1\"\n" +
                             "[[fault]]\nkind = \"batch\"\nmode = \"constant_column\"\n"
                             "column = 500\nstep = 1\n[expect]\ndeadlock = false\n"),
      "x.toml");
  EXPECT_EQ(s.faults.size(), 2u);
  // FSDP2's collectives and optimizer state (the Python agent applies them,
  // the LibTorch agent refuses them at attach).
  Scenario f = load_scenario_string(
      External(kCommand, fault + "kind = \"comm\"\ntarget = \"reduce_scatter\"\n" +
                             "[[fault]]\nkind = \"comm\"\ntarget = \"all_gather\"\nbit = 30\n"
                             "step = 1\n[[fault]]\nkind = \"hang\"\nwhere = "
                             "\"before_reduce_scatter\"\nduration_ms = 5\nstep = 1\n"
                             "[[fault]]\nkind = \"tensor\"\ntarget = "
                             "\"optimizer:net.0.weight.exp_avg\"\nstep = 1\n"
                             "[expect]\ndeadlock = false\n"),
      "x.toml");
  ASSERT_EQ(f.faults.size(), 4u);
  EXPECT_EQ(f.faults[0].params.get_string("target"), "reduce_scatter");
  EXPECT_EQ(f.faults[1].params.get_string("target"), "all_gather");
  EXPECT_EQ(f.faults[2].params.get_string("where"), "before_reduce_scatter");
  EXPECT_EQ(f.faults[3].params.get_string("target"), "optimizer:net.0.weight.exp_avg");
}

// [job] torch and launch (../shared/SCENARIO_FORMAT.md, "Modern PyTorch jobs").
TEST(ScenarioExternal, TorchRequirementAndPlainLaunch) {
  Scenario d = load_scenario_string(External(kCommand), "x.toml");
  EXPECT_EQ(d.job.torch, "");
  EXPECT_EQ(d.job.launch, Launch::kTorchrun);
  Scenario s = load_scenario_string(
      External(std::string(kCommand) + "ranks = 1\ntorch = \">=2.4, <3\"\nlaunch = \"plain\"\n"),
      "x.toml");
  EXPECT_EQ(s.job.torch, ">=2.4, <3");
  EXPECT_EQ(s.job.launch, Launch::kPlain);
  EXPECT_EQ(ErrorOf(External(std::string(kCommand) + "torch = \"2.4\"\n")),
            "x.toml:7:9: error: [job].torch: \"2.4\" is not a version requirement: clause 1 "
            "\"2.4\": no comparison operator (expected OP VERSION, OP one of >= <= > < == != ~=, "
            "VERSION like 2.4; clauses separated by commas, e.g. \">=2.4,<3\")");
  // plain sets no RANK/WORLD_SIZE: one process only (ranks defaults to 2).
  EXPECT_EQ(ErrorOf(External(std::string(kCommand) + "launch = \"plain\"\n")),
            "x.toml:7:10: error: [job].launch: \"plain\" starts one process with none of "
            "torchrun's variables, so it needs ranks = 1 (ranks is 2)");
  EXPECT_NE(ErrorOf(External(std::string(kCommand) + "launch = \"srun\"\n")).find("x.toml:7"),
            std::string::npos);
  const std::string head = "[scenario]\nname = \"t\"\n[job]\nworkload = \"mlp\"\nsteps = 30\n";
  EXPECT_EQ(ErrorOf(head + "torch = \">=2\"\n"),
            "x.toml:6:9: error: [job].torch: only for workload = \"external\" (workload is "
            "\"mlp\")");
}

// [job] python_packages: names with optional requirements, each entry checked at load with its
// own line:col; only for external jobs.
TEST(ScenarioExternal, PythonPackagesAreCheckedAtLoad) {
  EXPECT_TRUE(load_scenario_string(External(kCommand), "x.toml").job.python_packages.empty());
  Scenario s = load_scenario_string(
      External(
          std::string(kCommand) +
          "python_packages = [\"lightning>=2.0\", \"transformers\", \"accelerate >= 0.26, <1\","
          " \"Pytorch_Lightning~=2.1\"]\n"),
      "x.toml");
  EXPECT_EQ(s.job.python_packages,
            (std::vector<std::string>{"lightning>=2.0", "transformers", "accelerate >= 0.26, <1",
                                      "Pytorch_Lightning~=2.1"}));
  // Line 7 is python_packages; the column is the bad entry's.
  EXPECT_EQ(ErrorOf(External(std::string(kCommand) +
                             "python_packages = [\"lightning>=2.0\", \"transformers 4\"]\n")),
            "x.toml:7:38: error: [job].python_packages[1]: \"transformers 4\" is not a package "
            "requirement: after the name \"transformers\": \"4\" is not a version requirement "
            "(expected a distribution name of letters, digits, -, _ and ., optionally followed "
            "by a version requirement, e.g. \"lightning>=2.0\")");
  EXPECT_EQ(ErrorOf(External(std::string(kCommand) + "python_packages = [\"lightning>=2.x\"]\n")),
            "x.toml:7:20: error: [job].python_packages[0]: \"lightning>=2.x\" is not a package "
            "requirement: after the name \"lightning\": clause 1 \">=2.x\": \"2.x\" is not a "
            "version of dot-separated numbers (expected OP VERSION, OP one of >= <= > < == != "
            "~=, VERSION like 2.4; clauses separated by commas, e.g. \">=2.4,<3\")");
  EXPECT_EQ(ErrorOf(External(std::string(kCommand) + "python_packages = [\">=2\"]\n")),
            "x.toml:7:20: error: [job].python_packages[0]: \">=2\" is not a package requirement: "
            "no distribution name (expected a distribution name of letters, digits, -, _ and ., "
            "optionally followed by a version requirement, e.g. \"lightning>=2.0\")");
  EXPECT_EQ(
      ErrorOf(External(std::string(kCommand) + "python_packages = [\"lightning[pytorch]\"]\n")),
      "x.toml:7:20: error: [job].python_packages[0]: \"lightning[pytorch]\" is not a package "
      "requirement: after the name \"lightning\": \"[pytorch]\" is not a version requirement "
      "(expected a distribution name of letters, digits, -, _ and ., optionally followed by a "
      "version requirement, e.g. \"lightning>=2.0\")");
  EXPECT_EQ(ErrorOf(External(std::string(kCommand) + "python_packages = [\"\"]\n")),
            "x.toml:7:20: error: [job].python_packages[0]: \"\" is not a package requirement: "
            "empty (expected a distribution name of letters, digits, -, _ and ., optionally "
            "followed by a version requirement, e.g. \"lightning>=2.0\")");
  // pip's name comparison: pytorch-lightning and Pytorch_Lightning are one distribution.
  EXPECT_EQ(
      ErrorOf(External(std::string(kCommand) +
                       "python_packages = [\"pytorch-lightning\", \"Pytorch_Lightning>=2\"]\n")),
      "x.toml:7:41: error: [job].python_packages[1]: \"Pytorch_Lightning\" is already "
      "listed at [0]; give each package once");
  EXPECT_NE(ErrorOf(External(std::string(kCommand) + "python_packages = \"lightning\"\n"))
                .find("x.toml:7"),
            std::string::npos);
  const std::string head = "[scenario]\nname = \"t\"\n[job]\nworkload = \"mlp\"\nsteps = 30\n";
  EXPECT_EQ(ErrorOf(head + "python_packages = [\"lightning\"]\n"),
            "x.toml:6:19: error: [job].python_packages: only for workload = \"external\" "
            "(workload is \"mlp\")");
}

}  // namespace
}  // namespace nanchaos::harness
