// Report model serialisation and the four writers (report.json, junit.xml, report.md, console).
//
// Conventions shared by every writer, so the formats never disagree:
// - An empty string in an "optional" string field (reason, outcome, fault_outcome, layer, cause,
//   action, target, run_dir) means "no value" and is written as JSON null / "-".
// - A detection step < 0 means unknown (null).
// - Non-finite numbers matter here (a NaN final loss is the point of many scenarios), and JSON
//   has no literal for them: nlohmann would silently write null, which reads as "absent". They are
//   written as the strings "nan", "inf", "-inf" instead, also inside checks and `extra`.
// - A verdict outside pass/fail/error/skipped counts as an error, so the summary always adds up.
// report.json keeps the spec's key order (ordered_json) so a person can read it top-down; the
// to_json() overloads return the same content as plain nlohmann::json.
#include "results/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <type_traits>

namespace nanchaos::results {
namespace {

using ojson = nlohmann::ordered_json;

bool is_pass(const ScenarioResult& r) { return r.verdict == "pass"; }
bool is_fail(const ScenarioResult& r) { return r.verdict == "fail"; }
bool is_skipped(const ScenarioResult& r) { return r.verdict == "skipped"; }
bool is_error(const ScenarioResult& r) { return !is_pass(r) && !is_fail(r) && !is_skipped(r); }

template <class J>
J str_or_null(const std::string& s) {
  return s.empty() ? J(nullptr) : J(s);
}

template <class J>
J number(double v) {
  if (std::isnan(v)) return J("nan");
  if (std::isinf(v)) return J(v > 0 ? "inf" : "-inf");
  return J(v);
}

template <class J, class T>
J opt(const std::optional<T>& v) {
  if (!v) return J(nullptr);
  if constexpr (std::is_floating_point_v<T>) {
    return number<J>(*v);
  } else {
    return J(*v);
  }
}

// Converts a free-form value (check expected/actual, extra) into J, replacing non-finite floats.
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

template <class J>
J rank_json(const std::vector<int64_t>& ranks) {
  if (ranks.empty()) return J(nullptr);
  if (ranks.size() == 1) return J(ranks.front());
  return J(ranks);
}

template <class J>
J detection_json(const Detection& d) {
  J j = J::object();
  j["detector"] = d.detector;
  j["rank"] = rank_json<J>(d.ranks);
  j["step"] = d.step < 0 ? J(nullptr) : J(d.step);
  j["layer"] = str_or_null<J>(d.layer);
  j["cause"] = str_or_null<J>(d.cause);
  j["transient"] = opt<J>(d.transient);
  j["latency_steps"] = opt<J>(d.latency_steps);
  j["latency_ms"] = opt<J>(d.latency_ms);
  j["decision_us"] = opt<J>(d.decision_us);
  j["action"] = str_or_null<J>(d.action);
  return j;
}

template <class J>
J scenario_json(const ScenarioResult& r) {
  J j = J::object();
  j["name"] = r.name;
  j["file"] = r.file;
  j["verdict"] = r.verdict;
  j["reason"] = str_or_null<J>(r.reason);
  j["outcome"] = str_or_null<J>(r.outcome);
  j["wall_ms"] = number<J>(r.wall_ms);
  j["seed"] = r.seed;
  j["ranks"] = r.ranks;
  J checks = J::array();
  for (const auto& c : r.checks) {
    J cj = J::object();
    cj["key"] = c.key;
    cj["expected"] = sanitized<J>(c.expected);
    cj["actual"] = sanitized<J>(c.actual);
    cj["pass"] = c.pass;
    checks.push_back(std::move(cj));
  }
  j["checks"] = std::move(checks);
  j["fault_outcome"] = str_or_null<J>(r.fault_outcome);
  j["first_detection"] = r.first_detection ? detection_json<J>(*r.first_detection) : J(nullptr);
  J detections = J::array();
  for (const auto& d : r.detections) detections.push_back(detection_json<J>(d));
  j["detections"] = std::move(detections);
  J injections = J::array();
  for (const auto& in : r.injections) {
    J ij = J::object();
    ij["fault"] = in.fault;
    ij["kind"] = in.kind;
    ij["rank"] = in.rank;
    ij["step"] = in.step;
    ij["target"] = str_or_null<J>(in.target);
    ij["t_ms"] = number<J>(in.t_ms);
    ij["replay"] = in.replay;
    injections.push_back(std::move(ij));
  }
  j["injections"] = std::move(injections);
  j["steps_completed"] = r.steps_completed;
  j["dropped_events"] = r.dropped_events;
  j["final_loss"] = opt<J>(r.final_loss);
  j["run_dir"] = str_or_null<J>(r.run_dir);
  j["trial"] = r.trial;
  j["trial_count"] = r.trial_count;
  if (!r.stats.is_null()) j["stats"] = sanitized<J>(r.stats);
  if (!r.trials.empty()) {
    J trials = J::array();
    for (const auto& t : r.trials) trials.push_back(scenario_json<J>(t));
    j["trials"] = std::move(trials);
  }
  // The contract fields win: `extra` adds facts, it never rewrites a judged one.
  if (r.extra.is_object()) {
    for (const auto& [k, v] : r.extra.items()) {
      if (!j.contains(k)) j[k] = sanitized<J>(v);
    }
  }
  return j;
}

template <class J>
J suite_json(const SuiteReport& r) {
  J j = J::object();
  j["suite"] = r.suite;
  j["started"] = r.started;
  j["nanchaos_version"] = r.nanchaos_version;
  j["host"] = r.host;
  J scenarios = J::array();
  for (const auto& s : r.scenarios) scenarios.push_back(scenario_json<J>(s));
  j["scenarios"] = std::move(scenarios);
  j["trials"] = r.trials;
  if (!r.detector_stats.is_null()) j["detectors"] = sanitized<J>(r.detector_stats);
  J summary = J::object();
  summary["passed"] = r.passed();
  summary["failed"] = r.failed();
  summary["errors"] = r.errors();
  summary["skipped"] = r.skipped();
  j["summary"] = std::move(summary);
  j["interrupted"] = r.interrupted;
  if (r.interrupted) {
    j["interrupt_signal"] = r.interrupt_signal;
    J not_run = J::array();
    for (const auto& n : r.not_run) not_run.push_back(n);
    j["not_run"] = std::move(not_run);
  }
  return j;
}

// Opens `path` for writing, writes through `body`, and reports any failure with the path and the
// OS reason (a half-written report that looks complete is worse than none).
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

// --- text helpers ---

// Display width of UTF-8 text in code points (good enough for names, layers and "…").
size_t width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Byte offset of code point `cp` in `s`.
size_t byte_at(const std::string& s, size_t cp) {
  size_t i = 0;
  for (size_t seen = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (seen == cp) return i;
      ++seen;
    }
  }
  return s.size();
}

std::string one_line(std::string s) {
  for (auto& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return s;
}

enum class Align { kLeft, kRight };
enum class Cut { kTail, kHead };  // kHead keeps the end: "…fc1.weight" says more than "blocks.…"

// Fits `s` into exactly `w` columns, marking a cut with "…".
std::string cell(const std::string& raw, size_t w, Align align = Align::kLeft,
                 Cut cut = Cut::kTail) {
  std::string s = one_line(raw.empty() ? "-" : raw);
  size_t n = width(s);
  if (n > w) {
    if (cut == Cut::kTail) {
      s = s.substr(0, byte_at(s, w - 1)) + "…";
    } else {
      s = "…" + s.substr(byte_at(s, n - (w - 1)));
    }
    n = w;
  }
  std::string pad(w - n, ' ');
  return align == Align::kLeft ? s + pad : pad + s;
}

std::string ranks_text(const std::vector<int64_t>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ","));
}

