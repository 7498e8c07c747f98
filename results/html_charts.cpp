// report.html's charts (html.h): the data, from the judge's timelines (ScenarioResult::timeline)
// and the scenarios' stats (latency per detector), and the gnuplot scripts that draw them.
// Each script carries its data inline (datablocks), so a person can re-render one by hand.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "results/html.h"

namespace nanchaos::results {

// Gnuplot string literal content (html.h).
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

namespace {

using json = nlohmann::json;

// A chart of horizontal lanes (y: lane 0 at the top) over time: the terminal, output, title and
// axes, up to the ytics.
std::string lanes_head(int height, const std::string& svg_path, const std::string& title,
                       const std::string& xlabel, int lanes) {
  std::string s = fmt::format(
      "set terminal svg size 1000,{} fixed noenhanced font 'sans,10' background '#ffffff'\n",
      height);
  s += fmt::format("set output \"{}\"\n", gp_str(svg_path));
  s += fmt::format("set title \"{}\"\n", gp_str(title));
  s += fmt::format("set xlabel \"{}\"\n", xlabel);
  s += fmt::format("set yrange [{}:-0.7]\n", lanes - 0.3);
  return s;
}

// "plot a, \\\n b, ...\n" ("NaN notitle" when there is nothing to plot).
std::string plot_line(std::vector<std::string> plots) {
  if (plots.empty()) plots.push_back("NaN notitle");
  std::string s = "plot ";
  for (size_t i = 0; i < plots.size(); ++i) s += (i ? ", \\\n     " : "") + plots[i];
  return s + "\n";
}

}  // namespace

std::string timeline_script(const Timeline& t, const std::string& title,
                            const std::string& svg_path) {
  const int lanes = std::max(t.ranks, 1);
  std::string s = lanes_head(140 + 50 * lanes, svg_path, title, "ms since the job started", lanes);
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
  // Collectives, point-to-point sends/receives (pipeline stages), and either never left.
  struct Bars {
    const char* block;
    const char* colour;
    const char* title;
    std::string rows;
  };
  Bars bars[] = {{"coll", "#4a7fb5", "collective", ""},
                 {"p2p", "#74b816", "send/recv", ""},
                 {"open", "#e8590c", "never left", ""}};
  for (const auto& b : t.bars) {
    bars[b.open ? 2 : b.p2p ? 1 : 0].rows += fmt::format("{} {} {}\n", b.t0_ms, b.t1_ms, b.rank);
  }
  for (const auto& b : bars) {
    if (b.rows.empty()) continue;
    block(b.block, b.rows);
    plots.push_back(fmt::format(
        "${} using (($1+$2)/2):3:1:2:($3-0.25):($3+0.25) with boxxyerror lc rgb '{}' title '{}'",
        b.block, b.colour, b.title));
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
  if (plots.empty()) s += "set label 1 \"no events\" at graph 0.5,0.5 center\n";
  return s + plot_line(plots);
}

std::string launches_script(const std::vector<Launch>& launches,
                            const std::vector<Restart>& restarts, const std::string& title,
                            const std::string& svg_path) {
  const int lanes = 1 + int(restarts.size());
  std::string s =
      lanes_head(150 + 40 * lanes, svg_path, title, "ms since the first launch started", lanes);
  s += "set ytics (\"launches\" 0";
  for (size_t k = 0; k < restarts.size(); ++k) {
    s += fmt::format(", \"restart {}\" {}", restarts[k].after_launch + 1, k + 1);
  }
  s += ")\nset grid xtics\nset key outside bottom center horizontal\n";
  s += "set style fill solid 0.8 noborder\n";
  std::vector<std::string> plots;
  auto bars = [&](const std::string& name, const std::string& colour, const std::string& rows) {
    if (rows.empty()) return;
    s += fmt::format("${} << EOD\n{}EOD\n", name, rows);
    plots.push_back(fmt::format(
        "${} using (($1+$2)/2):3:1:2:($3-0.3):($3+0.3) with boxxyerror lc rgb '{}' title '{}'",
        name, colour, name));
  };
  // Each launch as a bar coloured by how it ended, labelled with the step it resumed from.
  const std::pair<const char*, const char*> outcomes[] = {{"completed", "#2b8a3e"},
                                                          {"crashed", "#c92a2a"},
                                                          {"aborted", "#495057"},
                                                          {"hung", "#e8590c"}};
  std::string labels;
  for (const auto& [outcome, colour] : outcomes) {
    std::string rows;
    for (const Launch& l : launches) {
      if (l.outcome != outcome) continue;
      rows += fmt::format("{} {} 0\n", l.start_ms, l.end_ms);
    }
    bars(outcome, colour, rows);
  }
  for (const Launch& l : launches) {
    labels += fmt::format(
        "{} 0 \"{}{}\"\n", l.start_ms, l.launch,
        l.resumed_from_step ? fmt::format(": from step {}", *l.resumed_from_step) : std::string());
  }
  // Each restart's phases as consecutive segments from the failing event (a stacked bar on the
  // time axis): a null phase takes no room.
  const char* phases[] = {"detect", "teardown", "relaunch", "load", "first_step"};
  const char* colours[] = {"#f03e3e", "#fab005", "#4a7fb5", "#7950f2", "#20c997"};
  std::vector<std::string> rows(5);
  for (size_t k = 0; k < restarts.size(); ++k) {
    const Restart& x = restarts[k];
    const std::optional<double> ms[] = {x.detect_ms, x.teardown_ms, x.relaunch_ms, x.load_ms,
                                        x.first_step_ms};
    double at = x.failed_ms;
    for (size_t p = 0; p < 5; ++p) {
      if (!ms[p]) continue;
      rows[p] += fmt::format("{} {} {}\n", at, at + *ms[p], k + 1);
      at += *ms[p];
    }
  }
  for (size_t p = 0; p < 5; ++p) bars(phases[p], colours[p], rows[p]);
  if (!labels.empty()) {
    s += fmt::format("$labels << EOD\n{}EOD\n", labels);
    plots.push_back(
        "$labels using 1:($2-0.4):3 with labels left offset 0.3,0 font 'sans,8' notitle");
  }
  return s + plot_line(plots);
}

std::string step_split_script(const std::vector<RankStepTime>& rows, const std::string& title,
                              const std::string& svg_path) {
  const int lanes = std::max(int(rows.size()), 1);
  std::string s = lanes_head(150 + 40 * lanes, svg_path, title,
                             "ms per step (median over the steps every rank logged)", lanes);
  s += "set ytics (";
  for (size_t i = 0; i < rows.size(); ++i) {
    s += fmt::format("{}\"rank {}\" {}", i ? ", " : "", rows[i].rank, i);
  }
  s += ")\nset grid xtics\nset key outside bottom center horizontal\n";
  s += "set style fill solid 0.8 noborder\n";
  double widest = 0;
  for (const RankStepTime& t : rows) widest = std::max({widest, t.own_total_p50_us, t.wait_p50_us});
  // Room on the right for the score labels.
  s += fmt::format("set xrange [0:{}]\n", std::max(widest / 1e3, 0.001) * 1.4);
  std::vector<std::string> plots;
  auto bars = [&](const std::string& name, const std::string& colour, const std::string& label,
                  const std::string& rows_text, double top, double bottom) {
    if (rows_text.empty()) return;
    s += fmt::format("${} << EOD\n{}EOD\n", name, rows_text);
    plots.push_back(fmt::format(
        "${} using (($1+$2)/2):3:1:2:($3+({})):($3+({})) with boxxyerror lc rgb '{}' title '{}'",
        name, top, bottom, colour, label));
  };
  // Own time per phase, stacked from 0 (the upper part of the lane), in kPhaseKeys order.
  const char* colours[] = {"#868e96", "#4a7fb5", "#7950f2", "#20c997"};
  for (size_t k = 0; k < 4; ++k) {
    std::string text;
    for (size_t i = 0; i < rows.size(); ++i) {
      double at = 0;
      for (size_t p = 0; p < k; ++p) at += std::max(rows[i].own_p50_us[p], 0.0) / 1e3;
      const double w = std::max(rows[i].own_p50_us[k], 0.0) / 1e3;
      if (w > 0) text += fmt::format("{} {} {}\n", at, at + w, i);
    }
    bars(harness::kPhaseKeys[k], colours[k], harness::kPhaseKeys[k], text, -0.35, 0.05);
  }
  // Waiting in collectives, apart: a thinner bar under the own one.
  std::string waits, labels;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RankStepTime& t = rows[i];
    if (t.wait_p50_us > 0) waits += fmt::format("0 {} {}\n", t.wait_p50_us / 1e3, i);
    labels += fmt::format("{} {} \"score p50 {:.2f}, max {:.2f}{}\"\n", t.own_total_p50_us / 1e3, i,
                          t.score_p50, t.score_max,
                          t.slow_steps > 0 ? fmt::format(", {} slow", t.slow_steps) : "");
  }
  bars("waiting", "#fab005", "waiting in collectives", waits, 0.12, 0.35);
  if (!labels.empty()) {
    s += fmt::format("$scores << EOD\n{}EOD\n", labels);
    plots.push_back(
        "$scores using 1:($2-0.15):3 with labels left offset 0.5,0 font 'sans,8' notitle");
  }
  if (rows.empty()) s += "set label 1 \"no step times\" at graph 0.5,0.5 center\n";
  return s + plot_line(plots);
}

std::string step_score_script(const StepScores& sc, const std::string& title,
                              const std::string& svg_path) {
  constexpr size_t kTitledRanks = 16;
  double top = kSlowScore;
  std::vector<bool> slow(sc.ranks.size(), false);
  for (size_t i = 0; i < sc.score.size() && i < slow.size(); ++i) {
    for (double x : sc.score[i]) {
      top = std::max(top, x);
      slow[i] = slow[i] || x > kSlowScore;
    }
  }
  std::string s =
      "set terminal svg size 1000,360 fixed noenhanced font 'sans,10' background '#ffffff'\n";
  s += fmt::format("set output \"{}\"\n", gp_str(svg_path));
  s += fmt::format("set title \"{}\"\n", gp_str(title));
  s += sc.stride > 1
           ? fmt::format("set xlabel \"step (each point: the max of {} steps)\"\n", sc.stride)
           : std::string("set xlabel \"step\"\n");
  s += "set ylabel \"own time / ranks' median\"\nset grid ytics\n";
  s += "set key outside right top vertical\n";
  s += fmt::format("set yrange [0:{}]\n", std::max(2.0, top * 1.1));
  // One row per point: the step, then every rank's score (column 2 + rank index).
  std::string rows;
  for (size_t p = 0; p < sc.steps.size(); ++p) {
    rows += std::to_string(sc.steps[p]);
    for (const auto& r : sc.score) rows += p < r.size() ? fmt::format(" {}", r[p]) : " NaN";
    rows += "\n";
  }
  std::vector<std::string> plots;
  if (!sc.steps.empty()) {
    s += fmt::format("$score << EOD\n{}EOD\n", rows);
    if (sc.steps.size() == 1) {
      s += fmt::format("set xrange [{}:{}]\n", sc.steps[0] - 1, sc.steps[0] + 1);
    }
  }
  const bool all_titled = sc.ranks.size() <= kTitledRanks;
  bool others_titled = false;
  // A report edited by hand may hold fewer score rows than ranks: only the rows present.
  const size_t lines = std::min(sc.ranks.size(), sc.score.size());
  for (size_t i = 0; i < lines && !sc.steps.empty(); ++i) {
    const std::string col = std::to_string(i + 2);
    if (all_titled || slow[i]) {
      // Line types cycle through gnuplot's default colours.
      plots.push_back(
          fmt::format("$score using 1:{} with linespoints lt {} pt 7 ps 0.5 lw 1.5 "
                      "title 'rank {}'",
                      col, i + 1, sc.ranks[i]));
    } else {
      plots.push_back(fmt::format("$score using 1:{} with lines lc rgb '#adb5bd' lw 1 {}", col,
                                  others_titled ? "notitle" : "title 'other ranks'"));
      others_titled = true;
    }
  }
  plots.push_back(fmt::format("{} with lines dt 2 lw 2 lc rgb '#c92a2a' title 'threshold {}'",
                              kSlowScore, kSlowScore));
  if (sc.steps.empty()) s += "set xrange [0:1]\nset label 1 \"no steps\" at graph 0.5,0.5 center\n";
  return s + plot_line(plots);
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

}  // namespace nanchaos::results
