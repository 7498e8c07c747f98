// report.html writer. See html.h for what the page shows.
//
// Why gnuplot and not hand-drawn SVG: axes, ticks, legends and log scales are a plotting tool's
// job; we only decide what to draw. Every chart is one small script with its data inline
// (datablocks), kept next to the page, so a person can re-render or tweak one by hand.
#include "results/html.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "harness/common/child_process.h"
#include "harness/evidence/events.h"

namespace fs = std::filesystem;

namespace nanchaos::results {
namespace {

using json = nlohmann::json;

// Gnuplot string literal content: no double quotes or newlines inside "...".
std::string gp_str(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"') {
      out += '\'';
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else if (c == '\\') {
      out += '/';
    } else {
      out += c;
    }
  }
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  return bool(out);
}

// Runs `gnuplot script` with its output in `log`; waits at most 60 s (then kills it).
// Returns "" on success, else why not; `missing` is set when the program could not be started.
std::string run_gnuplot(const std::string& gnuplot, const std::string& script,
                        const std::string& log, bool& missing) {
  harness::SpawnOptions o;
  o.argv = {gnuplot, script};
  o.stdout_path = log;  // stderr too; stdin is /dev/null
  harness::ChildProcess child;
  try {
    child = harness::ChildProcess::spawn(o);
  } catch (const harness::SpawnError& e) {
    missing = e.error_number() == ENOENT || e.error_number() == EACCES;
    return e.what();
  }
  const auto status = child.wait_for(std::chrono::seconds(60));
  if (!status) {
    child.kill_group(std::chrono::milliseconds(0));
    return fmt::format("{} {} took longer than 60 s", gnuplot, script);
  }
  if (status->code() == 127) {
    missing = true;
    return fmt::format("{} not found", gnuplot);
  }
  if (status->code() != 0) {
    return fmt::format("{} {} failed (see {})", gnuplot, script, log);
  }
  return "";
}

// The <svg>...</svg> element of a gnuplot SVG file (drops the XML prolog and DOCTYPE).
std::string svg_element(const std::string& text) {
  const auto b = text.find("<svg");
  const auto e = text.rfind("</svg>");
  if (b == std::string::npos || e == std::string::npos || e < b) return "";
  return text.substr(b, e + 6 - b);
}

std::string num_text(const json& j, const char* key, const char* fmt_str = "{:.1f}") {
  if (!j.is_object()) return "-";
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return "-";
  return fmt::format(fmt::runtime(fmt_str), it->get<double>());
}

// stats[field][p] as text ("-" when absent).
std::string stat_text(const json& stats, const char* field, const char* p,
                      const char* fmt_str = "{:.1f}") {
  if (!stats.is_object()) return "-";
  auto it = stats.find(field);
  if (it == stats.end() || !it->is_object()) return "-";
  return num_text(*it, p, fmt_str);
}

std::string verdict_class(const std::string& v) {
  if (v == "pass" || v == "fail" || v == "skipped") return v;
  return "error";
}

const char* kStyle = R"(
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:13px;margin-bottom:1em}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
th{background:#eee}
.pass{background:#dff0d8}.fail{background:#f2dede}.error{background:#f5c6a5}.skipped{background:#eee}
.note{background:#fff3cd;border:1px solid #e0c060;padding:6px 10px;margin:1em 0}
section.scenario{border-top:1px solid #bbb;margin-top:1.5em;padding-top:.5em}
.charts{display:flex;flex-wrap:wrap;gap:12px}
.chart svg{max-width:100%;height:auto}
.legend{font-size:12px;color:#555}
)";

}  // namespace

std::string html_escape(const std::string& s) { return xml_escape(s); }

Timeline load_timeline(const std::string& run_dir, int ranks, std::optional<int64_t> job_start_us,
                       std::optional<double> job_end_ms) {
  Timeline t;
  t.ranks = std::max(ranks, 0);
  std::vector<std::vector<json>> logs;
  int64_t t0 = job_start_us.value_or(std::numeric_limits<int64_t>::max());
  for (int r = 0; r < t.ranks; ++r) {
    logs.push_back(harness::read_events(fmt::format("{}/events/rank-{}.jsonl", run_dir, r)));
    if (!job_start_us) {
      for (const auto& e : logs.back()) t0 = std::min(t0, e.value("t_us", int64_t(0)));
    }
  }
  if (t0 == std::numeric_limits<int64_t>::max()) t0 = 0;
  auto ms = [&](const json& e) { return double(e.value("t_us", int64_t(0)) - t0) / 1000.0; };
  bool any = false;
  for (int r = 0; r < t.ranks; ++r) {
    std::map<int64_t, std::pair<double, std::string>> open;  // seq -> (enter ms, name)
    double last = 0;
    for (const auto& e : logs[size_t(r)]) {
      const std::string ev = e.value("ev", "");
      const double at = ms(e);
      last = std::max(last, at);
      t.begin_ms = any ? std::min(t.begin_ms, at) : at;
      any = true;
      if (ev == "coll_enter") {
        open[e.value("seq", int64_t(-1))] = {at, e.value("name", "")};
      } else if (ev == "coll_leave") {
        auto it = open.find(e.value("seq", int64_t(-1)));
        if (it != open.end()) {
          t.bars.push_back({r, it->second.first, at, it->second.second, false});
          open.erase(it);
        }
      } else if (ev == "inject") {
        std::string label = fmt::format("inject {} s{}", e.value("kind", ""), e.value("step", 0));
        if (e.value("replay", false)) label += " (replay)";
        t.marks.push_back({r, at, "inject", label});
      } else if (ev == "detect") {
        t.marks.push_back({r, at, "detect", "detect " + e.value("detector", "")});
      } else if (ev == "decision") {
        t.marks.push_back({r, at, "decision", "decision " + e.value("action", "")});
      } else if (ev == "abort") {
        t.marks.push_back({r, at, "abort", "abort"});
      } else if (ev == "exit") {
        t.marks.push_back({r, at, "exit", fmt::format("exit {}", e.value("code", 0))});
      }
    }
    // Entered and never left: the rank was still waiting at its last sign of life.
    for (const auto& [seq, v] : open) t.bars.push_back({r, v.first, last, v.second, true});
    t.end_ms = std::max(t.end_ms, last);
  }
  // A rank whose last sign of life IS entering the collective (killed while waiting) waited
  // until the job ended: a zero-length bar would hide the very thing to see.
  const double waited_until = job_end_ms ? std::max(*job_end_ms, t.end_ms) : t.end_ms;
  for (auto& b : t.bars) {
    if (b.open && b.t1_ms <= b.t0_ms) {
      b.t1_ms = waited_until;
      t.end_ms = waited_until;
    }
  }
  return t;
}

std::string timeline_script(const Timeline& t, const std::string& title,
                            const std::string& svg_path) {
  const int lanes = std::max(t.ranks, 1);
  std::string s;
  s += fmt::format(
      "set terminal svg size 1000,{} fixed noenhanced font 'sans,10' background '#ffffff'\n",
      140 + 50 * lanes);
  s += fmt::format("set output \"{}\"\n", gp_str(svg_path));
  s += fmt::format("set title \"{}\"\n", gp_str(title));
  s += "set xlabel \"ms since the job started\"\n";
  s += fmt::format("set yrange [{}:-0.7]\n", lanes - 0.3);
  s += "set ytics (";
  for (int r = 0; r < lanes; ++r) s += fmt::format("{}\"rank {}\" {}", r ? ", " : "", r, r);
  s += ")\nset grid xtics\nset key outside bottom center horizontal\n";
  // From the first rank event: the launch and LibTorch set-up before it carry no evidence.
  const double span = std::max(t.end_ms - t.begin_ms, 1.0);
  s += fmt::format("set xrange [{}:{}]\n", std::max(0.0, t.begin_ms - 0.02 * span),
                   t.end_ms + 0.08 * span);
  s += "set style fill solid 0.8 noborder\n";
  std::vector<std::string> plots;
  auto block = [&](const std::string& name, const std::string& rows) {
    s += fmt::format("${} << EOD\n{}EOD\n", name, rows);
  };
  std::string closed, open;
  for (const auto& b : t.bars) {
    (b.open ? open : closed) += fmt::format("{} {} {}\n", b.t0_ms, b.t1_ms, b.rank);
  }
  if (!closed.empty()) {
    block("coll", closed);
    plots.push_back(
        "$coll using (($1+$2)/2):3:1:2:($3-0.25):($3+0.25) with boxxyerror lc rgb '#4a7fb5' "
        "title 'collective'");
  }
  if (!open.empty()) {
    block("open", open);
    plots.push_back(
        "$open using (($1+$2)/2):3:1:2:($3-0.25):($3+0.25) with boxxyerror lc rgb '#e8590c' "
        "title 'collective never left'");
  }
  // Marks of one moment (inject, detect, decision at the faulty step; abort and exit at the end)
  // get their labels in different corners around the point, so they do not print on each other.
  struct Kind {
    const char* kind;
    const char* style;
    double dy;          // label offset in lane units (negative: above the lane)
    const char* align;  // left: label starts at the mark; right: it ends there
  };
  const Kind kinds[] = {{"inject", "pt 9 ps 1.6 lc rgb '#c92a2a'", -0.36, "right"},
                        {"detect", "pt 7 ps 1.3 lc rgb '#1971c2'", 0.42, "left"},
                        {"decision", "pt 13 ps 1.3 lc rgb '#2b8a3e'", -0.36, "left"},
                        {"abort", "pt 2 ps 2 lw 2 lc rgb '#000000'", -0.36, "right"},
                        {"exit", "pt 5 ps 1 lc rgb '#868e96'", 0.42, "right"}};
  for (const auto& k : kinds) {
    // Label each (rank, label) once: a detector firing every step would bury the lane. Marks of
    // one kind and rank within 3% of the time axis share one label ("detect loss, grad").
    struct Row {
      double t;
      int rank;
      std::string label;
    };
    std::vector<Row> kept;
    std::map<int, size_t> last_labelled;  // rank -> index in kept
    std::set<std::pair<int, std::string>> labelled;
    for (const auto& m : t.marks) {
      if (m.kind != k.kind) continue;
      kept.push_back({m.t_ms, m.rank, ""});
      if (!labelled.insert({m.rank, m.label}).second) continue;
      auto it = last_labelled.find(m.rank);
      if (it != last_labelled.end() && m.t_ms - kept[it->second].t <= 0.03 * span) {
        std::string& l = kept[it->second].label;
        const std::string prefix = std::string(k.kind) + " ";
        l += ", " + (m.label.rfind(prefix, 0) == 0 ? m.label.substr(prefix.size()) : m.label);
        continue;
      }
      kept.back().label = m.label;
      last_labelled[m.rank] = kept.size() - 1;
    }
    if (kept.empty()) continue;
    std::string rows;
    for (const auto& row : kept) {
      rows += fmt::format("{} {} \"{}\"\n", row.t, row.rank, gp_str(row.label));
    }
    block(k.kind, rows);
    plots.push_back(
        fmt::format("${} using 1:2 with points {} title '{}'", k.kind, k.style, k.kind));
    plots.push_back(
        fmt::format("${} using 1:($2+({})):3 with labels {} offset {},0 font 'sans,8' notitle",
                    k.kind, k.dy, k.align, std::string(k.align) == "left" ? "0.6" : "-0.6"));
  }
  if (plots.empty()) {
    s += "set label 1 \"no events\" at graph 0.5,0.5 center\n";
    plots.push_back("NaN notitle");
  }
  s += "plot ";
  for (size_t i = 0; i < plots.size(); ++i) s += (i ? ", \\\n     " : "") + plots[i];
  s += "\n";
  return s;
}

std::vector<std::pair<std::string, std::vector<LatencyPoint>>> latency_points(
    const SuiteReport& r) {
  std::vector<std::pair<std::string, std::vector<LatencyPoint>>> out;
  for (const auto& s : r.scenarios) {
    if (!s.stats.is_object() || !s.stats.contains("by_detector")) continue;
    for (const auto& [det, dj] : s.stats["by_detector"].items()) {
      const json& lat = dj.value("latency_ms", json());
      if (!lat.is_object()) continue;
      auto it = std::find_if(out.begin(), out.end(),
                             [&name = det](const auto& p) { return p.first == name; });
      if (it == out.end()) {
        out.push_back({det, {}});
        it = out.end() - 1;
      }
      it->second.push_back({s.name, lat.value("p50", 0.0), lat.value("p95", 0.0),
                            lat.value("max", 0.0), lat.value("n", size_t(0))});
    }
  }
  return out;
}

std::string latency_script(const std::string& detector, const std::vector<LatencyPoint>& points,
                           const std::string& svg_path) {
  double lo = std::numeric_limits<double>::max(), hi = 0;
  std::string rows;
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    lo = std::min(lo, p.p50_ms);
    hi = std::max(hi, p.max_ms);
    rows +=
        fmt::format("{} {} {} {} \"{}\"\n", i, p.p50_ms, p.p95_ms, p.max_ms, gp_str(p.scenario));
  }
  const bool log_y = !points.empty() && lo > 0 && hi / lo > 100;
  std::string s;
  s += fmt::format(
      "set terminal svg size {},360 fixed noenhanced font 'sans,10' background '#ffffff'\n",
      std::max<size_t>(420, 160 + 90 * points.size()));
  s += fmt::format("set output \"{}\"\n", gp_str(svg_path));
  s += fmt::format("set title \"detector {}: latency injection -> first detection\"\n",
                   gp_str(detector));
  s += "set ylabel \"ms\"\nset grid ytics\nset key outside top center horizontal\n";
  s += "set xtics rotate by -25\nset bmargin 7\n";
  s += fmt::format("set xrange [-0.6:{}]\n", double(points.size()) - 0.4);
  if (log_y) {
    s += "set logscale y\n";
  } else {
    s += "set yrange [0:*]\n";
  }
  s += fmt::format("$lat << EOD\n{}EOD\n", rows);
  s += "set style fill solid 0.7 noborder\nset boxwidth 0.5\n";
  s += "plot $lat using 1:2:xtic(5) with ";
  s += log_y ? "points pt 7 ps 1.4 lc rgb '#1971c2' title 'p50'"
             : "boxes lc rgb '#74c0fc' title 'p50'";
  s += ", \\\n     $lat using 1:2:2:3 with yerrorbars pt -1 lc rgb '#1971c2' title 'p50..p95'";
  s += ", \\\n     $lat using 1:4 with points pt 2 ps 1.4 lc rgb '#c92a2a' title 'max'\n";
  return s;
}

std::string write_html(const SuiteReport& r, const std::string& path, const HtmlOptions& o) {
  std::vector<std::string> notes;
  std::string work = o.work_dir;
  if (work.empty()) work = (fs::path(path).parent_path() / "html").string();
  std::error_code ec;
  fs::create_directories(work, ec);
  bool gnuplot_missing = false;
  std::string first_plot_error;
  // Renders one chart; "" when it could not be drawn (the reason goes to the notes once).
  auto render = [&](const std::string& stem, const std::string& script) -> std::string {
    if (gnuplot_missing) return "";
    const std::string gp = work + "/" + stem + ".gp";
    const std::string svg = work + "/" + stem + ".svg";
    if (!write_text(gp, script)) {
      if (first_plot_error.empty()) first_plot_error = "cannot write " + gp;
      return "";
    }
    std::error_code rm;
    fs::remove(svg, rm);
    const std::string err = run_gnuplot(o.gnuplot, gp, work + "/" + stem + ".log", gnuplot_missing);
    if (!err.empty()) {
      if (first_plot_error.empty()) first_plot_error = err;
      return "";
    }
    return svg_element(read_text(svg));
  };
  auto script_path = [&](const std::string& stem) { return work + "/" + stem + ".svg"; };
  auto file_stem = [](std::string s) {
    for (auto& c : s) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
    }
    return s;
  };

  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  h += fmt::format("<title>nanchaos report: {}</title>\n<style>{}</style></head><body>\n",
                   html_escape(r.suite), kStyle);
  h += fmt::format("<h1>nanchaos report: {}</h1>\n", html_escape(r.suite));
  h += fmt::format(
      "<p>Started {} on <code>{}</code>, nanchaos {}, {} trial(s) per scenario. <b>{} scenarios: "
      "{} passed, {} failed, {} errors, {} skipped</b></p>\n",
      html_escape(r.started), html_escape(r.host), html_escape(r.nanchaos_version), r.trials,
      r.scenarios.size(), r.passed(), r.failed(), r.errors(), r.skipped());
  const std::string note_marker = "<!--notes-->";
  h += note_marker;

  // --- summary table ---
  h += "<h2>Summary</h2>\n<table id=\"summary\"><tr><th>Verdict</th><th>Scenario</th>"
       "<th>Outcome</th><th>First detector</th><th>Rank</th><th>Layer</th><th>Cause</th>"
       "<th>Passed</th><th>Lat. steps p50/max</th><th>Lat. ms p50</th><th>Lat. ms p95</th>"
       "<th>Decision us p50</th><th>Abort ms p50</th><th>Wall s p50</th></tr>\n";
  for (const auto& s : r.scenarios) {
    const Detection* d = s.first_detection ? &*s.first_detection : nullptr;
    std::string rank;
    if (d) {
      for (size_t i = 0; i < d->ranks.size(); ++i)
        rank += (i ? "," : "") + std::to_string(d->ranks[i]);
    }
    const json& st = s.stats;
    const std::string passed =
        st.is_object() ? fmt::format("{}/{}", st.value("passed", 0), st.value("trials", 0)) : "-";
    const std::string steps = stat_text(st, "latency_steps", "p50", "{:.0f}") + " / " +
                              stat_text(st, "latency_steps", "max", "{:.0f}");
    std::string wall = "-";
    if (st.is_object() && st.value("wall_ms", json()).is_object()) {
      wall = fmt::format("{:.1f}", st["wall_ms"].value("p50", 0.0) / 1000.0);
    }
    h += fmt::format(
        "<tr class=\"{}\"><td>{}</td><td><a href=\"#s-{}\">{}</a></td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
        verdict_class(s.verdict), html_escape(s.verdict), html_escape(s.name), html_escape(s.name),
        html_escape(s.outcome.empty() ? "-" : s.outcome), html_escape(d ? d->detector : "-"),
        rank.empty() ? "-" : rank, html_escape(d && !d->layer.empty() ? d->layer : "-"),
        html_escape(d && !d->cause.empty() ? d->cause : "-"), passed, steps,
        stat_text(st, "latency_ms", "p50", "{:.2f}"), stat_text(st, "latency_ms", "p95", "{:.2f}"),
        stat_text(st, "decision_us", "p50", "{:.0f}"),
        stat_text(st, "abort_latency_ms", "p50", "{:.0f}"), wall);
  }
  h += "</table>\n<p class=\"legend\">Percentiles are nearest-rank over the trials. Latency: "
       "first injection to first detection. Decision: first local detection to every rank "
       "agreeing. Abort: first injection to the job's end, for aborted or crashed jobs.</p>\n";

  // --- per-detector latency charts ---
  h += "<h2>Detection latency per detector</h2>\n";
  const auto per_detector = latency_points(r);
  if (per_detector.empty()) h += "<p>No scenario measured a detection latency.</p>\n";
  h += "<div class=\"charts\">\n";
  for (const auto& [det, points] : per_detector) {
    const std::string stem = file_stem("latency-" + det);
    const std::string svg = render(stem, latency_script(det, points, script_path(stem)));
    h += fmt::format("<div class=\"chart\" id=\"latency-{}\">\n", html_escape(det));
    if (!svg.empty()) {
      h += svg + "\n";
    } else {
      h += "<table><tr><th>Scenario</th><th>p50 ms</th><th>p95 ms</th><th>max ms</th></tr>";
      for (const auto& p : points) {
        h += fmt::format(
            "<tr><td>{}</td><td class=\"n\">{:.2f}</td><td class=\"n\">{:.2f}</td>"
            "<td class=\"n\">{:.2f}</td></tr>",
            html_escape(p.scenario), p.p50_ms, p.p95_ms, p.max_ms);
      }
      h += "</table>\n";
    }
    h += "</div>\n";
  }
  h += "</div>\n";

  // --- per-scenario timelines ---
  h += "<h2>Scenarios</h2>\n<p class=\"legend\">Timeline of the representative trial: ranks as "
       "lanes, collectives as bars (orange: entered and never left), injection (red triangle), "
       "local detection (blue dot), consensus decision (green diamond), abort (black cross), "
       "exit (grey square).</p>\n";
  for (const auto& s : r.scenarios) {
    h += fmt::format(
        "<section class=\"scenario\" id=\"s-{}\"><h3>{} <span class=\"{}\">{}</span>"
        "</h3>\n",
        html_escape(s.name), html_escape(s.name), verdict_class(s.verdict), html_escape(s.verdict));
    const std::string trial_text =
        s.trial_count > 0 ? fmt::format("trial {} of {}", s.trial, s.trial_count) : "not run";
    h += fmt::format("<p>File <code>{}</code>, seed {}, {}, outcome {}", html_escape(s.file),
                     s.seed, trial_text, html_escape(s.outcome.empty() ? "-" : s.outcome));
    if (!s.reason.empty()) h += fmt::format(". Reason: {}", html_escape(s.reason));
    h += ".</p>\n";
    if (s.run_dir.empty() || s.outcome.empty()) {
      h += "<p>No job ran.</p></section>\n";
      continue;
    }
    std::optional<int64_t> start;
    auto it = s.extra.find("job_start_us");
    if (it != s.extra.end() && it->is_number_integer()) start = it->get<int64_t>();
    // wall_ms is launch -> launcher reaped, i.e. the job's end on the timeline's clock.
    const Timeline t = load_timeline(s.run_dir, int(s.ranks), start,
                                     start ? std::optional<double>(s.wall_ms) : std::nullopt);
    const std::string stem = file_stem("timeline-" + s.name);
    const std::string svg = render(
        stem,
        timeline_script(t, s.name + " (trial " + std::to_string(s.trial) + ")", script_path(stem)));
    if (!svg.empty()) {
      h += "<div class=\"chart\">" + svg + "</div>\n";
    } else {
      h += fmt::format("<p>{} collectives, {} marks; no chart (see the note above).</p>\n",
                       t.bars.size(), t.marks.size());
    }
    h += "</section>\n";
  }
  h += "</body></html>\n";

  if (gnuplot_missing) {
    notes.push_back(
        fmt::format("{}: charts and timelines omitted (install gnuplot-nox)", first_plot_error));
  } else if (!first_plot_error.empty()) {
    notes.push_back("some charts are missing: " + first_plot_error);
  }
  std::string note_html;
  for (const auto& n : notes) note_html += "<p class=\"note\">" + html_escape(n) + "</p>\n";
  h.replace(h.find(note_marker), note_marker.size(), note_html);
  if (!write_text(path, h)) notes.push_back("cannot write " + path);
  std::string all;
  for (const auto& n : notes) all += (all.empty() ? "" : "; ") + n;
  return all;
}

}  // namespace nanchaos::results
