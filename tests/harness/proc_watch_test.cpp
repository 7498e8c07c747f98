// The rank's own process watch (harness/evidence/proc_watch.h) on a real process: SIGKILLed, it
// still leaves its gone record, timed after the kill on CLOCK_MONOTONIC.
#include "harness/evidence/proc_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "harness/evidence/events.h"

namespace nanchaos::harness {
namespace {

namespace fs = std::filesystem;

// Forks a process that starts its watch, says so through a pipe, and waits to be killed.
pid_t WatchedProcess(const std::string& record, int rank) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t p = fork();
  if (p == 0) {
    close(ready[0]);
    const char ok = start_exit_watch(record, rank) ? '1' : '0';
    (void)!write(ready[1], &ok, 1);
    for (;;) pause();
  }
  close(ready[1]);
  char ok = '0';
  (void)!read(ready[0], &ok, 1);
  close(ready[0]);
  return ok == '1' ? p : -1;
}

nlohmann::json ReadWithin(const std::string& path, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (fs::exists(path)) {
      std::ifstream in(path);
      return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return nullptr;
}

TEST(ProcWatch, AKilledProcessLeavesItsGoneRecordTimedAfterTheKill) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("proc_watch_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string record = gone_record_path(dir.string(), 3);
  EXPECT_EQ(record, dir.string() + "/rank-3.gone.json");
  const pid_t p = WatchedProcess(record, 3);
  ASSERT_GT(p, 0);
  // Alive: no record yet.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(fs::exists(record));
  const int64_t killed = now_us();
  ASSERT_EQ(kill(p, SIGKILL), 0);
  int status = 0;
  waitpid(p, &status, 0);
  const nlohmann::json g = ReadWithin(record, std::chrono::seconds(10));
  const int64_t after = now_us();
  ASSERT_TRUE(g.is_object()) << "no gone record within 10 s";
  EXPECT_EQ(g["ev"], "gone");
  EXPECT_EQ(g["rank"], 3);
  EXPECT_EQ(g["pid"], p);
  EXPECT_GE(g["t_us"].get<int64_t>(), killed);
  EXPECT_LE(g["t_us"].get<int64_t>(), after);
  EXPECT_FALSE(fs::exists(record + ".tmp"));
  fs::remove_all(dir);
}

TEST(ProcWatch, ARecordThatCannotBeWrittenLosesNothingElse) {
  // A folder that does not exist: the watcher writes nothing and the watched process is unharmed.
  const std::string record = "/nonexistent-nanchaos-dir/rank-0.gone.json";
  const pid_t p = WatchedProcess(record, 0);
  ASSERT_GT(p, 0);
  ASSERT_EQ(kill(p, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(p, &status, 0), p);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_TRUE(ReadWithin(record, std::chrono::milliseconds(200)).is_null());
}

}  // namespace
}  // namespace nanchaos::harness
