// Registries of fault kinds and detectors, filled at static-initialization time by one
// registration line next to each class (as FoundationDB's REGISTER_WORKLOAD does).
//
//   // inject/lr.cpp
//   NANCHAOS_REGISTER_FAULT_KIND(lr, (FaultKindInfo{"lr", "multiplies the learning rate",
//       {{"factor", KeyType::kFloat, ...}}, "", &make_lr_injector}));
//
// A kind or detector whose feature is not built yet registers with `not_implemented` set: its
// keys validate, and `nanchaos run` refuses the scenario with "not implemented yet: <that text>".
// Duplicate names abort at start-up. The executable links the registrars' object files whole
// (CMake WHOLE_ARCHIVE), so no registration is dropped by the linker.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/scenario/keys.h"

namespace nanchaos::inject {
class Injector;
}
namespace nanchaos::detect {
class Detector;
}

namespace nanchaos::harness {

struct FaultSpec;
struct Scenario;
struct Decision;  // consensus.h

/// A fault kind: its extra keys (besides the common ones) and how to build its injector.
struct FaultKindInfo {
  std::string name;
  std::string doc;
  std::vector<KeySpec> keys;
  std::string not_implemented;  ///< "" when built; otherwise what is missing (and which issue)
  std::function<std::unique_ptr<inject::Injector>(const FaultSpec&, const Scenario&)> make;
  /// Optional cross-key check after the keys validated (e.g. count vs fraction); throws
  /// ScenarioError with a position. May be empty.
  std::function<void(const FaultSpec&)> check;
  /// Optional check against the rest of the scenario (workload, loss...), after [job] and
  /// [workload] loaded; throws ScenarioError with a position. May be empty.
  std::function<void(const FaultSpec&, const Scenario&)> check_job;
};

/// Which presets hold a detector (SCENARIO_FORMAT.md, [detectors] `preset`); `full` holds every
/// detector and `none` none, so they need no flag.
enum PresetFlags : unsigned { kPresetDefault = 1u, kPresetNaive = 2u };

/// What a detector's attribution rule maps the indices of a consensus row to.
struct AttributionNames {
  const std::vector<std::string>& backward;  ///< gradients and parameters, backward order
  const std::vector<std::string>& modules;   ///< probed module outputs, forward order
  const std::vector<std::string>& replica;   ///< replica.h order: parameters, buffers, state
};

/// A detector: everything the rest of nanchaos needs to know about it, in its one file. The
/// central lists (pipeline order, consensus bits, presets, docs/keys.md, the registry snapshot of
/// torch-free builds) all derive from these entries, and tests/harness/registry_test.cpp fails
/// when one disagrees.
struct DetectorInfo {
  std::string name;
  std::string doc;
  std::vector<KeySpec> keys;
  std::string not_implemented;
  std::function<std::unique_ptr<detect::Detector>(const Scenario&)> make;
  /// Position in the step pipeline (DESIGN.md "The step pipeline"); unique, >= 0. Sorted by it,
  /// the detectors give the consensus bits (bit i = i-th detector) and "the first detector of a
  /// step" (the flagged one that comes first). Spaced by 10 so that a new one fits between.
  int order = -1;
  /// PresetFlags of the presets besides `full` that hold it.
  unsigned presets = 0;
  /// In a preset only where a dynamic loss scaler exists (precision = fp16); `enabled` may still
  /// name it anywhere.
  bool preset_fp16_only = false;
  /// The consensus row column (consensus.h RowField) that carries its Finding's `code`; -1: none.
  int column = -1;
  /// Its check also decides whether the replay reproduced a fault (detectors/stack/replay.h): a
  /// stateless test for a non-finite value, made for the replay whether or not the scenario
  /// enables it, so a replay's verdict never depends on the enabled set.
  bool replay = false;
  /// DESIGN.md attribution of a step whose first detector this is: sets `layer` and `cause` of
  /// the decision from the first blamed rank's row (kRowWidth doubles). Empty: neither is known
  /// from the consensus (the replay or the detector's own event tells). Must not throw for
  /// indices outside the name lists (it leaves `layer` empty then).
  std::function<void(const double* row, const AttributionNames& names, Decision* d)> attribute;
};

std::map<std::string, FaultKindInfo>& fault_kinds();
std::map<std::string, DetectorInfo>& detectors();

/// Registers; aborts the process with a message on a duplicate name (and, for a detector, on a
/// missing or duplicate `order`, more than kMaxDetectors, or a registration after
/// detector_order() was first read).
bool register_fault_kind(FaultKindInfo info);
bool register_detector(DetectorInfo info);

/// The consensus row stores a rank's detector bits in one double: 52 bits stay exact.
inline constexpr size_t kMaxDetectors = 52;

/// Every registered detector's name, sorted by `order` (the pipeline order). Computed on the first
/// call, which must come after static initialization (from main or a test).
const std::vector<std::string>& detector_order();

}  // namespace nanchaos::harness

#define NANCHAOS_REGISTER_FAULT_KIND(id, ...)             \
  static const bool nanchaos_fault_kind_registered_##id = \
      ::nanchaos::harness::register_fault_kind(__VA_ARGS__)
#define NANCHAOS_REGISTER_DETECTOR(id, ...)             \
  static const bool nanchaos_detector_registered_##id = \
      ::nanchaos::harness::register_detector(__VA_ARGS__)
