// The event log: lines readable while the writer runs, kept when it is killed, NUL tail trimmed,
// growth past the first mapped block, evidence that cannot be written recorded and counted.
#include "harness/evidence/events.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace nanchaos::harness {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::path(::testing::TempDir()) /
          ("nanchaos_events_" + name + "_" + std::to_string(getpid()) + ".jsonl"))
      .string();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(EventLog, LinesAreReadableWhileOpenAndTheFileIsExactAfterClose) {
  const std::string path = temp_path("open");
  {
    EventLog log(path);
    log.write("start", {{"rank", 3}});
    log.write_line(R"({"ev":"coll_enter","seq":0,"t_us":5})");
    const auto seen = read_events(path);  // another reader, before the writer closes
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[0]["ev"], "start");
    EXPECT_EQ(seen[0]["rank"], 3);
    EXPECT_TRUE(seen[0].contains("t_us"));
    EXPECT_EQ(seen[1]["seq"], 0);
  }
  const std::string text = slurp(path);
  EXPECT_EQ(text.find('\0'), std::string::npos);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  fs::remove(path);
}

// An external job's agent continues the log exec-rank began (`launch`, `clock`).
TEST(EventLog, AppendKeepsTheLinesAlreadyThere) {
  const std::string path = temp_path("append");
  {
    std::ofstream(path) << R"({"ev":"launch","t_us":1})"
                        << "\n";
  }
  {
    EventLog log(path, /*append=*/true);
    log.write("agent", {{"rank", 1}});
  }
  const auto seen = read_events(path);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0]["ev"], "launch");
  EXPECT_EQ(seen[1]["ev"], "agent");
  EXPECT_EQ(slurp(path).find('\0'), std::string::npos);
  {
    EventLog log(path);  // the default truncates
    log.write("start");
  }
  EXPECT_EQ(read_events(path).size(), 1u);
  fs::remove(path);
}

TEST(EventLog, EventsOfAKilledWriterSurviveAndTheNulTailIsTrimmed) {
  const std::string path = temp_path("killed");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    EventLog log(path);
    log.write("start", {{"rank", 1}});
    log.write("step_begin", {{"step", 0}});
    ::raise(SIGKILL);  // no destructor, no flush: only what the kernel already has survives
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  auto events = read_events(path);  // skips the NUL tail
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1]["ev"], "step_begin");
  EXPECT_NE(slurp(path).find('\0'), std::string::npos) << "the killed writer left its block";
  trim_event_log(path);
  const std::string text = slurp(path);
  EXPECT_EQ(text.find('\0'), std::string::npos);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  EXPECT_EQ(read_events(path).size(), 2u);
  trim_event_log(path);  // a clean file stays as it is
  EXPECT_EQ(slurp(path), text);
  fs::remove(path);
}

TEST(EventLog, GrowsPastItsFirstBlock) {
  const std::string path = temp_path("grow");
  const std::string pad(200, 'x');
  constexpr int kLines = 4000;  // ~0.9 MB: several 256 KiB blocks
  {
    EventLog log(path);
    for (int i = 0; i < kLines; ++i) log.write("pad", {{"i", i}, {"pad", pad}});
    EXPECT_EQ(read_events(path).size(), size_t(kLines));
  }
  const auto events = read_events(path);
  ASSERT_EQ(events.size(), size_t(kLines));
  EXPECT_EQ(events.back()["i"], kLines - 1);
  EXPECT_EQ(slurp(path).find('\0'), std::string::npos);
  fs::remove(path);
}

// Runs `body` in a child whose files may not grow past `limit` bytes (RLIMIT_FSIZE: the same
// refusal as a full disk, EFBIG instead of ENOSPC, without root), SIGXFSZ ignored as a rank's
// would not be. Returns the child's exit code.
template <class Body>
int with_file_size_limit(rlim_t limit, Body&& body) {
  const pid_t child = fork();
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);
    const rlimit rl{limit, limit};
    setrlimit(RLIMIT_FSIZE, &rl);
    _exit(body());
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(EventLog, AFullFileSystemIsRecordedAsLogErrorAndLaterEventsAreCounted) {
  const std::string path = temp_path("full");
  constexpr int kEvents = 20000;  // ~1.2 MiB of lines: well past the first 256-KiB block
  const int rc = with_file_size_limit(300 << 10, [&] {
    EventLog log(path);
    for (int i = 0; i < kEvents; ++i) log.write("step_end", {{"step", i}, {"pad", "0123456789"}});
    return log.error() == EFBIG && log.dropped() > 0 ? 0 : 1;
  });
  ASSERT_EQ(rc, 0);
  const auto events = read_events(path);
  ASSERT_GE(events.size(), 3u);
  const auto& err = events[events.size() - 2];
  EXPECT_EQ(err["ev"], "log_error");
  EXPECT_EQ(err["path"], path);
  EXPECT_EQ(err["errno"], EFBIG);
  EXPECT_EQ(err["op"], "posix_fallocate");
  EXPECT_EQ(err["error"], std::strerror(EFBIG));
  const auto& dropped = events.back();
  EXPECT_EQ(dropped["ev"], "log_dropped");
  const int64_t written = int64_t(events.size()) - 2;
  EXPECT_EQ(dropped["count"].get<int64_t>() + written, kEvents) << "every event written or counted";
  EXPECT_EQ(events[size_t(written - 1)]["step"], written - 1) << "the record is a clean prefix";
  EXPECT_EQ(slurp(path).find('\0'), std::string::npos);
  fs::remove(path);
}

TEST(EventLog, NoRoomForTheFirstBlockStillRecordsTheLoss) {
  const std::string path = temp_path("noblock");
  const int rc = with_file_size_limit(16 << 10, [&] {  // room for the 4-KiB reserve only
    EventLog log(path);
    log.write("start", {{"rank", 0}});
    return log.dropped() == 1 ? 0 : 1;
  });
  ASSERT_EQ(rc, 0);
  const auto events = read_events(path);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["ev"], "log_error");
  EXPECT_EQ(events[1]["ev"], "log_dropped");
  EXPECT_EQ(events[1]["count"], 1);
  fs::remove(path);
}

TEST(EventLog, NoRoomAtAllIsAnErrorNamingThePath) {
  const std::string path = temp_path("noroom");
  const int rc = with_file_size_limit(1000, [&] {
    try {
      EventLog log(path);
    } catch (const std::runtime_error& e) {
      const std::string want = "cannot allocate event log " + path + ": " + std::strerror(EFBIG);
      return std::string(e.what()) == want ? 0 : 2;
    }
    return 1;
  });
  EXPECT_EQ(rc, 0);
  fs::remove(path);
}

}  // namespace
}  // namespace nanchaos::harness
