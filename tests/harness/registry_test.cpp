// A detector or a fault kind is one file (harness/scenario/registry.h DetectorInfo,
// FaultKindInfo): the central lists that derive from the registrations must agree with them. Each
// test here fails when one registration is incomplete or two contradict each other (a missing
// order, a taken column, a cause the [expect] table does not know, a class whose name differs
// from its registration, a kind without its campaign rules, a README that lists other kinds).
#include "harness/scenario/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "detectors/core/consensus.h"
#include "detectors/core/replica.h"
#include "detectors/detector.h"
#include "harness/common/cause.h"
#include "harness/common/rng.h"
#include "harness/scenario/fault_draw.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/scenario_schema.h"

namespace nanchaos::harness {
namespace {

const std::vector<std::string> kBwd = {"head.bias", "head.weight", "layers.0.linear.weight"};
const std::vector<std::string> kModules = {"layers.0", "head"};
const std::vector<std::string> kReplica = {"layers.0.linear.weight", "training_state"};

// The names of the .cpp files directly in `folder` of the source tree, without extension.
std::set<std::string> SourceStems(const std::string& folder) {
  std::set<std::string> out;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(NANCHAOS_SOURCE_DIR) + "/" + folder)) {
    if (e.is_regular_file() && e.path().extension() == ".cpp") out.insert(e.path().stem());
  }
  return out;
}

// One file, one registration: detectors/<name>.cpp registers detector <name>, inject/<kind>.cpp
// fault kind <kind> (inject/injector.cpp, faults.cpp and agent.cpp are the agent's machinery,
// not kinds). A registration the linker dropped, or a file that registers under another name,
// fails here.
TEST(Registry, EachDetectorAndFaultKindFileRegistersItsName) {
  std::set<std::string> registered_detectors, registered_kinds;
  for (const auto& [name, info] : detectors()) registered_detectors.insert(name);
  for (const auto& [name, info] : fault_kinds()) registered_kinds.insert(name);
  EXPECT_EQ(registered_detectors, SourceStems("detectors"));
  std::set<std::string> kind_files = SourceStems("inject");
  for (const char* machinery : {"injector", "faults", "agent", "observe"})
    kind_files.erase(machinery);
  EXPECT_EQ(registered_kinds, kind_files);
}

TEST(Registry, PipelineOrderHoldsEveryDetectorOnceInAscendingOrder) {
  const auto& order = detector_order();
  EXPECT_EQ(order.size(), detectors().size());
  EXPECT_LE(order.size(), kMaxDetectors);
  std::set<std::string> seen(order.begin(), order.end());
  EXPECT_EQ(seen.size(), order.size());
  for (size_t i = 1; i < order.size(); ++i) {
    EXPECT_LT(detectors().at(order[i - 1]).order, detectors().at(order[i]).order)
        << order[i - 1] << " before " << order[i];
  }
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(detector_bit(order[i]), int(i));
  EXPECT_EQ(summary_width(), order.size());
}

TEST(Registry, EachBuiltDetectorIsTheClassItsRegistrationNames) {
  const Scenario s = load_scenario_string(
      "[scenario]\nname = \"r\"\n[job]\nworkload = \"mlp\"\nsteps = 20\nprecision = \"fp16\"\n"
      "[detectors]\npreset = \"full\"\n",
      "r.toml");
  for (const auto& name : detector_order()) {
    const DetectorInfo& info = detectors().at(name);
    EXPECT_FALSE(info.doc.empty()) << name;
    ASSERT_TRUE(info.make) << name << ": no factory";
    const auto d = info.make(stack_config(s));
    ASSERT_NE(d, nullptr) << name;
    EXPECT_EQ(d->name(), name);
  }
}

TEST(Registry, ConsensusColumnsAreAttributionColumns) {
  // kBits and kMaxAbs are the runner's; every other column a detector may carry its code in.
  for (const auto& name : detector_order()) {
    const int column = detectors().at(name).column;
    if (column < 0) continue;
    EXPECT_LT(column, int(kRowWidth)) << name;
    EXPECT_NE(column, int(kBits)) << name;
    EXPECT_NE(column, int(kMaxAbs)) << name;
  }
}

