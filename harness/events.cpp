#include "harness/events.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace nanchaos::harness {

int64_t now_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

int64_t process_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return int64_t(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

namespace {
constexpr size_t kBlock = size_t(256) << 10;  // mapping growth step
}  // namespace

EventLog::EventLog(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw std::runtime_error("cannot open event log " + path + ": " + std::strerror(errno));
  }
  grow(1);
}

EventLog::~EventLog() {
  if (fd_ < 0) return;
  if (map_) {
    munmap(map_, cap_);
    if (ftruncate(fd_, off_t(len_)) != 0) {
      // Nothing to do in a destructor: readers skip the NUL tail anyway.
    }
  }
  ::close(fd_);
}

bool EventLog::grow(size_t need) {
  const size_t cap = (need + kBlock - 1) / kBlock * kBlock;
  if (posix_fallocate(fd_, 0, off_t(cap)) == 0) {
    void* m = map_ ? mremap(map_, cap_, cap, MREMAP_MAYMOVE)
                   : mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (m != MAP_FAILED) {
      map_ = static_cast<char*>(m);
      cap_ = cap;
      return true;
    }
  }
  // Give the mapping up: the file keeps what was written, appends continue with write(2).
  if (map_) munmap(map_, cap_);
  map_ = nullptr;
  cap_ = 0;
  if (ftruncate(fd_, off_t(len_)) != 0 || lseek(fd_, off_t(len_), SEEK_SET) < 0) {
    // The next write(2) still appends at the current offset; readers skip a NUL gap.
  }
  return false;
}

void EventLog::append(std::string_view line) {
  if (fd_ < 0) return;
  if (map_ &&
      (len_ + line.size() + 1 <= cap_ || grow(std::max(len_ + line.size() + 1, 2 * cap_)))) {
    std::memcpy(map_ + len_, line.data(), line.size());
    map_[len_ + line.size()] = '\n';
    len_ += line.size() + 1;
    return;
  }
  iovec iov[2] = {{const_cast<char*>(line.data()), line.size()}, {const_cast<char*>("\n"), 1}};
  const ssize_t n = ::writev(fd_, iov, 2);
  if (n > 0) len_ += size_t(n);
}

void EventLog::write(const std::string& ev, nlohmann::json fields) {
  if (fd_ < 0) return;
  fields["ev"] = ev;
  if (!fields.contains("t_us")) fields["t_us"] = now_us();
  // NaN/inf are not JSON: dump() writes null for them, which readers treat as non-finite.
  append(fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void EventLog::write_line(std::string_view line) { append(line); }

void trim_event_log(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t nul = text.find('\0');
  if (nul == std::string::npos) return;
  const size_t last_nl = text.rfind('\n', nul);
  const off_t keep = last_nl == std::string::npos ? 0 : off_t(last_nl + 1);
  if (::truncate(path.c_str(), keep) != 0) {
    // Best effort: readers skip the NUL tail anyway.
  }
}

std::vector<nlohmann::json> read_events(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.is_object()) out.push_back(std::move(j));  // events are objects
  }
  return out;
}

}  // namespace nanchaos::harness
