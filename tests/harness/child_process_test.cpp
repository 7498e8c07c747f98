// ChildProcess (harness/common/child_process.h): exit status, output capture, redirection, timeout
// kill of the whole group, death by signal, destruction, spawn errors, the death-signal (fork)
// path.
#include "harness/common/child_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "tests/test_util.h"

namespace fs = std::filesystem;
using nanchaos::harness::ChildProcess;
using nanchaos::harness::ExitStatus;
using nanchaos::harness::SpawnError;
using nanchaos::harness::SpawnOptions;
using namespace std::chrono_literals;

namespace {

SpawnOptions sh(const std::string& script) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", script};
  return o;
}

// Alive and not a zombie.
bool alive(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const auto rp = line.rfind(')');
  return rp != std::string::npos && line.substr(rp + 2, 1) != "Z";
}

// Waits (generously) for `pid` to be gone; true when it is.
bool gone_within(int pid, std::chrono::milliseconds bound) {
  const auto end = std::chrono::steady_clock::now() + bound;
  while (alive(pid)) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// The pid a child script wrote to `file` (waits for the line to appear).
int read_pid(const std::string& file) {
  for (int i = 0; i < 500; ++i) {
    std::ifstream in(file);
    int pid = 0;
    if (in >> pid && pid > 0) return pid;
    std::this_thread::sleep_for(10ms);
  }
  return 0;
}

}  // namespace

TEST(ChildProcess, ReportsTheExitCodeAndCapturesStdoutAndStderr) {
  auto o = sh("echo out; echo err >&2; exit 3");
  o.capture_output = true;
  ChildProcess c = ChildProcess::spawn(o);
  EXPECT_EQ(c.read_output(), "out\nerr\n");
  const ExitStatus st = c.wait();
  EXPECT_TRUE(st.exited);
  EXPECT_EQ(st.exit_code, 3);
  EXPECT_EQ(st.code(), 3);
  EXPECT_EQ(st.describe(), "exit 3");
  EXPECT_EQ(c.poll()->exit_code, 3);  // reaped once; the status stays
}

TEST(ChildProcess, RedirectsStdoutToAFileAndPassesTheGivenEnvironment) {
  const auto dir = nanchaos::test_util::scratch_dir("nanchaos-child", "env");
  auto o = sh("echo \"$NANCHAOS_CHILD_TEST\"; echo to-stderr >&2");
  o.env = nanchaos::harness::env_with({{"NANCHAOS_CHILD_TEST", "forty two"}});
  o.stdout_path = dir + "/log";
  ChildProcess c = ChildProcess::spawn(o);
  EXPECT_EQ(c.wait().code(), 0);
  std::ifstream in(dir + "/log");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "forty two\nto-stderr\n");
}

TEST(ChildProcess, ADeathBySignalIsReportedAsSuch) {
  ChildProcess c = ChildProcess::spawn(sh("kill -SEGV $$"));
  const ExitStatus st = c.wait();
  EXPECT_FALSE(st.exited);
  EXPECT_EQ(st.signal, SIGSEGV);
  EXPECT_EQ(st.code(), 128 + SIGSEGV);
  EXPECT_EQ(st.describe(), "killed by SIGSEGV");
}

TEST(ChildProcess, TimeoutThenKillGroupEndsTheChildAndItsDescendants) {
  const auto dir = nanchaos::test_util::scratch_dir("nanchaos-child", "group");
  // The shell ignores SIGTERM and starts a grandchild that ignores it too: only SIGKILL to the
  // group ends both.
  ChildProcess c = ChildProcess::spawn(
      sh("trap '' TERM; sh -c 'trap \"\" TERM; echo $$ > " + dir + "/gc; exec sleep 300' & wait"));
  const int grandchild = read_pid(dir + "/gc");
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(c.pgid(), c.pid());  // new session by default: its own group
  EXPECT_FALSE(c.wait_for(100ms).has_value());
  const ExitStatus st = c.kill_group(200ms);
  EXPECT_EQ(st.signal, SIGKILL);
  EXPECT_TRUE(gone_within(grandchild, 10s));
}

TEST(ChildProcess, DestructionKillsTheWholeGroup) {
  const auto dir = nanchaos::test_util::scratch_dir("nanchaos-child", "dtor");
  int child = 0;
  {
    ChildProcess c = ChildProcess::spawn(sh("sleep 300 & echo $! > " + dir + "/gc; wait"));
    child = c.pid();
    ASSERT_GT(read_pid(dir + "/gc"), 0);
  }
  const int grandchild = read_pid(dir + "/gc");
  EXPECT_FALSE(alive(child));  // reaped by the destructor, not left a zombie
  EXPECT_TRUE(gone_within(grandchild, 10s));
}

TEST(ChildProcess, AMovedFromObjectOwnsNothing) {
  ChildProcess a = ChildProcess::spawn(sh("exit 7"));
  ChildProcess b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): the moved-from state is the test
  EXPECT_EQ(b.wait().exit_code, 7);
}

TEST(ChildProcess, AMissingProgramIsASpawnErrorNamingIt) {
  SpawnOptions o;
  o.argv = {"nanchaos-no-such-program", "x"};
  try {
    ChildProcess::spawn(o);
    FAIL() << "no error";
  } catch (const SpawnError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot execute nanchaos-no-such-program: not found in PATH");
    EXPECT_EQ(e.error_number(), ENOENT);
  }
  o.argv = {"/nonexistent/prog"};
  EXPECT_THROW(ChildProcess::spawn(o), SpawnError);
  o.death_signal = SIGTERM;  // the fork path reports the exec's errno the same way
  try {
    ChildProcess::spawn(o);
    FAIL() << "no error";
  } catch (const SpawnError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot execute /nonexistent/prog: No such file or directory");
  }
}

TEST(ChildProcess, AnUnwritableRedirectionIsASpawnError) {
  auto o = sh("true");
  o.stdout_path = "/nonexistent-dir/log";
  EXPECT_THROW(ChildProcess::spawn(o), SpawnError);
  o.death_signal = SIGTERM;
  try {
    ChildProcess::spawn(o);
    FAIL() << "no error";
  } catch (const SpawnError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot execute /bin/sh: stdout /nonexistent-dir/log: No such file or directory");
  }
}

// The fork path: the death signal reaches the child when the spawning *thread* ends (prctl(2)),
// here a thread that ends while this process lives on.
TEST(ChildProcess, DeathSignalFiresWhenTheSpawningThreadEnds) {
  ChildProcess c;
  std::thread([&] {
    auto o = sh("exec sleep 300");
    o.death_signal = SIGKILL;
    c = ChildProcess::spawn(o);
  }).join();
  ASSERT_TRUE(c.valid());
  const auto st = c.wait_for(10s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->signal, SIGKILL);
}

TEST(ChildProcess, SignalsCaughtOrIgnoredHereAreDefaultInTheChild) {
  struct sigaction ign {
  }, old_int{}, old_term{};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ign, &old_int);
  sigaction(SIGTERM, &ign, &old_term);
  for (int death : {0, int(SIGKILL)}) {
    auto o = sh("exec sleep 300");
    o.death_signal = death;
    ChildProcess c = ChildProcess::spawn(o);
    c.signal_group(SIGINT);
    const auto st = c.wait_for(10s);
    ASSERT_TRUE(st.has_value()) << "death_signal " << death;
    EXPECT_EQ(st->signal, SIGINT) << "death_signal " << death;
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
}
