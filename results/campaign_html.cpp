// campaign.html (campaign.h write_campaign_html): a self-contained page. The heatmap (fault class
// x first detector, with coverage per class) and the confusion matrix (true x named cause) are
// HTML tables shaded by their share, so every number stays readable and selectable; the latency
// distribution is a gnuplot SVG (html.h SvgRenderer), inlined.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "results/campaign.h"
#include "results/html.h"
#include "results/text.h"

namespace fs = std::filesystem;

namespace nanchaos::results {
namespace {

// A cell shaded by `share` in [0, 1] (white to `rgb`).
std::string shaded(const std::string& text, double share, const char* rgb) {
  return fmt::format("<td class=\"n\" style=\"background:rgba({},{:.2f})\">{}</td>", rgb,
                     std::clamp(share, 0.0, 1.0) * 0.85, text);
}

std::string pct(const Rate& r) {
  if (!r.rate) return "-";
  return fmt::format("{:.0f}% [{:.0f}-{:.0f}]", 100 * *r.rate, 100 * r.ci95->lo, 100 * r.ci95->hi);
}

std::string heatmap(const CampaignSummary& s) {
  std::set<std::string> dets;
  for (const auto& [d, by] : s.detector_by_class) dets.insert(d);
  std::string h =
      "<table id=\"heatmap\"><tr><th>fault class</th><th>faults</th><th>not "
      "masked</th><th>coverage [95%]</th>";
  for (const auto& d : dets) h += "<th>" + html_escape(d) + "</th>";
  h += "<th>undetected</th></tr>\n";
  for (const auto& [cls, cs] : s.by_class) {
    h += fmt::format("<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>",
                     html_escape(cls), cs.faults, cs.coverage.n);
    h += shaded(pct(cs.coverage), cs.coverage.rate.value_or(0), "60,160,60");
    const double denom = double(std::max<int64_t>(1, cs.coverage.n));
    for (const auto& d : dets) {
      int64_t n = 0;
      if (auto it = s.detector_by_class.at(d).find(cls); it != s.detector_by_class.at(d).end()) {
        n = it->second;
      }
      h += shaded(n ? std::to_string(n) : "", double(n) / denom, "40,100,200");
    }
    const int64_t missed = cs.coverage.n - cs.coverage.k;
    h += shaded(missed ? std::to_string(missed) : "", double(missed) / denom, "200,50,50");
    h += "</tr>\n";
  }
  return h + "</table>\n";
}

std::string confusion(const CampaignSummary& s) {
  std::set<std::string> named;
  for (const auto& [t, row] : s.confusion) {
    for (const auto& [n, k] : row) named.insert(n);
  }
  std::string h = "<table id=\"confusion\"><tr><th>true cause \\ named</th>";
  for (const auto& n : named) h += "<th>" + html_escape(n == "-" ? "(none)" : n) + "</th>";
  h += "</tr>\n";
  for (const auto& [truth, row] : s.confusion) {
    int64_t total = 0;
    for (const auto& [n, k] : row) total += k;
    h += "<tr><th>" + html_escape(truth) + "</th>";
    for (const auto& n : named) {
      auto it = row.find(n);
      const int64_t k = it == row.end() ? 0 : it->second;
      const char* rgb = n == truth ? "60,160,60" : "200,50,50";
      h += shaded(k ? std::to_string(k) : "", double(k) / double(std::max<int64_t>(1, total)), rgb);
    }
    h += "</tr>\n";
  }
  return h + "</table>\n";
}

// Gnuplot: detection latency (ms, log scale) of every detected fault, one column of points per
// detector, jittered by fault index so equal values stay visible.
std::string latency_distribution_script(const Campaign& c, const std::string& svg) {
  std::vector<std::string> dets;
  for (const auto& f : c.faults) {
    if (f.named && f.latency_ms &&
        std::find(dets.begin(), dets.end(), f.named->detector) == dets.end()) {
      dets.push_back(f.named->detector);
    }
  }
  std::string data;
  for (size_t i = 0; i < dets.size(); ++i) {
    for (const auto& f : c.faults) {
      if (!f.named || !f.latency_ms || f.named->detector != dets[i]) continue;
      const double jitter = 0.3 * (double(f.index % 13) / 12.0 - 0.5);
      data += fmt::format("{} {} {}\n", double(i) + jitter, std::max(*f.latency_ms, 1e-3),
                          f.latency_steps.value_or(0));
    }
  }
  std::string tics;
  for (size_t i = 0; i < dets.size(); ++i) {
    tics += fmt::format("{}\"{}\" {}", i ? ", " : "", gp_str(dets[i]), i);
  }
  // noenhanced: detector names have underscores (post_reduce), which enhanced text would set
  // as subscripts.
  return fmt::format(
      "set terminal svg size 720,360 dynamic noenhanced font 'sans,11'\nset output \"{}\"\n"
      "$d << EOD\n{}EOD\nset title 'Detection latency per first detector (each point a fault)'\n"
      "set ylabel 'ms from injection to first detection'\nset logscale y\nset xtics ({})\n"
      "set xrange [-0.6:{}]\nset grid ytics\nset key off\n"
      "plot $d using 1:2 with points pt 7 ps 0.6 lc rgb '#2864c8'\n",
      gp_str(svg), data, tics, double(dets.size()) - 0.4);
}

}  // namespace

std::string write_campaign_html(const Campaign& c, const std::string& path) {
  SvgRenderer charts("gnuplot", (fs::path(path).parent_path() / "html").string());
  const ClassSummary& a = c.summary.all;
  std::string h = html_page_head("nanchaos campaign: " + c.name, "");
  h += fmt::format(
      "<p>Scenario <code>{}</code>, seed {}, {} faults over {}{}, {:.1f} s, nanchaos {}.</p>\n",
      html_escape(c.scenario), c.seed, a.faults,
      html_escape(fmt::format("{}", fmt::join(c.kinds, ", "))),
      c.values == "any" ? "" : " with --values " + html_escape(c.values), c.wall_s,
      html_escape(c.nanchaos_version));
  h += "<!--notes-->";
  h += "<h2>Summary</h2>\n<table><tr><th></th><th>rate [95% Wilson]</th><th>k/n</th></tr>\n";
  const std::pair<const char*, const Rate*> rates[] = {{"coverage", &a.coverage},
                                                       {"attribution: rank", &a.rank},
                                                       {"attribution: layer", &a.layer},
                                                       {"attribution: cause", &a.cause}};
  for (const auto& [name, r] : rates) {
    h += fmt::format("<tr><td>{}</td>{}<td class=\"n\">{}/{}</td></tr>\n", name,
                     shaded(pct(*r), r->rate.value_or(0), "60,160,60"), r->k, r->n);
  }
  h += "</table>\n";
  h += fmt::format(
      "<p class=\"legend\">The stack's own figures: a fault counts only when the stack under test "
      "named it. Beside them: of {} not-masked faults the stack did not name, the harness's "
      "post-mortem explained {}; {} detection(s) came after the window.</p>\n",
      a.harness_explained.n, a.harness_explained.k, a.late);
  h += "<table><tr>";
  for (auto o : campaign_outcomes()) h += fmt::format("<th>{}</th>", to_string(o));
  h += "<th>error</th></tr><tr>";
  for (auto o : campaign_outcomes()) {
    h += fmt::format("<td class=\"n\">{}</td>", a.outcomes.at(to_string(o)));
  }
  h += fmt::format("<td class=\"n\">{}</td></tr></table>\n", a.errors);
  const CampaignSummary& s = c.summary;
  h += fmt::format(
      "<h2>Finite faults per detector</h2>\n<p>{} finite fault(s) (a factor, a finite value, a "
      "mantissa or low exponent bit), {} not masked.</p>\n",
      s.finite_faults, s.finite_coverage.n);
  if (s.finite_coverage.n > 0) {
    h += "<table><tr><th>detector</th><th>named first [95% Wilson]</th><th>k/n</th></tr>\n";
    for (const auto& [detector, r] : s.finite_by_detector) {
      h += fmt::format("<tr><td>{}</td>{}<td class=\"n\">{}/{}</td></tr>\n", html_escape(detector),
                       shaded(pct(r), r.rate.value_or(0), "60,160,60"), r.k, r.n);
    }
    h +=
        fmt::format("<tr><td><b>any (finite coverage)</b></td>{}<td class=\"n\">{}/{}</td></tr>\n",
                    shaded(pct(s.finite_coverage), s.finite_coverage.rate.value_or(0), "60,160,60"),
                    s.finite_coverage.k, s.finite_coverage.n);
    h += "</table>\n";
  }
  h += fmt::format(
      "<p>Straggler false positives: the <code>straggler</code> detector fired on {} of the {} "
      "measured faults that slow no rank.</p>\n",
      s.straggler_false_positives.k, s.straggler_false_positives.n);
  h += "<h2>Coverage per fault class and first detector</h2>\n" + heatmap(c.summary);
  h += "<p class=\"legend\">A cell counts the faults of the class (row) that the detector "
       "(column) caught first; shading is its share of the class's faults that were not "
       "masked. Undetected: not masked and no detection.</p>\n";
  h += "<h2>Confusion matrix: true cause against named cause</h2>\n" + confusion(c.summary);
  h += "<p class=\"legend\">Rows: the cause the injected fault has (the contract's table). "
       "Columns: the cause the stack's first detection named; (none): not detected (a masked "
       "fault nothing detected is left out). Green: right, red: wrong; shading is the share "
       "of the row.</p>\n";
  h += "<h2>Detection latency</h2>\n";
  const std::string svg = charts.render(
      "campaign-latency", latency_distribution_script(c, charts.svg_path("campaign-latency")));
  if (!svg.empty()) {
    h += "<div class=\"chart\">" + svg + "</div>\n";
  }
  if (c.summary.latency_steps) {
    const auto& l = *c.summary.latency_steps;
    h += fmt::format("<p>In steps over {} detected faults: p50 {}, p95 {}, max {}.</p>\n", l.n,
                     l.p50, l.p95, l.max);
  }
  h += "<h2>Faults</h2>\n<table><tr><th>#</th><th>class</th><th>fault</th><th>outcome</th>"
       "<th>named by</th><th>true rank / layer / cause</th><th>named rank / layer / "
       "cause</th><th>latency (steps)</th><th>scenario</th></tr>\n";
  for (const auto& f : c.faults) {
    const bool wrong =
        (f.rank_ok && !*f.rank_ok) || (f.layer_ok && !*f.layer_ok) || (f.cause_ok && !*f.cause_ok);
    h += fmt::format(
        "<tr{}><td class=\"n\">{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td>"
        "<td>{} / {} / {}</td><td>{}</td><td class=\"n\">{}</td><td><a href=\"{}\">toml</a></td>"
        "</tr>\n",
        wrong ? " style=\"background:#f2dede\"" : "", f.index, html_escape(f.fault_class),
        html_escape(f.fault.dump()),
        html_escape(f.outcome ? to_string(*f.outcome) : "error: " + f.error),
        html_escape(f.named           ? f.named->detector
                    : f.harness_named ? "(harness: " + f.harness_named->detector + ")"
                    : f.late          ? "(late: " + f.late->detector + ")"
                                      : "-"),
        ranks_text(f.truth.ranks), html_escape(f.truth.layer.value_or("-")),
        html_escape(f.truth.cause),
        f.named ? html_escape(fmt::format("{} / {} / {}", ranks_text(f.named->ranks),
                                          f.named->layer.empty() ? "-" : f.named->layer,
                                          f.named->cause.empty() ? "-" : f.named->cause))
                : "-",
        f.latency_steps ? std::to_string(*f.latency_steps) : "-", html_escape(f.scenario));
  }
  h += "</table>\n</body></html>\n";
  const std::string note = charts.note();
  h.replace(h.find("<!--notes-->"), 12,
            note.empty() ? "" : "<p class=\"note\">" + html_escape(note) + "</p>\n");
  write_file(path, [&](std::ofstream& out) { out << h; });
  return note;
}

}  // namespace nanchaos::results
