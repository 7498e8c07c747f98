// What a built-in workload builds, without building it: module names, parameter and buffer names
// with their shapes, for a [job] + [workload] configuration. Torch-free, so the scenario loader
// can check targets and `layer` values and estimate a rank's memory before any job starts.
//
// The names are the scenario contract (SCENARIO_FORMAT.md "Module names", harness/job/workload.h):
//   mlp:         layers.I.linear, [layers.I.norm], layers.I, head
//   transformer: embed, pos, blocks.I.{ln1, attn.qkv, attn.proj, attn, ln2, mlp.fc1, mlp.fc2, mlp},
//                blocks.I, ln_f, head
// harness/job/workload_mlp.cpp and workload_transformer.cpp build the real models; the test
// tests/harness/model_spec_test.cpp builds them for several configurations and compares every
// name, shape and the forward order of the probes with what is listed here, so the two cannot
// drift.
//
// Example:
//   ModelSpec m = builtin_model(WorkloadKind::kMlp, WorkloadConfig{});  // layers = 3
//   m.modules[0] == "layers.0.linear"; m.parameters.back().name == "head.bias"
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/scenario/scenario.h"

namespace nanchaos::harness {

/// A named tensor of the model and its shape (a scalar has an empty shape).
struct TensorShape {
  std::string name;
  std::vector<int64_t> shape;
  /// Elements, as a double: absurd configurations (hidden = 2e9) overflow int64.
  double numel() const;
};

struct ModelSpec {
  std::vector<std::string> modules;     ///< activation targets, in forward (probe) order
  std::vector<TensorShape> parameters;  ///< named_parameters() order (registration order)
  std::vector<TensorShape> buffers;     ///< named_buffers() order (BatchNorm running statistics)
};

/// The model `workload` builds for `w`. Throws std::logic_error for WorkloadKind::kExternal
/// (an external job's names are known only once it attaches).
ModelSpec builtin_model(WorkloadKind workload, const WorkloadConfig& w);

/// Above this many layers the loader does not list names (a million-name list would cost more
/// than the check is worth; such a model is refused by the memory check of host_limits.h on most
/// hosts, and a target that matches nothing still fails at run time: "injection not verified").
inline constexpr int64_t kMaxListedLayers = 4096;

/// builtin_model() of the scenario's workload, or nullopt for an external job or a model with
/// more than kMaxListedLayers layers.
std::optional<ModelSpec> listed_model(const Scenario& s);

/// "mlp" or "transformer".
const char* workload_name(WorkloadKind workload);

}  // namespace nanchaos::harness
