#include "harness/common/proc_status.h"

#include <fstream>
#include <string>

namespace nanchaos::harness {

namespace {

// The value of a "Field:\t  123456 kB" line of /proc/<pid>/status.
std::optional<int64_t> status_kib(const char* field, int pid) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/status")
                            : "/proc/" + std::to_string(pid) + "/status");
  const std::string key = std::string(field) + ":";
  // A zombie's status has no Vm* lines at all.
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    try {
      return std::stoll(line.substr(key.size()));  // skips the leading blanks, stops at " kB"
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> vm_hwm_kib(int pid) { return status_kib("VmHWM", pid); }

std::optional<int64_t> vm_rss_kib(int pid) { return status_kib("VmRSS", pid); }

}  // namespace nanchaos::harness
