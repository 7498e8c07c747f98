// Helpers the report writers share (report.cpp, console.cpp, markdown.cpp, junit.cpp, columns.cpp):
// verdict classes, number and text rendering, and writing a file whole. Internal to results/: not
// part of the report API (report.h), so it may change with the writers.
#pragma once

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "results/report.h"

namespace nanchaos::results {

inline bool is_pass(const ScenarioResult& r) { return r.verdict == Verdict::kPass; }
inline bool is_fail(const ScenarioResult& r) { return r.verdict == Verdict::kFail; }
inline bool is_skipped(const ScenarioResult& r) { return r.verdict == Verdict::kSkipped; }
inline bool is_error(const ScenarioResult& r) {
  return !is_pass(r) && !is_fail(r) && !is_skipped(r);
}

/// A non-finite number as the strings "nan", "inf", "-inf" (JSON has no literal for them and
/// nlohmann would silently write null, which reads as "absent").
template <class J>
J number(double v) {
  if (std::isnan(v)) return J("nan");
  if (std::isinf(v)) return J(v > 0 ? "inf" : "-inf");
  return J(v);
}

/// A free-form value (check expected/actual, a job fact) as J, with non-finite floats replaced.
template <class J>
J sanitized(const nlohmann::json& v) {
  if (v.is_number_float()) return number<J>(v.get<double>());
  if (v.is_array()) {
    J out = J::array();
    for (const auto& e : v) out.push_back(sanitized<J>(e));
    return out;
  }
  if (v.is_object()) {
    J out = J::object();
    for (const auto& [k, e] : v.items()) out[k] = sanitized<J>(e);
    return out;
  }
  return J(v);
}

/// Opens `path` for writing, writes through `body`, and reports any failure with the path and the
/// OS reason (a half-written report that looks complete is worse than none).
template <class Body>
void write_file(const std::string& path, Body&& body) {
  errno = 0;
  std::ofstream out(path, std::ios::out | std::ios::trunc | std::ios::binary);
  if (!out) {
    throw std::runtime_error(
        fmt::format("cannot write {}: {}", path, std::strerror(errno ? errno : EIO)));
  }
  body(out);
  out.close();
  if (!out) {
    throw std::runtime_error(
        fmt::format("cannot write {}: {}", path, std::strerror(errno ? errno : EIO)));
  }
}

/// Display width of UTF-8 text in code points (good enough for names, layers and "…").
size_t width(const std::string& s);
/// Byte offset of code point `cp` in `s`.
size_t byte_at(const std::string& s, size_t cp);
/// Newlines, carriage returns and tabs as spaces: one table row stays one line.
std::string one_line(std::string s);

enum class Align { kLeft, kRight };
enum class Cut { kTail, kHead };  // kHead keeps the end: "…fc1.weight" says more than "blocks.…"

/// Fits `raw` ("" shows as "-") into exactly `w` columns, marking a cut with "…".
std::string cell(const std::string& raw, size_t w, Align align = Align::kLeft,
                 Cut cut = Cut::kTail);
/// A Markdown table cell: one line, "-" for "", `|` escaped.
std::string md_cell(const std::string& raw);
/// XML element text: escaped as xml_escape (report.h) but keeping newlines readable (only
/// attributes need them as character references).
std::string xml_text(const std::string& s);

std::string ranks_text(const std::vector<int64_t>& ranks);  ///< "0,2"
std::string fmt_opt_int(const std::optional<int64_t>& v);   ///< "" when unset
std::string fmt_opt_ms(const std::optional<double>& v);     ///< "{:.1f}", "" when unset
std::string verdict_label(const ScenarioResult& r);         ///< PASS, FAIL, SKIP, ERROR
/// "7 scenarios: 2 passed, 2 failed, 2 errors, 1 skipped" (and what an interruption left).
std::string summary_text(const SuiteReport& r);
/// Compact rendering of a check value for humans ("-" when the run gave none).
std::string value_text(const nlohmann::json& v);
std::vector<const Check*> failed_checks(const ScenarioResult& r);

/// One rank's straggler scores (StepScores::score[i]) as a text sparkline of at most
/// `max_chars` characters (consecutive points merged by their max when there are more), one of
/// "▁▂▃▄" for a score up to kSlowScore (1.5) in steps of 0.375 and one of "▅▆▇█" above it
/// (█: 3 and more), so a character from ▅ up is a slow step. "" for no points.
std::string score_sparkline(const std::vector<double>& scores, size_t max_chars = 40);

/// One link to a job's output file (JobLogs), as report.md and report.html show it.
struct LogLink {
  std::string label;  ///< "ranks.log", "launcher.log", "rank 0 out", "rank 0 err", "ranks/"
  std::string href;   ///< relative to the report's folder, '/'-separated, %-escaped
};
/// The links of `r.logs` (under `r.run_dir`) from a report written to `report_path`: the merged
/// view, the launcher's log, then each rank's out and err; with more than `max_ranks` ranks, one
/// link to the ranks/ folder instead of 2 x ranks. Paths are made relative with std::filesystem
/// (lexically, from the absolute forms), so the links survive moving the whole output folder.
std::vector<LogLink> log_links(const ScenarioResult& r, const std::string& report_path,
                               size_t max_ranks = 8);

}  // namespace nanchaos::results
