// The detector registry: what each detector declares (its keys, presets, pipeline order,
// consensus column, attribution rule) and how it is built, from a StackConfig: the stack's part
// of a scenario, which holds no faults and no expectations (stack_config.h). Filled at
// static-initialization time by one NANCHAOS_REGISTER_DETECTOR line next to each detector.
// The fault kinds' registry is registry.h, which includes this one; the detectors include only
// this one (tests/include_rules.py).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/scenario/keys.h"
#include "harness/scenario/stack_config.h"

namespace nanchaos::detect {
class Detector;
}

namespace nanchaos::harness {

struct Decision;  // consensus.h

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
  std::function<std::unique_ptr<detect::Detector>(const StackConfig&)> make;
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

  // What the stack (detectors/stack/) reads instead of the detector's name.
  /// Enabling it gives every collective the deadline [detectors].collective_timeout_ms; a
  /// collective past it (or failed) is this detector's `detect` (stack_comm.h). watchdog.
  bool arms_collective_deadline = false;
  /// Its finding is GradScaler's found_inf (a non-finite scaled gradient): under fp16 the loss
  /// scaler backs off on it. grad, loss_scale.
  bool found_inf = false;
  /// Under fp16, a decision led by another found_inf detector is reported as this one, with
  /// cause fp16_overflow (the scaler's found_inf is its finding). loss_scale; at most one.
  bool reports_found_inf = false;
  /// Its finding with code 0 means non-finite logits: the stack names the module from the
  /// always-on probe sums on the step itself, so a transient fault is localized too. loss.
  bool localizes_loss = false;
  /// The replay refines a decision it leads (transient, then cause and layer). false: its
  /// finding is state that diverged over earlier steps, which re-running one step cannot tell.
  /// Off for replica.
  bool refined_by_replay = true;
  /// The replay's non-finite parameter or module output may rename the cause and layer of a
  /// decision it leads. false: the finding already names its origin (the inputs or labels)
  /// and the replay only tells whether it was transient. Off for batch.
  bool refined_to_layer = true;
  /// Its ranks are the minority of a vote on the replicas' state (replica.h), not where a
  /// symptom showed: policy resync applies to its decisions, and the training-state vote
  /// (attribution.h drifted_ranks) does not lean against them. replica.
  bool ranks_by_vote = false;
  /// Its decisions take no recovery action (the `decision` event's action is "none" whatever
  /// [recovery] policy says): what it finds changes no number, so skipping, rolling back or
  /// aborting would only cost training. straggler.
  bool report_only = false;
};

std::map<std::string, DetectorInfo>& detectors();

/// Registers; aborts the process with a message on a duplicate name, a missing or duplicate
/// `order`, more than kMaxDetectors, or a registration after detector_order() was first read.
bool register_detector(DetectorInfo info);

/// The consensus row stores a rank's detector bits in one double: 52 bits stay exact.
inline constexpr size_t kMaxDetectors = 52;

/// Every registered detector's name, sorted by `order` (the pipeline order). Computed on the first
/// call, which must come after static initialization (from main or a test).
const std::vector<std::string>& detector_order();

}  // namespace nanchaos::harness

#define NANCHAOS_REGISTER_DETECTOR(id, ...)             \
  static const bool nanchaos_detector_registered_##id = \
      ::nanchaos::harness::register_detector(__VA_ARGS__)
