// The checkpoint folder's files (see checkpoint_files.h).
#include "harness/job/checkpoint_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <regex>
#include <stdexcept>

namespace nanchaos::harness {

namespace fs = std::filesystem;

fs::path checkpoint_dir(const std::string& run_dir) { return fs::path(run_dir) / "checkpoints"; }

fs::path checkpoint_archive(const fs::path& dir, int64_t step) {
  return dir / fmt::format("step-{:06d}.pt", step);
}

fs::path checkpoint_manifest(const fs::path& dir, int64_t step) {
  return dir / fmt::format("step-{:06d}.json", step);
}

fs::path checkpoint_dcp_folder(const fs::path& dir, int64_t step) {
  return dir / fmt::format("step-{:06d}", step);
}

fs::path checkpoint_dcp_metadata(const fs::path& dir, int64_t step) {
  return checkpoint_dcp_folder(dir, step) / ".metadata";
}

fs::path checkpoint_dcp_shard(const fs::path& dir, int64_t step, int rank) {
  return checkpoint_dcp_folder(dir, step) / fmt::format("__{}_0.distcp", rank);
}

namespace {
std::function<void(const fs::path&)>& rename_hook() {
  static std::function<void(const fs::path&)> hook;
  return hook;
}
}  // namespace

void set_checkpoint_rename_hook(std::function<void(const fs::path&)> hook) {
  rename_hook() = std::move(hook);
}

void write_file_atomic(const fs::path& path, const std::string& bytes) {
  const fs::path tmp = path.string() + fmt::format(".tmp-{}", getpid());
  const auto fail = [&](const char* what) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("checkpoint: cannot {} {}: {}", what, tmp.string(), why));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      fail("write");
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail("fsync");
  }
  if (::close(fd) != 0) fail("close");
  if (rename_hook()) rename_hook()(path);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename");
}

std::vector<int64_t> checkpoint_steps(const fs::path& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return steps;
  static const std::regex manifest(R"(step-(\d{6,})\.json)");
  static const std::regex folder(R"(step-(\d{6,}))");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, manifest)) {
      steps.push_back(std::stoll(m[1].str()));
    } else if (std::regex_match(file, m, folder) && fs::exists(entry.path() / ".metadata", ec)) {
      steps.push_back(std::stoll(m[1].str()));
    }
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

void prune_checkpoints(const fs::path& dir, int64_t keep) {
  const std::vector<int64_t> steps = checkpoint_steps(dir);
  std::error_code ec;
  for (size_t i = size_t(std::max<int64_t>(keep, 0)); i < steps.size(); ++i) {
    fs::remove(checkpoint_manifest(dir, steps[i]), ec);  // the manifest first: never half-listed
    fs::remove(checkpoint_archive(dir, steps[i]), ec);
    fs::remove(checkpoint_dcp_metadata(dir, steps[i]), ec);
    fs::remove_all(checkpoint_dcp_folder(dir, steps[i]), ec);
  }
}

}  // namespace nanchaos::harness
