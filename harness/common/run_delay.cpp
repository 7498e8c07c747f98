#include "harness/common/run_delay.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>

namespace nanchaos::harness {

RunDelay::~RunDelay() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t RunDelay::ns() {
  if (!opened_) {
    // thread-self: the file of the thread that opens it, whichever thread reads the fd later.
    fd_ = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    opened_ = true;
  }
  if (fd_ < 0) return 0;
  // "<on-cpu ns> <run-delay ns> <timeslices>\n"
  char buf[128];
  const ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* space = std::strchr(buf, ' ');
  if (!space) return 0;
  return std::strtoll(space + 1, nullptr, 10);
}

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace nanchaos::harness