std::string fmt_opt_int(const std::optional<int64_t>& v) {
  return v ? std::to_string(*v) : std::string();
}

std::string fmt_opt_ms(const std::optional<double>& v) {
  return v ? fmt::format("{:.1f}", *v) : std::string();
}

std::string verdict_label(const ScenarioResult& r) {
  if (is_pass(r)) return "PASS";
  if (is_fail(r)) return "FAIL";
  if (is_skipped(r)) return "SKIP";
  return "ERROR";
}

std::string plural(int n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string summary_text(const SuiteReport& r) {
  std::string text =
      fmt::format("{}: {} passed, {} failed, {}, {} skipped",
                  plural(static_cast<int>(r.scenarios.size()), "scenario", "scenarios"), r.passed(),
                  r.failed(), plural(r.errors(), "error", "errors"), r.skipped());
  if (r.interrupted) {
    text += fmt::format("; INTERRUPTED by {}: {} not run", r.interrupt_signal, r.not_run.size());
    if (!r.not_run.empty()) text += fmt::format(" ({})", fmt::join(r.not_run, ", "));
  }
  return text;
}

// Compact rendering of a check value for humans ("-" when the run gave none).
std::string value_text(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  return sanitized<nlohmann::json>(v).dump();
}

std::vector<const Check*> failed_checks(const ScenarioResult& r) {
  std::vector<const Check*> out;
  for (const auto& c : r.checks) {
    if (!c.pass) out.push_back(&c);
  }
  return out;
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      case '\n':
        out += "&#10;";
        break;
      case '\r':
        out += "&#13;";
        break;
      case '\t':
        out += "&#9;";
        break;
      default:
        if (c < 0x20) {
          out += "\xEF\xBF\xBD";
        } else {
          out += ch;
        }
    }
  }
  return out;
}

