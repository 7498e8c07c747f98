// The checks before any job starts, one behaviour for `nanchaos run` (run_suite), `nanchaos
// campaign` (run_campaign) and `nanchaos validate`: a scenario file loads, fits this host
// (host_limits.h) and has a name no other file of the suite has; the launcher is there when a job
// needs it; and each scenario can run here (implemented, a GPU for device = "cuda", a Python with
// torch and the listed packages for a bare `python3` command).
//
// Who reports what: Preflight returns the messages; the callers print them under their own
// prefix ("nanchaos run: error: ...") and decide the exit status. A run turns a Blocker into the
// scenario's verdict (skipped or error) and goes on with the rest; a campaign has one scenario and
// stops; validate only loads (it never probes the launcher, GPUs or interpreters).
//
// Example:
//   Preflight pf(opts.host_limits);
//   for (f : files) scenarios.push_back(pf.load(f));          // throws ScenarioError
//   if (auto e = launcher_error(launcher, scenarios); !e.empty()) ...  // exit 2, no job started
//   pf.probe_pythons(scenarios);
//   if (const Blocker b = pf.blocker(s)) ...                 // b.skip: skipped, else error
// Thread-safety: none; one Preflight per command, on the main thread.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/controller/host_limits.h"
#include "harness/controller/host_probe.h"
#include "harness/scenario/scenario.h"

namespace nanchaos::harness {

/// What keeps a scenario from running on this host (Preflight::blocker). False when nothing does.
struct Blocker {
  enum class What { kNone, kNotImplemented, kNoGpu, kNoPython };
  What what = What::kNone;
  /// The scenario is `skipped`, not an `error`: the host lacks what it needs (a GPU; interpreters
  /// with torch, none meeting [job] torch and python_packages). A CI host without a GPU stays
  /// green unless --fail-on-skip.
  bool skip = false;
  /// "not implemented yet: A; B" (unimplemented_features(), joined), gpu_skip_reason(), or
  /// PythonInterpreter::error ("no Python interpreter with torch ...: python3 (...): ...").
  std::string reason;
  explicit operator bool() const { return what != What::kNone; }
};

/// True when `s`'s job is started through the launcher: every job but one NCCL rank, which
/// launcher_argv (launch.h) runs directly (a device = "cuda" job is one NCCL rank or skipped).
bool needs_launcher(const Scenario& s);

/// "" when the launcher's program (the first word of `launcher`, found as find_program() would)
/// can be run, or when none of `scenarios` needs one (needs_launcher()). Otherwise the error a
/// missing dependency deserves, said once before any job: "launcher 'mpirun' not found in PATH
/// (Open MPI's mpirun: Debian package openmpi-bin, installed by .ci/install-deps; or set
/// --launcher / NANCHAOS_LAUNCHER)" (" in PATH" only for a bare name).
std::string launcher_error(const std::string& launcher, const std::vector<Scenario>& scenarios);

class Preflight {
 public:
  /// `host`: what the limits are checked against (probe_host()); `gpu`: the host's GPUs, nullopt
  /// to probe them (probe_gpu_host(), ~ms) at the first device = "cuda" scenario only.
  Preflight(HostResources host, HostLimitOptions limits, std::optional<GpuHost> gpu = std::nullopt);
  /// This host: probe_host().
  explicit Preflight(HostLimitOptions limits = {});

  /// Loads `file` (load_scenario), checks it against the host (check_host_limits, skipped with
  /// --no-host-limits), then refuses a [scenario].name an earlier load() of this Preflight
  /// returned (run folders are named after it): "b.toml: error: [scenario].name \"x\" is also
  /// used by a.toml". Throws ScenarioError with the first of these messages.
  Scenario load(const std::string& file);

  /// Probes the interpreters (probe_pythons(), one process per candidate, blocking) once for all
  /// `scenarios` whose command needs python (command_needs_python()), with every package any of
  /// them lists in [job] python_packages. Probes nothing when none needs python.
  void probe_pythons(const std::vector<Scenario>& scenarios);
  /// Uses `probed` as the interpreters probe_pythons() would have found (tests, a caller that
  /// probed already).
  void set_pythons(std::vector<PythonCandidate> probed) { pythons_ = std::move(probed); }

  /// The interpreter `s` runs with: choose_python() over the probed ones by [job] torch and
  /// python_packages. An empty PythonInterpreter for a scenario that needs none.
  PythonInterpreter python_for(const Scenario& s) const;

  /// The first of what keeps `s` from running here, in this order: a feature not implemented
  /// (error; a scenario error shows on every host), no usable GPU for device = "cuda" (skipped),
  /// no interpreter for a bare python command (skipped when some interpreter has torch but none
  /// meets the requirements, else error). Call probe_pythons() first for external scenarios.
  Blocker blocker(const Scenario& s);

 private:
  HostResources host_;
  HostLimitOptions limits_;
  std::optional<GpuHost> gpu_;
  std::map<std::string, std::string> names_;  ///< [scenario].name -> the file that has it
  std::vector<PythonCandidate> pythons_;
};

}  // namespace nanchaos::harness
