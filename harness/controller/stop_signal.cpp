// SIGINT/SIGTERM/SIGHUP caught for the controller (see stop_signal.h).
#include "harness/controller/stop_signal.h"

#include <string.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <ctime>

namespace nanchaos::harness {
namespace {

// The first SIGINT/SIGTERM/SIGHUP the controller got (0: none). A signal handler may only store to
// a volatile sig_atomic_t; launch_job's poll loop and run_suite read it.
volatile std::sig_atomic_t g_stop_signal = 0;

// When the first one came (CLOCK_MONOTONIC, ns). Lock-free, so a handler may store and load it.
std::atomic<int64_t> g_first_ns{0};
static_assert(std::atomic<int64_t>::is_always_lock_free);

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe (POSIX.1-2008, signal-safety(7))
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

void on_stop_signal(int sig) {
  const int64_t now = monotonic_ns();
  if (g_stop_signal != 0) {
    // One stop sent twice: timeout(1) signals its command and then its whole process group,
    // which holds the command too; when the controller runs between the two kill() calls, it gets
    // both. Only one that comes later is a second request.
    if (now - g_first_ns.load() < kRepeatWindowMs * 1000000) return;
    ::signal(sig, SIG_DFL);  // a second one: die of it now (the ranks' guards end the job)
    ::raise(sig);
    return;
  }
  g_first_ns.store(now);
  g_stop_signal = sig;
}

}  // namespace

int stop_signal() { return g_stop_signal; }

StopSignalHandlers::StopSignalHandlers() {
  g_stop_signal = 0;
  g_first_ns.store(0);
  for (int i = 0; i < 3; ++i) {
    struct sigaction sa {};
    sa.sa_handler = &on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(kSignals[i], nullptr, &old_[i]);
    if (kSignals[i] != SIGTERM && old_[i].sa_handler == SIG_IGN) continue;
    sigaction(kSignals[i], &sa, nullptr);
  }
}

StopSignalHandlers::~StopSignalHandlers() {
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &old_[i], nullptr);
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : std::to_string(sig);
}

}  // namespace nanchaos::harness
