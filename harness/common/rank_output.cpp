// Per-rank output files: see rank_output.h.
#include "harness/common/rank_output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nanchaos::harness {

std::string rank_output_dir(const std::string& run_dir) { return run_dir + "/ranks"; }

std::string rank_stdout_path(const std::string& dir, int rank) {
  return fmt::format("{}/rank-{}.out", dir, rank);
}

std::string rank_stderr_path(const std::string& dir, int rank) {
  return fmt::format("{}/rank-{}.err", dir, rank);
}

std::string launcher_log_path(const std::string& dir) { return dir + "/launcher.log"; }

std::string redirect_rank_output(int rank) {
  const char* dir = std::getenv(kRankOutputEnv);
  if (dir == nullptr || *dir == '\0') return "";
  // The controller makes the folder; on another host (a shared filesystem) it may not be visible
  // yet under that name, and a rank started by hand may name a new one.
  if (::mkdir(dir, 0755) != 0 && errno != EEXIST) {
    return fmt::format("cannot create {}: {}", dir, std::strerror(errno));
  }
  const std::string out = rank_stdout_path(dir, rank), err = rank_stderr_path(dir, rank);
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC;
  const int out_fd = ::open(out.c_str(), kFlags, 0644);
  if (out_fd < 0) return fmt::format("cannot open {}: {}", out, std::strerror(errno));
  const int err_fd = ::open(err.c_str(), kFlags, 0644);
  if (err_fd < 0) {
    const int e = errno;
    ::close(out_fd);
    return fmt::format("cannot open {}: {}", err, std::strerror(e));
  }
  std::fflush(stdout);  // what was printed before goes where it was meant to (the launcher)
  std::fflush(stderr);
  ::dup2(out_fd, STDOUT_FILENO);  // dup2 clears FD_CLOEXEC on the copy: kept across exec
  ::dup2(err_fd, STDERR_FILENO);
  ::close(out_fd);
  ::close(err_fd);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return "";
}

}  // namespace nanchaos::harness