namespace {

// Element text: keeps newlines readable (only attributes need them as character references).
std::string xml_text(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\n') {
      out += '\n';
    } else {
      out += xml_escape(std::string(1, ch));
    }
  }
  return out;
}

std::string md_cell(const std::string& raw) {
  std::string s = one_line(raw.empty() ? "-" : raw);
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

// --- console column widths (header and rows must agree) ---
constexpr size_t kVerdictW = 7, kScenarioW = 32, kOutcomeW = 9, kDetectorW = 15, kRankW = 5,
                 kLayerW = 26, kCauseW = 18, kLatStepsW = 10, kLatMsW = 8, kWallW = 7;
constexpr size_t kReasonW = 80;
const char* const kSep = "  ";

}  // namespace

int SuiteReport::passed() const {
  int n = 0;
  for (const auto& s : scenarios) n += is_pass(s);
  return n;
}
int SuiteReport::failed() const {
  int n = 0;
  for (const auto& s : scenarios) n += is_fail(s);
  return n;
}
int SuiteReport::errors() const {
  int n = 0;
  for (const auto& s : scenarios) n += is_error(s);
  return n;
}
int SuiteReport::skipped() const {
  int n = 0;
  for (const auto& s : scenarios) n += is_skipped(s);
  return n;
}

nlohmann::json to_json(const Detection& d) { return detection_json<nlohmann::json>(d); }
nlohmann::json to_json(const ScenarioResult& r) { return scenario_json<nlohmann::json>(r); }
nlohmann::json to_json(const SuiteReport& r) { return suite_json<nlohmann::json>(r); }

void write_report_json(const SuiteReport& r, const std::string& path) {
  const std::string text = suite_json<ojson>(r).dump(2) + "\n";
  write_file(path, [&](std::ofstream& out) { out << text; });
}

void write_junit(const SuiteReport& r, const std::string& path) {
  double total_ms = 0;
  for (const auto& s : r.scenarios) total_ms += std::isfinite(s.wall_ms) ? s.wall_ms : 0;
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += fmt::format(
      "<testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
      "time=\"{:.3f}\" timestamp=\"{}\" hostname=\"{}\">\n",
      xml_escape(r.suite), r.scenarios.size() + r.not_run.size(), r.failed(), r.errors(),
      r.skipped() + int(r.not_run.size()), total_ms / 1000.0, xml_escape(r.started),
      xml_escape(r.host));
  if (r.interrupted) {
    x += fmt::format(
        "  <properties>\n    <property name=\"interrupted\" value=\"{}\"/>\n  </properties>\n",
        xml_escape(r.interrupt_signal));
  }
  for (const auto& s : r.scenarios) {
    const double secs = std::isfinite(s.wall_ms) ? s.wall_ms / 1000.0 : 0.0;
    x += fmt::format("  <testcase classname=\"nanchaos.{}\" name=\"{}\"", xml_escape(r.suite),
                     xml_escape(s.name));
    if (!s.file.empty()) x += fmt::format(" file=\"{}\"", xml_escape(s.file));
    x += fmt::format(" time=\"{:.3f}\"", secs);
    if (is_pass(s)) {
      x += "/>\n";
      continue;
    }
    x += ">\n";
    if (is_fail(s)) {
      std::string body;
      for (const Check* c : failed_checks(s)) {
        body += fmt::format("{}: expected {}, actual {}\n", c->key, value_text(c->expected),
                            value_text(c->actual));
      }
      x += fmt::format("    <failure message=\"{}\" type=\"check\">{}</failure>\n",
                       xml_escape(s.reason), xml_text(body));
    } else if (is_skipped(s)) {
      x += fmt::format("    <skipped message=\"{}\"/>\n", xml_escape(s.reason));
    } else {
      x += fmt::format("    <error message=\"{}\" type=\"{}\"/>\n", xml_escape(s.reason),
                       xml_escape(s.verdict));
    }
    if (!s.run_dir.empty()) {
      x += fmt::format("    <system-out>run_dir: {}&#10;seed: {}</system-out>\n",
                       xml_text(s.run_dir), s.seed);
    }
    x += "  </testcase>\n";
  }
  // Never started because the run was interrupted: skipped, saying why.
  for (const auto& name : r.not_run) {
    x += fmt::format(
        "  <testcase classname=\"nanchaos.{}\" name=\"{}\" time=\"0.000\">\n    <skipped "
        "message=\"not run: the run was interrupted by {}\"/>\n  </testcase>\n",
        xml_escape(r.suite), xml_escape(name), xml_escape(r.interrupt_signal));
  }
  x += "</testsuite>\n";
  write_file(path, [&](std::ofstream& out) { out << x; });
}

