// What the controller asks of its host before launching: the GPUs (gpu_skip_reason), a Python
// with torch for external jobs (resolve_python), programs on PATH. Declared in controller.h.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "harness/common/child_process.h"
#include "harness/common/cuda_device.h"
#include "harness/common/job_guard.h"
#include "harness/common/log.h"
#include "harness/common/proc_status.h"
#include "harness/common/rank_host.h"
#include "harness/controller/controller.h"
#include "harness/controller/judge.h"
#include "harness/controller/progress.h"
#include "harness/evidence/clock_sync.h"
#include "harness/evidence/events.h"
#include "harness/scenario/plan.h"
#include "nanchaos/config.h"
#include "results/html.h"
#include "results/report.h"
#include "results/stats.h"

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

PythonInterpreter resolve_python(const std::vector<std::string>& candidates) {
  PythonInterpreter out;
  if (const char* env = std::getenv("NANCHAOS_PYTHON"); env && *env) {
    out.path = env;
    return out;
  }
  std::vector<std::string> said;
  std::set<std::string> probed;
  for (const auto& name : candidates) {
    const std::string full = which(name);
    const std::string label = name.find('/') == std::string::npos && !full.empty()
                                  ? fmt::format("{} ({})", name, full)
                                  : name;
    if (full.empty()) {
      said.push_back(name +
                     (name.find('/') == std::string::npos ? ": not found in PATH" : ": not found"));
      continue;
    }
    if (!probed.insert(fs::weakly_canonical(full).string()).second) continue;
    std::string text, last;
    int st = -1;
    try {
      SpawnOptions probe;
      probe.argv = {full, "-c", "import torch"};
      probe.capture_output = true;  // stdout and stderr: the last line says why not
      ChildProcess py = ChildProcess::spawn(probe);
      text = py.read_output(std::chrono::seconds(120));  // then killed: a hung import
      st = py.wait().code();
    } catch (const SpawnError& e) {
      text = e.what();
    }
    if (st == 0) {
      out.path = full;
      return out;
    }
    std::istringstream lines(text);
    for (std::string l; std::getline(lines, l);) {
      if (l.find_first_not_of(" \t\r") != std::string::npos) last = l;
    }
    const std::string prefix = "ModuleNotFoundError: ";
    if (last.rfind(prefix, 0) == 0) last.erase(0, prefix.size());
    said.push_back(label + ": " + (last.empty() ? "cannot import torch" : last));
  }
  out.error = "no Python interpreter with torch: " + fmt::format("{}", fmt::join(said, "; ")) +
              "; install Debian's python3-torch (.ci/install-deps) or set NANCHAOS_PYTHON";
  return out;
}
}  // namespace nanchaos::harness
