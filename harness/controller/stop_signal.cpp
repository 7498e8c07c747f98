// SIGINT/SIGTERM/SIGHUP caught for the controller (see stop_signal.h).
#include "harness/controller/stop_signal.h"

#include <string.h>

#include <csignal>

namespace nanchaos::harness {
namespace {

// The first SIGINT/SIGTERM/SIGHUP the controller got (0: none). A signal handler may only store to
// a volatile sig_atomic_t; launch_job's poll loop and run_suite read it.
volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {  // a second one: die of it now (the ranks' guards end the job)
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_stop_signal = sig;
}

}  // namespace

int stop_signal() { return g_stop_signal; }

StopSignalHandlers::StopSignalHandlers() {
  g_stop_signal = 0;
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
