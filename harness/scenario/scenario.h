// The typed scenario model (docs/scenario-format.md) and its loader.
//
// load_scenario() parses one TOML file with toml++, validates every table and key against the
// declarations (scenario_schema.cpp for fixed tables, the fault-kind and detector registries for
// [[fault]] and [detectors]), fills defaults and returns a Scenario. Nothing here includes torch.
//
// Errors: ScenarioError, whose what() is a complete compiler-style message:
//   "scenarios/lr.toml:14:1: error: [[fault]] kind \"tensr\" is unknown; kinds: batch, ..."
//   "x.toml:7:1: error: [expect] unknown key `within_step`; did you mean `within_steps`?"
//   "x.toml:3:9: error: [job].steps: expected integer >= 1, got string"
//   "missing.toml: error: cannot open file"
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/scenario/keys.h"
#include "harness/scenario/stack_config.h"
#include "harness/scenario/target.h"

namespace nanchaos::harness {

/// A malformed scenario (or a missing file). what() names file:line:col, the key path and the fix.
class ScenarioError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One [[fault]] entry. Common keys are typed fields; kind-specific keys live in `params`
/// (declared by the kind's FaultKindInfo, defaults filled).
struct FaultSpec {
  int index = 0;  ///< position in the file's [[fault]] array (0-based)
  std::string kind;
  RankSet ranks;             ///< default [0]
  int64_t step = 0;          ///< first step (0-based) it can fire
  int64_t repeat = 1;        ///< consecutive steps; -1 = "forever"
  double probability = 1.0;  ///< per eligible step, drawn from (seed, index, step, rank)
  bool persistent = false;
  Params params;  ///< kind-specific keys
  /// `target` parsed, for the kinds that declare target wheres (FaultKindInfo::target_wheres);
  /// nullopt for the others (comm's `target` names a collective) and when unset.
  std::optional<Target> target;
  SourcePos pos;  ///< where the [[fault]] table starts

  /// True when `step` lies in [step, step + repeat) (probability not applied).
  bool in_window(int64_t s) const { return s >= step && (repeat < 0 || s < step + repeat); }
};

/// [expect]: every present key is a check. `params` keeps what was written (and where);
/// the typed fields below mirror it for convenience.
struct ExpectConfig {
  Params params;
  std::optional<bool> detected;
  std::optional<std::string> first_detector;
  std::optional<int64_t> within_steps;
  std::optional<double> within_ms;
  std::optional<std::vector<int64_t>> rank;
  std::optional<std::string> layer;
  std::optional<std::string> cause;
  std::optional<bool> transient;
  std::optional<std::string> outcome;
  bool deadlock = false;  ///< default false, always checked
  std::optional<double> abort_within_ms;
  std::optional<bool> recovered;
  std::optional<double> final_loss_max;
  std::optional<bool> consistent;  ///< nullopt: default (true when the job completes)
  std::optional<std::string> fault_outcome;
  int64_t max_false_positives = 0;
  std::optional<int64_t> restarts;           ///< exact number of relaunches
  std::optional<int64_t> resumed_from_step;  ///< the step the last launch resumed from
  /// Steps computed twice or lost, summed over restarts: (the failed launch's last step reached)
  /// - (the next launch's resumed step) <= this.
  std::optional<int64_t> steps_lost_max;
  /// Every restart's resume_ms (the failing event -> the next launch's first completed step,
  /// ms) <= this; fails when no restart happened.
  std::optional<double> resume_ms_max;
  /// Every rank's final parameter and optimizer digests equal those of the clean reference run
  /// (same scenario and seed, no fault; harness/controller/clean_run.h).
  std::optional<bool> final_matches_clean;
};

/// [campaign]: minima `nanchaos campaign` gates on (docs/scenario-format.md "Campaigns");
/// `nanchaos run` ignores the table. nullopt: not checked.
struct CampaignConfig {
  std::optional<double> min_coverage;           ///< in [0, 1]
  std::optional<double> min_attribution_rank;   ///< in [0, 1]
  std::optional<double> min_attribution_layer;  ///< in [0, 1]
  std::optional<double> min_attribution_cause;  ///< in [0, 1]
  Params params;                                ///< as written (positions)
};

/// [checkpoint]: the built-in job's own checkpoints (SCENARIO_FORMAT.md "Recovery by restart").
/// The checkpoint at step s holds the state before step s runs; saves at steps every, 2 every, ...
struct CheckpointConfig {
  int64_t every = 0;     ///< steps between saves; 0: no checkpoints (the table is absent)
  int64_t keep = 2;      ///< newest checkpoints kept on disk
  bool validate = true;  ///< on load: digests and finiteness; a bad one falls back to an older
  std::string format = "torch";  ///< "torch": one file (rank 0); "dcp": a shard per rank
  bool on() const { return every > 0; }
};

struct Scenario {
  std::string file;  ///< path as given
  std::string name;
  std::string description;
  std::vector<std::string> tags;
  uint64_t seed = 0;
  JobConfig job;
  WorkloadConfig workload;
  std::vector<FaultSpec> faults;
  DetectorConfig detectors;
  RecoveryConfig recovery;
  CheckpointConfig checkpoint;
  ExpectConfig expect;
  CampaignConfig campaign;
};

/// The stack's part of `s` (stack_config.h): everything but the faults, the expectations and the
/// campaign thresholds.
StackConfig stack_config(const Scenario& s);

/// Parses and validates one scenario file. Throws ScenarioError.
Scenario load_scenario(const std::string& path);
/// Same, from a string (tests); `path` is only used in messages.
Scenario load_scenario_string(const std::string& toml_text, const std::string& path);

/// Expands PATH arguments (files, or folders searched recursively for *.toml, sorted) into files.
/// Throws ScenarioError for a path that does not exist.
std::vector<std::string> expand_scenario_paths(const std::vector<std::string>& paths);

/// Fault kinds and detectors a scenario names that this build does not register ("detector
/// `x`: not registered in this build"). Empty when the scenario can run. `nanchaos run` refuses
/// a scenario with any, exit 2.
std::vector<std::string> unimplemented_features(const Scenario& s);

/// The detector names each preset enables (built or not), in pipeline order.
std::vector<std::string> preset_detectors(Preset p, DType precision);

}  // namespace nanchaos::harness
