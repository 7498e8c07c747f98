// The fault-kind and detector registries (registry.h) as JSON, and back.
//
// The key tables of fault kinds and detectors are declared next to their torch code
// (inject/<kind>.cpp, detectors/<name>.cpp). Builds without LibTorch (the libFuzzer targets and
// the plan tool of tests/fuzz/, docs/fuzzing.md) read the same tables from a snapshot instead:
// tests/fuzz/registry.json, the output of `nanchaos keys --format json`, kept identical to the
// live registry by the CTest `fuzz_registry_up_to_date`.
//
//   {"version": 1,
//    "fault_kinds": [{"name": "tensor", "doc": "...",
//                     "keys": [{"name": "count", "type": "int", "required": false, "doc": "...",
//                               "default": {"int": 1}, "min": 1, "max": "inf", ...}],
//                     "python_agent": true}],
//    "detectors": [...]}
//
// A default is tagged by its type: {"bool"|"int"|"float"|"string"|"strings"|"ints"|"ranks": v},
// floats and bounds as numbers or "nan"/"inf"/"-inf". A snapshot has no injector factories and
// no cross-key `check` functions, campaign rules or flags but `python_agent`: a kind registered
// from it validates its keys and the fixed tables, not the checks its torch file adds (documented
// in docs/fuzzing.md).
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "harness/scenario/registry.h"

namespace nanchaos::harness {

/// Registry entries as a snapshot holds them (no factories, checks or attribution rules).
struct RegistrySnapshot {
  std::vector<FaultKindInfo> fault_kinds;  ///< name order
  std::vector<DetectorInfo> detectors;     ///< pipeline order
};

/// Every registered fault kind (name order) and detector (pipeline order, with `order`,
/// `presets` and `preset_fp16_only`), with their keys.
nlohmann::ordered_json registry_json();
nlohmann::ordered_json registry_json(const RegistrySnapshot& snap);

/// Parses a registry_json() document without registering anything. Throws std::runtime_error
/// naming the entry when the document does not have that shape.
RegistrySnapshot parse_registry_json(const nlohmann::json& doc);

/// Registers every fault kind and detector of a registry_json() document that is not registered
/// yet (make and check empty). Throws std::runtime_error naming the entry when the document
/// does not have that shape.
void register_from_json(const nlohmann::json& doc);

}  // namespace nanchaos::harness
