// Rank locality. See rank_host.h.
#include "harness/common/rank_host.h"

#include <unistd.h>

namespace nanchaos::harness {

std::string this_host() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "";
  return host;
}

std::string this_pid_namespace() {
  char buf[128] = {0};
  const ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

bool rank_is_local(const nlohmann::json& first_event, const std::string& host,
                   const std::string& pidns) {
  if (!first_event.is_object()) return true;
  const std::string h = first_event.value("host", std::string());
  if (!h.empty() && h != host) return false;
  const std::string ns = first_event.value("pidns", std::string());
  return ns.empty() || pidns.empty() || ns == pidns;
}

bool rank_is_local(const nlohmann::json& first_event) {
  static const std::string host = this_host(), pidns = this_pid_namespace();
  return rank_is_local(first_event, host, pidns);
}

}  // namespace nanchaos::harness
