// What the controller asks of its host before launching: the GPUs (gpu_skip_reason), a Python
// with torch for external jobs (resolve_python), programs on PATH. Declared in host_probe.h.
#include "harness/controller/host_probe.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "harness/common/child_process.h"
#include "harness/common/cuda_device.h"
#include "harness/common/version_req.h"
#include "nanchaos/config.h"

namespace fs = std::filesystem;

namespace nanchaos::harness {
namespace {

// The full path of `name` as execvp would find it ("" when it would not).
std::string which(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string full = (dir.empty() ? "." : dir) + "/" + name;
    if (access(full.c_str(), X_OK) == 0 && !fs::is_directory(full)) return full;
  }
  return "";
}
}  // namespace

// True when `name` is an executable file: as a path when it has a '/', else searched in PATH.
bool find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string full = (dir.empty() ? "." : dir) + "/" + name;
    if (access(full.c_str(), X_OK) == 0 && !fs::is_directory(full)) return true;
  }
  return false;
}

std::string gpu_skip_reason(const Scenario& s, const GpuHost& host) {
  if (s.job.device != Device::kCuda) return "";
  // A CPU-only LibTorch is the blocker a GPU or a driver would not remove: name it first (with
  // that LibTorch the GPU count says nothing), and the nanchaos build only as a second one.
  if (!host.torch_cuda) {
    return std::string("device cuda needs a GPU: this LibTorch has no CUDA (CPU-only build)") +
           (host.built_with_cuda ? "" : "; nanchaos was also built without CUDA/NCCL");
  }
  if (!host.built_with_cuda) {
    return "device cuda needs a GPU build: nanchaos was built without CUDA/NCCL (nvcc or nccl.h "
           "not found)";
  }
  if (host.devices < s.job.ranks) {
    return fmt::format("device cuda needs a GPU per rank: {} ranks, this host has {}{}",
                       s.job.ranks, host.devices, host.why.empty() ? "" : " (" + host.why + ")");
  }
  return "";
}

GpuHost probe_gpu_host() {
  static const GpuHost cached = [] {
    GpuHost h;
    h.built_with_cuda = NANCHAOS_WITH_CUDA && NANCHAOS_WITH_NCCL;
    h.torch_cuda = NANCHAOS_TORCH_CUDA;
    if (h.built_with_cuda) h.devices = cuda_device_count(&h.why);
    return h;
  }();
  return cached;
}

std::string gpu_skip_reason(const Scenario& s) { return gpu_skip_reason(s, probe_gpu_host()); }

bool command_needs_python(const Scenario& s) {
  return s.job.external() && !s.job.command.empty() &&
         (s.job.command[0] == "python" || s.job.command[0] == "python3");
}

const std::vector<std::string>& default_python_candidates() {
  static const std::vector<std::string> kCandidates = {"python3", "/usr/bin/python3"};
  return kCandidates;
}

namespace {

// Run as `python -c kProbe NAME...`: package versions from their metadata first (importing
// lightning alone takes seconds), then torch, whose import failing ends the run with the reason
// as its last line. importlib.metadata is Python 3.8+; an older one reports every package missing.
constexpr const char* kProbe =
    "import sys\n"
    "try:\n"
    "    from importlib.metadata import version\n"
    "except ImportError:\n"
    "    version = None\n"
    "for n in sys.argv[1:]:\n"
    "    try:\n"
    "        print('nanchaos-package', n, version(n))\n"
    "    except Exception:\n"
    "        print('nanchaos-package', n)\n"
    "import torch; print('nanchaos-torch-version', torch.__version__)\n";

}  // namespace

