// StopSignalHandlers (harness/controller/stop_signal.h): one stop request delivered twice at once
// is one stop; a second request later kills the controller.
#include "harness/controller/stop_signal.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

namespace {

using nanchaos::harness::kRepeatWindowMs;
using nanchaos::harness::stop_signal;
using nanchaos::harness::StopSignalHandlers;

// What timeout(1) does: its signal to the command, then the same one to the command's process
// group. The CI flake this guards against: the controller died of the second and wrote nothing.
TEST(StopSignal, TheSameSignalTwiceAtOnceIsOneStop) {
  {
    StopSignalHandlers handlers;
    EXPECT_EQ(stop_signal(), 0);
    ::raise(SIGINT);
    ::raise(SIGINT);
    EXPECT_EQ(stop_signal(), SIGINT);
  }
  StopSignalHandlers again;  // a fresh request starts from no signal
  EXPECT_EQ(stop_signal(), 0);
}

TEST(StopSignalDeathTest, ASecondSignalAfterTheWindowKillsAtOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        StopSignalHandlers handlers;
        ::raise(SIGTERM);
        std::this_thread::sleep_for(std::chrono::milliseconds(kRepeatWindowMs + 200));
        ::raise(SIGTERM);
        std::exit(0);  // not reached
      },
      testing::KilledBySignal(SIGTERM), "");
}

}  // namespace
