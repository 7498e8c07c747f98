// job_guard.h: when a job process must end itself (controller gone, launcher gone, deadline).
#include "harness/common/job_guard.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "harness/common/child_process.h"
#include "harness/common/rank_host.h"

using nanchaos::harness::ChildProcess;
using nanchaos::harness::job_guard_reason;
using nanchaos::harness::JobGuardState;
using nanchaos::harness::process_start_ticks;
using nanchaos::harness::SpawnOptions;

namespace {

ChildProcess sleeper() {
  SpawnOptions o;
  o.argv = {"sleep", "600"};
  return ChildProcess::spawn(o);
}

}  // namespace

TEST(JobGuard, StartTicksOfALiveProcessAreStableAndAZombieHasNone) {
  ASSERT_TRUE(process_start_ticks().has_value());
  ChildProcess c = sleeper();
  const auto t = process_start_ticks(c.pid());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(process_start_ticks(c.pid()), t);
  EXPECT_GE(*t, *process_start_ticks());  // started after this process
  ::kill(c.pid(), SIGKILL);
  // Killed, not yet reaped: a zombie, which counts as gone.
  for (int i = 0; i < 500 && process_start_ticks(c.pid()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(process_start_ticks(c.pid()).has_value());
  c.wait();
  EXPECT_FALSE(process_start_ticks(c.pid()).has_value());
}

TEST(JobGuard, ReasonNamesTheControllerTheLauncherOrTheDeadline) {
  ChildProcess controller = sleeper();
  JobGuardState g;
  g.controller_pid = controller.pid();
  g.controller_start = *process_start_ticks(controller.pid());
  g.parent_pid = 4242;
  g.deadline_unix_ms = 1000000;
  EXPECT_EQ(job_guard_reason(g, 4242, 999999), "");
  EXPECT_EQ(job_guard_reason(g, 1, 999999), "the launcher (pid 4242) is gone");
  EXPECT_EQ(job_guard_reason(g, 4242, 1000000),
            "the job's deadline passed (timeout_ms + 2000 ms) and the controller did not end the "
            "job");
  JobGuardState reused = g;  // same pid, another start time: not our controller
  reused.controller_start += 1;
  EXPECT_EQ(job_guard_reason(reused, 4242, 0),
            "the controller (pid " + std::to_string(controller.pid()) + ") is gone");
  controller.kill_group(std::chrono::milliseconds(0));
  EXPECT_EQ(job_guard_reason(g, 4242, 0),
            "the controller (pid " + std::to_string(g.controller_pid) + ") is gone");
  JobGuardState none;  // nothing watched: never fires
  EXPECT_EQ(job_guard_reason(none, 1, 1LL << 50), "");
}

// The controller's pid is watched only on its host in its PID namespace (a netns host of the
// multinode tests, or a container, has pids of its own).
TEST(JobGuard, TheControllersPidIsWatchedOnlyInItsOwnPidNamespace) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  setenv("NANCHAOS_CONTROLLER_PID", "4242", 1);
  setenv("NANCHAOS_CONTROLLER_START", "7", 1);
  setenv("NANCHAOS_CONTROLLER_HOST", host, 1);
  setenv("NANCHAOS_CONTROLLER_PIDNS", nanchaos::harness::this_pid_namespace().c_str(), 1);
  auto same = nanchaos::harness::job_guard_from_env();
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(same->controller_pid, 4242);
  setenv("NANCHAOS_CONTROLLER_PIDNS", "pid:[1]", 1);
  auto other = nanchaos::harness::job_guard_from_env();
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->controller_pid, 0);
  for (const char* v : {"NANCHAOS_CONTROLLER_PID", "NANCHAOS_CONTROLLER_START",
                        "NANCHAOS_CONTROLLER_HOST", "NANCHAOS_CONTROLLER_PIDNS"}) {
    unsetenv(v);
  }
}
