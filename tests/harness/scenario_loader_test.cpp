// Scenario loader: exact error messages (file:line:col and text), defaults, presets, the shipped
// cases, and what is reported as not implemented yet.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "harness/scenario/keys.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/scenario_schema.h"
#include "tests/harness/loader_text.h"

namespace nanchaos::harness {
namespace {

constexpr auto* ErrorOf = &test_util::loader_error;
std::string WithHead(const std::string& rest) { return test_util::with_head(rest); }

const char* kMinimal = R"([scenario]
name = "nan-activation-rank1"

[job]
workload = "mlp"
steps = 30

[[fault]]
kind = "tensor"
target = "activation:layers.1"
ranks = [1]
step = 10

[expect]
detected = true
rank = 1
)";

// --- exact error messages --------------------------------------------------------------------

TEST(ScenarioLoaderErrors, MisspeltKeySuggestsNearest) {
  EXPECT_EQ(
      ErrorOf(WithHead("[expect]\nwithin_step = 2\n")),
      "x.toml:7:1: error: [expect] unknown key \"within_step\"; did you mean \"within_steps\"?");
}

TEST(ScenarioLoaderErrors, UnknownKeyWithoutNearNameListsKeys) {
  EXPECT_EQ(ErrorOf(WithHead("[recovery]\ncolour = 1\n")),
            "x.toml:7:1: error: [recovery] unknown key \"colour\"; keys: policy, snapshot_every, "
            "lr_backoff_factor, max_consecutive, init_scale, growth_factor, backoff_factor, "
            "growth_interval, max_scale, min_scale");
}

TEST(ScenarioLoaderErrors, WrongTypePointsAtTheValue) {
  EXPECT_EQ(ErrorOf("[job]\nworkload = \"mlp\"\nsteps = \"30\"\n[scenario]\nname = \"t\"\n"),
            "x.toml:3:9: error: [job].steps: expected integer >= 1, got string");
}

// Every registered fault kind by name, as the loader lists them (a new kind file adds itself).
std::string RegisteredKinds() {
  std::vector<std::string> names;
  for (const auto& [name, info] : fault_kinds()) names.push_back(name);
  return join(names);
}

TEST(ScenarioLoaderErrors, UnknownFaultKind) {
  const std::string text = WithHead(
      "\n"                    // 6
      "[workload]\n"          // 7
      "hidden = 64\n"         // 8
      "\n"                    // 9
      "[[fault]]\n"           // 10
      "step = 3\n"            // 11
      "kind = \"tensr\"\n");  // 12
  EXPECT_EQ(ErrorOf(text),
            "x.toml:12:8: error: [[fault]] #1 kind \"tensr\" is unknown; did you mean \"tensor\"? "
            "kinds: " +
                RegisteredKinds());
}

TEST(ScenarioLoaderErrors, BadTomlSyntax) {
  EXPECT_EQ(ErrorOf("[scenario]\nname = \n"),
            "x.toml:2:8: error: invalid TOML: Error while parsing key-value pair: expected value, "
            "saw '\\n'");
}

TEST(ScenarioLoaderErrors, MissingFile) {
  try {
    load_scenario("/nonexistent/missing.toml");
    FAIL() << "no error";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/missing.toml: error: cannot open file");
  }
}

TEST(ScenarioLoaderErrors, NameWithSlash) {
  EXPECT_EQ(ErrorOf("[scenario]\nname = \"a/b\"\n[job]\nworkload = \"mlp\"\nsteps = 3\n"),
            "x.toml:2:8: error: [scenario].name: \"a/b\" does not match [a-z0-9._-]+ ('/' is not "
            "allowed)");
}

TEST(ScenarioLoaderErrors, ProbabilityOutOfRange) {
  EXPECT_EQ(ErrorOf(WithHead("[[fault]]\n"
                             "kind = \"lr\"\n"
                             "factor = 10.0\n"
                             "step = 1\n"
                             "probability = 1.5\n")),
            "x.toml:10:15: error: [[fault]] #1.probability: expected float in (0, 1], got 1.5");
}

TEST(ScenarioLoaderErrors, StepsZero) {
  EXPECT_EQ(ErrorOf("[scenario]\nname = \"t\"\n[job]\nworkload = \"mlp\"\nsteps = 0\n"),
            "x.toml:5:9: error: [job].steps: expected integer >= 1, got 0");
}

TEST(ScenarioLoaderErrors, UnknownTable) {
  EXPECT_EQ(
      ErrorOf(WithHead("[expct]\ndetected = true\n")),
      "x.toml:6:2: error: unknown table [expct]; did you mean [expect]? tables: [scenario], "
      "[job], [workload], [[fault]], [detectors], [recovery], [checkpoint], [expect], [campaign]");
}

TEST(ScenarioLoaderErrors, FaultRankOutsideTheJob) {
  EXPECT_EQ(ErrorOf(WithHead("ranks = 2\n"
                             "[[fault]]\n"
                             "kind = \"tensor\"\n"
                             "target = \"loss\"\n"
                             "step = 1\n"
                             "ranks = [0, 2]\n")),
            "x.toml:11:13: error: [[fault]] #1.ranks: rank 2 does not exist; [job].ranks = 2 "
            "(ranks 0..1)");
}

TEST(ScenarioLoaderErrors, CountAndFractionTogether) {
  EXPECT_EQ(ErrorOf(WithHead("[[fault]]\n"
                             "kind = \"tensor\"\n"
                             "target = \"gradient:head.weight\"\n"
                             "step = 1\n"
                             "count = 3\n"
                             "fraction = 0.5\n")),
            "x.toml:11:12: error: [[fault]] #1: `count` and `fraction` are exclusive; write one of "
            "them");
}

TEST(ScenarioLoaderErrors, MissingRequiredKeyPointsAtTheTable) {
  EXPECT_EQ(ErrorOf("[scenario]\nname = \"t\"\n\n[job]\nworkload = \"mlp\"\n"),
            "x.toml:4:1: error: [job]: missing required key \"steps\" (integer >= 1: optimizer "
            "steps per rank)");
}

TEST(ScenarioLoaderErrors, MissingRequiredTable) {
  EXPECT_EQ(ErrorOf("[scenario]\nname = \"t\"\n"), "x.toml: error: missing required table [job]");
}

TEST(ScenarioLoaderErrors, BadChoiceSuggestsNearest) {
  EXPECT_EQ(ErrorOf(WithHead("device = \"cdua\"\n")),
            "x.toml:6:10: error: [job].device: \"cdua\" is not valid; did you mean \"cuda\"? "
            "choices: cpu, cuda");
}

TEST(ScenarioLoaderErrors, KeyOfAnotherKind) {
  EXPECT_EQ(ErrorOf(WithHead("[[fault]]\nkind = \"lr\"\nfactor = 2.0\nstep = 1\nmode = \"x\"\n")),
            "x.toml:10:1: error: [[fault]] #1 unknown key \"mode\" for kind \"lr\" (it belongs to "
            "kind batch, checkpoint; keys of \"lr\": factor)");
}

TEST(ScenarioLoaderErrors, BadTarget) {
  EXPECT_EQ(ErrorOf(WithHead("[[fault]]\nkind = \"tensor\"\ntarget = \"layers.1\"\nstep = 1\n")),
            "x.toml:8:10: error: [[fault]] #1.target: \"layers.1\" is not a valid target; expected "
            "activation:NAME or parameter:NAME or gradient:NAME or optimizer:PARAM.STATE or "
            "\"loss\"");
}

// Every registered detector by name, as the loader lists them (a new detector file adds itself).
std::string RegisteredDetectors() {
  std::vector<std::string> names;
  for (const auto& [name, info] : detectors()) names.push_back(name);
  return join(names);
}

TEST(ScenarioLoaderErrors, UnknownEnabledDetector) {
  EXPECT_EQ(ErrorOf(WithHead("[detectors]\nenabled = [\"loss\", \"gard\"]\n")),
            "x.toml:7:20: error: [detectors].enabled: \"gard\" is not a detector; did you mean "
            "\"grad\"? detectors: " +
                RegisteredDetectors());
}

TEST(ScenarioLoaderErrors, UnknownFirstDetector) {
  EXPECT_EQ(ErrorOf(WithHead("[expect]\nfirst_detector = \"gradd\"\n")),
            "x.toml:7:18: error: [expect].first_detector: \"gradd\" is not a detector; did you "
            "mean \"grad\"? detectors: " +
                RegisteredDetectors() + ", checkpoint");
}

TEST(ScenarioLoaderErrors, ExpectCauseAndOutcomeFromTheirLists) {
  EXPECT_EQ(ErrorOf(WithHead("[expect]\ncause = \"gradients\"\n")),
            "x.toml:7:9: error: [expect].cause: \"gradients\" is not valid; did you mean "
            "\"gradient\"? choices: data, loss_math, activation, gradient, parameter, "
            "fp16_overflow, gradient_explosion, comm_corruption, reduce_overflow, hang, "
            "rank_failure, replica_divergence, straggler, checkpoint_corruption");
  EXPECT_EQ(ErrorOf(WithHead("[expect]\nfault_outcome = \"lost\"\n")),
            "x.toml:7:17: error: [expect].fault_outcome: \"lost\" is not valid; choices: masked, "
            "detected_recovered, detected_unrecovered, hang, silent_corruption");
}

TEST(ScenarioLoaderErrors, ExpectRankOutsideTheJob) {
  EXPECT_EQ(
      ErrorOf(WithHead("[expect]\nrank = 5\n")),
      "x.toml:7:8: error: [expect].rank: rank 5 does not exist; [job].ranks = 2 (ranks 0..1)");
}

TEST(ScenarioLoaderErrors, PolicyNames) {
  EXPECT_EQ(ErrorOf(WithHead("[recovery]\npolicy = [\"rollback\", \"lr_backof\"]\n")),
            "x.toml:7:23: error: [recovery].policy: \"lr_backof\" is not valid; did you mean "
            "\"lr_backoff\"? choices: skip_step, rollback, lr_backoff, abort, none, resync");
}

TEST(ScenarioLoaderErrors, FaultWrittenAsPlainTable) {
  EXPECT_EQ(ErrorOf(WithHead("[fault]\nkind = \"lr\"\n")),
            "x.toml:6:1: error: [[fault]]: expected an array of tables (write each as [[fault]]), "
            "got table");
}

TEST(ScenarioLoaderErrors, HangDurationForeverOrInteger) {
  EXPECT_EQ(ErrorOf(WithHead("[[fault]]\nkind = \"hang\"\nstep = 1\nduration_ms = \"long\"\n")),
            "x.toml:9:15: error: [[fault]] #1.duration_ms: expected integer >= 1 or \"forever\", "
            "got \"long\"");
  Scenario s = load_scenario_string(
      WithHead("[[fault]]\nkind = \"hang\"\nstep = 1\nduration_ms = \"forever\"\n"
               "[expect]\ndeadlock = false\n"),
      "x.toml");
  EXPECT_EQ(s.faults[0].params.get_int("duration_ms"), -1);
}

TEST(ScenarioLoaderErrors, NcclNeedsCuda) {
  EXPECT_EQ(ErrorOf(WithHead("backend = \"nccl\"\n")),
            "x.toml:6:11: error: [job].backend: \"nccl\" needs device = \"cuda\"");
}

TEST(ScenarioLoaderErrors, CudaOverMpiIsNotImplemented) {
  EXPECT_EQ(ErrorOf(WithHead("device = \"cuda\"\nbackend = \"mpi\"\n")),
            "x.toml:7:11: error: [job].backend: \"mpi\" with device = \"cuda\" is not implemented "
            "(it would need a CUDA-aware MPI); use \"nccl\"");
}

TEST(ScenarioLoaderErrors, DeviceStallNeedsNcclAndTheAllReduce) {
  EXPECT_EQ(ErrorOf(WithHead("[[fault]]\nkind = \"hang\"\nstep = 1\nduration_ms = 10\n"
                             "stall = \"device\"\n")),
            "x.toml:10:9: error: [[fault]] #1.stall: \"device\" needs device = \"cuda\" with the "
            "nccl backend");
  EXPECT_EQ(ErrorOf(WithHead("device = \"cuda\"\n[[fault]]\nkind = \"hang\"\nstep = 1\n"
                             "duration_ms = 10\nwhere = \"step_start\"\nstall = \"device\"\n")),
            "x.toml:12:9: error: [[fault]] #1.stall: \"device\" stalls the gradient all-reduce; it "
            "needs where = \"before_grad_allreduce\"");
  EXPECT_EQ(ErrorOf(WithHead("[[fault]]\nkind = \"hang\"\nstep = 1\nduration_ms = 10\n"
                             "stall = \"gpu\"\n"))
                .rfind("x.toml:10:9: error: [[fault]] #1.stall: \"gpu\"", 0),
            0u);
}

// FSDP2's collectives are the Python agent's: a built-in job has neither a
// reduce-scatter nor an all-gather, so the keys are refused at load, at the key.
TEST(ScenarioLoaderErrors, Fsdp2CollectivePointsAreExternalOnly) {
  EXPECT_EQ(ErrorOf(WithHead("[[fault]]\nkind = \"comm\"\nstep = 1\ntarget = "
                             "\"reduce_scatter\"\n")),
            "x.toml:9:10: error: [[fault]] #1.target: \"reduce_scatter\" is not implemented for "
            "built-in jobs: FSDP2 external jobs only (the built-in stack all-reduces its "
            "gradients); remove `target` to hit the all-reduce");
  EXPECT_EQ(ErrorOf(WithHead("[[fault]]\nkind = \"comm\"\nstep = 1\ntarget = "
                             "\"all_gather\"\n")),
            "x.toml:9:10: error: [[fault]] #1.target: \"all_gather\" is not implemented for "
            "built-in jobs: FSDP2 external jobs only (the built-in stack all-reduces its "
            "gradients); remove `target` to hit the all-reduce");
  EXPECT_EQ(ErrorOf(WithHead("[[fault]]\nkind = \"hang\"\nstep = 1\nduration_ms = 10\n"
                             "where = \"before_reduce_scatter\"\n")),
            "x.toml:10:9: error: [[fault]] #1.where: \"before_reduce_scatter\" is not "
            "implemented for built-in jobs: FSDP2 external jobs only (the built-in stack "
            "all-reduces its gradients; use \"before_grad_allreduce\")");
  // A misspelt collective lists the two.
  EXPECT_EQ(ErrorOf(WithHead("[[fault]]\nkind = \"comm\"\nstep = 1\ntarget = "
                             "\"reduce-scatter\"\n"))
                .rfind("x.toml:9:10: error: [[fault]] #1.target: \"reduce-scatter\"", 0),
            0u);
}

// --- defaults and resolution ------------------------------------------------------------------

TEST(ScenarioLoader, MinimalScenarioFillsDefaults) {
  Scenario s = load_scenario_string(kMinimal, "min.toml");
  EXPECT_EQ(s.file, "min.toml");
  EXPECT_EQ(s.name, "nan-activation-rank1");
  EXPECT_EQ(s.description, "");
  EXPECT_TRUE(s.tags.empty());
  EXPECT_EQ(s.seed, 0u);

  EXPECT_EQ(s.job.workload, WorkloadKind::kMlp);
  EXPECT_EQ(s.job.steps, 30);
  EXPECT_EQ(s.job.ranks, 2);
  EXPECT_EQ(s.job.device, Device::kCpu);
  EXPECT_EQ(s.job.backend, Backend::kMpi);
  EXPECT_EQ(s.job.precision, DType::kFp32);
  EXPECT_EQ(s.job.grad_allreduce_dtype, DType::kFp32);
  EXPECT_FALSE(s.job.grad_predivide);
  EXPECT_EQ(s.job.timeout_ms, 120000);

  EXPECT_EQ(s.workload.batch_size, 32);
  EXPECT_EQ(s.workload.hidden, 128);
  EXPECT_EQ(s.workload.layers, 3);
  EXPECT_EQ(s.workload.optimizer, Optimizer::kAdam);
  EXPECT_DOUBLE_EQ(s.workload.lr, 1e-3);
  EXPECT_EQ(s.workload.loss, LossKind::kCrossEntropy);
  EXPECT_EQ(s.workload.norm, Norm::kNone);

  ASSERT_EQ(s.faults.size(), 1u);
  const FaultSpec& f = s.faults[0];
  EXPECT_EQ(f.index, 0);
  EXPECT_EQ(f.kind, "tensor");
  EXPECT_FALSE(f.ranks.all);
  EXPECT_EQ(f.ranks.ranks, std::vector<int64_t>{1});
  EXPECT_EQ(f.step, 10);
  EXPECT_EQ(f.repeat, 1);
  EXPECT_DOUBLE_EQ(f.probability, 1.0);
  EXPECT_FALSE(f.persistent);
  EXPECT_EQ(f.pos.str(), "min.toml:8:1");
  EXPECT_EQ(f.params.get_string("target"), "activation:layers.1");
  EXPECT_TRUE(f.params.given("target"));
  EXPECT_EQ(f.params.pos("target").str(), "min.toml:10:10");
  EXPECT_TRUE(std::isnan(f.params.get_float("value")));
  EXPECT_FALSE(f.params.given("value"));
  EXPECT_EQ(f.params.get_int("count"), 1);
  EXPECT_FALSE(f.params.has("fraction"));
  EXPECT_FALSE(f.params.has("ranks"));  // common keys are typed fields, not params
  EXPECT_TRUE(f.in_window(10));
  EXPECT_FALSE(f.in_window(11));

  EXPECT_EQ(s.detectors.preset, Preset::kDefault);
  EXPECT_EQ(s.detectors.enabled,
            (std::vector<std::string>{"replica", "batch", "loss", "grad", "straggler",
                                      "post_reduce", "watchdog"}));
  EXPECT_FALSE(s.detectors.enabled_given);
  EXPECT_TRUE(s.detectors.consensus);
  EXPECT_TRUE(s.detectors.replay);
  EXPECT_FALSE(s.detectors.replay_given);
  EXPECT_EQ(collective_timeout_ms(s.detectors), 10000);
  EXPECT_EQ(s.detectors.params.get_int("collective_timeout_ms"), 10000);
  EXPECT_DOUBLE_EQ(s.detectors.params.get_float("max_abs"), 1e6);
  EXPECT_EQ(s.detectors.params.get_int("spike_window"), 20);
  EXPECT_DOUBLE_EQ(s.detectors.params.get_float("spike_zscore"), 6.0);
  EXPECT_EQ(s.detectors.params.get_int("replica_every"), 10);

  EXPECT_EQ(s.recovery.policy, std::vector<Policy>{Policy::kSkipStep});
  EXPECT_TRUE(s.recovery.has(Policy::kSkipStep));
  EXPECT_FALSE(s.recovery.has(Policy::kRollback));
  EXPECT_EQ(s.recovery.snapshot_every, 10);
  EXPECT_DOUBLE_EQ(s.recovery.scaler.max_scale, 16777216.0);

  EXPECT_EQ(s.expect.detected, true);
  EXPECT_EQ(s.expect.rank, std::vector<int64_t>{1});
  EXPECT_FALSE(s.expect.first_detector.has_value());
  EXPECT_FALSE(s.expect.consistent.has_value());
  EXPECT_FALSE(s.expect.deadlock);
  EXPECT_EQ(s.expect.max_false_positives, 0);
  EXPECT_TRUE(s.expect.params.given("detected"));
  EXPECT_TRUE(s.expect.params.has("deadlock"));
  EXPECT_FALSE(s.expect.params.given("deadlock"));
  EXPECT_FALSE(s.expect.params.has("cause"));

  EXPECT_TRUE(unimplemented_features(s).empty());
}

TEST(ScenarioLoader, CudaDefaultsToNccl) {
  Scenario s = load_scenario_string(WithHead("device = \"cuda\"\n"), "x.toml");
  EXPECT_EQ(s.job.backend, Backend::kNccl);
  EXPECT_TRUE(unimplemented_features(s).empty());
  Scenario n = load_scenario_string(WithHead("device = \"cuda\"\nbackend = \"nccl\"\n"), "x.toml");
  EXPECT_EQ(n.job.backend, Backend::kNccl);
  EXPECT_EQ(n.job.device, Device::kCuda);
}

TEST(ScenarioLoader, NaivePresetTurnsConsensusAndReplayOff) {
  Scenario s = load_scenario_string(WithHead("[detectors]\npreset = \"naive\"\n"), "x.toml");
  EXPECT_EQ(s.detectors.enabled, (std::vector<std::string>{"loss", "grad"}));
  EXPECT_FALSE(s.detectors.consensus);
  EXPECT_FALSE(s.detectors.replay);
  EXPECT_TRUE(unimplemented_features(s).empty());  // the naive stack is built (deadlock issue)
}

TEST(ScenarioLoader, ExplicitReplayIsBuilt) {
  Scenario s = load_scenario_string(WithHead("[detectors]\nreplay = true\n"), "x.toml");
  EXPECT_TRUE(s.detectors.replay_given);
  EXPECT_TRUE(s.detectors.replay);
  EXPECT_TRUE(unimplemented_features(s).empty());
}

TEST(ScenarioLoader, EnabledOverridesPreset) {
  Scenario s = load_scenario_string(
      WithHead("[detectors]\npreset = \"none\"\nenabled = [\"grad\", \"watchdog\"]\n"), "x.toml");
  EXPECT_TRUE(s.detectors.enabled_given);
  EXPECT_EQ(s.detectors.enabled, (std::vector<std::string>{"grad", "watchdog"}));
  EXPECT_TRUE(unimplemented_features(s).empty());
}

TEST(ScenarioLoader, RankSetForms) {
  Scenario s = load_scenario_string(WithHead("ranks = 4\n"
                                             "[[fault]]\nkind = \"lr\"\nfactor = 10\nstep = 1\n"
                                             "ranks = \"all\"\nrepeat = \"forever\"\n"
                                             "[[fault]]\nkind = \"comm\"\nstep = 2\nranks = 3\n"
                                             "bit = 30\n[expect]\ndeadlock = false\n"),
                                    "x.toml");
  ASSERT_EQ(s.faults.size(), 2u);
  EXPECT_TRUE(s.faults[0].ranks.all);
  EXPECT_TRUE(s.faults[0].ranks.contains(3));
  EXPECT_EQ(s.faults[0].repeat, -1);
  EXPECT_TRUE(s.faults[0].in_window(1000));
  EXPECT_DOUBLE_EQ(s.faults[0].params.get_float("factor"), 10.0);  // integer written for a float
  EXPECT_EQ(s.faults[1].index, 1);
  EXPECT_EQ(s.faults[1].ranks.ranks, std::vector<int64_t>{3});
  EXPECT_FALSE(s.faults[1].ranks.contains(0));
}

TEST(ScenarioLoader, PresetDetectors) {
  EXPECT_EQ(preset_detectors(Preset::kDefault, DType::kFp32),
            (std::vector<std::string>{"replica", "batch", "loss", "grad", "straggler",
                                      "post_reduce", "watchdog"}));
  EXPECT_EQ(preset_detectors(Preset::kDefault, DType::kFp16),
            (std::vector<std::string>{"replica", "batch", "loss", "grad", "loss_scale", "straggler",
                                      "post_reduce", "watchdog"}));
  // full: every detector; loss_scale only where a loss scaler exists (fp16).
  EXPECT_EQ(preset_detectors(Preset::kFull, DType::kFp32).size(), detectors().size() - 1);
  EXPECT_EQ(preset_detectors(Preset::kFull, DType::kFp16).size(), detectors().size());
  EXPECT_EQ(preset_detectors(Preset::kNaive, DType::kFp32),
            (std::vector<std::string>{"loss", "grad"}));
  EXPECT_TRUE(preset_detectors(Preset::kNone, DType::kFp16).empty());
}

// --- names the workload does not have, faults nobody judges ----------------

// A fault on lines 6-9 with `target`, then [expect] on line 10.
std::string TargetFault(const std::string& target, const std::string& kind = "tensor") {
  return WithHead(
      "[[fault]]\n"  // 6
      "kind = \"" +
      kind +
      "\"\n"  // 7
      "target = \"" +
      target +
      "\"\n"                 // 8
      "step = 1\n"           // 9
      "[expect]\n"           // 10
      "detected = true\n");  // 11
}

TEST(ScenarioLoaderNames, ActivationTargetTypoSuggestsTheModule) {
  EXPECT_EQ(ErrorOf(TargetFault("activation:layer.1")),
            "x.toml:8:10: error: [[fault]] #1.target: \"activation:layer.1\" names no module of "
            "the mlp workload; did you mean \"activation:layers.1\"? modules: layers.0.linear, "
            "layers.0, layers.1.linear, layers.1, layers.2.linear, layers.2, head");
}

TEST(ScenarioLoaderNames, LayerIndexPastTheEndSaysHowManyThereAre) {
  EXPECT_EQ(ErrorOf(TargetFault("activation:layers.99", "overflow")),
            "x.toml:8:10: error: [[fault]] #1.target: \"activation:layers.99\" names no module "
            "of the mlp workload; [workload].layers = 3 gives layers.0 .. layers.2");
}

TEST(ScenarioLoaderNames, GradientTargetTypoSuggestsTheParameter) {
  EXPECT_EQ(ErrorOf(TargetFault("gradient:layers.1.linear.wieght", "bitflip")),
            "x.toml:8:10: error: [[fault]] #1.target: \"gradient:layers.1.linear.wieght\" names "
            "no parameter of the mlp workload; did you mean "
            "\"gradient:layers.1.linear.weight\"? parameters: layers.0.linear.weight, "
            "layers.0.linear.bias, layers.1.linear.weight, layers.1.linear.bias, "
            "layers.2.linear.weight, layers.2.linear.bias, head.weight, head.bias");
  // A module name is not a parameter name.
  EXPECT_NE(ErrorOf(TargetFault("parameter:layers.1")).find("names no parameter"),
            std::string::npos);
}

TEST(ScenarioLoaderNames, LongNameListsAreCut) {
  const std::string text =
      "[scenario]\nname = \"t\"\n[job]\nworkload = \"transformer\"\nsteps = 3\n"  // 1-5
      "[[fault]]\nkind = \"overflow\"\n"                                          // 6-7
      "target = \"activation:blocks.1.mlp.fc3\"\n"                                // 8
      "step = 1\n[expect]\ndetected = true\n";
  EXPECT_EQ(ErrorOf(text),
            "x.toml:8:10: error: [[fault]] #1.target: \"activation:blocks.1.mlp.fc3\" names no "
            "module of the transformer workload; did you mean \"activation:blocks.1.mlp.fc1\"? "
            "modules: embed, pos, blocks.0.ln1, blocks.0.attn.qkv, blocks.0.attn.proj, "
            "blocks.0.attn, blocks.0.ln2, blocks.0.mlp.fc1, blocks.0.mlp.fc2, blocks.0.mlp, "
            "blocks.0, blocks.1.ln1, blocks.1.attn.qkv, blocks.1.attn.proj, blocks.1.attn, "
            "blocks.1.ln2, blocks.1.mlp.fc1, blocks.1.mlp.fc2, blocks.1.mlp, blocks.1, "
            "blocks.2.ln1, blocks.2.attn.qkv, blocks.2.attn.proj, blocks.2.attn, ... (7 more; "
            "`nanchaos targets x.toml` lists them)");
}

TEST(ScenarioLoaderNames, TargetsThatNameSomethingLoad) {
  for (const char* t : {"activation:layers.1", "activation:layers.*", "activation:head",
                        "parameter:head.bias", "gradient:layers.*.linear.weight", "loss"}) {
    EXPECT_EQ(ErrorOf(TargetFault(t)), "no error") << t;
  }
  // The norm's names exist only with a norm.
  EXPECT_NE(ErrorOf(TargetFault("activation:layers.0.norm")).find("names no module"),
            std::string::npos);
  EXPECT_EQ(ErrorOf(WithHead("[workload]\nnorm = \"layernorm\"\n[[fault]]\nkind = \"tensor\"\n"
                             "target = \"activation:layers.0.norm\"\nstep = 1\n[expect]\n"
                             "detected = true\n")),
            "no error");
}

TEST(ScenarioLoaderNames, ExpectLayerMustNameSomethingTheStackCanBlame) {
  auto with_layer = [](const std::string& layer) {
    return WithHead(
        "[expect]\n"  // 6
        "layer = \"" +
        layer + "\"\n");  // 7
  };
  EXPECT_EQ(
      ErrorOf(with_layer("layers.99")),
      "x.toml:7:9: error: [expect].layer: \"layers.99\" is no module, parameter or buffer "
      "of the mlp workload (nor loss, inputs, labels, training_state, nor a step phase: data, "
      "compute, backward, comm); [workload].layers = 3 gives layers.0 .. layers.2");
  EXPECT_EQ(ErrorOf(with_layer("heads")),
            "x.toml:7:9: error: [expect].layer: \"heads\" is no module, parameter or buffer of "
            "the mlp workload (nor loss, inputs, labels, training_state, nor a step phase: data, "
            "compute, backward, comm); did you mean \"head\"? "
            "names: "
            "layers.0.linear, layers.0, layers.1.linear, layers.1, layers.2.linear, layers.2, "
            "head, layers.0.linear.weight, layers.0.linear.bias, layers.1.linear.weight, "
            "layers.1.linear.bias, layers.2.linear.weight, layers.2.linear.bias, head.weight, "
            "head.bias");
  // Prefixes of module or parameter names, the loss, the batch, autograd ops and the step phases
  // a straggler is named with are fine.
  for (const char* ok : {"layers.1", "layers.1.linear.weight", "head", "loss", "labels", "inputs",
                         "LogBackward0", "training_state", "compute", "comm"}) {
    EXPECT_EQ(ErrorOf(with_layer(ok)), "no error") << ok;
  }
}

TEST(ScenarioLoaderNames, FaultWithoutExpectIsRefused) {
  EXPECT_EQ(ErrorOf(WithHead("[[fault]]\nkind = \"crash\"\nstep = 1\n")),
            "x.toml:6:1: error: [[fault]] #1 has no [expect] to judge it; add an [expect] table "
            "and say what the stack must do (e.g. detected = true, outcome = \"completed\"), even "
            "if only deadlock = false");
  EXPECT_EQ(ErrorOf(WithHead("[[fault]]\nkind = \"crash\"\nstep = 1\n"
                             "[[fault]]\nkind = \"crash\"\nstep = 2\n[expect]\n")),
            "x.toml:12:1: error: [expect] is empty, so nothing judges the scenario's 2 faults; say "
            "what the stack must do (e.g. detected = true, outcome = \"completed\"), even if "
            "only deadlock = false");
  EXPECT_EQ(ErrorOf(WithHead("[[fault]]\nkind = \"crash\"\nstep = 1\n[expect]\n"
                             "deadlock = false\n")),
            "no error");
  // No fault, nothing to judge: a clean run needs no [expect].
  EXPECT_EQ(ErrorOf(WithHead("")), "no error");
}

// --- the cases from real reports ---------------------------------------------------------------

TEST(ScenarioLoader, EverySharedCaseValidates) {
  std::vector<std::string> files = expand_scenario_paths({NANCHAOS_SOURCE_DIR "/tests/cases"});
  ASSERT_GE(files.size(), 9u);
  for (const auto& file : files) {
    EXPECT_NO_THROW(load_scenario(file)) << file;
  }
}

TEST(ScenarioLoader, EveryShippedScenarioValidates) {
  std::vector<std::string> files = expand_scenario_paths({NANCHAOS_SOURCE_DIR "/scenarios"});
  if (files.empty()) GTEST_SKIP() << "scenarios/ is empty";
  for (const auto& file : files) {
    try {
      load_scenario(file);
    } catch (const ScenarioError& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST(ScenarioLoader, UnimplementedFeaturesOfSharedCases) {
  const std::string dir = NANCHAOS_SOURCE_DIR "/tests/cases/";
  for (const char* name :
       {"r01-naive-stack-deadlocks", "r01-nan-input-one-rank", "r02-fp16-logits-overflow",
        "r06-nan-gradient-checked", "r06-nan-gradient-unchecked",
        "r21-fp16-ffn-overflow-blamed-on-ffn", "r22-zero-std-normalization",
        "r23-masked-nan-targets", "r24-lr-too-high-rollback"}) {
    Scenario s = load_scenario(dir + name + ".toml");
    EXPECT_TRUE(unimplemented_features(s).empty()) << name;
  }
  Scenario r24 = load_scenario(dir + "r24-lr-too-high-rollback.toml");
  // The full preset: every registered detector but loss_scale (fp32 has no loss scaler).
  EXPECT_EQ(r24.detectors.enabled, preset_detectors(Preset::kFull, DType::kFp32));
  EXPECT_EQ(r24.detectors.enabled.size(), detectors().size() - 1);
  EXPECT_EQ(std::count(r24.detectors.enabled.begin(), r24.detectors.enabled.end(), "loss_scale"),
            0);
  EXPECT_TRUE(r24.recovery.has(Policy::kRollback));
}

TEST(ScenarioLoader, CudaWithDeviceStallHangIsBuilt) {
  Scenario s = load_scenario_string(
      WithHead("device = \"cuda\"\n[[fault]]\nkind = \"hang\"\nstep = 1\nduration_ms = "
               "\"forever\"\nstall = \"device\"\n[expect]\ndeadlock = false\n"),
      "x.toml");
  EXPECT_EQ(s.faults[0].params.get_string("stall"), "device");
  EXPECT_TRUE(unimplemented_features(s).empty());
}

TEST(ScenarioLoader, ExpandPaths) {
  const std::string dir = NANCHAOS_SOURCE_DIR "/tests/cases";
  std::vector<std::string> files =
      expand_scenario_paths({dir, dir + "/r01-nan-input-one-rank.toml"});
  ASSERT_FALSE(files.empty());
  EXPECT_TRUE(std::is_sorted(files.begin(), files.end()));
  EXPECT_EQ(std::count(files.begin(), files.end(), dir + "/r01-nan-input-one-rank.toml"), 1);
  try {
    expand_scenario_paths({"/nonexistent/suite"});
    FAIL() << "no error";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/suite: error: no such file or folder");
  }
}

// --- keys and registry ---------------------------------------------------------------------------

TEST(Keys, Nearest) {
  EXPECT_EQ(nearest("within_step", {"within_ms", "within_steps"}), "within_steps");
  EXPECT_EQ(nearest("tensr", {"batch", "tensor"}), "tensor");
  EXPECT_EQ(nearest("zzzzzz", {"batch", "tensor"}), "");
}

TEST(Keys, ParamsAccessors) {
  Params p;
  p.set_table_pos({"f.toml", 3, 1});
  p.set("n", int64_t{4}, {"f.toml", 4, 5});
  p.set("d", int64_t{2});
  p.set("s", std::string("a"));
  EXPECT_TRUE(p.given("n"));
  EXPECT_FALSE(p.given("d"));
  EXPECT_TRUE(p.has("d"));
  EXPECT_DOUBLE_EQ(p.get_float("n"), 4.0);
  EXPECT_EQ(p.get_ints("n"), std::vector<int64_t>{4});
  EXPECT_EQ(p.get_strings("s"), std::vector<std::string>{"a"});
  EXPECT_EQ(p.pos("n").str(), "f.toml:4:5");
  EXPECT_EQ(p.pos("d").str(), "f.toml:3:1");
  EXPECT_THROW(p.get_int("missing"), std::logic_error);
  EXPECT_THROW(p.get_bool("n"), std::logic_error);
}

TEST(Keys, DescribeExpected) {
  EXPECT_EQ(describe_expected(Key("p", KeyType::kFloat, "").above(0).max(1)), "float in (0, 1]");
  EXPECT_EQ(describe_expected(Key("b", KeyType::kInt, "").range(0, 31)), "integer in [0, 31]");
  EXPECT_EQ(type_name(KeyType::kRankSet), "\"all\", integer or array of integers");
}

TEST(RegistryDeathTest, DuplicateNameAborts) {
  FaultKindInfo dup;
  dup.name = "tensor";
  EXPECT_DEATH(register_fault_kind(dup), "fault kind \"tensor\" registered twice");
}

// SCENARIO_FORMAT.md "More faults": optimizer-state targets and kind `state`, refused at load
// where the state does not exist on the built-in job.
TEST(ScenarioLoaderMoreFaults, OptimizerTargetsNeedAdamAndAnExistingState) {
  auto with = [](const std::string& optimizer, const std::string& target) {
    return WithHead(
        "[workload]\n"  // 6
        "optimizer = \"" +
        optimizer +
        "\"\n"                 // 7
        "[[fault]]\n"          // 8
        "kind = \"tensor\"\n"  // 9
        "target = \"" +
        target +
        "\"\n"  // 10
        "step = 3\n[expect]\ndetected = true\n");
  };
  Scenario ok =
      load_scenario_string(with("adam", "optimizer:layers.1.linear.weight.exp_avg_sq"), "x.toml");
  EXPECT_TRUE(unimplemented_features(ok).empty());
  EXPECT_NO_THROW(
      load_scenario_string(with("adamw", "optimizer:layers.*.linear.weight.exp_avg"), "x.toml"));
  EXPECT_EQ(ErrorOf(with("sgd", "optimizer:layers.1.linear.weight.exp_avg_sq")),
            "x.toml:10:10: error: [[fault]] #1.target: "
            "\"optimizer:layers.1.linear.weight.exp_avg_sq\": [workload].optimizer = \"sgd\" "
            "runs without momentum and keeps no optimizer state; optimizer: targets need "
            "\"adam\" or \"adamw\" (exp_avg, exp_avg_sq)");
  const std::string typo = ErrorOf(with("adam", "optimizer:layers.1.linear.weight.exp_avg_sqr"));
  EXPECT_NE(typo.find("names no optimizer state (PARAM.exp_avg or PARAM.exp_avg_sq) of the mlp "
                      "workload; did you mean "
                      "\"optimizer:layers.1.linear.weight.exp_avg_sq\"?"),
            std::string::npos)
      << typo;
}

TEST(ScenarioLoaderMoreFaults, StateKindNeedsOneOfValueOrFactorAndTheStateItChanges) {
  auto with = [](const std::string& job_extra, const std::string& fault) {
    return WithHead(job_extra + "[[fault]]\nkind = \"state\"\nstep = 3\n" + fault +
                    "[expect]\ndetected = true\n");
  };
  Scenario lr = load_scenario_string(with("", "field = \"lr\"\nfactor = 10.0\n"), "x.toml");
  EXPECT_EQ(lr.faults.at(0).kind, "state");
  EXPECT_NO_THROW(load_scenario_string(
      with("precision = \"fp16\"\n", "field = \"loss_scale\"\nvalue = 8.0\n"), "x.toml"));
  EXPECT_EQ(ErrorOf(with("", "field = \"lr\"\n")),
            "x.toml:9:9: error: [[fault]] #1: kind \"state\" needs `value` or `factor`");
  EXPECT_EQ(ErrorOf(with("", "field = \"lr\"\nvalue = 2.0\nfactor = 3.0\n")),
            "x.toml:11:10: error: [[fault]] #1: `value` and `factor` are exclusive; write one of "
            "them");
  EXPECT_EQ(ErrorOf(with("", "field = \"loss_scale\"\nfactor = 0.5\n")),
            "x.toml:9:9: error: [[fault]] #1.field: \"loss_scale\" needs [job].precision = "
            "\"fp16\" (only fp16 runs a dynamic loss scaler, as with GradScaler)");
  EXPECT_EQ(
      ErrorOf(with("[workload]\noptimizer = \"sgd\"\n", "field = \"step_counter\"\nvalue = 1.0\n")),
      "x.toml:11:9: error: [[fault]] #1.field: \"step_counter\" needs "
      "[workload].optimizer = \"adam\" or \"adamw\" (SGD keeps no step counter)");
  const std::string bad = ErrorOf(with("", "field = \"lrr\"\nfactor = 2.0\n"));
  EXPECT_NE(bad.find("did you mean \"lr\"?"), std::string::npos) << bad;
}

TEST(Registry, EveryKeyDeclarationIsSane) {
  // Defaults must satisfy their own ranges and choices; every entry has a doc line.
  auto check = [](const std::string& owner, const std::vector<KeySpec>& keys) {
    for (const auto& k : keys) {
      SCOPED_TRACE(owner + "." + k.name);
      EXPECT_FALSE(k.doc.empty());
      EXPECT_FALSE(k.required && k.default_value.has_value());
      if (!k.default_value) continue;
      if (const auto* s = std::get_if<std::string>(&*k.default_value); s && !k.choices.empty()) {
        EXPECT_NE(std::find(k.choices.begin(), k.choices.end(), *s), k.choices.end());
      }
      if (const auto* i = std::get_if<int64_t>(&*k.default_value)) {
        EXPECT_GE(static_cast<double>(*i), k.min);
        EXPECT_LE(static_cast<double>(*i), k.max);
      }
    }
  };
  check("scenario", scenario_keys());
  check("job", job_keys());
  check("workload", workload_keys());
  check("recovery", recovery_keys());
  check("expect", expect_keys());
  check("fault", fault_common_keys());
  check("detectors", detector_common_keys());
  for (const auto& [name, info] : fault_kinds()) check(name, info.keys);
  for (const auto& [name, info] : detectors()) check(name, info.keys);
  // How many there are is checked against the source files (registry_test.cpp).
  EXPECT_FALSE(fault_kinds().empty());
  EXPECT_FALSE(detectors().empty());
}

}  // namespace
}  // namespace nanchaos::harness