TEST(Registry, EachAttributionRuleNamesAKnownCauseAndALayerFromItsColumn) {
  const auto& causes = cause_names();
  for (const auto& name : detector_order()) {
    const DetectorInfo& info = detectors().at(name);
    if (!info.attribute) continue;
    // One flagged rank (1) whose index columns, all zero, point at entry 0 of their lists.
    std::vector<double> rows(2 * kRowWidth, 0.0);
    rows[kRowWidth + kBits] = double(uint64_t(1) << detector_bit(name));
    // The replica column carries a divergence code (replica.h): tensor 0, a corrupted weight.
    rows[kRowWidth + kReplicaIdx] = divergence_code({0, DivergenceKind::kParameter});
    const Decision d = decide(rows, 2, kBwd, kModules, kReplica);
    EXPECT_EQ(d.detector, name);
    EXPECT_NE(std::find(causes.begin(), causes.end(), d.cause), causes.end())
        << name << " attributes cause \"" << d.cause << "\", which [expect] cause cannot name";
    if (info.column == kGradIdx || info.column == kParamIdx) EXPECT_EQ(d.layer, kBwd[0]) << name;
    if (info.column == kReplicaIdx) EXPECT_EQ(d.layer, kReplica[0]) << name;
  }
}

TEST(Registry, PresetsAreTheRegisteredMemberships) {
  const auto& order = detector_order();
  // full: every detector, loss_scale-like ones only under fp16.
  EXPECT_EQ(preset_detectors(Preset::kFull, DType::kFp16), order);
  for (const auto& name : preset_detectors(Preset::kFull, DType::kFp32)) {
    EXPECT_FALSE(detectors().at(name).preset_fp16_only) << name;
  }
  EXPECT_TRUE(preset_detectors(Preset::kNone, DType::kFp16).empty());
  for (auto [preset, flag] :
       {std::pair{Preset::kDefault, kPresetDefault}, std::pair{Preset::kNaive, kPresetNaive}}) {
    const auto on = preset_detectors(preset, DType::kFp16);
    for (const auto& name : order) {
      const bool member = (detectors().at(name).presets & flag) != 0;
      EXPECT_EQ(std::count(on.begin(), on.end(), name), member ? 1 : 0) << name;
    }
  }
  // The `preset` key's doc lists the default preset's members by name.
  const auto& keys = detector_common_keys();
  const auto preset_key =
      std::find_if(keys.begin(), keys.end(), [](const KeySpec& k) { return k.name == "preset"; });
  ASSERT_NE(preset_key, keys.end());
  for (const auto& name : preset_detectors(Preset::kDefault, DType::kFp16)) {
    EXPECT_NE(preset_key->doc.find(name), std::string::npos) << name;
  }
}

TEST(Registry, CauseTableRoundTrips) {
  const auto& names = cause_names();
  ASSERT_EQ(names.size(), size_t(Cause::kCheckpointCorruption) + 1);
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(to_string(Cause(i)), names[i]);
    EXPECT_EQ(parse_cause(names[i]), Cause(i)) << names[i];
  }
  EXPECT_EQ(to_string(Cause::kLossMath), "loss_math");
  EXPECT_FALSE(parse_cause("").has_value());
  EXPECT_FALSE(parse_cause("my_stack_cause").has_value());
}

