// Report comparison (see compare.h for the rules and why milliseconds are gated so gently).
#include "results/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "results/stats.h"

namespace nanchaos::results {
namespace {

using json = nlohmann::json;

std::optional<double> num(const json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// A count from a report (trials, passed): int(1e300) would be undefined behaviour, so a value
// outside [0, 1e9] (or NaN) gives `def` instead.
int count_of(std::optional<double> v, int def) { return v && *v >= 0 && *v <= 1e9 ? int(*v) : def; }

// stats[field][key], e.g. stats.latency_ms.p50.
std::optional<double> stat(const json& stats, const char* field, const char* key) {
  if (!stats.is_object()) return std::nullopt;
  auto it = stats.find(field);
  if (it == stats.end()) return std::nullopt;
  return num(*it, key);
}

std::string str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string opt_text(const std::optional<double>& v, const char* f = "{:.2f}") {
  return v ? fmt::format(fmt::runtime(f), *v) : "-";
}

std::string attribution_text(const json& a) {
  if (!a.is_object()) return "-";
  auto part = [&](const char* k) {
    const json& v = a.value(k, json());
    if (v.is_null()) return std::string("-");
    return v.is_string() ? v.get<std::string>() : v.dump();
  };
  return fmt::format("rank {} / {} / {}", part("rank"), part("layer"), part("cause"));
}

std::string verdict_cell(const std::optional<ScenarioSide>& s) {
  if (!s) return "absent";
  if (s->trials > 1) return fmt::format("{} {}/{}", to_string(s->verdict), s->passed, s->trials);
  return to_string(s->verdict);
}

// "scenario "x": unknown verdict "passed" (known: pass, fail, error, skipped)".
std::string unknown_verdict(const std::string& scenario, const std::string& verdict) {
  std::vector<std::string> known;
  for (Verdict v : {Verdict::kPass, Verdict::kFail, Verdict::kError, Verdict::kSkipped}) {
    known.push_back(to_string(v));
  }
  return fmt::format("scenario \"{}\": unknown verdict \"{}\" (known: {})", scenario, verdict,
                     fmt::join(known, ", "));
}

// scenario_side() of one scenario of the report `label`: an unknown verdict names both.
ScenarioSide side_of(const json& scenario, const std::string& label) {
  try {
    return scenario_side(scenario);
  } catch (const CompareInputError& e) {
    throw CompareInputError(fmt::format("{}: {}", label, e.what()));
  }
}

std::string arrow(const std::string& a, const std::string& b) { return a == b ? a : a + " → " + b; }

std::string detector_cell(const ScenarioDiff& d) {
  const std::string a = d.base ? (d.base->detector.empty() ? "-" : d.base->detector) : "absent";
  const std::string b = d.fresh ? (d.fresh->detector.empty() ? "-" : d.fresh->detector) : "absent";
  return arrow(a, b);
}

std::string attribution_cell(const ScenarioDiff& d) {
  if (!d.attribution_match) return "-";
  return *d.attribution_match ? "match" : "CHANGED";
}

std::string steps_cell(const ScenarioDiff& d) {
  const std::string a = d.base ? opt_text(d.base->steps_max, "{:.0f}") : "absent";
  const std::string b = d.fresh ? opt_text(d.fresh->steps_max, "{:.0f}") : "absent";
  return arrow(a, b);
}

std::string ms_cell(const ScenarioDiff& d, bool p95) {
  auto v = [&](const std::optional<ScenarioSide>& s) {
    return s ? opt_text(p95 ? s->ms_p95 : s->ms_p50) : "absent";
  };
  return fmt::format("{} → {}", v(d.base), v(d.fresh));
}

std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

// Every restart's resume_ms of one trial (a scenario object of report.json).
void add_resume_ms(const json& trial, std::vector<double>& out) {
  const json& restarts = trial.is_object() ? trial.value("restarts", json()) : json();
  if (!restarts.is_array()) return;
  for (const auto& x : restarts) {
    if (auto ms = num(x, "resume_ms")) out.push_back(*ms);
  }
}

// The restart latency gate (compare.h): p50 or p95 of resume_ms; "" when it holds.
std::string restart_regression(const std::vector<double>& base, const std::vector<double>& fresh,
                               const CompareOptions& o) {
  const auto b = summarize(base), n = summarize(fresh);
  if (!b || !n || int(b->n) < o.min_trials || int(n->n) < o.min_trials) return "";
  std::vector<std::string> worse;
  const std::tuple<const char*, double, double> pcts[] = {{"p50", b->p50, n->p50},
                                                          {"p95", b->p95, n->p95}};
  for (const auto& [name, bv, nv] : pcts) {
    if (bv > 0 && nv / bv > o.max_slowdown && nv - bv > o.min_delta_ms) {
      worse.push_back(fmt::format("{} {:.1f} → {:.1f} ms (x{:.2f} > x{:.2f})", name, bv, nv,
                                  nv / bv, o.max_slowdown));
    }
  }
  if (worse.empty()) return "";
  return fmt::format("resume_ms {} over {} → {} restarts", fmt::join(worse, ", "), b->n, n->n);
}

// The p50 slowdown rule of latency, decision and abort_latency (compare.h) on one metric:
// a finding's detail, or a note when it would be one but a side has too few trials ("" both
// when the metric held or is not measurable).
struct SlowdownVerdict {
  std::string finding, note;
};
SlowdownVerdict slowdown(const char* metric, const char* unit, double unit_per_ms,
                         const std::optional<double>& b, const std::optional<double>& n,
                         const ScenarioSide& bs, const ScenarioSide& ns, const CompareOptions& o) {
  if (!b || !n || *b <= 0) return {};
  const double ratio = *n / *b;
  if (ratio <= o.max_slowdown || *n - *b <= o.min_delta_ms * unit_per_ms) return {};
  const std::string text = fmt::format("{} p50 {:.2f} → {:.2f} {} (x{:.2f} > x{:.2f})", metric, *b,
                                       *n, unit, ratio, o.max_slowdown);
  if (bs.trials >= o.min_trials && ns.trials >= o.min_trials) return {text, ""};
  return {"", fmt::format("{} not gated ({} < {} trials): {}", metric,
                          std::min(bs.trials, ns.trials), o.min_trials, text)};
}

std::string regression_line(const Regression& r) {
  return fmt::format("{}: {}: {}", r.scenario, r.kind, r.detail);
}

}  // namespace

json load_report(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw CompareInputError(fmt::format("{}: is a directory, not a report.json", path));
  }
  if (std::filesystem::exists(path, ec) && std::filesystem::is_empty(path, ec)) {
    throw CompareInputError(fmt::format("{}: empty file, not a report.json", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw CompareInputError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw CompareInputError(
        fmt::format("{}: not valid JSON (byte {}): {}", path, e.byte, e.what()));
  } catch (const json::exception& e) {
    // e.g. out_of_range.406 for a number like 1e400 (found by nanchaos_fuzz_report)
    throw CompareInputError(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  if (!j.is_object() || !j.contains("scenarios") || !j["scenarios"].is_array()) {
    throw CompareInputError(
        fmt::format("{}: not a nanchaos report.json: no \"scenarios\" array", path));
  }
  std::set<std::string> names;
  size_t i = 0;
  for (const auto& s : j["scenarios"]) {
    if (!s.is_object() || !s.contains("name") || !s["name"].is_string() || !s.contains("verdict") ||
        !s["verdict"].is_string()) {
      throw CompareInputError(
          fmt::format("{}: scenarios[{}] has no \"name\" and \"verdict\" strings", path, i));
    }
    if (!parse_verdict(s["verdict"].get<std::string>())) {
      throw CompareInputError(fmt::format(
          "{}: {}", path,
          unknown_verdict(s["name"].get<std::string>(), s["verdict"].get<std::string>())));
    }
    if (!names.insert(s["name"].get<std::string>()).second) {
      throw CompareInputError(
          fmt::format("{}: scenario \"{}\" appears twice", path, s["name"].get<std::string>()));
    }
    ++i;
  }
  return j;
}

ScenarioSide scenario_side(const json& s) {
  ScenarioSide side;
  const std::string verdict = str(s, "verdict");
  const auto v = parse_verdict(verdict);
  if (!v) {
    throw CompareInputError(unknown_verdict(str(s, "name"), verdict));
  }
  side.verdict = *v;
  side.reason = str(s, "reason");
  const json& fd = s.value("first_detection", json());
  if (fd.is_object()) {
    side.detector = str(fd, "detector");
    side.attribution = {{"rank", fd.value("rank", json())},
                        {"layer", fd.value("layer", json())},
                        {"cause", fd.value("cause", json())}};
  }
  const json& trials = s.value("trials", json());
  if (trials.is_array() && !trials.empty()) {
    for (const auto& t : trials) add_resume_ms(t, side.resume_ms);
  } else {
    add_resume_ms(s, side.resume_ms);
  }
  const json& st = s.value("stats", json());
  if (st.is_object()) {
    side.trials = count_of(num(st, "trials"), 1);
    side.passed = count_of(num(st, "passed"), side.verdict == Verdict::kPass);
    side.steps_max = stat(st, "latency_steps", "max");
    side.ms_p50 = stat(st, "latency_ms", "p50");
    side.ms_p95 = stat(st, "latency_ms", "p95");
    side.decision_us_p50 = stat(st, "decision_us", "p50");
    side.abort_ms_p50 = stat(st, "abort_latency_ms", "p50");
  } else {  // a report from before --trials: its top level is its one trial
    side.trials = 1;
    side.passed = side.verdict == Verdict::kPass;
    side.steps_max = num(fd, "latency_steps");
    side.ms_p50 = side.ms_p95 = num(fd, "latency_ms");
    side.decision_us_p50 = num(fd, "decision_us");
  }
  return side;
}

namespace {

// Whether report `doc`'s string array `key` (pending, not_run) holds `name`.
bool listed(const json& doc, const char* key, const std::string& name) {
  const auto it = doc.find(key);
  return it != doc.end() && it->is_array() &&
         std::find(it->begin(), it->end(), json(name)) != it->end();
}

}  // namespace

Comparison compare_reports(const json& base, const json& fresh, const CompareOptions& o,
                           const std::string& base_label, const std::string& fresh_label) {
  Comparison c;
  c.base_label = base_label;
  c.fresh_label = fresh_label;
  c.options = o;
  for (const auto& [doc, label] : {std::pair{&base, "BASE"}, std::pair{&fresh, "NEW"}}) {
    const auto it = doc->find("complete");
    if (it == doc->end() || !it->is_boolean() || it->get<bool>()) continue;
    const auto pending = doc->find("pending");
    const auto not_run = doc->find("not_run");
    const size_t left = (pending != doc->end() && pending->is_array() ? pending->size() : 0) +
                        (not_run != doc->end() && not_run->is_array() ? not_run->size() : 0);
    const auto interrupted = doc->find("interrupted");
    const bool stopped = interrupted != doc->end() && *interrupted == true;
    c.incomplete.push_back(
        fmt::format("{} is incomplete ({}: {} scenario(s) not judged)", label,
                    stopped ? "its run was interrupted" : "its run had not finished", left));
  }
  std::map<std::string, const json*> fresh_by_name;
  for (const auto& s : fresh["scenarios"]) fresh_by_name[s["name"].get<std::string>()] = &s;
  std::set<std::string> seen;
  std::vector<double> suite_base, suite_fresh;  // the shared scenarios' restarts, pooled
  auto flag = [&](ScenarioDiff& d, const std::string& kind, const std::string& detail) {
    d.kinds.push_back(kind);
    c.regressions.push_back({d.name, kind, detail});
  };
  for (const auto& bs : base["scenarios"]) {
    ScenarioDiff d;
    d.name = bs["name"].get<std::string>();
    seen.insert(d.name);
    d.base = side_of(bs, base_label);
    auto it = fresh_by_name.find(d.name);
    if (it == fresh_by_name.end()) {
      ++c.only_base;
      if (o.common_only) continue;
      // Still a regression (nothing was measured), but said as what it is: a scenario the
      // unfinished run had not judged yet, or one its interruption never started.
      const char* why = listed(fresh, "pending", d.name)   ? " (not judged yet: its run had "
                                                             "not finished)"
                        : listed(fresh, "not_run", d.name) ? " (not run: its run was interrupted)"
                                                           : "";
      flag(d, "missing", fmt::format("in {}, absent from {}{}", base_label, fresh_label, why));
      c.scenarios.push_back(std::move(d));
      continue;
    }
    ++c.shared;
    d.fresh = side_of(*it->second, fresh_label);
    const ScenarioSide& b = *d.base;
    const ScenarioSide& n = *d.fresh;
    // A scenario that passed and is now skipped stopped passing: a suite whose GPU runs quietly
    // turn into skips must not pass the gate. Skipped on both sides, or newly skipped after a
    // failure, is only a note.
    if (n.verdict == Verdict::kSkipped && b.verdict != Verdict::kSkipped &&
        b.verdict != Verdict::kPass) {
      d.notes.push_back("skipped in NEW");
    }
    if (b.verdict == Verdict::kPass && n.verdict != Verdict::kPass) {
      flag(d, "verdict",
           fmt::format("pass → {}{}", to_string(n.verdict),
                       n.reason.empty() ? "" : " (" + n.reason + ")"));
    }
    if (b.verdict != Verdict::kPass && n.verdict == Verdict::kPass) {
      d.notes.push_back("fixed: now passes");
    }
    const bool b_det = !b.attribution.is_null(), n_det = !n.attribution.is_null();
    if (b_det && n_det) {
      d.attribution_match = b.attribution == n.attribution;
      if (!*d.attribution_match) {
        flag(d, "attribution",
             fmt::format("{} → {}", attribution_text(b.attribution),
                         attribution_text(n.attribution)));
      }
      if (b.detector != n.detector) {
        d.notes.push_back(fmt::format("first detector {} → {}", b.detector, n.detector));
      }
      if (b.steps_max && n.steps_max && *n.steps_max > *b.steps_max) {
        flag(d, "detection",
             fmt::format("later: {:.0f} → {:.0f} steps after the injection (max over trials)",
                         *b.steps_max, *n.steps_max));
      }
    } else if (b_det && !n_det && n.verdict != Verdict::kSkipped) {
      flag(d, "detection",
           fmt::format("no longer detected (was {} after {} steps)", b.detector,
                       opt_text(b.steps_max, "{:.0f}")));
    } else if (!b_det && n_det) {
      d.notes.push_back("detected now (" + n.detector + ")");
    }
    if (b.ms_p50 && n.ms_p50 && *b.ms_p50 > 0) d.ratio = *n.ms_p50 / *b.ms_p50;
    const std::tuple<const char*, const char*, const char*, double, std::optional<double>,
                     std::optional<double>>
        metrics[] = {
            {"latency", "latency_ms", "ms", 1.0, b.ms_p50, n.ms_p50},
            {"decision", "decision_us", "us", 1000.0, b.decision_us_p50, n.decision_us_p50},
            {"abort_latency", "abort_latency_ms", "ms", 1.0, b.abort_ms_p50, n.abort_ms_p50}};
    for (const auto& [kind, metric, unit, per_ms, bv, nv] : metrics) {
      const SlowdownVerdict v = slowdown(metric, unit, per_ms, bv, nv, b, n, o);
      if (!v.finding.empty()) flag(d, kind, v.finding);
      if (!v.note.empty()) d.notes.push_back(v.note);
    }
    if (const std::string r = restart_regression(b.resume_ms, n.resume_ms, o); !r.empty()) {
      flag(d, "restart_latency", r);
    }
    suite_base.insert(suite_base.end(), b.resume_ms.begin(), b.resume_ms.end());
    suite_fresh.insert(suite_fresh.end(), n.resume_ms.begin(), n.resume_ms.end());
    c.scenarios.push_back(std::move(d));
  }
  if (const std::string r = restart_regression(suite_base, suite_fresh, o); !r.empty()) {
    c.regressions.push_back({"(suite)", "restart_latency", r});
  }
  for (const auto& ns : fresh["scenarios"]) {
    const std::string name = ns["name"].get<std::string>();
    if (seen.count(name)) continue;
    ++c.only_fresh;
    if (o.common_only) continue;
    ScenarioDiff d;
    d.name = name;
    d.fresh = side_of(ns, fresh_label);
    d.notes.push_back("only in NEW");
    if (d.fresh->verdict == Verdict::kFail || d.fresh->verdict == Verdict::kError) {
      flag(d, "new_failure",
           fmt::format("only in {}, and {}{}", fresh_label, to_string(d.fresh->verdict),
                       d.fresh->reason.empty() ? "" : " (" + d.fresh->reason + ")"));
    }
    c.scenarios.push_back(std::move(d));
  }
  return c;
}

int scenarios_with_findings(const Comparison& c) {
  std::set<std::string> names;
  for (const auto& r : c.regressions) names.insert(r.scenario);
  return int(names.size());
}

// "2 finding(s) in 1 scenario(s)".
std::string findings_text(const Comparison& c) {
  return fmt::format("{} finding(s) in {} scenario(s)", c.regressions.size(),
                     scenarios_with_findings(c));
}

std::string overlap_text(const Comparison& c) {
  std::string t = fmt::format("{} shared scenario(s)", c.shared);
  if (c.only_base > 0) {
    t += fmt::format("; {} only in BASE{}", c.only_base,
                     c.options.common_only ? " (not compared: --common)" : "");
  }
  if (c.only_fresh > 0) {
    t += fmt::format("; {} only in NEW{}", c.only_fresh,
                     c.options.common_only ? " (not compared: --common)" : "");
  }
  for (const auto& i : c.incomplete) t += "; " + i;
  return t;
}

std::string format_markdown(const Comparison& c) {
  std::string m = "### nanchaos compare\n\n";
  m += fmt::format(
      "`{}` → `{}`; latency gate: p50 ratio > x{:.2f} and > {:.1f} ms slower, when "
      "both sides have ≥ {} trials.\n\n",
      md_escape(c.base_label), md_escape(c.fresh_label), c.options.max_slowdown,
      c.options.min_delta_ms, c.options.min_trials);
  m += overlap_text(c) + ".\n\n";
  if (c.regressions.empty()) {
    m += fmt::format("**No regression** in {} scenarios.\n\n", c.scenarios.size());
  } else {
    m += fmt::format("**{}** fail the gate:\n\n", findings_text(c));
    for (const auto& r : c.regressions) {
      m += fmt::format("- `{}`: **{}**: {}\n", md_escape(r.scenario), r.kind, md_escape(r.detail));
    }
    m += "\n";
  }
  m += "| | Scenario | Verdict | First detector | Attribution | Latency (steps, max) | "
       "p50 ms | p95 ms | Ratio | Notes |\n|---|---|---|---|---|--:|--:|--:|--:|---|\n";
  for (const auto& d : c.scenarios) {
    std::string notes;
    for (const auto& k : d.kinds) notes += (notes.empty() ? "" : ", ") + ("**" + k + "**");
    for (const auto& n : d.notes) notes += (notes.empty() ? "" : ", ") + n;
    m += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                     d.kinds.empty() ? "✅" : "❌", md_escape(d.name),
                     md_escape(arrow(verdict_cell(d.base), verdict_cell(d.fresh))),
                     md_escape(detector_cell(d)), attribution_cell(d), steps_cell(d),
                     ms_cell(d, false), ms_cell(d, true), opt_text(d.ratio), md_escape(notes));
  }
  return m;
}

std::string format_text(const Comparison& c) {
  std::string t = fmt::format("nanchaos compare: {} -> {}\n", c.base_label, c.fresh_label);
  t += overlap_text(c) + "\n";
  t += fmt::format("{:<4} {:<34} {:<24} {:<26} {:<11} {:>9} {:>22} {:>7}\n", "", "SCENARIO",
                   "VERDICT", "FIRST DETECTOR", "ATTRIBUTION", "STEPS", "P50 ms", "RATIO");
  for (const auto& d : c.scenarios) {
    t += fmt::format("{:<4} {:<34} {:<24} {:<26} {:<11} {:>9} {:>22} {:>7}",
                     d.kinds.empty() ? "ok" : "REGR", d.name,
                     arrow(verdict_cell(d.base), verdict_cell(d.fresh)), detector_cell(d),
                     attribution_cell(d), steps_cell(d), ms_cell(d, false), opt_text(d.ratio));
    for (const auto& n : d.notes) t += "  (" + n + ")";
    t += "\n";
  }
  for (const auto& r : c.regressions) t += "REGRESSION " + regression_line(r) + "\n";
  t += fmt::format("--- {} scenarios compared: {}\n", c.scenarios.size(),
                   c.regressions.empty() ? "no regression" : findings_text(c) + " fail the gate");
  return t;
}

json format_json(const Comparison& c) {
  json j = json::object();
  j["base"] = c.base_label;
  j["new"] = c.fresh_label;
  j["options"] = {{"max_slowdown", c.options.max_slowdown},
                  {"min_trials", c.options.min_trials},
                  {"min_delta_ms", c.options.min_delta_ms}};
  auto side = [](const std::optional<ScenarioSide>& s) -> json {
    if (!s) return nullptr;
    auto o = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
    return {{"verdict", to_string(s->verdict)},
            {"trials", s->trials},
            {"passed", s->passed},
            {"first_detector", s->detector.empty() ? json(nullptr) : json(s->detector)},
            {"attribution", s->attribution},
            {"latency_steps_max", o(s->steps_max)},
            {"latency_ms_p50", o(s->ms_p50)},
            {"latency_ms_p95", o(s->ms_p95)},
            {"decision_us_p50", o(s->decision_us_p50)},
            {"abort_latency_ms_p50", o(s->abort_ms_p50)},
            {"resume_ms", to_json(summarize(s->resume_ms))}};
  };
  json scenarios = json::array();
  for (const auto& d : c.scenarios) {
    scenarios.push_back(
        {{"name", d.name},
         {"base", side(d.base)},
         {"new", side(d.fresh)},
         {"attribution_match", d.attribution_match ? json(*d.attribution_match) : json(nullptr)},
         {"ratio", d.ratio ? json(*d.ratio) : json(nullptr)},
         {"regressions", d.kinds},
         {"notes", d.notes}});
  }
  j["scenarios"] = std::move(scenarios);
  json regs = json::array();
  for (const auto& r : c.regressions) {
    regs.push_back({{"scenario", r.scenario}, {"kind", r.kind}, {"detail", r.detail}});
  }
  j["regressions"] = std::move(regs);
  j["regressed"] = !c.regressions.empty();
  j["scenarios_with_findings"] = scenarios_with_findings(c);
  j["shared"] = c.shared;
  j["only_base"] = c.only_base;
  j["only_new"] = c.only_fresh;
  j["common_only"] = c.options.common_only;
  j["incomplete"] = c.incomplete;
  return j;
}

int run_compare(const std::string& base_path, const std::string& fresh_path,
                const CompareOptions& o, const std::string& format, std::ostream& out,
                std::ostream& err) {
  if (format != "md" && format != "text" && format != "json") {
    err << fmt::format("nanchaos compare: error: --format {}: use md, text or json\n", format);
    return 2;
  }
  Comparison c;
  try {
    const json base = load_report(base_path);
    const json fresh = load_report(fresh_path);
    c = compare_reports(base, fresh, o, base_path, fresh_path);
    if (c.shared == 0) {
      err << fmt::format(
          "nanchaos compare: error: {} and {} share no scenario ({} in {}, {} in {}): nothing to "
          "compare\n",
          base_path, fresh_path, base["scenarios"].size(), base_path, fresh["scenarios"].size(),
          fresh_path);
      return 2;
    }
  } catch (const CompareInputError& e) {
    err << "nanchaos compare: error: " << e.what() << "\n";
    return 2;
  }
  if (format == "md") {
    out << format_markdown(c);
  } else if (format == "json") {
    out << format_json(c).dump(2) << "\n";
  } else {
    out << format_text(c);
  }
  return c.regressions.empty() ? 0 : 1;
}

}  // namespace nanchaos::results
