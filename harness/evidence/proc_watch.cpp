// The rank's own process watch (proc_watch.h). Everything the watcher child needs is prepared
// before the fork; after it, the child makes system calls only (no allocation, no stdio), so a
// fork from a process with threads is safe.
#include "harness/evidence/proc_watch.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <ctime>

extern char** environ;

namespace nanchaos::harness {
namespace {

// Decimal digits of v (>= 0) written backwards from `end`; returns the first character.
char* put_digits(char* end, int64_t v) {
  do {
    *--end = char('0' + v % 10);
    v /= 10;
  } while (v > 0);
  return end;
}

int64_t monotonic_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

void close_inherited(int keep) {
  // close_range (Linux >= 5.9) on both sides of `keep`; else one close per descriptor.
#ifdef SYS_close_range
  auto close_fds = [](unsigned lo, unsigned hi) {
    return syscall(SYS_close_range, lo, hi, 0u) == 0;
  };
  bool ranged = true;
  if (keep < 0) {
    ranged = close_fds(0u, ~0u);
  } else {
    if (keep > 0) ranged = close_fds(0u, unsigned(keep - 1));
    ranged = ranged && close_fds(unsigned(keep + 1), ~0u);
  }
  if (ranged) return;
#endif
  for (int fd = 0; fd < 4096; ++fd) {
    if (fd != keep) close(fd);
  }
}

// Blocks until process `watched` (this child's parent) has ended.
void wait_for_end(pid_t watched, int pidfd) {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    for (;;) {
      const int n = poll(&p, 1, -1);
      if (n > 0) return;
      if (n < 0 && errno != EINTR) break;  // fall back to the parent check
    }
  }
  const timespec tick{0, 5'000'000};
  while (getppid() == watched) nanosleep(&tick, nullptr);
}

}  // namespace

std::string gone_record_path(const std::string& events_dir, int rank) {
  return fmt::format("{}/rank-{}.gone.json", events_dir, rank);
}

bool start_exit_watch(const std::string& path, int rank) {
  const pid_t watched = getpid();
  const std::string tmp = path + ".tmp";
  const std::string head =
      fmt::format(R"({{"ev":"gone","rank":{},"pid":{},"t_us":)", rank, int64_t(watched));
  int pidfd = -1;
#ifdef SYS_pidfd_open
  pidfd = int(syscall(SYS_pidfd_open, watched, 0u));
#endif
  const pid_t child = fork();
  if (child != 0) {
    if (pidfd >= 0) close(pidfd);
    return child > 0;
  }
  // The watcher. Out of the rank's session and process group, deaf to the signals a teardown
  // sends the group, invisible to the sweep for the job's processes.
  setsid();
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE}) sigaction(sig, &ignore, nullptr);
  constexpr char kMarker[] = "NANCHAOS_JOB_ID=";
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, kMarker, sizeof(kMarker) - 1) == 0) (*e)[0] = '_';
  }
  close_inherited(pidfd);
  const int null = open("/dev/null", O_RDWR);  // 0, 1, 2: nothing of the launcher's pipes held
  if (null >= 0) {
    dup2(null, 1);
    dup2(null, 2);
  }
  wait_for_end(watched, pidfd);
  const int64_t t = monotonic_us();
  char tail[32];
  char* end = tail + sizeof(tail);
  *--end = '\n';
  *--end = '}';
  char* first = put_digits(end, t);
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    const bool ok = write(fd, head.data(), head.size()) == ssize_t(head.size()) &&
                    write(fd, first, size_t(tail + sizeof(tail) - first)) ==
                        ssize_t(tail + sizeof(tail) - first);
    close(fd);
    if (ok) rename(tmp.c_str(), path.c_str());
  }
  _exit(0);
}

}  // namespace nanchaos::harness
