// report.html: a self-contained page (no external URL) for people comparing runs by eye.
//
// Contents: the summary table (verdict, first detector, attribution, latency p50/p95 over the
// trials, pass rate), one latency chart per detector across the scenarios it caught first
// (p50 bar, p95 and max marks, ms), and per scenario a timeline of every rank of its
// representative trial (ScenarioResult::timeline: the judge's, from the evidence it read; the
// page opens no event log): ranks as lanes (y), ms since the job started (x), collectives and
// point-to-point sends/receives as bars (a bar never left is drawn to the rank's last event in a
// warning colour), and injection, detection, decision, abort and exit as labelled marks; and per
// scenario whose job logged phase times, its per-rank step-time table and two charts (the phase
// split per rank, the straggler score per step: JobFacts::step_times and step_scores).
//
// Charts are SVG rendered by gnuplot (svg terminal) from data and script files written to a
// work folder next to the page, then inlined. Without gnuplot the page still gets every table
// and a visible note instead of the charts. Nothing here includes torch.
#pragma once

#include <string>
#include <vector>

#include "results/report.h"

namespace nanchaos::results {

/// Gnuplot script (data inline as datablocks) drawing `t` (ScenarioResult::timeline, which the
/// judge builds) into the SVG `svg_path`: collectives and point-to-point sends/receives as bars
/// in two colours, those never left in a third.
std::string timeline_script(const Timeline& t, const std::string& title,
                            const std::string& svg_path);

/// Gnuplot script (data inline) of a relaunched job ([job] restarts; report.json `launches` and
/// `restarts`): every launch as a bar on one time axis (ms since the first launch started),
/// coloured by its outcome and labelled with the step it resumed from, and under it one lane
/// per restart with its resume latency split (detect, teardown, relaunch, load, first_step) as
/// consecutive segments from the failing event.
std::string launches_script(const std::vector<Launch>& launches,
                            const std::vector<Restart>& restarts, const std::string& title,
                            const std::string& svg_path);

/// Gnuplot script (data inline) of a job's per-rank step-time split (report.json `step_times`,
/// which the judge computes): one lane per rank (in `rows` order, labelled "rank N"), its median
/// own time per phase (data, compute, backward, comm) as consecutive segments of one bar from 0,
/// in ms, and under it, apart, a thinner bar of its median time waiting in collectives; each own
/// bar is labelled with the rank's score p50 and max. An empty `rows` draws "no step times".
std::string step_split_script(const std::vector<RankStepTime>& rows, const std::string& title,
                              const std::string& svg_path);

/// Gnuplot script (data inline) of the straggler score per step (report.json `step_scores`):
/// one line per rank over the steps (x: step; a downsampled series says its stride in the
/// x label), and the kSlowScore threshold as a dashed line, so a slow rank's onset shows where
/// its line crosses it. Up to 16 ranks every line is titled "rank N"; with more, only the
/// ranks whose score ever exceeds the threshold are titled and the others are drawn grey under
/// one "other ranks" entry.
std::string step_score_script(const StepScores& scores, const std::string& title,
                              const std::string& svg_path);

/// One row of a per-detector latency chart: a scenario the detector caught first.
struct LatencyPoint {
  std::string scenario;
  double p50_ms = 0, p95_ms = 0, max_ms = 0;
  size_t n = 0;  ///< trials it is summarised over
};
/// Per detector, the scenarios it caught first and their latency_ms summary, from each scenario's
/// `stats.by_detector` (detectors and scenarios in report order).
std::vector<std::pair<std::string, std::vector<LatencyPoint>>> latency_points(const SuiteReport& r);
/// Gnuplot script (data inline) of one detector's chart: p50 with a bar up to p95, and max, per
/// scenario; a log y axis when the values span more than two decades.
std::string latency_script(const std::string& detector, const std::vector<LatencyPoint>& points,
                           const std::string& svg_path);

/// The start of a self-contained page (report.html, campaign.html) up to and including its
/// <h1>: doctype, <title> and <h1> from `title` (escaped), the pages' shared style plus
/// `extra_css`.
std::string html_page_head(const std::string& title, const std::string& extra_css);

/// Gnuplot string literal content, for "...": double quotes become ', backslashes /, newlines
/// spaces (a name from the job, e.g. an external stack's detector, cannot break the script).
std::string gp_str(const std::string& s);

/// HTML text escaping: xml_escape (report.h), so the page and junit.xml escape alike.
std::string html_escape(const std::string& s);

/// Renders gnuplot scripts to SVG files in a work folder and returns each as an inline <svg>
/// element (report.html, campaign.html). After gnuplot failed to start once it stops trying.
/// Single-threaded.
class SvgRenderer {
 public:
  SvgRenderer(std::string gnuplot, std::string work_dir);
  /// Where the SVG of `stem` goes (the script's `set output`).
  std::string svg_path(const std::string& stem) const;
  /// Writes `script` to <work>/<stem>.gp, runs gnuplot, returns the <svg> element; "" when it
  /// could not be drawn (the first reason is kept for note()).
  std::string render(const std::string& stem, const std::string& script);
  /// "" when every chart was drawn, else the page's note ("gnuplot not found: charts and
  /// timelines omitted (install gnuplot-nox)", "some charts are missing: ...").
  std::string note() const;

 private:
  std::string gnuplot_, work_;
  bool missing_ = false;
  std::string first_error_;
};

/// `s` as a file name: characters other than [A-Za-z0-9._-] become '_'.
std::string file_stem(std::string s);

struct HtmlOptions {
  std::string gnuplot = "gnuplot";  ///< program to run (looked up in PATH)
  std::string work_dir;             ///< data/scripts/SVGs; "" = <page folder>/html
};

/// Writes the page to `path`. Never throws: returns "" when everything went in, else a short
/// note of what is missing ("gnuplot not found: ...", "cannot write ..."), which the page shows
/// too when it could be written.
std::string write_html(const SuiteReport& r, const std::string& path, const HtmlOptions& o = {});

}  // namespace nanchaos::results
