// Drawing a campaign's faults (docs/scenario-format.md "Campaigns", docs/generator.md "Campaign
// draws"): kind, ranks, step, target, value or bit, from the campaign seed with the portable
// generator (harness/common/rng.h), each fault turned into a complete scenario (the base scenario
// with one [[fault]]) and validated by the scenario loader before it is kept, so a drawn fault the
// loader would refuse is never run.
//
//   CampaignTargets t = builtin_targets(base);        // or the external job's dry run
//   auto kinds = campaign_kinds(base, t, {});         // every kind valid for this job
//   auto faults = draw_faults(base, base_text, t, kinds, seed, 50);
//   write(fault_scenario_toml(base, base_text, faults[7], "faults/007/scenario.toml"));
//
// Fault i is drawn from SplitMix64(mix(mix(mix(seed, 0xCA4A), i), attempt)) (attempt 0 unless
// the loader refused an earlier draw), so the first k faults of a 50-fault campaign are the
// 16-fault campaign of the same seed, and a change to one kind's draw never moves another
// fault's. Pure functions of their inputs (no clocks, no I/O); thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "results/campaign.h"

namespace nanchaos::harness {

/// A campaign that cannot be drawn: a kind that is not valid for the job, a job too short for an
/// observation window. what() is the whole message.
class CampaignError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The built-in workload's names (harness/scenario/model_spec.h, the names `nanchaos targets`
/// lists). Throws CampaignError for an external job or an unlisted (huge) model.
CampaignTargets builtin_targets(const Scenario& s);

/// One drawn fault, ready to be written as a scenario.
struct DrawnFault {
  int index = 0;
  nlohmann::ordered_json fault;  ///< the [[fault]] table: kind, ranks, step, then its own keys
  std::string fault_class;       ///< kind, or kind:where (see fault_class_of)
  results::Truth truth;
  /// Faults run beside it, unscored (FaultKindInfo::companions): [[fault]] #2, #3, ...
  std::vector<nlohmann::ordered_json> companions;
  int redraws = 0;      ///< draws of this index the loader refused before this one (0 normally)
  bool finite = false;  ///< finite by construction (its kind's FaultKindInfo::finite rule)
  bool slows = false;   ///< it slows a rank (FaultKindInfo::slows_rank: kind slow)
};

/// The window fault steps are drawn from: [first, last] with first = max(1, steps / 5) (a clean
/// prefix the spike detectors learn from) and last = steps - 1 - max(2, steps / 5) (the
/// observation window after the fault). Throws CampaignError when the job is too short.
std::pair<int64_t, int64_t> fault_step_window(int64_t steps);

/// The `--kinds` text as names: comma-separated, blanks around a name dropped ("tensor, lr").
/// Throws CampaignError when it names no kind ("", ",") or has an empty item ("tensor,,lr"): a
/// typo must not widen the campaign to every kind.
std::vector<std::string> split_kinds_option(const std::string& text);

/// The `--values` text: "any" (the default: what campaigns always drew), "finite" or
/// "nonfinite". Throws CampaignError naming the option and the accepted words otherwise.
DrawValues parse_values_option(const std::string& text);

/// Kinds that can be drawn for this job, sorted; `wanted` empty = every registered, built kind
/// valid for the job and for `values` (`--values`; FaultKindInfo::values_refusal). Throws
/// CampaignError naming a wanted kind that is unknown or invalid here and why ("overflow: needs
/// [job].precision = \"fp16\" or \"bf16\"", "batch: --values finite: its corruptions write
/// NaN or Inf ..."), or when no kind is left.
std::vector<std::string> campaign_kinds(const Scenario& s, const CampaignTargets& t,
                                        const std::vector<std::string>& wanted,
                                        DrawValues values = DrawValues::kAny);

/// The contract's ground truth of a drawn fault (rank = the hit ranks, step, and the layer and
/// cause of its kind's `truth` rule; SCENARIO_FORMAT.md "Campaigns"). `world` resolves
/// ranks = "all". Throws CampaignError for an unregistered kind.
results::Truth truth_of(const nlohmann::ordered_json& fault, int64_t world);
/// "tensor:activation", "bitflip:gradient", "batch:inputs", "state:lr", "lr", "hang", ...: the
/// kind, then its `fault_class` rule's variant when it has one.
std::string fault_class_of(const nlohmann::ordered_json& fault);

/// The scenario that runs `f` alone: `base_text` (the base scenario file) without its
/// [[fault]], [expect] and [campaign], named "<base>-fNNN", with `f` as its one [[fault]] and
/// `[expect] deadlock = false` (a fault needs an [expect]; the campaign scores the evidence, not
/// the verdict). An external job's relative command arguments that name files next to the base
/// scenario become absolute (the fault's scenario lives in the campaign folder). `header` is a
/// comment put first (the re-run command).
std::string fault_scenario_toml(const Scenario& base, const std::string& base_text,
                                const DrawnFault& f, const std::string& header = "");

/// Draws `count` faults over `kinds` (from campaign_kinds, with the same `values`: each kind's
/// draw rule writes what FaultDraw::values() allows; kAny is the draw campaigns always made, so
/// a same-seed campaign without --values draws what it drew before) and checks each through the
/// scenario loader (load_scenario_string of fault_scenario_toml); a refused draw is drawn again
/// from the next attempt. Throws CampaignError when 20 attempts of one index are refused (a bug:
/// the message carries the loader's last error). Stops early, with fewer faults, once stop_signal()
/// is set (Ctrl-C while a large campaign is drawn).
std::vector<DrawnFault> draw_faults(const Scenario& base, const std::string& base_text,
                                    const CampaignTargets& t, const std::vector<std::string>& kinds,
                                    uint64_t seed, int count, DrawValues values = DrawValues::kAny);

}  // namespace nanchaos::harness
