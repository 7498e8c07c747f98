// What the controller asks of its host before launching (host_probe.cpp): the GPUs
// (gpu_skip_reason), a Python with torch and the listed packages for external jobs
// (probe_pythons, choose_python), programs on PATH (find_program). Preflight (preflight.h) puts
// them together for run, campaign and validate.
// Thread-safety: probe_gpu_host() caches its answer (call it first from one thread); the rest
// have no shared state. probe_pythons() blocks while it runs the interpreters.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "harness/scenario/scenario.h"

namespace nanchaos::harness {

/// What the controller knows about the host's GPUs before launching a device = "cuda" job.
struct GpuHost {
  bool built_with_cuda = false;  ///< nanchaos built with the CUDA kernels and the NCCL engine
  bool torch_cuda = false;       ///< the LibTorch it links was built with CUDA
  int devices = 0;               ///< cudaGetDeviceCount (0 on error: no GPU)
  std::string why;               ///< the CUDA runtime's reason when devices == 0
};

/// The host as this process sees it (CUDA runtime queried once, ~ms; cached). Never throws.
GpuHost probe_gpu_host();

/// Why a device = "cuda" scenario is `skipped` on `host` ("" when it can run: CUDA and NCCL built,
/// CUDA LibTorch, at least one GPU per rank). "" for device = "cpu". The first blocker named is
/// the one no GPU would remove: a CPU-only LibTorch, then a nanchaos built without CUDA/NCCL,
/// then too few GPUs. Pure function.
std::string gpu_skip_reason(const Scenario& s, const GpuHost& host);
/// gpu_skip_reason(s, probe_gpu_host()).
std::string gpu_skip_reason(const Scenario& s);

/// A Python interpreter probed for torch and packages, in one run: `python -c "<probe>" NAME...`
/// prints `nanchaos-package NAME VERSION` (`nanchaos-package NAME` when not installed) for each
/// package name, read with importlib.metadata.version (nothing is imported), then imports torch
/// and prints its version.
struct PythonCandidate {
  std::string label;          ///< as tried: "python3 (/usr/bin/python3)", "/opt/v/bin/python"
  std::string path;           ///< resolved executable ("" when not found)
  std::string torch_version;  ///< torch.__version__ ("" when torch does not import)
  std::string why;            ///< why not, when torch_version is "": the import's last line
  /// normalized_package_name -> installed version ("" when not installed), for each name probed.
  std::map<std::string, std::string> packages;
};

/// The default interpreter candidates after $NANCHAOS_PYTHON: {"python3", "/usr/bin/python3"}.
const std::vector<std::string>& default_python_candidates();

/// The candidates in the order [job] torch tries them (../shared/SCENARIO_FORMAT.md, "Modern
/// PyTorch jobs"): each entry of $NANCHAOS_PYTHON (a ':'-separated list), then `candidates` (a
/// bare name is searched in PATH). Each distinct executable is probed once (a hung import is
/// killed after 120 s); the same executable under two names is kept once.
/// `packages`: [job] python_packages entries of every scenario that will choose from the result
/// ("lightning>=2.0", "transformers"); the distinct names (pip-normalized) are probed in the same
/// run, and malformed entries are skipped (the loader refuses them).
std::vector<PythonCandidate> probe_pythons(
    const std::vector<std::string>& candidates = default_python_candidates(),
    const std::vector<std::string>& packages = {});

/// The interpreter that replaces a bare `python`/`python3` command[0] of an external job.
/// `error` (path empty) names every candidate and its torch version or why it has none:
/// "no Python interpreter with torch >=2.4: python3 (/usr/bin/python3): torch 1.13.0a0;
/// /opt/v/bin/python: No module named 'torch'; ...". With [job] python_packages each candidate
/// with torch also lists every package's version or its absence: "no Python interpreter with
/// torch >=2.4 and lightning>=2.0, transformers: python3 (/usr/bin/python3): torch 1.13.0a0, no
/// lightning, no transformers; /opt/v/bin/python: torch 2.5.1, lightning 2.6.6, no transformers;
/// ...". `unmet` is true when some interpreter has torch but none meets the requirements (the
/// scenario is then skipped, not an error).
struct PythonInterpreter {
  std::string path;
  std::string torch_version;
  /// Each [job] python_packages entry's name as written and the chosen interpreter's version of
  /// it, in the scenario's order (empty when path is "").
  std::vector<std::pair<std::string, std::string>> packages;
  std::string error;
  bool unmet = false;
};
/// The first of `probed` whose torch meets `torch_requirement` ([job] torch; "" any torch) and
/// that has every one of `packages` ([job] python_packages) at a version meeting its requirement.
/// A package `probed` lacks an entry for counts as not installed.
PythonInterpreter choose_python(const std::vector<PythonCandidate>& probed,
                                const std::string& torch_requirement,
                                const std::vector<std::string>& packages = {});
/// probe_pythons(default_python_candidates(), packages) then choose_python().
PythonInterpreter resolve_python(const std::string& torch_requirement = "",
                                 const std::vector<std::string>& packages = {});
/// True for an external job whose command[0] is exactly "python" or "python3".
bool command_needs_python(const Scenario& s);

/// True when `name` is an executable file: as a path when it has a '/', else searched in PATH.
bool find_program(const std::string& name);

}  // namespace nanchaos::harness
