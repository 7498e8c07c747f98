// The registry snapshot of torch-free builds (harness/scenario/registry_json.h): every key of every
// registered fault kind and detector survives JSON and back; bad snapshots name the entry.
#include "harness/scenario/registry_json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "harness/scenario/registry.h"

namespace nanchaos::harness {
namespace {

using nlohmann::json;

TEST(RegistryJson, EveryKeyOfTheLiveRegistryRoundTrips) {
  const json live = registry_json();
  ASSERT_FALSE(live["fault_kinds"].empty());
  ASSERT_FALSE(live["detectors"].empty());
  // Parse it back (nothing is registered) and write it again: every entry, key, order and preset
  // must come back as it was.
  const RegistrySnapshot snap = parse_registry_json(live);
  EXPECT_EQ(snap.fault_kinds.size(), fault_kinds().size());
  EXPECT_EQ(snap.detectors.size(), detectors().size());
  const json again = registry_json(snap);
  for (const char* list : {"fault_kinds", "detectors"}) {
    ASSERT_EQ(again[list].size(), live[list].size()) << list;
    for (size_t i = 0; i < live[list].size(); ++i) {
      EXPECT_EQ(again[list][i], live[list][i]) << list << " " << live[list][i]["name"];
    }
  }
}

TEST(RegistryJson, AKindFromTheSnapshotValidatesItsKeysButBuildsNothing) {
  register_from_json(json::parse(R"({"version": 1, "detectors": [], "fault_kinds": [
      {"name": "rt_probe", "doc": "d",
       "keys": [{"name": "count", "type": "int", "required": false, "doc": "n",
                 "default": {"int": 1}, "min": 1, "max": "inf", "min_exclusive": false}]}]})"));
  const auto& info = fault_kinds().at("rt_probe");
  ASSERT_EQ(info.keys.size(), 1u);
  EXPECT_EQ(info.keys[0].type, KeyType::kInt);
  EXPECT_EQ(std::get<int64_t>(*info.keys[0].default_value), 1);
  EXPECT_EQ(info.keys[0].min, 1.0);
  EXPECT_TRUE(std::isinf(info.keys[0].max));
  EXPECT_FALSE(info.make);
  EXPECT_FALSE(info.check);
  fault_kinds().erase("rt_probe");
}

TEST(RegistryJson, MalformedSnapshotNamesTheEntry) {
  const auto message = [](const char* text) {
    try {
      register_from_json(json::parse(text));
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(R"({"version": 2})"), "registry snapshot: document: not version 1");
  EXPECT_EQ(message(R"({"version": 1, "detectors": []})"),
            "registry snapshot: document: no \"fault_kinds\" array");
  EXPECT_EQ(message(R"({"version": 1, "detectors": [], "fault_kinds": [
      {"name": "rt_bad", "keys": [{"name": "k", "type": "nope"}]}]})"),
            "registry snapshot: fault kind rt_bad.k: unknown type nope");
  EXPECT_EQ(fault_kinds().count("rt_bad"), 0u);
  EXPECT_EQ(message(R"({"version": 1, "fault_kinds": [], "detectors": [
      {"name": "rt_det", "keys": [], "order": 5, "presets": ["huge"], "preset_fp16_only": false}]})"),
            "registry snapshot: detector rt_det: unknown preset huge");
}

}  // namespace
}  // namespace nanchaos::harness
