// What the detection and recovery stack under test is built from: the job, the workload, the
// [detectors] and [recovery] tables of a scenario, and its seed. StackConfig is a type with no
// faults and no expectations (no field can hold a [[fault]], an [expect] key or a [campaign]
// threshold), so nothing built from it can read the plan: the stack under test never sees what
// will be injected or what the judge expects (../shared/DESIGN.md "the stack
// never reads the ground truth"). The detectors (detectors/) include this header and
// detector_registry.h, never scenario.h, registry.h or plan.h; tests/include_rules.py checks that
// on every include, transitively.
//
// scenario.h includes this header (a Scenario holds these tables) and gives stack_config(), the
// only way from a Scenario to a StackConfig. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "harness/common/dtype.h"
#include "harness/scenario/keys.h"

namespace nanchaos::harness {

enum class Device { kCpu, kCuda };
enum class Backend { kMpi, kNccl };
enum class Optimizer { kSgd, kAdam, kAdamW };
enum class Schedule { kConstant, kCosine };
enum class Norm { kNone, kBatchNorm, kLayerNorm };
enum class LossKind { kCrossEntropy, kNaiveLogSoftmax, kMse, kMaskedMse };
/// kExternal: the user's own training command with the Python agent inside (docs/scenario-format.md
/// "External jobs"); the job brings its own model and stack.
enum class WorkloadKind { kMlp, kTransformer, kExternal };

/// How an external job's ranks are started ([job] launch): torchrun's environment (RANK,
/// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or none of it (`plain`:
/// one process, for scripts that turn distributed on when RANK is set, as nanoGPT's train.py).
enum class Launch { kTorchrun, kPlain };

struct JobConfig {
  WorkloadKind workload = WorkloadKind::kMlp;
  int64_t steps = 1;
  int64_t ranks = 2;
  Device device = Device::kCpu;
  Backend backend = Backend::kMpi;  ///< nccl by default when device = cuda
  DType precision = DType::kFp32;
  DType grad_allreduce_dtype = DType::kFp32;
  bool grad_predivide = false;
  int64_t timeout_ms = 120000;  ///< whole-job wall-clock limit (ms), per launch
  /// Relaunches of the whole job after a launch that ended abnormally (crashed, aborted, hung);
  /// 0 = none (docs/scenario-format.md "Recovery by restart").
  int64_t restarts = 0;
  int64_t restart_delay_ms = 0;  ///< wait between the end of one launch and the next (ms)
  // External jobs only (workload = "external"):
  std::vector<std::string> command;                      ///< argv, run once per rank
  std::vector<std::pair<std::string, std::string>> env;  ///< added to every rank, file order
  int64_t micro_batches = 1;                             ///< root forwards per iteration
  int64_t attach_timeout_ms = 30000;  ///< launch -> `agent` event deadline, else the job is killed
  std::string torch;  ///< a torch version requirement (">=2.4"; "" any): picks the interpreter
  /// Python distributions the interpreter must have, each a PackageRequirement as written
  /// ("lightning>=2.0", "transformers"; validated at load): picks the interpreter with `torch`.
  std::vector<std::string> python_packages;
  Launch launch = Launch::kTorchrun;
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

enum class Preset { kDefault, kFull, kNaive, kNone };

struct DetectorConfig {
  Preset preset = Preset::kDefault;
  std::vector<std::string> enabled;  ///< resolved list (preset, or the `enabled` override)
  bool enabled_given = false;        ///< `enabled` written in the file
  bool consensus = true;             ///< default false for naive
  bool replay = true;                ///< default false for naive
  bool replay_given = false;
  /// Every detector-declared key (max_abs, spike_*, replica_every, collective_timeout_ms), as
  /// written or defaulted: each detector reads its own keys from here, nowhere else.
  Params params;
};

/// The watchdog's default deadline for any collective (ms): its `collective_timeout_ms` key's
/// default (detectors/watchdog.cpp).
inline constexpr int64_t kDefaultCollectiveTimeoutMs = 10000;

/// [detectors].collective_timeout_ms (ms), the watchdog's key, also read outside the stack (the
/// controller's post-mortem, the NCCL set-up, the external job's plan): from `d.params`, where
/// the loader and read_plan put it; kDefaultCollectiveTimeoutMs when the Params lack it (a
/// DetectorConfig built by hand).
inline int64_t collective_timeout_ms(const DetectorConfig& d) {
  return d.params.has("collective_timeout_ms") ? d.params.get_int("collective_timeout_ms")
                                               : kDefaultCollectiveTimeoutMs;
}

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

/// The stack's configuration (see above). `seed` is the scenario's (a trial's seed replaces it);
/// the stack may draw from it, as a real job seeds its own randomness.
struct StackConfig {
  std::string file;  ///< the scenario file's path, for messages
  uint64_t seed = 0;
  JobConfig job;
  WorkloadConfig workload;
  DetectorConfig detectors;
  RecoveryConfig recovery;
};

}  // namespace nanchaos::harness
