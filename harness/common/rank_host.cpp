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

bool rank_is_local(std::string_view rank_host, std::string_view rank_pidns, std::string_view host,
                   std::string_view pidns) {
  if (!rank_host.empty() && rank_host != host) return false;
  return rank_pidns.empty() || pidns.empty() || rank_pidns == pidns;
}

bool rank_is_local(std::string_view rank_host, std::string_view rank_pidns) {
  static const std::string host = this_host(), pidns = this_pid_namespace();
  return rank_is_local(rank_host, rank_pidns, host, pidns);
}

}  // namespace nanchaos::harness
