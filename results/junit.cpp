// junit.xml (report.h write_junit): one testcase per scenario, failed checks in the failure body,
// and the scenarios an interruption left unrun as skipped, so CI test views show the suite.
#include <fmt/format.h>

#include <cmath>

#include "results/text.h"

namespace nanchaos::results {

namespace {

// A scenario's wall time over all its trials (ms): `--trials N` runs N jobs, and a CI view that
// sums testcase times must see them all, not the representative trial's.
double all_trials_ms(const ScenarioResult& s) {
  if (s.trials.empty()) return std::isfinite(s.wall_ms) ? s.wall_ms : 0.0;
  double ms = 0;
  for (const auto& t : s.trials) ms += std::isfinite(t.wall_ms) ? t.wall_ms : 0.0;
  return ms;
}

// "2/5 trials passed: " before a repeated scenario's failure or error message ("" for one
// trial): the verdict stands for N runs, and a flaky scenario must read as one.
std::string trials_prefix(const ScenarioResult& s) {
  if (!s.stats.is_object()) return "";
  const auto n = s.stats.value("trials", int64_t(1));
  if (n <= 1) return "";
  return fmt::format("{}/{} trials passed: ", s.stats.value("passed", int64_t(0)), n);
}

}  // namespace

void write_junit(const SuiteReport& r, const std::string& path) {
  double total_ms = 0;
  for (const auto& s : r.scenarios) total_ms += all_trials_ms(s);
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += fmt::format(
      "<testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
      "time=\"{:.3f}\" timestamp=\"{}\" hostname=\"{}\">\n",
      xml_escape(r.suite), r.scenarios.size() + r.not_run.size() + r.pending.size(), r.failed(),
      r.errors() + int(r.pending.size()), r.skipped() + int(r.not_run.size()), total_ms / 1000.0,
      xml_escape(r.started), xml_escape(r.host));
  if (r.interrupted) {
    x += fmt::format(
        "  <properties>\n    <property name=\"interrupted\" value=\"{}\"/>\n  </properties>\n",
        xml_escape(r.interrupt_signal));
  } else if (!r.complete) {
    x += "  <properties>\n    <property name=\"complete\" value=\"false\"/>\n  </properties>\n";
  }
  for (const auto& s : r.scenarios) {
    const double secs = all_trials_ms(s) / 1000.0;
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
                       xml_escape(trials_prefix(s) + s.reason), xml_text(body));
    } else if (is_skipped(s)) {
      x += fmt::format("    <skipped message=\"{}\"/>\n", xml_escape(s.reason));
    } else {
      x += fmt::format("    <error message=\"{}\" type=\"{}\"/>\n",
                       xml_escape(trials_prefix(s) + s.reason), xml_escape(to_string(s.verdict)));
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
  // Not judged yet when this file was written: an error, so that a file a dead controller left
  // never reads as a pass.
  for (const auto& name : r.pending) {
    x += fmt::format(
        "  <testcase classname=\"nanchaos.{}\" name=\"{}\" time=\"0.000\">\n    <error "
        "message=\"not judged: the run had not finished when this file was written (the "
        "controller still runs, or it died: nanchaos run --resume RUN)\" "
        "type=\"incomplete\"/>\n  </testcase>\n",
        xml_escape(r.suite), xml_escape(name));
  }
  x += "</testsuite>\n";
  write_file(path, [&](std::ofstream& out) { out << x; });
}

}  // namespace nanchaos::results
