// Leveled diagnostics: see log.h.
#include "harness/common/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <memory>

#include "harness/common/check.h"

namespace nanchaos::log {
namespace {

constexpr std::pair<const char*, Level> kNames[] = {
    {"trace", Level::kTrace}, {"debug", Level::kDebug}, {"info", Level::kInfo},
    {"warn", Level::kWarn},   {"error", Level::kError}, {"off", Level::kOff}};

spdlog::level::level_enum to_spdlog(Level l) {
  switch (l) {
    case Level::kTrace:
      return spdlog::level::trace;
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kOff:
      break;
  }
  return spdlog::level::off;
}

struct State {
  Level level = Level::kWarn;
  std::shared_ptr<spdlog::logger> logger;
};

State& state() {
  static State s = [] {
    State st;
    std::string complaint;
    st.level = parse_level(std::getenv("NANCHAOS_LOG"), &complaint);
    // stderr, unbuffered per line (a rank killed a moment later has still said it), with the
    // process's host, pid and rank on every line.
    st.logger = std::make_shared<spdlog::logger>("nanchaos",
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
    st.logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] " + harness::process_origin() + " %v");
    st.logger->set_level(to_spdlog(st.level));
    st.logger->flush_on(spdlog::level::trace);
    if (!complaint.empty()) st.logger->warn("{}", complaint);
    return st;
  }();
  return s;
}

}  // namespace

Level parse_level(const char* name, std::string* complaint) {
  if (!name || !*name) return Level::kWarn;
  const std::string n(name);
  for (const auto& [text, l] : kNames) {
    if (n == text) return l;
  }
  if (complaint) {
    *complaint = fmt::format(
        "NANCHAOS_LOG={}: unknown level (one of: trace, debug, info, warn, error, off); using warn",
        n);
  }
  return Level::kWarn;
}

Level level() { return state().level; }

void write(Level l, std::string_view message) { state().logger->log(to_spdlog(l), "{}", message); }

}  // namespace nanchaos::log
