#include "harness/evidence/events.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
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

EventLog::EventLog(const std::string& path, bool append) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | (append ? 0 : O_TRUNC), 0644);
  if (fd_ < 0) {
    throw std::runtime_error("cannot open event log " + path + ": " + std::strerror(errno));
  }
  if (append) {
    struct stat st {};
    if (fstat(fd_, &st) == 0) len_ = size_t(st.st_size);
    ::lseek(fd_, off_t(len_), SEEK_SET);  // the write(2) fallback writes at the offset
  }
  grow(len_ + 1);
}

EventLog::~EventLog() {
  if (fd_ < 0) return;
  if (dropped_ > 0) {
    const std::string line =
        nlohmann::json{{"ev", "log_dropped"}, {"t_us", now_us()}, {"count", dropped_}}.dump();
    if (map_) {
      put_reserved(line);
    } else {
      const std::string text = line + "\n";
      if (::write(fd_, text.data(), text.size()) > 0) len_ += text.size();
    }
  }
  if (map_) {
    munmap(map_, cap_);
    if (ftruncate(fd_, off_t(len_)) != 0) {
      // Nothing to do in a destructor: readers skip the NUL tail anyway.
    }
  }
  ::close(fd_);
}

namespace {
// posix_fallocate's answers that mean "this filesystem has no room for the file" rather than
// "this filesystem cannot preallocate" (EOPNOTSUPP, EINVAL: use write(2) instead).
bool no_room(int rc) { return rc == ENOSPC || rc == EDQUOT || rc == EFBIG; }
}  // namespace

