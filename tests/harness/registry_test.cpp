// A detector is one file (harness/scenario/registry.h DetectorInfo): the central lists that derive
// from the registrations must agree with them. Each test here fails when one registration is
// incomplete or two contradict each other (a missing order, a taken column, a cause the
// [expect] table does not know, a class whose name differs from its registration).
#include "harness/scenario/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "detectors/core/consensus.h"
#include "detectors/core/replica.h"
#include "detectors/detector.h"
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
    if (!info.make) {
      EXPECT_FALSE(info.not_implemented.empty()) << name << ": no factory and no reason";
      continue;
    }
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

}  // namespace
}  // namespace nanchaos::harness
