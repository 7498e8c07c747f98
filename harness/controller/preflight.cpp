// The pre-launch checks of run, campaign and validate (see preflight.h).
#include "harness/controller/preflight.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "harness/controller/launch.h"

namespace nanchaos::harness {

bool needs_launcher(const Scenario& s) {
  return s.job.external() || !(s.job.backend == Backend::kNccl && s.job.ranks == 1);
}

std::string launcher_error(const std::string& launcher, const std::vector<Scenario>& scenarios) {
  if (std::none_of(scenarios.begin(), scenarios.end(), needs_launcher)) return "";
  const std::vector<std::string> words = split_words(launcher);
  if (!words.empty() && find_program(words.front())) return "";
  // A path that is not there needs no "in PATH"; a bare name was searched there.
  const bool path_given = words.empty() || words.front().find('/') != std::string::npos;
  return fmt::format(
      "launcher '{}' not found{} (Open MPI's mpirun: Debian package openmpi-bin, installed by "
      ".ci/install-deps; or set --launcher / NANCHAOS_LAUNCHER)",
      words.empty() ? launcher : words.front(), path_given ? "" : " in PATH");
}

Preflight::Preflight(HostResources host, HostLimitOptions limits, std::optional<GpuHost> gpu)
    : host_(std::move(host)), limits_(std::move(limits)), gpu_(std::move(gpu)) {}

Preflight::Preflight(HostLimitOptions limits) : Preflight(probe_host(), std::move(limits)) {}

Scenario Preflight::load(const std::string& file) {
  Scenario s = load_scenario(file);
  check_host_limits(s, host_, limits_);
  if (auto [it, fresh] = names_.emplace(s.name, file); !fresh) {
    throw ScenarioError(fmt::format("{}: error: [scenario].name \"{}\" is also used by {}", file,
                                    s.name, it->second));
  }
  return s;
}

void Preflight::probe_pythons(const std::vector<Scenario>& scenarios) {
  std::vector<std::string> packages;
  bool any = false;
  for (const auto& s : scenarios) {
    if (!command_needs_python(s)) continue;
    any = true;
    packages.insert(packages.end(), s.job.python_packages.begin(), s.job.python_packages.end());
  }
  if (any) pythons_ = harness::probe_pythons(default_python_candidates(), packages);
}

PythonInterpreter Preflight::python_for(const Scenario& s) const {
  if (!command_needs_python(s)) return {};
  return choose_python(pythons_, s.job.torch, s.job.python_packages);
}

Blocker Preflight::blocker(const Scenario& s) {
  Blocker b;
  if (const auto missing = unimplemented_features(s); !missing.empty()) {
    b.what = Blocker::What::kNotImplemented;
    b.reason = fmt::format("not implemented yet: {}", fmt::join(missing, "; "));
    return b;
  }
  if (s.job.device == Device::kCuda) {
    if (!gpu_) gpu_ = probe_gpu_host();
    if (std::string why = gpu_skip_reason(s, *gpu_); !why.empty()) {
      b.what = Blocker::What::kNoGpu;
      b.skip = true;
      b.reason = std::move(why);
      return b;
    }
  }
  if (command_needs_python(s)) {
    if (PythonInterpreter py = python_for(s); py.path.empty()) {
      b.what = Blocker::What::kNoPython;
      b.skip = py.unmet;
      b.reason = std::move(py.error);
    }
  }
  return b;
}

}  // namespace nanchaos::harness