void write_markdown(const SuiteReport& r, const std::string& path) {
  std::string m = fmt::format("# nanchaos report: {}\n\n", one_line(r.suite));
  m += fmt::format("Started {} on `{}`, nanchaos {}.\n\n", md_cell(r.started), md_cell(r.host),
                   md_cell(r.nanchaos_version));
  m += fmt::format("**{}**\n\n", summary_text(r));
  m += "| Verdict | Scenario | Outcome | First detector | Rank | Layer | Cause | Latency (steps) "
       "| Latency (ms) | Wall (s) |\n";
  m += "|---|---|---|---|---|---|---|--:|--:|--:|\n";
  for (const auto& s : r.scenarios) {
    const Detection* d = s.first_detection ? &*s.first_detection : nullptr;
    m += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1f} |\n", verdict_label(s),
                     md_cell(s.name), md_cell(s.outcome), md_cell(d ? d->detector : ""),
                     md_cell(d ? ranks_text(d->ranks) : ""), md_cell(d ? d->layer : ""),
                     md_cell(d ? d->cause : ""), md_cell(d ? fmt_opt_int(d->latency_steps) : ""),
                     md_cell(d ? fmt_opt_ms(d->latency_ms) : ""), s.wall_ms / 1000.0);
  }
  // Repeated trials (--trials N > 1): the percentiles of results/stats.h per scenario.
  if (r.trials > 1) {
    auto pct = [](const nlohmann::json& st, const char* key, const char* f) -> std::string {
      const auto it = st.find(key);
      if (it == st.end() || !it->is_object()) return "-";
      auto v = [&](const char* k) {
        const auto x = it->find(k);
        return x != it->end() && x->is_number() ? fmt::format(fmt::runtime(f), x->get<double>())
                                                : std::string("-");
      };
      return v("p50") + " / " + v("p95") + " / " + v("max");
    };
    m += fmt::format(
        "\n## Trials ({} per scenario; p50 / p95 / max, nearest rank)\n\n| Scenario | Passed | "
        "Latency (steps) | Latency (ms) | Decision (us) | Abort latency (ms) |\n"
        "|---|--:|--:|--:|--:|--:|\n",
        r.trials);
    for (const auto& s : r.scenarios) {
      if (!s.stats.is_object()) continue;
      m += fmt::format("| {} | {}/{} | {} | {} | {} | {} |\n", md_cell(s.name),
                       s.stats.value("passed", 0), s.stats.value("trials", 0),
                       pct(s.stats, "latency_steps", "{:.0f}"),
                       pct(s.stats, "latency_ms", "{:.2f}"), pct(s.stats, "decision_us", "{:.0f}"),
                       pct(s.stats, "abort_latency_ms", "{:.0f}"));
    }
  }
  // Peak memory per rank (extra.memory, written by the judge; VmHWM counts shared library
  // pages in every rank, so the total is an upper bound).
  bool mem_heading = false;
  for (const auto& s : r.scenarios) {
    const auto it = s.extra.find("memory");
    if (it == s.extra.end() || !it->is_object()) continue;
    if (!mem_heading) {
      m += "\n## Memory per rank (peak RSS, VmHWM)\n\n| Scenario | Ranks | Max (MiB) | Mean (MiB) "
           "| Total (MiB) |\n|---|--:|--:|--:|--:|\n";
      mem_heading = true;
    }
    m += fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.1f} |\n", md_cell(s.name),
                     it->value("ranks_measured", 0), it->value("per_rank_max_mib", 0.0),
                     it->value("per_rank_mean_mib", 0.0), it->value("total_mib", 0.0));
  }
  bool heading = false;
  for (const auto& s : r.scenarios) {
    if (is_pass(s)) continue;
    if (!heading) {
      m += "\n## Not passing\n";
      heading = true;
    }
    m += fmt::format("\n### {} ({})\n\n", one_line(s.name), s.verdict);
    if (!s.file.empty()) m += fmt::format("File: `{}`", s.file);
    if (!s.run_dir.empty())
      m += fmt::format("{}Run folder: `{}`", s.file.empty() ? "" : " · ", s.run_dir);
    if (!s.file.empty() || !s.run_dir.empty()) m += "\n\n";
    if (!s.reason.empty()) m += fmt::format("Reason: {}\n\n", one_line(s.reason));
    const auto failed = failed_checks(s);
    if (!failed.empty()) {
      m += "| Check | Expected | Actual |\n|---|---|---|\n";
      for (const Check* c : failed) {
        m += fmt::format("| {} | {} | {} |\n", md_cell(c->key), md_cell(value_text(c->expected)),
                         md_cell(value_text(c->actual)));
      }
    }
  }
  write_file(path, [&](std::ofstream& out) { out << m; });
}

