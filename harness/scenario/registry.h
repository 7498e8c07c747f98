// Registries of fault kinds and detectors, filled at static-initialization time by one
// registration line next to each class (as FoundationDB's REGISTER_WORKLOAD does). The
// detectors' half is detector_registry.h (included here), which reaches no fault or scenario
// type: the detectors include only that one.
//
//   // inject/lr.cpp
//   FaultKindInfo lr_kind() {
//     FaultKindInfo info;
//     info.name = "lr";  info.keys = {...};  info.make = ...;
//     info.draw = [](FaultDraw& d, nlohmann::ordered_json& f) { f["factor"] = 1e4; };
//     info.truth = [](const nlohmann::ordered_json&) {
//       return KindTruth{Cause::kGradientExplosion, std::nullopt};
//     };
//     return info;
//   }
//   NANCHAOS_REGISTER_FAULT_KIND(lr, lr_kind());
//
// Everything about a kind lives in its FaultKindInfo, so a new kind is one new file: its keys
// and injector, its campaign draw and ground truth, and the flags the job, the judge and the
// campaign read instead of its name. A built kind without `make`, `draw` or `truth` aborts at
// start-up with a message naming it (a snapshot's kinds, registry_json.h, carry keys only).
//
// A kind not built is not registered: the loader refuses it as unknown, listing the kinds that
// are.
// Duplicate names abort at start-up. The executable links the registrars' object files whole
// (CMake WHOLE_ARCHIVE), so no registration is dropped by the linker.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/common/cause.h"
#include "harness/scenario/detector_registry.h"
#include "harness/scenario/keys.h"
#include "harness/scenario/target.h"

namespace nanchaos::inject {
class Injector;
}

namespace nanchaos::harness {

struct FaultSpec;
struct Scenario;
class FaultDraw;  // harness/scenario/fault_draw.h

/// What a campaign's faults can hit in a job: module names (activation targets, forward order),
/// parameter names, and whether optimizer state exists.
struct CampaignTargets {
  std::vector<std::string> modules;
  std::vector<std::string> parameters;
  bool optimizer_state = false;  ///< optimizer: targets exist (built-in jobs with adam/adamw)
};

/// What numbers a campaign's faults write (`nanchaos campaign --values`; docs/generator.md
/// "Campaign draws"): kAny draws as campaigns always did (NaN, Inf, 1e30, any bit), kFinite only
/// finite, bounded corruption (a factor in [1.01, 100], a mantissa or low exponent bit), kNonfinite
/// only NaN and Inf. Kinds that write no number (slow, hang, crash) draw the same in every mode.
enum class DrawValues { kAny, kFinite, kNonfinite };
/// "any", "finite", "nonfinite".
const char* to_string(DrawValues v);
/// The `--values` text; nullopt for anything else.
std::optional<DrawValues> parse_draw_values(const std::string& text);

/// The part of a drawn fault's ground truth its kind decides (the ranks and step are the
/// fault's): the cause the stack should name and, when it can be scored, the layer.
struct KindTruth {
  Cause cause = Cause::kData;
  /// module / parameter / inputs / labels / loss; none: not scored
  std::optional<std::string> layer;
};

/// A fault kind: its extra keys (besides the common ones), how to build its injector, and what
/// the job, the judge and campaigns need to know of it.
struct FaultKindInfo {
  std::string name;
  std::string doc;
  std::vector<KeySpec> keys;
  std::function<std::unique_ptr<inject::Injector>(const FaultSpec&, const Scenario&)> make;
  /// The wheres its `target` key may name (tensor, bitflip: all; overflow: activation), in the
  /// order the loader's message lists them. Non-empty: the loader and read_plan parse `target`
  /// into FaultSpec::target and refuse any other text. Empty: `target`, if declared, is a plain
  /// string param.
  std::vector<TargetWhere> target_wheres;
  /// Optional cross-key check after the keys validated (e.g. count vs fraction); throws
  /// ScenarioError with a position. May be empty.
  std::function<void(const FaultSpec&)> check;
  /// Optional check against the rest of the scenario (workload, loss...), after [job] and
  /// [workload] loaded; throws ScenarioError with a position. May be empty.
  std::function<void(const FaultSpec&, const Scenario&)> check_job;
  /// Optional: the step the fault fires at when a key other than `step` says it (the
  /// checkpoint kind's `save = N` is the save made before step N x every), after check_job.
  /// FaultSpec::step (the plan's, the ground truth's) is set to it. May be empty.
  std::function<int64_t(const FaultSpec&, const Scenario&)> fault_step;

