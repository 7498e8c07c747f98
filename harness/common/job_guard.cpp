// The job's watch over its controller. See job_guard.h.
#include "harness/common/job_guard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness/common/rank_host.h"

namespace nanchaos::harness {
namespace {

std::string host_name() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

const char* env_value(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

}  // namespace

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<uint64_t> process_start_ticks(int pid) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/stat")
                            : "/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // "pid (comm) S ppid ...": comm may hold spaces and ')', so fields count from the last ')'.
  const auto rp = line.rfind(')');
  if (rp == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(rp + 1));
  std::string state;
  fields >> state;  // field 3
  if (state == "Z" || state == "X") return std::nullopt;
  std::string skip;
  for (int f = 4; f < 22; ++f) fields >> skip;
  uint64_t start = 0;
  if (!(fields >> start)) return std::nullopt;
  return start;
}

std::map<std::string, std::string> job_guard_env(int64_t timeout_ms) {
  return {{"NANCHAOS_CONTROLLER_PID", std::to_string(getpid())},
          {"NANCHAOS_CONTROLLER_START", std::to_string(process_start_ticks().value_or(0))},
          {"NANCHAOS_CONTROLLER_HOST", host_name()},
          {"NANCHAOS_CONTROLLER_PIDNS", this_pid_namespace()},
          {"NANCHAOS_DEADLINE_UNIX_MS", std::to_string(unix_ms() + timeout_ms + kJobGuardGraceMs)}};
}

std::optional<JobGuardState> job_guard_from_env() {
  const char* pid = env_value("NANCHAOS_CONTROLLER_PID");
  const char* start = env_value("NANCHAOS_CONTROLLER_START");
  const char* host = env_value("NANCHAOS_CONTROLLER_HOST");
  const char* pidns = env_value("NANCHAOS_CONTROLLER_PIDNS");
  const char* deadline = env_value("NANCHAOS_DEADLINE_UNIX_MS");
  if (!pid && !deadline) return std::nullopt;
  JobGuardState g;
  // The controller's pid means something on its own host, in its own PID namespace, only (a
  // host of the netns tests shares the hostname rule but not the pids: docs/multi-node.md).
  const bool same_pidns = !pidns || this_pid_namespace() == pidns;
  if (pid && start && host && host_name() == host && same_pidns) {
    g.controller_pid = std::atoi(pid);
    g.controller_start = std::strtoull(start, nullptr, 10);
  }
  g.parent_pid = int(getppid());
  if (g.parent_pid <= 1) g.parent_pid = 0;  // started by init: no launcher to watch
  if (deadline) g.deadline_unix_ms = std::strtoll(deadline, nullptr, 10);
  return g;
}

std::string job_guard_reason(const JobGuardState& g, int parent_pid, int64_t now_unix_ms) {
  if (g.controller_pid > 0) {
    const auto start = process_start_ticks(g.controller_pid);
    if (!start || *start != g.controller_start) {
      return fmt::format("the controller (pid {}) is gone", g.controller_pid);
    }
  }
  if (g.parent_pid > 0 && parent_pid != g.parent_pid) {
    return fmt::format("the launcher (pid {}) is gone", g.parent_pid);
  }
  if (g.deadline_unix_ms > 0 && now_unix_ms >= g.deadline_unix_ms) {
    return fmt::format(
        "the job's deadline passed (timeout_ms + {} ms) and the controller did not "
        "end the job",
        kJobGuardGraceMs);
  }
  return "";
}

void start_job_guard(const std::string& who) {
  static std::atomic<bool> started{false};
  const auto g = job_guard_from_env();
  if (!g || started.exchange(true)) return;
  std::thread([state = *g, who] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kJobGuardPollMs));
      const std::string why = job_guard_reason(state, int(getppid()), unix_ms());
      if (why.empty()) continue;
      const std::string line = fmt::format("{}: {}: ending this rank\n", who, why);
      (void)!write(2, line.data(), line.size());
      _exit(kJobGuardExit);
    }
  }).detach();
}

}  // namespace nanchaos::harness