// Everything the campaign and the judge need of a kind is in its registration (a kind without
// them aborts at start-up; this says which rule is missing): each built kind draws its keys on
// every job that does not refuse it, and its ground truth names a cause of the table.
TEST(Registry, EachBuiltFaultKindDeclaresItsCampaignRules) {
  const std::string job = "[scenario]\nname = \"x\"\n[job]\nsteps = 30\nranks = 4\n";
  const std::vector<Scenario> jobs = {
      load_scenario_string(job + "workload = \"mlp\"\n", "mlp.toml"),
      load_scenario_string(job + "workload = \"mlp\"\nprecision = \"fp16\"\n[workload]\n"
                                 "optimizer = \"adam\"\nloss = \"mse\"\nnormalize_inputs = true\n",
                           "mlp-fp16.toml"),
      load_scenario_string(job + "workload = \"transformer\"\nprecision = \"fp16\"\n", "tf.toml"),
      load_scenario_string(job + "workload = \"mlp\"\nrestarts = 1\n[checkpoint]\nevery = 5\n",
                           "ckpt.toml"),
  };
  CampaignTargets targets;
  targets.modules = kModules;
  targets.parameters = kBwd;
  targets.optimizer_state = true;
  for (const auto& [name, info] : fault_kinds()) {
    EXPECT_TRUE(info.make) << name << ": no injector factory";
    ASSERT_TRUE(info.draw) << name << ": no campaign draw";
    ASSERT_TRUE(info.truth) << name << ": no ground truth";
    int drawn = 0;
    for (const Scenario& s : jobs) {
      // Named in --kinds (a kind such as `slow` is drawn only then).
      if (info.refusal && !info.refusal(s, targets, true).empty()) continue;
      for (uint64_t seed = 0; seed < 20; ++seed) {
        inject::SplitMix64 g(seed);
        FaultDraw d(g, s, targets);
        nlohmann::ordered_json f = {{"kind", name}, {"ranks", {1}}, {"step", 7}};
        info.draw(d, f);
        EXPECT_EQ(f.at("kind"), name) << "the draw of " << name << " changed its kind";
        const KindTruth t = info.truth(f);
        EXPECT_TRUE(parse_cause(to_string(t.cause)).has_value()) << name;
        if (info.fault_class) (void)info.fault_class(f);
        ++drawn;
      }
    }
    EXPECT_GT(drawn, 0) << name << " is refused by every built-in job of this test";
  }
}

// The judge dates a failed launch from a firing only for a kind whose firing is its rank's
// failure: crash. A hang also stops the job, but its failure is the timeout, not the firing.
TEST(Registry, OnlyCrashFailsItsRankAtInjection) {
  ASSERT_NE(find_fault_kind("crash"), nullptr);
  EXPECT_TRUE(find_fault_kind("crash")->fails_at_injection);
  ASSERT_NE(find_fault_kind("hang"), nullptr);
  EXPECT_TRUE(find_fault_kind("hang")->stops_job);
  for (const auto& [name, info] : fault_kinds()) {
    if (name != "crash") EXPECT_FALSE(info.fails_at_injection) << name;
  }
}

// A kind that forgot a rule stops the program at start-up, naming the kind and the rule; a
// snapshot's entry (keys only) needs none.
TEST(RegistryDeathTest, BuiltKindWithoutItsRulesAborts) {
  FaultKindInfo info;
  info.name = "throwaway";
  info.make = fault_kinds().at("tensor").make;  // any factory
  info.draw = [](FaultDraw&, nlohmann::ordered_json&) {};
  EXPECT_DEATH(register_fault_kind(info),
               "fault kind \"throwaway\" \\(inject/throwaway.cpp\\) registers no ground truth "
               "for campaigns \\(`truth`\\)");
  info.truth = [](const nlohmann::ordered_json&) { return KindTruth{Cause::kGradient, {}}; };
  info.draw = nullptr;
  EXPECT_DEATH(register_fault_kind(info), "registers no campaign draw of its keys");
  EXPECT_EXIT(
      {
        FaultKindInfo keys_only;
        keys_only.name = "throwaway";
        register_fault_kind(keys_only, /*keys_only=*/true);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// README.md shows `nanchaos validate` on a mistyped kind: its list of kinds is the registry's
// (it once lacked `state`). The file below puts `kind` where README's bad.toml has it.
TEST(Registry, ReadmeListsTheRegisteredFaultKinds) {
  std::ifstream readme(std::string(NANCHAOS_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(readme) << "README.md not found";
  std::string line, shown;
  while (std::getline(readme, line)) {
    if (line.rfind("bad.toml:", 0) == 0 && line.find("is unknown") != std::string::npos) {
      shown = line;
    }
  }
  ASSERT_FALSE(shown.empty()) << "README.md shows no `nanchaos validate bad.toml` error";
  const std::string bad =
      "[scenario]\nname = \"bad\"\n[job]\nworkload = \"mlp\"\nsteps = 10\nranks = 2\n"
      "[[fault]]\nkind = \"tensr\"\n";
  std::string said;
  try {
    load_scenario_string(bad, "bad.toml");
  } catch (const ScenarioError& e) {
    said = e.what();
  }
  EXPECT_EQ(shown, said);
  std::string kinds;
  for (const auto& [name, info] : fault_kinds()) kinds += (kinds.empty() ? "" : ", ") + name;
  EXPECT_NE(said.find("kinds: " + kinds), std::string::npos) << said;
}

}  // namespace
}  // namespace nanchaos::harness
