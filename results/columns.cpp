// The summary column table (columns.h). The console and report.md show one trial's figures (the
// representative one); report.html shows the percentiles over the trials (results/stats.h), so
// its latency and wall columns are columns of their own.
#include "results/columns.h"

#include <fmt/format.h>

namespace nanchaos::results {
namespace {

using nlohmann::json;

// stats[field][p] as text ("-" when absent).
std::string stat_text(const json& stats, const char* field, const char* p, const char* fmt_str) {
  if (!stats.is_object()) return "-";
  auto it = stats.find(field);
  if (it == stats.end() || !it->is_object()) return "-";
  auto v = it->find(p);
  if (v == it->end() || !v->is_number()) return "-";
  return fmt::format(fmt::runtime(fmt_str), v->get<double>());
}

std::string detector(const Row& w) { return w.detection ? w.detection->detector : ""; }
std::string ranks(const Row& w) { return w.detection ? ranks_text(w.detection->ranks) : ""; }
std::string layer(const Row& w) { return w.detection ? w.detection->layer : ""; }
std::string cause(const Row& w) { return w.detection ? w.detection->cause : ""; }
std::string latency_steps(const Row& w) {
  return w.detection ? fmt_opt_int(w.detection->latency_steps) : "";
}
std::string latency_ms(const Row& w) {
  return w.detection ? fmt_opt_ms(w.detection->latency_ms) : "";
}
std::string wall_s(const Row& w) { return fmt::format("{:.1f}", w.result.wall_ms / 1000.0); }

std::string trials_passed(const Row& w) {
  const json& st = w.result.stats;
  return st.is_object() ? fmt::format("{}/{}", st.value("passed", 0), st.value("trials", 0)) : "-";
}
std::string steps_p50_max(const Row& w) {
  return stat_text(w.result.stats, "latency_steps", "p50", "{:.0f}") + " / " +
         stat_text(w.result.stats, "latency_steps", "max", "{:.0f}");
}
std::string wall_s_p50(const Row& w) {
  const json& st = w.result.stats;
  if (!st.is_object() || !st.value("wall_ms", json()).is_object()) return "-";
  return fmt::format("{:.1f}", st["wall_ms"].value("p50", 0.0) / 1000.0);
}

}  // namespace

Row::Row(const ScenarioResult& r, Format f) : result(r) {
  if (r.first_detection) {
    detection = &*r.first_detection;
    return;
  }
  if (f == Format::kConsole && r.judged && r.judged->postmortem.blame) {
    const Blame& blame = *r.judged->postmortem.blame;
    postmortem_.detector = "post-mortem";
    postmortem_.ranks = blame.ranks;
    postmortem_.cause = blame.cause;
    detection = &postmortem_;
  }
}

std::string_view Column::header(Format f) const {
  switch (f) {
    case Format::kConsole:
      return console;
    case Format::kMarkdown:
      return markdown;
    case Format::kHtml:
      return html;
  }
  return {};
}

const std::vector<Column>& report_columns() {
  constexpr auto kL = Align::kLeft, kR = Align::kRight;
  // console, markdown, html header; cell; alignment; console width and cut; html link.
  static const std::vector<Column> columns = {
      {"VERDICT", "Verdict", "", [](const Row& w) { return verdict_label(w.result); }, kL, 7},
      // report.html shows the verdict as written in report.json, its row coloured by it.
      {"", "", "Verdict", [](const Row& w) { return std::string(to_string(w.result.verdict)); },
       kL},
      {"SCENARIO", "Scenario", "Scenario", [](const Row& w) { return w.result.name; }, kL, 32,
       Cut::kTail, true},
      {"OUTCOME", "Outcome", "Outcome",
       [](const Row& w) { return std::string(to_string(w.result.outcome)); }, kL, 9},
      {"DETECTOR", "First detector", "First detector", detector, kL, 15},
      {"RANK", "Rank", "Rank", ranks, kL, 5},
      {"LAYER", "Layer", "Layer", layer, kL, 26, Cut::kHead},
      {"CAUSE", "Cause", "Cause", cause, kL, 18},
      {"LAT(steps)", "Latency (steps)", "", latency_steps, kR, 10},
      {"LAT(ms)", "Latency (ms)", "", latency_ms, kR, 8},
      {"WALL(s)", "Wall (s)", "", wall_s, kR, 7},
      // Over the trials (results/stats.h; "-" where a scenario has no stats).
      {"", "", "Passed", trials_passed, kR},
      {"", "", "Lat. steps p50/max", steps_p50_max, kR},
      {"", "", "Lat. ms p50",
       [](const Row& w) { return stat_text(w.result.stats, "latency_ms", "p50", "{:.2f}"); }, kR},
      {"", "", "Lat. ms p95",
       [](const Row& w) { return stat_text(w.result.stats, "latency_ms", "p95", "{:.2f}"); }, kR},
      {"", "", "Decision us p50",
       [](const Row& w) { return stat_text(w.result.stats, "decision_us", "p50", "{:.0f}"); }, kR},
      {"", "", "Abort ms p50",
       [](const Row& w) { return stat_text(w.result.stats, "abort_latency_ms", "p50", "{:.0f}"); },
       kR},
      {"", "", "Wall s p50", wall_s_p50, kR},
  };
  return columns;
}

}  // namespace nanchaos::results
