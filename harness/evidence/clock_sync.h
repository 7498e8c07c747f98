// Clock offsets between the controller and ranks on other hosts (docs/multi-node.md "Clocks").
//
// Event times are CLOCK_MONOTONIC of the host that wrote them (events.h); that clock has no common
// zero across hosts. So at launch the controller serves a tiny UDP time service (ClockServer) and
// tells the ranks where it is in $NANCHAOS_CLOCK ("ADDR[,ADDR...]:PORT", forwarded by the
// launcher like NANCHAOS_JOB_ID). Each rank, at start, does a few NTP-style exchanges against it
// (measure_clock) and logs one event:
//   clock {offset_us, rtt_us, samples, server, real_minus_mono_us}   or   clock {error}
// offset_us is the controller's CLOCK_REALTIME minus the rank's, from the exchange with the
// smallest round trip; its error is at most rtt_us / 2 (plus drift over the job, ~ppm for
// NTP-disciplined clocks). real_minus_mono_us is the rank's CLOCK_REALTIME - CLOCK_MONOTONIC,
// read together. The judge puts a rank's events on the controller's timeline with
// timeline_shift_us (a rank monotonic time t is t + shift on the controller's monotonic clock).
//
//   ClockServer srv;                       // controller, before launching
//   setenv("NANCHAOS_CLOCK", srv.spec())   // e.g. "10.77.0.1,127.0.0.1:40123"
//   ClockMeasurement m = measure_clock(getenv("NANCHAOS_CLOCK"));  // rank
//   log.write("clock", m.to_json());
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

namespace nanchaos::harness {

/// CLOCK_REALTIME in microseconds.
int64_t realtime_us();
/// CLOCK_REALTIME - CLOCK_MONOTONIC in microseconds, both read together (the pair with the
/// shortest read gap of a few tries, so a preemption between the reads does not count).
int64_t real_minus_mono_us();

/// The controller's side: a UDP socket on every IPv4 address (port chosen by the kernel) and a
/// thread that answers each 24-byte request {magic, seq, t1} with {magic, seq, t1, t2, t3}: t2
/// its CLOCK_REALTIME (us) when the request arrived, t3 when the answer leaves. Owns the socket
/// and the thread; the destructor stops and joins it (within ~50 ms). Never throws: when no
/// socket can be had, ok() is false and spec() is "".
class ClockServer {
 public:
  ClockServer();
  ~ClockServer();
  ClockServer(const ClockServer&) = delete;
  ClockServer& operator=(const ClockServer&) = delete;

  bool ok() const { return fd_ >= 0; }
  int port() const { return port_; }
  /// "ADDR[,ADDR...]:PORT": $NANCHAOS_CLOCK_HOST (a comma list, for hosts that reach the
  /// controller by an address it does not see as its own) if set, else this host's IPv4
  /// addresses, non-loopback first, 127.0.0.1 last. "" when !ok().
  std::string spec() const;

 private:
  void serve();
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// One rank's measurement. `error` non-empty: nothing was measured (then the other fields are 0).
struct ClockMeasurement {
  int64_t offset_us = 0;           ///< controller CLOCK_REALTIME - rank CLOCK_REALTIME
  int64_t rtt_us = 0;              ///< round trip of the sample used (network only: t4-t1-(t3-t2))
  int samples = 0;                 ///< answered exchanges
  std::string server;              ///< the address that answered
  int64_t real_minus_mono_us = 0;  ///< the rank's real_minus_mono_us()
  std::string error;
  /// The `clock` event's fields (see the header comment).
  nlohmann::json to_json() const;
};

/// Measures against `spec` ("ADDR[,ADDR...]:PORT"): the addresses are tried in order (one request,
/// `timeout_ms` for its answer), the first that answers gets `samples` exchanges in all. Never
/// throws; a bad spec or no answer gives `error` ("no answer from 10.0.0.1:4000 (250 ms)").
ClockMeasurement measure_clock(const std::string& spec, int samples = 8, int timeout_ms = 250);

/// Writes the `clock` event when $NANCHAOS_CLOCK is set and not empty (ranks call this at start);
/// `write` is called with the event's fields. No-op otherwise.
template <class WriteFn>
void log_clock_from_env(WriteFn&& write) {
  const char* spec = std::getenv("NANCHAOS_CLOCK");
  if (spec && *spec) write(measure_clock(spec).to_json());
}

/// The shift that puts a rank's CLOCK_MONOTONIC times on the controller's CLOCK_MONOTONIC:
/// rank real_minus_mono + offset - controller real_minus_mono (us), from the rank's `clock`
/// event. nullopt when the event has no measurement (an `error`, or a field missing).
std::optional<int64_t> timeline_shift_us(const nlohmann::json& clock_event,
                                         int64_t controller_real_minus_mono_us);

}  // namespace nanchaos::harness