bool EventLog::grow(size_t need) {
  if (full_) return false;
  const size_t cap = (need + kReserveBytes + kBlock - 1) / kBlock * kBlock;
  const int rc = posix_fallocate(fd_, 0, off_t(cap));
  if (rc == 0) {
    void* m = map_ ? mremap(map_, cap_, cap, MREMAP_MAYMOVE)
                   : mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (m != MAP_FAILED) {
      map_ = static_cast<char*>(m);
      cap_ = cap;
      return true;
    }
  } else if (no_room(rc)) {
    if (!map_) {
      // Not even the first block: map the reserve alone, so that the loss is on record.
      const int rc2 = posix_fallocate(fd_, 0, off_t(kReserveBytes));
      void* m = rc2 == 0 ? mmap(nullptr, kReserveBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0)
                         : MAP_FAILED;
      if (m == MAP_FAILED) {
        throw std::runtime_error("cannot allocate event log " + path_ + ": " +
                                 std::strerror(rc2 ? rc2 : errno));
      }
      map_ = static_cast<char*>(m);
      cap_ = kReserveBytes;
    }
    lose(rc, "posix_fallocate");
    return false;
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

void EventLog::put_reserved(std::string_view line) {
  if (!map_ || len_ + line.size() + 1 > cap_) {
    ++dropped_;
    return;
  }
  std::memcpy(map_ + len_, line.data(), line.size());
  map_[len_ + line.size()] = '\n';
  len_ += line.size() + 1;
}

void EventLog::lose(int err, const char* op) {
  if (errno_ == 0) errno_ = err;
  std::fprintf(stderr,
               "nanchaos: event log %s: %s failed: %s; later events are counted as dropped\n",
               path_.c_str(), op, std::strerror(err));
  if (map_ && !full_) {
    put_reserved(nlohmann::json{
        {"ev", "log_error"},
        {"t_us", now_us()},
        {"path", path_},
        {"errno", err},
        {"error", std::strerror(err)},
        {"op", op}}.dump());
  }
  full_ = true;
}

void EventLog::append(std::string_view line) {
  if (fd_ < 0) return;
  if (full_) {
    ++dropped_;
    return;
  }
  if (map_) {
    if (len_ + line.size() + 1 + kReserveBytes <= cap_ ||
        grow(std::max(len_ + line.size() + 1, 2 * cap_))) {
      std::memcpy(map_ + len_, line.data(), line.size());
      map_[len_ + line.size()] = '\n';
      len_ += line.size() + 1;
      return;
    }
    if (full_) {
      ++dropped_;
      return;
    }
  }
  iovec iov[2] = {{const_cast<char*>(line.data()), line.size()}, {const_cast<char*>("\n"), 1}};
  const ssize_t n = ::writev(fd_, iov, 2);
  if (n == ssize_t(line.size() + 1)) {
    len_ += size_t(n);
    return;
  }
  if (n > 0) len_ += size_t(n);  // a torn line: readers skip it
  ++dropped_;
  if (errno_ == 0) {
    errno_ = n < 0 ? errno : ENOSPC;
    std::fprintf(stderr, "nanchaos: event log %s: write failed: %s; later events are counted\n",
                 path_.c_str(), std::strerror(errno_));
  }
}

void EventLog::write(const std::string& ev, nlohmann::json fields) {
  if (fd_ < 0) return;
  fields["ev"] = ev;
  if (!fields.contains("t_us")) fields["t_us"] = now_us();
  // NaN/inf are not JSON: dump() writes null for them, which readers treat as non-finite.
  append(fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void EventLog::write_line(std::string_view line) { append(line); }

void EventLog::swap(EventLog& other) noexcept {
  std::swap(path_, other.path_);
  std::swap(fd_, other.fd_);
  std::swap(map_, other.map_);
  std::swap(cap_, other.cap_);
  std::swap(len_, other.len_);
  std::swap(full_, other.full_);
  std::swap(dropped_, other.dropped_);
  std::swap(errno_, other.errno_);
}

std::string EventLog::text() const {
  if (map_) return std::string(map_, len_);
  std::string out(len_, '\0');
  size_t got = 0;
  while (fd_ >= 0 && got < len_) {
    const ssize_t n = ::pread(fd_, out.data() + got, len_ - got, off_t(got));
    if (n <= 0) break;
    got += size_t(n);
  }
  out.resize(got);
  return out;
}

void trim_event_log(const std::string& path) {
  // A regular file only (a job may leave a directory or a link to /dev/zero in its place: that
  // is the judge's to report, read_events_strict), read without exceptions.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return;
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  std::string text;
  try {
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception&) {
    return;  // unreadable: nothing cut
  }
  // The tail a killed writer leaves is NUL bytes up to the end of the (preallocated) file; NULs
  // with lines after them are no such tail and stay, for the judge to name.
  const size_t last = text.find_last_not_of('\0');
  const size_t tail = last == std::string::npos ? 0 : last + 1;
  if (tail == text.size()) return;
  const size_t last_nl = tail == 0 ? std::string::npos : text.rfind('\n', tail - 1);
  const off_t keep = last_nl == std::string::npos ? 0 : off_t(last_nl + 1);
  if (::truncate(path.c_str(), keep) != 0) {
    // Best effort: readers skip the NUL tail anyway.
  }
}

namespace {

std::vector<nlohmann::json> parse_event_stream(std::istream& in) {
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.is_object()) out.push_back(std::move(j));  // events are objects
  }
  return out;
}

}  // namespace

std::vector<nlohmann::json> read_events(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) return {};
  std::ifstream in(path);
  return parse_event_stream(in);
}

std::vector<nlohmann::json> parse_events(const std::string& text) {
  std::istringstream in(text);
  return parse_event_stream(in);
}

std::vector<nlohmann::json> read_events_strict(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);  // follows a link
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) {
    throw BadEventLine(fmt::format(
        "a rank's event log is no regular file (a directory, a device, a pipe): {}", path));
  }
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string bad;  // why the last non-blank line read is no event ("" when it is one)
  int64_t line_no = 0;
  bool torn = false;  // the last non-blank line ended at the end of the file, or holds a NUL
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    // Blank, or a gap of NUL bytes a writer left (events.h EventLog: a failed truncate).
    if (line.find_first_not_of(std::string_view(" \t\r\0", 4)) == std::string::npos) continue;
    torn = in.eof() || line.find('\0') != std::string::npos;
    if (!bad.empty()) throw BadEventLine(bad);  // a bad line with a line after it
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const char* why = j.is_discarded()                                  ? "not JSON"
                      : !j.is_object()                                  ? "not a JSON object"
                      : !j.contains("ev") || !j.find("ev")->is_string() ? "no string \"ev\""
                                                                        : nullptr;
    if (why == nullptr) {
      out.push_back(std::move(j));
      continue;
    }
    // Shown as JSON text (a NUL or a control byte stays readable), cut at 80 bytes.
    const std::string shown = nlohmann::json(line.substr(0, 80))
                                  .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    bad = fmt::format("a line of a rank's event log is no event: {}:{}: {}: {}{}", path, line_no,
                      why, shown, line.size() > 80 ? " (cut)" : "");
  }
  // A bad last line that ends without a newline (or in NUL bytes) is torn: its writer was killed
  // mid-write, skipped. One that a newline ends was written whole.
  if (!bad.empty() && !torn) throw BadEventLine(bad);
  return out;
}

}  // namespace nanchaos::harness
