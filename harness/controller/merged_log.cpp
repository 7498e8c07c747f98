// The merged view of the per-rank output: see merged_log.h.
#include "harness/controller/merged_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <optional>

#include "harness/common/rank_output.h"

namespace nanchaos::harness {
namespace {

// "launcher.log" -> "[launcher] ", "rank-3.out" -> "[rank 3] ", "rank-3.err" -> "[rank 3 err] ";
// nullopt for any other name.
std::optional<std::string> prefix_of(const std::string& name) {
  if (name == "launcher.log") return std::string("[launcher] ");
  if (name.rfind("rank-", 0) != 0 || name.size() < 10) return std::nullopt;
  const std::string ext = name.substr(name.size() - 4);
  if (ext != ".out" && ext != ".err") return std::nullopt;
  const std::string digits = name.substr(5, name.size() - 9);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return fmt::format("[rank {}{}] ", digits, ext == ".err" ? " err" : "");
}

}  // namespace

results::JobLogs job_logs(const std::string& run_dir, int world) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // `rel` if RUN/rel exists, else "".
  auto existing = [&](const std::string& rel) {
    return fs::exists(run_dir + "/" + rel, ec) ? rel : std::string();
  };
  results::JobLogs logs;
  const std::string dir = fs::path(rank_output_dir(run_dir)).filename().string();  // "ranks"
  logs.merged = existing("ranks.log");
  logs.launcher = existing(launcher_log_path(dir));
  for (int r = 0; r < world; ++r) {
    results::JobLogs::Rank k{r, existing(rank_stdout_path(dir, r)),
                             existing(rank_stderr_path(dir, r))};
    if (!k.stdout_path.empty() || !k.stderr_path.empty()) logs.ranks.push_back(std::move(k));
  }
  return logs;
}

MergedLog::MergedLog(std::string ranks_dir, const std::string& merged_path)
    : dir_(std::move(ranks_dir)), out_(merged_path, std::ios::binary | std::ios::trunc) {}

MergedLog::~MergedLog() {
  for (auto& [name, src] : sources_) {
    if (src.fd >= 0) ::close(src.fd);
  }
}

void MergedLog::read_source(Source& src) {
  const int fd = src.fd;
  char buf[65536];
  std::string lines;
  for (;;) {
    const ssize_t n = ::pread(fd, buf, sizeof(buf), src.offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    src.offset += n;
    size_t start = 0;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') continue;
      lines += src.prefix;
      lines += src.partial;
      lines.append(buf + start, size_t(i) + 1 - start);
      src.partial.clear();
      start = size_t(i) + 1;
    }
    src.partial.append(buf + start, size_t(n) - start);
  }
  if (!lines.empty()) out_.write(lines.data(), std::streamsize(lines.size()));
}

void MergedLog::poll() {
  if (DIR* d = ::opendir(dir_.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (sources_.count(name)) continue;
      const auto prefix = prefix_of(name);
      if (!prefix) continue;
      const int fd = ::open((dir_ + "/" + name).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;  // tried again at the next poll
      sources_[name] = Source{*prefix, fd};
    }
    ::closedir(d);
  }
  for (auto& [name, src] : sources_) read_source(src);
  out_.flush();
}

void MergedLog::finish() {
  poll();
  for (auto& [name, src] : sources_) {
    if (src.partial.empty()) continue;
    out_ << src.prefix << src.partial << "\n";
    src.partial.clear();
  }
  out_.flush();
}

}  // namespace nanchaos::harness
