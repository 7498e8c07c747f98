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
#include <utility>
#include <vector>

#include "harness/scenario/keys.h"

namespace nanchaos::harness {

/// A malformed scenario (or a missing file). what() names file:line:col, the key path and the fix.
class ScenarioError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Device { kCpu, kCuda };
enum class Backend { kMpi, kNccl };
enum class DType { kFp32, kFp16, kBf16 };
enum class Optimizer { kSgd, kAdam, kAdamW };
enum class Schedule { kConstant, kCosine };
enum class Norm { kNone, kBatchNorm, kLayerNorm };
enum class LossKind { kCrossEntropy, kNaiveLogSoftmax, kMse, kMaskedMse };
/// kExternal: the user's own training command with the Python agent inside (docs/scenario-format.md
/// "External jobs"); the job brings its own model and stack.
enum class WorkloadKind { kMlp, kTransformer, kExternal };

const char* to_string(DType d);

struct JobConfig {
  WorkloadKind workload = WorkloadKind::kMlp;
  int64_t steps = 1;
  int64_t ranks = 2;
  Device device = Device::kCpu;
  Backend backend = Backend::kMpi;  ///< nccl by default when device = cuda
  DType precision = DType::kFp32;
  DType grad_allreduce_dtype = DType::kFp32;
  bool grad_predivide = false;
  int64_t timeout_ms = 120000;  ///< whole-job wall-clock limit (ms)
  // External jobs only (workload = "external"):
  std::vector<std::string> command;                      ///< argv, run once per rank
  std::vector<std::pair<std::string, std::string>> env;  ///< added to every rank, file order
  int64_t micro_batches = 1;                             ///< root forwards per iteration
  int64_t attach_timeout_ms = 30000;  ///< launch -> `agent` event deadline, else the job is killed
  Params params;  ///< the [job] keys as written and defaulted (positions for later checks)
  bool external() const { return workload == WorkloadKind::kExternal; }
};

struct WorkloadConfig {
  int64_t batch_size = 32;
  int64_t hidden = 128;
  int64_t layers = 3;
  int64_t heads = 4;
  int64_t seq_len = 32;
  int64_t vocab = 256;
  int64_t features = 64;
  int64_t classes = 10;
  Optimizer optimizer = Optimizer::kAdam;
  double lr = 1e-3;
  int64_t warmup_steps = 0;
  Schedule schedule = Schedule::kConstant;
  double grad_clip = 0.0;  ///< 0 = off
  Norm norm = Norm::kNone;
  LossKind loss = LossKind::kCrossEntropy;
  bool normalize_inputs = false;
  Params params;  ///< the [workload] keys as written and defaulted (empty for external jobs)
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
  SourcePos pos;  ///< where the [[fault]] table starts

  /// True when `step` lies in [step, step + repeat) (probability not applied).
  bool in_window(int64_t s) const { return s >= step && (repeat < 0 || s < step + repeat); }
};

enum class Preset { kDefault, kFull, kNaive, kNone };

struct DetectorConfig {
  Preset preset = Preset::kDefault;
  std::vector<std::string> enabled;  ///< resolved list (preset, or the `enabled` override)
  bool enabled_given = false;        ///< `enabled` written in the file
  bool consensus = true;             ///< default false for naive
  bool replay = true;                ///< default false for naive
  bool replay_given = false;
  Params params;  ///< detector-declared keys (max_abs, spike_*, collective_timeout_ms)
  int64_t collective_timeout_ms = 10000;
  double max_abs = 1e6;
  int64_t spike_window = 20;
  double spike_zscore = 6.0;
};

/// kResync: on a `replica` detection the flagged ranks copy the majority's state (replica.h).
enum class Policy { kSkipStep, kRollback, kLrBackoff, kAbort, kNone, kResync };

/// [recovery] dynamic loss scaler keys; defaults are torch.cuda.amp.GradScaler's (init 2^16, x2
/// growth every 2000 clean steps, x0.5 backoff) plus the contract's max 2^24 and min 1. The
/// scaler itself is the stack's (detectors/core/loss_scaler.h).
struct ScalerConfig {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  ///< clean steps
  double max_scale = 16777216.0;
  double min_scale = 1.0;
};

struct RecoveryConfig {
  std::vector<Policy> policy = {Policy::kSkipStep};
  int64_t snapshot_every = 10;
  double lr_backoff_factor = 0.5;
  int64_t max_consecutive = 5;
  ScalerConfig scaler;  ///< [recovery] init_scale ... min_scale (detectors/core/loss_scaler.h)
  bool has(Policy p) const;
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
  ExpectConfig expect;
  CampaignConfig campaign;
};

/// Parses and validates one scenario file. Throws ScenarioError.
Scenario load_scenario(const std::string& path);
/// Same, from a string (tests); `path` is only used in messages.
Scenario load_scenario_string(const std::string& toml_text, const std::string& path);

/// Expands PATH arguments (files, or folders searched recursively for *.toml, sorted) into files.
/// Throws ScenarioError for a path that does not exist.
std::vector<std::string> expand_scenario_paths(const std::vector<std::string>& paths);

/// Features a scenario uses that are not built yet ("fault kind overflow (issue 5)", ...).
/// Empty when the scenario can run. `nanchaos run` refuses a scenario with any, exit 2.
std::vector<std::string> unimplemented_features(const Scenario& s);

/// The detector names each preset enables (built or not), in pipeline order.
std::vector<std::string> preset_detectors(Preset p, DType precision);

}  // namespace nanchaos::harness
