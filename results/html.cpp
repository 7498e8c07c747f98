// report.html writer: the page around the charts (html_charts.cpp draws those), its summary
// table from the shared column table (columns.h). See html.h for what the page shows.
//
// Why gnuplot and not hand-drawn SVG: axes, ticks, legends and log scales are a plotting tool's
// job; we only decide what to draw. Every chart is one small script with its data inline
// (datablocks), kept next to the page, so a person can re-render or tweak one by hand.
#include "results/html.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/common/child_process.h"
#include "results/columns.h"

namespace fs = std::filesystem;

namespace nanchaos::results {
namespace {

using json = nlohmann::json;

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

std::string verdict_class(Verdict v) { return to_string(v); }

// The summary: one row per scenario, coloured by its verdict, the scenario's cell a link to its
// section further down.
std::string summary_table(const SuiteReport& r) {
  std::string t = "<table id=\"summary\"><tr>";
  for (const Column& c : report_columns()) {
    if (!c.html.empty()) t += fmt::format("<th>{}</th>", c.html);
  }
  t += "</tr>\n";
  for (const auto& s : r.scenarios) {
    const Row w(s, Format::kHtml);
    t += fmt::format("<tr class=\"{}\">", verdict_class(s.verdict));
    for (const Column& c : report_columns()) {
      if (c.html.empty()) continue;
      const std::string text = c.text(w);
      const std::string shown = html_escape(text.empty() ? "-" : text);
      t += c.align == Align::kRight ? "<td class=\"n\">" : "<td>";
      t +=
          c.html_link ? fmt::format("<a href=\"#s-{}\">{}</a>", html_escape(s.name), shown) : shown;
      t += "</td>";
    }
    t += "</tr>\n";
  }
  return t;
}

// What report.html adds to the pages' shared style (html_page_head).
const char* kReportStyle = R"(
.pass{background:#dff0d8}.fail{background:#f2dede}.error{background:#f5c6a5}.skipped{background:#eee}
section.scenario{border-top:1px solid #bbb;margin-top:1.5em;padding-top:.5em}
.charts{display:flex;flex-wrap:wrap;gap:12px}
)";

}  // namespace

std::string html_escape(const std::string& s) { return xml_escape(s); }

std::string html_page_head(const std::string& title, const std::string& extra_css) {
  static const char* const kStyle = R"(
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:13px;margin-bottom:1em}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
th{background:#eee}
.note{background:#fff3cd;border:1px solid #e0c060;padding:6px 10px;margin:1em 0}
.chart svg{max-width:100%;height:auto}
.legend{font-size:12px;color:#555}
)";
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>{0}</title>\n<style>{1}{2}</style></head><body>\n<h1>{0}</h1>\n",
      html_escape(title), kStyle, extra_css);
}

SvgRenderer::SvgRenderer(std::string gnuplot, std::string work_dir)
    : gnuplot_(std::move(gnuplot)), work_(std::move(work_dir)) {
  std::error_code ec;
  fs::create_directories(work_, ec);
}

std::string SvgRenderer::svg_path(const std::string& stem) const {
  return work_ + "/" + stem + ".svg";
}

std::string SvgRenderer::render(const std::string& stem, const std::string& script) {
  if (missing_) return "";
  const std::string gp = work_ + "/" + stem + ".gp";
  const std::string svg = svg_path(stem);
  if (!write_text(gp, script)) {
    if (first_error_.empty()) first_error_ = "cannot write " + gp;
    return "";
  }
  std::error_code rm;
  fs::remove(svg, rm);
  const std::string err = run_gnuplot(gnuplot_, gp, work_ + "/" + stem + ".log", missing_);
  if (!err.empty()) {
    if (first_error_.empty()) first_error_ = err;
    return "";
  }
  return svg_element(read_text(svg));
}

std::string SvgRenderer::note() const {
  if (missing_) {
    return fmt::format("{}: charts and timelines omitted (install gnuplot-nox)", first_error_);
  }
  if (!first_error_.empty()) return "some charts are missing: " + first_error_;
  return "";
}

std::string file_stem(std::string s) {
  for (auto& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  return s;
}

namespace {

// A relaunched job: the launches chart, and the restarts' split as a table (also the fallback
// without gnuplot).
template <typename Render, typename ScriptPath>
std::string launches_html(const ScenarioResult& s, Render& render, ScriptPath& script_path) {
  const std::vector<Restart> none;
  const auto& restarts = s.judged->restarts ? *s.judged->restarts : none;
  const std::string stem = file_stem("launches-" + s.name);
  std::string h;
  const std::string svg = render(stem, launches_script(*s.judged->launches, restarts,
                                                       s.name + ": launches", script_path(stem)));
  if (!svg.empty()) h += "<div class=\"chart\">" + svg + "</div>\n";
  if (restarts.empty()) return h;
  auto cell = [](const std::optional<double>& ms) {
    return ms ? fmt::format("{:.1f}", *ms) : std::string("-");
  };
  h += "<table><tr><th>Restart after launch</th><th>Cause</th><th>Resume ms</th><th>Detect</th>"
       "<th>Teardown</th><th>Relaunch</th><th>Load</th><th>First step</th>"
       "<th title=\"the part of Load (or First step) the next launch spent importing torch\">"
       "of which import</th><th>Steps lost</th></tr>";
  for (const Restart& x : restarts) {
    h += fmt::format(
        "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
        x.after_launch, html_escape(x.cause), cell(x.resume_ms), cell(x.detect_ms),
        cell(x.teardown_ms), cell(x.relaunch_ms), cell(x.load_ms), cell(x.first_step_ms),
        cell(x.import_ms), x.steps_lost ? std::to_string(*x.steps_lost) : "-");
  }
  return h + "</table>\n";
}

// The job's per-rank step times (JobFacts::step_times; results/markdown.cpp has the same table):
// the phase split chart and the score-per-step chart (JobFacts::step_scores, absent from a
// report written before it existed) side by side, then the table (also the fallback without
// gnuplot).
template <typename Render, typename ScriptPath>
std::string step_times_html(const ScenarioResult& s, Render& render, ScriptPath& script_path) {
  if (!s.judged || s.judged->step_times.empty()) return "";
  std::string charts;
  const std::string split = file_stem("steps-" + s.name);
  const std::string svg =
      render(split, step_split_script(s.judged->step_times, s.name + ": own time per step by rank",
                                      script_path(split)));
  if (!svg.empty()) charts += "<div class=\"chart\">" + svg + "</div>\n";
  if (s.judged->step_scores) {
    const std::string scores = file_stem("scores-" + s.name);
    const std::string svg2 = render(
        scores, step_score_script(*s.judged->step_scores, s.name + ": straggler score per step",
                                  script_path(scores)));
    if (!svg2.empty()) charts += "<div class=\"chart\">" + svg2 + "</div>\n";
  }
  std::string h =
      charts.empty() ? "" : "<div class=\"charts step-charts\">\n" + charts + "</div>\n";
  h += "<table class=\"step-times\"><tr><th>Rank</th><th>Steps</th><th>Data ms</th>"
       "<th>Compute ms</th><th>Backward ms</th><th>Comm ms</th><th>Own total ms</th>"
       "<th>Waiting ms</th><th>Run delay ms</th><th>Score p50</th><th>Score max</th>"
       "<th>Slow steps</th></tr>";
  for (const RankStepTime& t : s.judged->step_times) {
    h += fmt::format(
        "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.2f}</td>"
        "<td class=\"n\">{:.2f}</td><td class=\"n\">{:.2f}</td><td class=\"n\">{:.2f}</td>"
        "<td class=\"n\">{:.2f}</td><td class=\"n\">{:.2f}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{:.2f}</td><td class=\"n\">{:.2f}</td><td class=\"n\">{}</td></tr>",
        t.rank, t.steps, t.own_p50_us[0] / 1e3, t.own_p50_us[1] / 1e3, t.own_p50_us[2] / 1e3,
        t.own_p50_us[3] / 1e3, t.own_total_p50_us / 1e3, t.wait_p50_us / 1e3,
        t.run_delay_p50_us ? fmt::format("{:.2f}", *t.run_delay_p50_us / 1e3) : "-", t.score_p50,
        t.score_max, t.slow_steps);
  }
  return h +
         "</table>\n<p class=\"legend\">Step time per rank: own time per phase (median over the "
         "steps every rank logged; collective waits and run-queue delay taken out); score = own "
         "total over the ranks' median at the step (the straggler detector's statistic); slow "
         "steps: score &gt; 1.5. Charts: each rank's own time per phase stacked, its waiting in "
         "collectives apart under it; each rank's score step by step against the 1.5 threshold "
         "(dashed), so a slow rank's onset is where its line crosses it.</p>\n";
}

}  // namespace

std::string write_html(const SuiteReport& r, const std::string& path, const HtmlOptions& o) {
  std::vector<std::string> notes;
  std::string work = o.work_dir;
  if (work.empty()) work = (fs::path(path).parent_path() / "html").string();
  SvgRenderer charts(o.gnuplot, work);
  auto render = [&](const std::string& stem, const std::string& script) {
    return charts.render(stem, script);
  };
  auto script_path = [&](const std::string& stem) { return charts.svg_path(stem); };

  std::string h = html_page_head("nanchaos report: " + r.suite, kReportStyle);
  h += fmt::format(
      "<p>Started {} on <code>{}</code>, nanchaos {}, {} trial(s) per scenario. <b>{} scenarios: "
      "{} passed, {} failed, {} errors, {} skipped</b></p>\n",
      html_escape(r.started), html_escape(r.host), html_escape(r.nanchaos_version), r.trials,
      r.scenarios.size(), r.passed(), r.failed(), r.errors(), r.skipped());
  const std::string note_marker = "<!--notes-->";
  h += note_marker;

  // --- summary table ---
  h += "<h2>Summary</h2>\n" + summary_table(r);
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
        html_escape(s.name), html_escape(s.name), verdict_class(s.verdict),
        html_escape(to_string(s.verdict)));
    const std::string trial_text =
        s.trial_count > 0 ? fmt::format("trial {} of {}", s.trial, s.trial_count) : "not run";
    h += fmt::format("<p>File <code>{}</code>, seed {}, {}, outcome {}", html_escape(s.file),
                     s.seed, trial_text,
                     html_escape(s.outcome == Outcome::kNone ? "-" : to_string(s.outcome)));
    if (!s.reason.empty()) h += fmt::format(". Reason: {}", html_escape(s.reason));
    h += ".</p>\n";
    if (const auto links = log_links(s, path); !links.empty()) {
      h += "<p class=\"logs\">Output:";
      for (size_t i = 0; i < links.size(); ++i) {
        h += fmt::format("{} <a href=\"{}\">{}</a>", i ? " ·" : "", html_escape(links[i].href),
                         html_escape(links[i].label));
      }
      h += "</p>\n";
    }
    if (s.run_dir.empty() || s.outcome == Outcome::kNone) {
      h += "<p>No job ran.</p></section>\n";
      continue;
    }
    if (s.judged && s.judged->launches) h += launches_html(s, render, script_path);
    h += step_times_html(s, render, script_path);
    const Timeline& t = s.timeline;
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

  if (const std::string n = charts.note(); !n.empty()) notes.push_back(n);
  std::string note_html;
  for (const auto& n : notes) note_html += "<p class=\"note\">" + html_escape(n) + "</p>\n";
  h.replace(h.find(note_marker), note_marker.size(), note_html);
  if (!write_text(path, h)) notes.push_back("cannot write " + path);
  std::string all;
  for (const auto& n : notes) all += (all.empty() ? "" : "; ") + n;
  return all;
}

}  // namespace nanchaos::results
