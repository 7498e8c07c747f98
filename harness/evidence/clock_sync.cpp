// The controller's time service and the ranks' NTP-style measurement. See clock_sync.h.
#include "harness/evidence/clock_sync.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <limits>
#include <sstream>
#include <vector>

#include "harness/evidence/events.h"

namespace nanchaos::harness {
namespace {

constexpr uint32_t kMagic = 0x4b43434e;  // "NCCK"

// The wire format: host byte order is fine, both ends are this program on x86-64/aarch64 Linux
// (little-endian); a foreign packet fails the magic check.
struct Packet {
  uint32_t magic;
  uint32_t seq;
  int64_t t1, t2, t3;
};
constexpr size_t kRequestBytes = 16;  // magic, seq, t1

int64_t clock_us(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return int64_t(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

}  // namespace

int64_t realtime_us() { return clock_us(CLOCK_REALTIME); }

int64_t real_minus_mono_us() {
  int64_t best_gap = std::numeric_limits<int64_t>::max(), best = 0;
  for (int i = 0; i < 5; ++i) {
    const int64_t m1 = now_us(), r = realtime_us(), m2 = now_us();
    if (m2 - m1 < best_gap) {
      best_gap = m2 - m1;
      best = r - (m1 + m2) / 2;
    }
  }
  return best;
}

ClockServer::ClockServer() {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return;
  }
  fd_ = fd;
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

ClockServer::~ClockServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) close(fd_);
}

void ClockServer::serve() {
  pollfd p{fd_, POLLIN, 0};
  while (!stop_) {
    if (poll(&p, 1, 50) <= 0) continue;  // the stop flag is checked every 50 ms
    Packet pk{};
    sockaddr_in from{};
    socklen_t flen = sizeof(from);
    const ssize_t n = recvfrom(fd_, &pk, sizeof(pk), 0, reinterpret_cast<sockaddr*>(&from), &flen);
    const int64_t t2 = realtime_us();
    if (n < ssize_t(kRequestBytes) || pk.magic != kMagic) continue;
    pk.t2 = t2;
    pk.t3 = realtime_us();
    sendto(fd_, &pk, sizeof(pk), 0, reinterpret_cast<sockaddr*>(&from), flen);
  }
}

std::string ClockServer::spec() const {
  if (!ok()) return "";
  if (const char* env = std::getenv("NANCHAOS_CLOCK_HOST"); env && *env) {
    return fmt::format("{}:{}", env, port_);
  }
  std::vector<std::string> addrs;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP) ||
          (a->ifa_flags & IFF_LOOPBACK)) {
        continue;
      }
      char buf[INET_ADDRSTRLEN] = {0};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
      addrs.push_back(buf);
    }
    freeifaddrs(list);
  }
  addrs.push_back("127.0.0.1");
  return fmt::format("{}:{}", fmt::join(addrs, ","), port_);
}

nlohmann::json ClockMeasurement::to_json() const {
  if (!error.empty()) return {{"error", error}, {"real_minus_mono_us", real_minus_mono_us}};
  return {{"offset_us", offset_us},
          {"rtt_us", rtt_us},
          {"samples", samples},
          {"server", server},
          {"real_minus_mono_us", real_minus_mono_us}};
}

namespace {

// One exchange with `to`: true and the four times when an answer came within timeout_ms.
bool exchange(int fd, const sockaddr_in& to, uint32_t seq, int timeout_ms, int64_t& t1, int64_t& t2,
              int64_t& t3, int64_t& t4) {
  Packet pk{kMagic, seq, 0, 0, 0};
  t1 = realtime_us();
  pk.t1 = t1;
  if (sendto(fd, &pk, kRequestBytes, 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) < 0) {
    return false;
  }
  const int64_t give_up = now_us() + int64_t(timeout_ms) * 1000;
  for (;;) {
    const int64_t left_ms = (give_up - now_us()) / 1000;
    if (left_ms < 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, int(left_ms) + 1) <= 0) return false;
    Packet in{};
    const ssize_t n = recv(fd, &in, sizeof(in), 0);
    t4 = realtime_us();
    // A late answer to an earlier request is skipped: its t1 is not ours.
    if (n == ssize_t(sizeof(in)) && in.magic == kMagic && in.seq == seq && in.t1 == t1) {
      t2 = in.t2;
      t3 = in.t3;
      return true;
    }
  }
}

}  // namespace

ClockMeasurement measure_clock(const std::string& spec, int samples, int timeout_ms) {
  ClockMeasurement m;
  m.real_minus_mono_us = real_minus_mono_us();
  const auto colon = spec.rfind(':');
  const int port = colon == std::string::npos ? 0 : std::atoi(spec.c_str() + colon + 1);
  if (colon == std::string::npos || port <= 0 || port > 65535) {
    m.error = fmt::format("bad NANCHAOS_CLOCK '{}' (want ADDR[,ADDR...]:PORT)", spec);
    return m;
  }
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    m.error = fmt::format("socket: {}", std::strerror(errno));
    return m;
  }
  std::vector<std::string> tried;
  std::stringstream list(spec.substr(0, colon));
  uint32_t seq = 0;
  int64_t best_rtt = std::numeric_limits<int64_t>::max();
  for (std::string host; std::getline(list, host, ',') && m.samples == 0;) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(uint16_t(port));
    if (inet_pton(AF_INET, host.c_str(), &to.sin_addr) != 1) {
      tried.push_back(host + " (not an IPv4 address)");
      continue;
    }
    for (int i = 0; i < samples; ++i) {
      int64_t t1 = 0, t2 = 0, t3 = 0, t4 = 0;
      if (!exchange(fd, to, ++seq, timeout_ms, t1, t2, t3, t4)) {
        if (m.samples == 0) break;  // the first request went unanswered: try the next address
        continue;
      }
      ++m.samples;
      const int64_t rtt = (t4 - t1) - (t3 - t2);
      if (rtt < best_rtt) {
        best_rtt = rtt;
        m.rtt_us = rtt;
        // NTP's offset: the mean of the two one-way differences (exact for a symmetric path).
        m.offset_us = ((t2 - t1) + (t3 - t4)) / 2;
      }
    }
    if (m.samples > 0) {
      m.server = host;
    } else {
      tried.push_back(fmt::format("{} (no answer in {} ms)", host, timeout_ms));
    }
  }
  close(fd);
  if (m.samples == 0) {
    m.error = fmt::format("no answer from the controller's clock service on port {}: {}", port,
                          fmt::join(tried, ", "));
  }
  return m;
}

std::optional<int64_t> timeline_shift_us(const nlohmann::json& clock_event,
                                         int64_t controller_real_minus_mono_us) {
  if (!clock_event.is_object() || clock_event.contains("error")) return std::nullopt;
  const auto off = clock_event.find("offset_us");
  const auto rmm = clock_event.find("real_minus_mono_us");
  if (off == clock_event.end() || rmm == clock_event.end() || !off->is_number_integer() ||
      !rmm->is_number_integer()) {
    return std::nullopt;
  }
  return rmm->get<int64_t>() + off->get<int64_t>() - controller_real_minus_mono_us;
}

}  // namespace nanchaos::harness