  // What the rest of nanchaos knows of the kind: read from here, never from its name.
  /// A firing ends or stalls its rank (crash, hang): a campaign hits one rank with it and runs it
  /// in a launch of its own, and it explains a crashed or hung job to the judge.
  bool stops_job = false;
  /// Its firing is the moment its rank fails (crash: the process dies right after the `inject`
  /// record): the judge dates a failed launch from the firing's time rather than from when the
  /// controller saw the rank gone. False for a kind that fails its rank later or never (hang:
  /// its failure is the job's timeout).
  bool fails_at_injection = false;
  /// It edits the gradient all-reduce's send buffer: a CUDA rank stages that buffer through host
  /// memory for it.
  bool edits_send_buffer = false;
  /// It changes the training state (Injector::on_training_state): the built-in loop runs that
  /// hook at step start.
  bool edits_training_state = false;
  /// The Python agent applies it to external jobs (inject/python/nanchaos); the loader refuses
  /// it for workload = "external" otherwise.
  bool python_agent = false;
  /// What of `f` only the Python agent applies ("" when the C++ agent of a LibTorch program can
  /// apply all of it): the C++ agent refuses such a fault at attach. May be empty.
  std::function<std::string(const FaultSpec& f)> python_only;

  // Campaigns (docs/scenario-format.md "Campaigns"; harness/controller/campaign_draw.h draws
  // kind, ranks and step, then calls these).
  /// Why the kind cannot be drawn for this job ("" when it can); `requested`: named in --kinds.
  /// May be empty (drawable for every job its keys validate on).
  std::function<std::string(const Scenario& s, const CampaignTargets& t, bool requested)> refusal;
  /// Draws the kind's own keys into `fault` (kind, ranks and step are set). Required.
  std::function<void(FaultDraw& d, nlohmann::ordered_json& fault)> draw;
  /// The class a drawn fault is counted in, after "<kind>:" ("activation" for
  /// "tensor:activation"); "" or empty: the kind alone.
  std::function<std::string(const nlohmann::ordered_json& fault)> fault_class;
  /// Optional: the [[fault]] tables a campaign runs beside a drawn fault so that it can matter
  /// (the checkpoint kind: a crash right after the corrupted save, so a relaunch loads it). They
  /// are not scored; the drawn fault's truth is the row's. May be empty.
  std::function<std::vector<nlohmann::ordered_json>(const nlohmann::ordered_json& fault,
                                                    const Scenario& s)>
      companions;
  /// The cause (and layer) a stack should blame for a drawn fault. Required.
  std::function<KindTruth(const nlohmann::ordered_json& fault)> truth;
  /// Optional: why the kind cannot be drawn under `--values v` ("" when it can: its `draw` rule
  /// reads FaultDraw::values()). Empty: the kind writes no number and draws the same in every
  /// mode (slow, hang, crash).
  std::function<std::string(DrawValues v)> values_refusal;
  /// Optional: whether a drawn fault is finite by construction: every number it writes is
  /// finite and, where it changes a value, the change is bounded (a factor, a finite value, a
  /// flip of a mantissa, low exponent or sign bit; fault_draw.h finite_flip). Campaign rows say
  /// so (`finite`) and the summary scores finite faults apart. Empty: never (the kind writes no
  /// number, or NaN/Inf by design).
  std::function<bool(const nlohmann::ordered_json& fault, const Scenario& s)> finite;
  /// It slows a rank and changes no number (slow): campaign rows say so (`slows`), and the
  /// `straggler` detector's detections on the other rows are its false positives.
  bool slows_rank = false;
};

std::map<std::string, FaultKindInfo>& fault_kinds();

/// Registers; aborts the process with a message on a duplicate name, or on a kind without
/// `make`, `draw` or `truth`. `keys_only`: a snapshot's entry
/// (registry_json.h), which has none of them.
bool register_fault_kind(FaultKindInfo info, bool keys_only = false);

/// The registered kind `name`; nullptr when none is.
const FaultKindInfo* find_fault_kind(const std::string& name);

/// True when some fault of `faults` is of a registered kind with `flag` set, e.g.
/// any_fault_kind(s.faults, &FaultKindInfo::stops_job).
bool any_fault_kind(const std::vector<FaultSpec>& faults, bool FaultKindInfo::*flag);

}  // namespace nanchaos::harness

#define NANCHAOS_REGISTER_FAULT_KIND(id, ...)             \
  static const bool nanchaos_fault_kind_registered_##id = \
      ::nanchaos::harness::register_fault_kind(__VA_ARGS__)
