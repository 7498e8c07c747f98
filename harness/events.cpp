#include "harness/events.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
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

EventLog::EventLog(const std::string& path) {
  f_ = std::fopen(path.c_str(), "w");
  if (!f_) throw std::runtime_error("cannot open event log " + path + ": " + std::strerror(errno));
}

EventLog::~EventLog() {
  if (f_) std::fclose(f_);
}

void EventLog::write(const std::string& ev, nlohmann::json fields) {
  if (!f_) return;
  fields["ev"] = ev;
  if (!fields.contains("t_us")) fields["t_us"] = now_us();
  // NaN/inf are not JSON: dump() writes null for them, which readers treat as non-finite.
  std::string line = fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

void EventLog::write_line(std::string_view line) {
  if (!f_) return;
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fputc('\n', f_);
  std::fflush(f_);
}

std::vector<nlohmann::json> read_events(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

}  // namespace nanchaos::harness
