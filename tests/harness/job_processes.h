// Test helpers for the no-orphan promises (no process of a job outlives it): `nanchaos run`
// started as a child, and the live processes of the jobs it launched, found exactly by their
// NANCHAOS_JOB_ID (the controller names its jobs "<controller pid>-<job counter>-<us>",
// harness/controller/controller.cpp).
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "harness/common/child_process.h"

namespace nanchaos::test_util {

/// A live (not zombie) process of a job of controller `controller_pid`.
struct JobProcess {
  int pid = 0;
  int job = 0;  ///< the job counter: 1 for the controller's first job, 2 for the next...
  std::string command;
};

/// Every live process whose environment has NANCHAOS_JOB_ID=<controller_pid>-...
inline std::vector<JobProcess> jobs_of_controller(int controller_pid) {
  std::vector<JobProcess> out;
  const std::string marker = "NANCHAOS_JOB_ID=" + std::to_string(controller_pid) + "-";
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == getpid()) continue;
    const std::string dir = "/proc/" + std::to_string(pid);
    std::ifstream env(dir + "/environ", std::ios::binary);
    for (std::string entry; std::getline(env, entry, '\0');) {
      if (entry.rfind(marker, 0) != 0) continue;
      std::ifstream stat(dir + "/stat");
      std::string line;
      std::getline(stat, line);
      const auto rp = line.rfind(')');
      if (rp == std::string::npos || rp + 2 >= line.size() || line[rp + 2] == 'Z') break;
      JobProcess p;
      p.pid = int(pid);
      p.job = std::atoi(entry.c_str() + marker.size());
      std::ifstream cmd(dir + "/cmdline", std::ios::binary);
      for (std::string arg; std::getline(cmd, arg, '\0');) p.command += arg + " ";
      out.push_back(p);
      break;
    }
  }
  closedir(d);
  return out;
}

/// Polls every 50 ms until no process of `controller_pid`'s jobs is left or `bound` passes;
/// returns what is left (empty: none).
inline std::vector<JobProcess> wait_no_job_process(int controller_pid,
                                                   std::chrono::milliseconds bound) {
  const auto end = std::chrono::steady_clock::now() + bound;
  for (;;) {
    auto left = jobs_of_controller(controller_pid);
    if (left.empty() || std::chrono::steady_clock::now() >= end) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

/// "pid 123 (job 1): mpirun -np 2 ...; ..." for a failure message.
inline std::string describe(const std::vector<JobProcess>& ps) {
  std::string s;
  for (const auto& p : ps) {
    s += "pid " + std::to_string(p.pid) + " (job " + std::to_string(p.job) + "): " + p.command +
         "; ";
  }
  return s;
}

/// Starts `nanchaos run ARGS...` (stdout and stderr to `log`) as a child in its own session.
inline harness::ChildProcess start_run(const std::string& bin, std::vector<std::string> args,
                                       const std::string& log) {
  harness::SpawnOptions o;
  o.argv = {bin, "run"};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.stdout_path = log;
  return harness::ChildProcess::spawn(o);
}

/// Waits (up to `bound`) until `file` contains `text`; true when it does.
inline bool wait_for_text(const std::string& file, const std::string& text,
                          std::chrono::milliseconds bound) {
  const auto end = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream in(file, std::ios::binary);
    const std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (body.find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace nanchaos::test_util
