// Key tables of the fixed scenario tables (docs/scenario-format.md is the contract; a change that
// alters the meaning of a listed key is a format break), and the Key builder they are written
// with. The helpers the declarations share are in scenario_checks.cpp.
#include "harness/scenario/scenario_schema.h"

#include <fmt/format.h>

#include <limits>
#include <string>

#include "harness/common/cause.h"
#include "harness/scenario/detector_registry.h"

namespace nanchaos::harness {

Key::Key(std::string name, KeyType type, std::string doc) {
  spec_.name = std::move(name);
  spec_.type = type;
  spec_.doc = std::move(doc);
}

Key& Key::required() {
  spec_.required = true;
  return *this;
}

Key& Key::def(bool v) { return def(Value(v)); }

Key& Key::def(int v) { return def(static_cast<int64_t>(v)); }

Key& Key::def(int64_t v) {
  if (spec_.type == KeyType::kFloat || spec_.type == KeyType::kFloatOrSpecial) {
    return def(Value(static_cast<double>(v)));
  }
  return def(Value(v));
}

Key& Key::def(double v) { return def(Value(v)); }

Key& Key::def(const char* v) {
  if (spec_.type == KeyType::kStringOrArray || spec_.type == KeyType::kStringArray) {
    return def(Value(std::vector<std::string>{v}));
  }
  if (spec_.type == KeyType::kFloatOrSpecial) {  // stored as the loader stores a written value
    const std::string s(v);
    if (s == "nan") return def(std::numeric_limits<double>::quiet_NaN());
    if (s == "inf") return def(std::numeric_limits<double>::infinity());
    if (s == "-inf") return def(-std::numeric_limits<double>::infinity());
    return def(std::stod(s));
  }
  return def(Value(std::string(v)));
}

Key& Key::def(Value v) {
  spec_.default_value = std::move(v);
  return *this;
}

Key& Key::min(double v) {
  spec_.min = v;
  spec_.min_exclusive = false;
  return *this;
}

Key& Key::above(double v) {
  spec_.min = v;
  spec_.min_exclusive = true;
  return *this;
}

Key& Key::max(double v) {
  spec_.max = v;
  return *this;
}

Key& Key::range(double lo, double hi) {
  spec_.min = lo;
  spec_.max = hi;
  spec_.min_exclusive = false;
  return *this;
}

Key& Key::choices(std::vector<std::string> c) {
  spec_.choices = std::move(c);
  return *this;
}

Key& Key::pattern(std::string regex) {
  spec_.pattern = std::move(regex);
  return *this;
}

namespace {

using K = KeyType;

const std::vector<std::string> kDTypes = {"fp32", "fp16", "bf16"};

}  // namespace

const std::vector<KeySpec>& scenario_keys() {
  static const std::vector<KeySpec> keys = {
      Key("name", K::kString, "unique within a suite; names the result folder")
          .required()
          .pattern("[a-z0-9._-]+"),
      Key("description", K::kString, "one or two sentences for reports").def(""),
      Key("tags", K::kStringArray, "select with --tag").def(Value(std::vector<std::string>{})),
      Key("seed", K::kInt, "every random choice derives from it; same seed, same run")
          .def(0)
          .min(0),
  };
  return keys;
}

const std::vector<KeySpec>& job_keys() {
  static const std::vector<KeySpec> keys = {
      Key("workload", K::kString,
          "mlp, transformer (a small GPT-style decoder), or external (your own training command)")
          .required()
          .choices({"mlp", "transformer", "external"}),
      Key("steps", K::kInt, "optimizer steps per rank").required().min(1),
      Key("ranks", K::kInt, "world size (data-parallel replicas)").def(2).min(1),
      Key("device", K::kString, "where tensors live; cuda gives one GPU per rank")
          .def("cpu")
          .choices({"cpu", "cuda"}),
      // No default value: it depends on `device` (mpi on cpu, nccl on cuda); the loader fills it.
      Key("backend", K::kString,
          "gradient and control collectives (default mpi on cpu, nccl on cuda)")
          .choices({"mpi", "nccl"}),
      Key("precision", K::kString,
          "fp16/bf16: autocast on CUDA; on CPU every layer's output and incoming gradient are "
          "rounded through the half type")
          .def("fp32")
          .choices(kDTypes),
      Key("grad_allreduce_dtype", K::kString,
          "dtype the gradients travel in: cast, SUM across ranks, divide by the world size")
          .def("fp32")
          .choices(kDTypes),
      Key("grad_predivide", K::kBool, "divide by the world size before the SUM instead of after")
          .def(false),
      Key("timeout_ms", K::kInt,
          "hard wall-clock limit for each launch of the job; past it the outcome is hung")
          .def(120000)
          .min(1),
      Key("restarts", K::kInt,
          "relaunch the whole job up to N times after a launch ends abnormally (a crashed rank, "
          "an abort, a hang), with fresh processes and a fresh MASTER_PORT; one-shot faults that "
          "fired do not fire again, persistent ones do; at most 100 (timeout_ms bounds each "
          "launch, not their sum)")
          .def(0)
          .range(0, 100),
      Key("restart_delay_ms", K::kInt,
          "wait (ms) between the end of one launch (every process gone) and the next; at most "
          "3600000 (1 h)")
          .def(0)
          .range(0, 3600000),
      Key("command", K::kStringArray,
          "external: the program and its arguments, run once per rank (required when external); "
          "a relative program is taken from the scenario file's folder, the working directory"),
      Key("env", K::kStringTable,
          "external: added to every rank's environment (the variables nanchaos sets are refused)")
          .def(Value(std::vector<std::string>{})),
      Key("micro_batches", K::kInt,
          "external: training-mode root forwards per iteration (gradient accumulation)")
          .def(1)
          .min(1),
      Key("attach_timeout_ms", K::kInt,
          "external: how long a launched rank may run before the nanchaos agent reports itself "
          "loaded; past it the job is killed with the reason")
          .def(30000)
          .min(1),
      Key("torch", K::kString,
          "external: a torch version requirement such as \">=2.4\" (clauses >= <= > < == != ~=, "
          "comma-separated); the job runs with the first interpreter whose torch meets it "
          "(NANCHAOS_PYTHON, a :-separated list, then PATH's python3, then /usr/bin/python3); "
          "none: the scenario is skipped, naming each interpreter tried and its torch")
          .def(""),
      Key("python_packages", K::kStringArray,
          "external: Python distributions the interpreter must have, each a name with an "
          "optional version requirement (\"lightning>=2.0\", \"transformers\"; names compare "
          "as pip's); the job runs with the first interpreter whose torch meets [job] torch and "
          "that has every one (importlib.metadata, nothing imported); none: the scenario is "
          "skipped, naming what each interpreter lacks")
          .def(Value(std::vector<std::string>{})),
      Key("launch", K::kString,
          "external: torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR "
          "and MASTER_PORT for every rank, and OMP_NUM_THREADS = 1 with more than one rank on a "
          "host where the environment sets none (torchrun's default; [job] env overrides); plain "
          "sets none of them (the NANCHAOS_* variables still) and needs ranks = 1")
          .def("torchrun")
          .choices({"torchrun", "plain"}),
  };
  return keys;
}

const std::vector<KeySpec>& workload_keys() {
  static const std::vector<KeySpec> keys = {
      Key("batch_size", K::kInt, "samples per rank per step").def(32).min(1),
      Key("hidden", K::kInt, "width (mlp) / model dim (transformer)").def(128).min(1),
      Key("layers", K::kInt, "hidden layers (mlp) / decoder blocks (transformer)").def(3).min(1),
      Key("heads", K::kInt, "attention heads (transformer only); must divide hidden").def(4).min(1),
      Key("seq_len", K::kInt, "sequence length (transformer only)").def(32).min(1),
      Key("vocab", K::kInt, "vocabulary size (transformer only)").def(256).min(2),
      Key("features", K::kInt, "input width (mlp only)").def(64).min(1),
      Key("classes", K::kInt, "output width (mlp only)").def(10).min(1),
      Key("optimizer", K::kString, "optimizer").def("adam").choices({"sgd", "adam", "adamw"}),
      Key("lr", K::kFloat, "peak learning rate").def(1e-3).above(0),
      Key("warmup_steps", K::kInt, "linear warmup steps, then the schedule").def(0).min(0),
      Key("schedule", K::kString, "learning-rate schedule after warmup")
          .def("constant")
          .choices({"constant", "cosine"}),
      Key("grad_clip", K::kFloat, "global-norm clipping threshold; 0 = off").def(0.0).min(0),
      Key("norm", K::kString,
          "mlp only: normalization after each hidden layer (BatchNorm buffers are broadcast from "
          "rank 0 at every step start)")
          .def("none")
          .choices({"none", "batchnorm", "layernorm"}),
      Key("loss", K::kString,
          "cross_entropy, naive_log_softmax (log(softmax(x)), can give -inf), mse or masked_mse "
          "(mlp; masked_mse drops non-finite targets after the element-wise loss)")
          .def("cross_entropy")
          .choices({"cross_entropy", "naive_log_softmax", "mse", "masked_mse"}),
      Key("normalize_inputs", K::kBool,
          "standardize each input feature by its batch mean and std (a constant column gives 0/0)")
          .def(false),
  };
  return keys;
}

const std::vector<KeySpec>& checkpoint_keys() {
  static const std::vector<KeySpec> keys = {
      Key("every", K::kInt,
          "built-in jobs: save model, optimizer, loss scaler, LR schedule position, data position "
          "and RNG state before steps every, 2 every, ...; a relaunch resumes from the newest "
          "valid one, bit-identical to a run that never failed")
          .required()
          .min(1),
      Key("keep", K::kInt, "how many checkpoints are kept (older ones are deleted)").def(2).min(1),
      Key("validate", K::kBool,
          "on load, check each checkpoint's per-tensor digests and finiteness; a bad one is "
          "reported (detector checkpoint, cause checkpoint_corruption) and the next older is "
          "tried")
          .def(true),
      Key("format", K::kString,
          "torch: one file written by rank 0; dcp: one shard per rank "
          "(torch.distributed.checkpoint's layout: a folder per save holding `__RANK_0.distcp` "
          "per rank and `.metadata`, written last)")
          .def("torch")
          .choices({"torch", "dcp"}),
  };
  return keys;
}

const std::vector<KeySpec>& recovery_keys() {
  static const std::vector<KeySpec> keys = {
      Key("policy", K::kStringOrArray,
          "what all ranks do on a detection; an array combines them ([\"rollback\", "
          "\"lr_backoff\"])")
          .def("skip_step")
          .choices({"skip_step", "rollback", "lr_backoff", "abort", "none", "resync"}),
      Key("snapshot_every", K::kInt, "rollback: steps between in-memory snapshots").def(10).min(1),
      Key("lr_backoff_factor", K::kFloat,
          "lr_backoff: the learning rate is multiplied by this from the detection on, cumulatively")
          .def(0.5)
          .above(0)
          .max(1),
      Key("max_consecutive", K::kInt, "that many detections in a row escalate to abort")
          .def(5)
          .min(1),
      Key("init_scale", K::kFloat, "fp16 dynamic loss scaler: initial scale").def(65536.0).above(0),
      Key("growth_factor", K::kFloat, "loss scaler: growth multiplier").def(2.0).min(1),
      Key("backoff_factor", K::kFloat, "loss scaler: backoff multiplier on overflow")
          .def(0.5)
          .above(0)
          .max(1),
      Key("growth_interval", K::kInt, "loss scaler: clean steps before the scale grows")
          .def(2000)
          .min(1),
      Key("max_scale", K::kFloat, "loss scaler: the scale never grows past this")
          .def(16777216.0)
          .above(0),
      Key("min_scale", K::kFloat,
          "loss scaler: a backoff below this escalates to abort with cause fp16_overflow")
          .def(1.0)
          .above(0),
  };
  return keys;
}

const std::vector<KeySpec>& expect_keys() {
  // Every present key is a check; only deadlock and max_false_positives have defaults (consistent
  // defaults to "true when the job completes", which the judge decides, so it has none here).
  static const std::vector<KeySpec> keys = {
      Key("detected", K::kBool,
          "true: some detector fired at or after the first fault; false: none fired at all"),
      Key("first_detector", K::kString, "name of the first detector to fire"),
      Key("within_steps", K::kInt, "first detection step - first fault step <= this").min(0),
      Key("within_ms", K::kFloat,
          "wall time from the first injection to the first detection <= this")
          .min(0),
      Key("rank", K::kIntOrIntArray, "the rank(s) blamed").min(0),
      Key("layer", K::kString, "the module or parameter the stack blames (prefix match)"),
      Key("cause", K::kString, "the cause the stack attributes").choices(cause_names()),
      Key("transient", K::kBool, "the replay's classification"),
      Key("outcome", K::kString, "how the job ended")
          .choices({"completed", "aborted", "hung", "crashed"}),
      Key("deadlock", K::kBool,
          "true when some rank waited past collective_timeout_ms + 1 s with no decision")
          .def(false),
      Key("abort_within_ms", K::kFloat,
          "aborted: time from the first fault to the last rank's exit")
          .min(0),
      Key("recovered", K::kBool,
          "every step ran and the final evaluation loss (eval mode, held-out batch) is finite"),
      Key("final_loss_max", K::kFloat, "final evaluation loss <= this"),
      Key("consistent", K::kBool,
          "every rank took the same decisions and ends bit-identical (default: true when the job "
          "completes)"),
      Key("fault_outcome", K::kString, "what the fault did")
          .choices({"masked", "detected_recovered", "detected_unrecovered", "hang",
                    "silent_corruption"}),
      Key("max_false_positives", K::kInt, "detections before the first fault <= this")
          .def(0)
          .min(0),
      Key("restarts", K::kInt,
          "exact number of relaunches that happened ([job] restarts is the budget)")
          .min(0),
      Key("resumed_from_step", K::kInt,
          "the step the last launch resumed from (its first step; 0 for a relaunch that loaded "
          "no checkpoint)")
          .min(0),
      Key("steps_lost_max", K::kInt,
          "steps computed twice or lost, summed over restarts: (last step reached before the "
          "failure) - (resumed step) <= this")
          .min(0),
      Key("resume_ms_max", K::kFloat,
          "every restart's resume latency (the failing event -> the next launch's first "
          "completed step, ms) <= this; fails when no restart happened")
          .min(0),
      Key("final_matches_clean", K::kBool,
          "every rank's final parameter and optimizer digests equal those of a clean run (same "
          "scenario and seed, no fault), which the harness runs and caches in RUN/clean"),
  };
  return keys;
}

const std::vector<KeySpec>& campaign_keys() {
  // No defaults: an absent key is not checked. `nanchaos run` reads none of them.
  static const std::vector<KeySpec> keys = {
      Key("min_coverage", K::kFloat,
          "nanchaos campaign exits 1 when coverage (detected / not masked) is below this")
          .range(0, 1),
      Key("min_attribution_rank", K::kFloat,
          "exit 1 when the share of detected faults blamed on the hit rank(s) is below this")
          .range(0, 1),
      Key("min_attribution_layer", K::kFloat,
          "exit 1 when the share of detected faults blamed on the hit layer is below this")
          .range(0, 1),
      Key("min_attribution_cause", K::kFloat,
          "exit 1 when the share of detected faults given the true cause is below this")
          .range(0, 1),
      Key("detect_within_steps", K::kInt,
          "a detection counts for a fault only this many steps after it at most (absent: "
          "max(10, replica_every))")
          .min(0),
  };
  return keys;
}

const std::vector<KeySpec>& fault_common_keys() {
  static const std::vector<KeySpec> keys = {
      Key("kind", K::kString, "the fault kind (inject/<kind>.cpp)").required(),
      Key("ranks", K::kRankSet, "which ranks the fault hits")
          .def(Value(RankSet{false, {0}}))
          .min(0),
      Key("step", K::kInt, "first step (0-based) it can fire").required().min(0),
      Key("repeat", K::kIntOrForever, "consecutive steps it fires").def(1).min(1),
      Key("probability", K::kFloat, "chance to fire on each eligible step (seeded)")
          .def(1.0)
          .above(0)
          .max(1),
      Key("persistent", K::kBool,
          "true: fires again whenever the stack re-executes the step (replay, rollback); false: a "
          "transient fault a replay does not see")
          .def(false),
  };
  return keys;
}

namespace {

/// The `preset` key's doc, listing each preset's members as their registrations declare them.
std::string preset_doc() {
  auto members = [](unsigned flag) {
    std::vector<std::string> names;
    for (const auto& name : detector_order()) {
      const DetectorInfo& info = detectors().at(name);
      if (info.presets & flag) names.push_back(info.preset_fp16_only ? name + " when fp16" : name);
    }
    return join(names, ", ");
  };
  return fmt::format(
      "default ({}), full (every detector), naive ({} per rank, early return, no consensus) or "
      "none",
      members(kPresetDefault), members(kPresetNaive));
}

}  // namespace

const std::vector<KeySpec>& detector_common_keys() {
  // consensus and replay have no declared default: it depends on the preset (false for naive).
  static const std::vector<KeySpec> keys = {
      Key("preset", K::kString, preset_doc())
          .def("default")
          .choices({"default", "full", "naive", "none"}),
      Key("enabled", K::kStringArray, "detector names; overrides the preset's list"),
      Key("consensus", K::kBool,
          "ranks agree on every detection through one small all-reduce before the gradient "
          "all-reduce (default true, false for naive)"),
      Key("replay", K::kBool,
          "on a detection, replay the step with activation probes and anomaly mode (default true, "
          "false for naive)"),
  };
  return keys;
}

const std::vector<std::string>& top_level_tables() {
  static const std::vector<std::string> names = {"scenario",   "job",       "workload",
                                                 "fault",      "detectors", "recovery",
                                                 "checkpoint", "expect",    "campaign"};
  return names;
}

}  // namespace nanchaos::harness
