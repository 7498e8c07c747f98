#include "harness/proc_status.h"

#include <fstream>
#include <string>

namespace nanchaos::harness {

std::optional<int64_t> vm_hwm_kib(int pid) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/status")
                            : "/proc/" + std::to_string(pid) + "/status");
  // Lines look like "VmHWM:\t  123456 kB"; a zombie's status has no Vm* lines at all.
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    try {
      return std::stoll(line.substr(6));  // stoll skips the leading blanks, stops at " kB"
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace nanchaos::harness