std::vector<PythonCandidate> probe_pythons(const std::vector<std::string>& candidates,
                                           const std::vector<std::string>& packages) {
  std::vector<std::string> names;
  if (const char* env = std::getenv("NANCHAOS_PYTHON"); env && *env) {
    std::istringstream list(env);
    for (std::string e; std::getline(list, e, ':');) {
      if (!e.empty()) names.push_back(e);
    }
  }
  names.insert(names.end(), candidates.begin(), candidates.end());
  // Each distinct distribution once, spelt as first written (importlib.metadata normalizes too).
  std::vector<std::string> package_names;
  std::set<std::string> package_keys;
  for (const auto& entry : packages) {
    if (const auto req = PackageRequirement::parse(entry, nullptr)) {
      if (package_keys.insert(req->key).second) package_names.push_back(req->name);
    }
  }
  std::vector<PythonCandidate> out;
  std::set<std::string> probed;
  for (const auto& name : names) {
    PythonCandidate c;
    c.path = which(name);
    c.label = name.find('/') == std::string::npos && !c.path.empty()
                  ? fmt::format("{} ({})", name, c.path)
                  : name;
    if (c.path.empty()) {
      c.why = name.find('/') == std::string::npos ? "not found in PATH" : "not found";
      out.push_back(c);
      continue;
    }
    if (!probed.insert(fs::weakly_canonical(c.path).string()).second) continue;
    std::string text;
    int st = -1;
    try {
      SpawnOptions probe;
      probe.argv = {c.path, "-c", kProbe};
      probe.argv.insert(probe.argv.end(), package_names.begin(), package_names.end());
      probe.capture_output = true;  // stdout and stderr: the last line says why not
      ChildProcess py = ChildProcess::spawn(probe);
      text = py.read_output(std::chrono::seconds(120));  // then killed: a hung import
      st = py.wait().code();
    } catch (const SpawnError& e) {
      text = e.what();
    }
    std::string last;
    std::istringstream lines(text);
    const std::string torch_mark = "nanchaos-torch-version ", package_mark = "nanchaos-package ";
    for (std::string l; std::getline(lines, l);) {
      // torch may warn on stderr around the import ("Failed to initialize NumPy"): the version
      // is the marked line, wherever it lands.
      if (l.rfind(torch_mark, 0) == 0) {
        c.torch_version = l.substr(torch_mark.size());
      } else if (l.rfind(package_mark, 0) == 0) {
        const std::string rest = l.substr(package_mark.size());
        const auto sp = rest.find(' ');
        std::string version = sp == std::string::npos ? "" : rest.substr(sp + 1);
        if (version == "None") version.clear();  // a distribution without a Version field
        c.packages[normalized_package_name(rest.substr(0, sp))] = version;
      } else if (l.find_first_not_of(" \t\r") != std::string::npos) {
        last = l;
      }
    }
    if (st != 0 || c.torch_version.empty()) {
      c.torch_version.clear();
      const std::string prefix = "ModuleNotFoundError: ";
      if (last.rfind(prefix, 0) == 0) last.erase(0, prefix.size());
      c.why = last.empty() ? "cannot import torch" : last;
    }
    out.push_back(c);
  }
  return out;
}

PythonInterpreter choose_python(const std::vector<PythonCandidate>& probed,
                                const std::string& torch_requirement,
                                const std::vector<std::string>& packages) {
  PythonInterpreter out;
  std::string why;
  const auto req = VersionRequirement::parse(torch_requirement, &why);
  if (!req) {  // the loader refuses these; a programmatic caller may not
    out.error = "[job].torch: \"" + torch_requirement + "\" is not a version requirement: " + why;
    return out;
  }
  std::vector<PackageRequirement> wanted;
  std::vector<std::string> wanted_text;
  for (const auto& entry : packages) {
    auto p = PackageRequirement::parse(entry, &why);
    if (!p) {
      out.error = "[job].python_packages: \"" + entry + "\" is not a package requirement: " + why;
      return out;
    }
    wanted_text.push_back(p->text);
    wanted.push_back(std::move(*p));
  }
  std::vector<std::string> said;
  bool any_torch = false;
  for (const auto& c : probed) {
    if (c.torch_version.empty()) {
      said.push_back(c.label + ": " + c.why);
      continue;
    }
    any_torch = true;
    bool ok = req->satisfied_by(c.torch_version);
    std::vector<std::string> has = {"torch " + c.torch_version};
    std::vector<std::pair<std::string, std::string>> versions;
    for (const auto& p : wanted) {
      const auto it = c.packages.find(p.key);
      const std::string version = it == c.packages.end() ? "" : it->second;
      if (version.empty()) {
        has.push_back("no " + p.name);
        ok = false;
        continue;
      }
      has.push_back(p.name + " " + version);
      ok = ok && p.version.satisfied_by(version);
      versions.emplace_back(p.name, version);
    }
    if (ok) {
      out.path = c.path;
      out.torch_version = c.torch_version;
      out.packages = std::move(versions);
      return out;
    }
    said.push_back(fmt::format("{}: {}", c.label, fmt::join(has, ", ")));
  }
  out.unmet = any_torch && !(req->any() && wanted.empty());
  std::string needs = req->any() ? "" : " " + req->text();
  if (!wanted.empty()) needs += fmt::format(" and {}", fmt::join(wanted_text, ", "));
  out.error = fmt::format("no Python interpreter with torch{}: {}", needs, fmt::join(said, "; "));
  out.error += out.unmet
                   ? "; list one in NANCHAOS_PYTHON (':'-separated), e.g. the torch 2.x venv "
                     "that .ci/torch2-venv makes"
                   : "; install Debian's python3-torch (.ci/install-deps) or set NANCHAOS_PYTHON";
  return out;
}

PythonInterpreter resolve_python(const std::string& torch_requirement,
                                 const std::vector<std::string>& packages) {
  return choose_python(probe_pythons(default_python_candidates(), packages), torch_requirement,
                       packages);
}
}  // namespace nanchaos::harness
