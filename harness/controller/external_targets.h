// The module and parameter names of an external job, from one dry run of it: no faults, the
// agent ends the job at the start of iteration 1, and rank 0's `start` event (modules,
// parameters) and `probe` events name what faults can target. `nanchaos targets my.toml` prints
// them; `nanchaos campaign` draws targets from them.
#pragma once

#include <string>
#include <vector>

#include "harness/controller/launch.h"
#include "harness/scenario/scenario.h"

namespace nanchaos::harness {

struct ExternalTargets {
  std::vector<std::string> modules;     ///< `start` modules, then probe names, first seen first
  std::vector<std::string> parameters;  ///< `start` parameters
  /// "" when every rank finished the dry run's iteration 0; else why not: "x.toml: the job's dry
  /// run never attached: ... (run folder /tmp/nanchaos-targets-XXXX)", or "... attached but rank
  /// R never finished iteration 0 (<the judge's reason>), so the names may be incomplete ..."
  /// (the names found are kept; the folder is kept for a look).
  std::string error;
};

/// Runs the dry run of external scenario `s` (its faults dropped) through `ctx`'s launcher in a
/// fresh /tmp folder, removed afterwards when it attached. Blocks for the job (at most
/// [job].timeout_ms). Never throws for what the job does.
ExternalTargets external_targets(const Scenario& s, const LaunchContext& ctx);

}  // namespace nanchaos::harness
