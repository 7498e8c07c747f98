// Leveled diagnostics on stderr, with a runtime switch: NANCHAOS_LOG = trace | debug | info |
// warn (default) | error | off. Backed by spdlog (Debian's libspdlog-dev), kept out of this header
// so that torch-side files do not pull it in.
//
//   log::debug("launch {}: {}", scenario, fmt::join(argv, " "));
//   log::info("rank {} attached after {} ms", rank, ms);
//
// A line reads `[2026-12-01 19:40:00.123] [debug] [host pid rank R] launch ...`: which process
// of which rank said it (harness/common/check.h process_origin). The controller passes
// NANCHAOS_LOG on to the ranks (mpirun -x), so one switch covers every process of a job.
// User-facing output (errors about a scenario, the progress lines, reports) is not logging and
// does not go through here. Thread-safe (spdlog's mutex sink); formatting happens only when the
// level is enabled.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

namespace nanchaos::log {

enum class Level { kTrace, kDebug, kInfo, kWarn, kError, kOff };

/// "debug" -> kDebug, ..., "" or null -> kWarn. An unknown name gives kWarn and sets `*complaint`
/// to a one-line explanation naming the accepted values. Pure.
Level parse_level(const char* name, std::string* complaint);

/// The level NANCHAOS_LOG selected, read once at first use (an unknown value is reported once,
/// at warn).
Level level();

inline bool enabled(Level l) { return l >= level() && l != Level::kOff; }

/// Writes one line at `l` (no check of enabled(): callers use the helpers below).
void write(Level l, std::string_view message);

template <typename... A>
void trace(fmt::format_string<A...> f, A&&... args) {
  if (enabled(Level::kTrace)) write(Level::kTrace, fmt::format(f, std::forward<A>(args)...));
}
template <typename... A>
void debug(fmt::format_string<A...> f, A&&... args) {
  if (enabled(Level::kDebug)) write(Level::kDebug, fmt::format(f, std::forward<A>(args)...));
}
template <typename... A>
void info(fmt::format_string<A...> f, A&&... args) {
  if (enabled(Level::kInfo)) write(Level::kInfo, fmt::format(f, std::forward<A>(args)...));
}
template <typename... A>
void warn(fmt::format_string<A...> f, A&&... args) {
  if (enabled(Level::kWarn)) write(Level::kWarn, fmt::format(f, std::forward<A>(args)...));
}
template <typename... A>
void error(fmt::format_string<A...> f, A&&... args) {
  if (enabled(Level::kError)) write(Level::kError, fmt::format(f, std::forward<A>(args)...));
}

}  // namespace nanchaos::log