std::string console_header() {
  std::string h;
  h += cell("VERDICT", kVerdictW) + kSep;
  h += cell("SCENARIO", kScenarioW) + kSep;
  h += cell("OUTCOME", kOutcomeW) + kSep;
  h += cell("DETECTOR", kDetectorW) + kSep;
  h += cell("RANK", kRankW) + kSep;
  h += cell("LAYER", kLayerW) + kSep;
  h += cell("CAUSE", kCauseW) + kSep;
  h += cell("LAT(steps)", kLatStepsW, Align::kRight) + kSep;
  h += cell("LAT(ms)", kLatMsW, Align::kRight) + kSep;
  h += cell("WALL(s)", kWallW, Align::kRight);
  return h + "\n";
}

std::string console_row(const ScenarioResult& r) {
  const Detection* d = r.first_detection ? &*r.first_detection : nullptr;
  std::string row;
  row += cell(verdict_label(r), kVerdictW) + kSep;
  row += cell(r.name, kScenarioW) + kSep;
  row += cell(r.outcome, kOutcomeW) + kSep;
  // No detection but a harness post-mortem (dead or absent ranks): show that blame instead.
  Detection pm;
  const auto pm_it = r.extra.find("postmortem");
  if (!d && pm_it != r.extra.end() && pm_it->is_object()) {
    pm.detector = "post-mortem";
    pm.ranks = pm_it->value("ranks", std::vector<int64_t>{});
    pm.cause = pm_it->value("cause", "");
    d = &pm;
  }
  row += cell(d ? d->detector : "", kDetectorW) + kSep;
  row += cell(d ? ranks_text(d->ranks) : "", kRankW) + kSep;
  row += cell(d ? d->layer : "", kLayerW, Align::kLeft, Cut::kHead) + kSep;
  row += cell(d ? d->cause : "", kCauseW) + kSep;
  row += cell(d ? fmt_opt_int(d->latency_steps) : "", kLatStepsW, Align::kRight) + kSep;
  row += cell(d ? fmt_opt_ms(d->latency_ms) : "", kLatMsW, Align::kRight) + kSep;
  row += cell(fmt::format("{:.1f}", r.wall_ms / 1000.0), kWallW, Align::kRight);
  // A non-passing row says why at its end, so the CI log alone tells what to look at.
  if (!is_pass(r) && !r.reason.empty()) {
    std::string reason = one_line(r.reason);
    if (width(reason) > kReasonW) reason = reason.substr(0, byte_at(reason, kReasonW - 1)) + "…";
    row += kSep + reason;
  }
  return row + "\n";
}

std::string console_footer(const SuiteReport& r) { return "--- " + summary_text(r) + "\n"; }

}  // namespace nanchaos::results
