// campaign.md and campaign.xml (JUnit), see campaign.h.
#include <fmt/format.h>

#include <cmath>

#include "results/campaign.h"
#include "results/text.h"

namespace nanchaos::results {
namespace {

std::string pct(const Rate& r) {
  if (!r.rate) return "-";
  return fmt::format("{:.1f} % ({:.1f}-{:.1f}, {}/{})", 100 * *r.rate, 100 * r.ci95->lo,
                     100 * r.ci95->hi, r.k, r.n);
}

std::string ranks_cell(const std::vector<int64_t>& r) { return r.empty() ? "-" : ranks_text(r); }

std::string fault_text(const CampaignFault& f) {
  std::string s = f.fault_class;
  if (f.fault.contains("target")) s += " " + f.fault["target"].get<std::string>();
  return s;
}

}  // namespace

std::string finite_markdown(const CampaignSummary& s) {
  std::string m = fmt::format(
      "## Finite faults per detector\n\n{} finite fault(s) (a factor, a finite value, a mantissa "
      "or low exponent bit: campaign.json `finite`), {} not masked.\n\n",
      s.finite_faults, s.finite_coverage.n);
  if (s.finite_coverage.n > 0) {
    m += "| detector | finite faults it named first (95% Wilson interval, k/n) |\n|---|---|\n";
    for (const auto& [detector, r] : s.finite_by_detector) {
      m += fmt::format("| {} | {} |\n", detector, pct(r));
    }
    m += fmt::format("| **any (finite coverage)** | {} |\n\n", pct(s.finite_coverage));
  }
  m += fmt::format(
      "Straggler false positives: the `straggler` detector fired on {} of the {} measured faults "
      "that slow no rank.\n\n",
      s.straggler_false_positives.k, s.straggler_false_positives.n);
  return m;
}

std::string campaign_markdown(const Campaign& c) {
  const ClassSummary& a = c.summary.all;
  std::string m = fmt::format("# nanchaos campaign: {}\n\n", c.name);
  m += fmt::format(
      "Scenario `{}`, seed {}, {} faults drawn over {}{} ({} at a time), {:.1f} s, nanchaos "
      "{}.{}\n\n",
      c.scenario, c.seed, c.requested, fmt::join(c.kinds, ", "),
      c.values == "any" ? "" : " with --values " + c.values, c.jobs, c.wall_s, c.nanchaos_version,
      c.interrupted ? fmt::format(" **Interrupted: {} of the {} faults requested were measured; "
                                  "the rows below are those.**",
                                  a.faults, c.requested)
                    : "");
  m += "The stack's own figures: a fault counts as detected only when the stack under test named "
       "it.\n\n";
  m += "| | rate (95% Wilson interval, k/n) |\n|---|---|\n";
  m += fmt::format("| coverage (the stack named it / not masked) | {} |\n", pct(a.coverage));
  m += fmt::format("| attribution: rank | {} |\n", pct(a.rank));
  m += fmt::format("| attribution: layer | {} |\n", pct(a.layer));
  m += fmt::format("| attribution: cause | {} |\n\n", pct(a.cause));
  m += fmt::format(
      "Beside them, not in them: of the {} not-masked faults the stack did not name, the "
      "harness's post-mortem explained {} (rank right {}, cause right {}); {} detection(s) "
      "came later than the window and were not counted.\n\n",
      a.harness_explained.n, a.harness_explained.k, pct(a.harness_rank), pct(a.harness_cause),
      a.late);
  m += "| outcome | faults |\n|---|---|\n";
  for (auto o : campaign_outcomes()) {
    m += fmt::format("| {} | {} |\n", to_string(o), a.outcomes.at(to_string(o)));
  }
  m += fmt::format("| (error: not measured) | {} |\n\n", a.errors);
  if (c.summary.latency_steps) {
    const auto& l = *c.summary.latency_steps;
    m += fmt::format("Detection latency (steps, over {} detected faults): p50 {}, p95 {}, max {}",
                     l.n, l.p50, l.p95, l.max);
    if (c.summary.latency_ms) {
      m += fmt::format("; ms: p50 {:.1f}, p95 {:.1f}, max {:.1f}", c.summary.latency_ms->p50,
                       c.summary.latency_ms->p95, c.summary.latency_ms->max);
    }
    m += ". ";
  }
  m += fmt::format("False positives (detections before the fault): {}.\n\n",
                   c.summary.false_positives);
  m += finite_markdown(c.summary);
  if (!c.thresholds.empty()) {
    m += "| threshold | min | actual | |\n|---|---|---|---|\n";
    for (const auto& [key, t] : c.thresholds.items()) {
      m += fmt::format("| {} | {} | {} | {} |\n", key, t["min"].dump(), t["actual"].dump(),
                       t["pass"].get<bool>() ? "pass" : "**missed**");
    }
    m += "\n";
  }
  m += "## Per fault class\n\n| class | faults | coverage | rank | layer | cause | outcomes |\n"
       "|---|---|---|---|---|---|---|\n";
  for (const auto& [name, s] : c.summary.by_class) {
    std::string outcomes;
    for (const auto& [o, n] : s.outcomes) {
      if (n > 0) outcomes += fmt::format("{}{} {}", outcomes.empty() ? "" : ", ", o, n);
    }
    if (s.errors > 0) outcomes += fmt::format("{}error {}", outcomes.empty() ? "" : ", ", s.errors);
    m += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", name, s.faults, pct(s.coverage),
                     pct(s.rank), pct(s.layer), pct(s.cause), md_cell(outcomes));
  }
  m += "\n## Attribution errors\n\n";
  bool any = false;
  for (const auto& f : c.faults) {
    const bool wrong =
        (f.rank_ok && !*f.rank_ok) || (f.layer_ok && !*f.layer_ok) || (f.cause_ok && !*f.cause_ok);
    if (!wrong) continue;
    if (!any) {
      m += "| fault | injected (rank, step, layer, cause) | named by | named (rank, step, layer, "
           "cause) | re-run |\n|---|---|---|---|---|\n";
    }
    any = true;
    m += fmt::format("| f{:03} {} | {}, {}, {}, {} | {} | {}, {}, {}, {} | `{}` |\n", f.index,
                     md_cell(fault_text(f)), ranks_cell(f.truth.ranks), f.truth.step,
                     md_cell(f.truth.layer.value_or("")), f.truth.cause, f.named->detector,
                     ranks_cell(f.named->ranks), f.named->step, md_cell(f.named->layer),
                     md_cell(f.named->cause), f.rerun);
  }
  if (!any) m += "None.\n";
  m += "\n## Faults the stack did not name that were not masked\n\n";
  any = false;
  for (const auto& f : c.faults) {
    if (!f.outcome || f.named || *f.outcome == CampaignOutcome::kMasked) continue;
    any = true;
    std::string why;
    if (f.late) {
      why = fmt::format("; named late by {} at step {}", f.late->detector, f.late->step);
    } else if (f.harness_named) {
      why = fmt::format("; the harness's post-mortem names rank {} ({})",
                        ranks_cell(f.harness_named->ranks), f.harness_named->cause);
    }
    m += fmt::format("- f{:03} {} (rank {}, step {}): {}{} — `{}`\n", f.index, fault_text(f),
                     ranks_cell(f.truth.ranks), f.truth.step, to_string(*f.outcome), why, f.rerun);
  }
  if (!any) m += "None.\n";
  return m;
}

void write_campaign_markdown(const Campaign& c, const std::string& path) {
  const std::string text = campaign_markdown(c);
  write_file(path, [&](std::ofstream& out) { out << text; });
}

void write_campaign_junit(const Campaign& c, const std::string& path) {
  struct Case {
    std::string failure, errors, out;
    double secs = 0;
  };
  std::map<std::string, Case> cases;
  for (const auto& f : c.faults) {
    Case& k = cases[f.fault_class];
    k.secs += std::isfinite(f.wall_ms) ? f.wall_ms / 1000.0 : 0.0;
    const std::string line = fmt::format("f{:03} {} (rank {}, step {})", f.index, fault_text(f),
                                         ranks_cell(f.truth.ranks), f.truth.step);
    if (!f.outcome) {
      k.errors += fmt::format("{}: not measured: {}\n", line, f.error);
      continue;
    }
    k.out += fmt::format("{}: {}\n", line, to_string(*f.outcome));
    if (!f.named && *f.outcome != CampaignOutcome::kMasked) {
      k.failure += fmt::format("{}: not detected by the stack ({}); re-run: {}\n", line,
                               to_string(*f.outcome), f.rerun);
    } else if (f.cause_ok && !*f.cause_ok) {
      k.failure +=
          fmt::format("{}: cause {} named, {} injected; re-run: {}\n", line,
                      f.named->cause.empty() ? "(none)" : f.named->cause, f.truth.cause, f.rerun);
    }
  }
  int failures = 0, errors = 0;
  double total = 0;
  for (const auto& [name, k] : cases) {
    failures += !k.failure.empty();
    errors += k.failure.empty() && !k.errors.empty();
    total += k.secs;
  }
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += fmt::format(
      "<testsuite name=\"campaign.{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"0\" "
      "time=\"{:.3f}\" timestamp=\"{}\">\n",
      xml_escape(c.name), cases.size(), failures, errors, total, xml_escape(c.started));
  for (const auto& [name, k] : cases) {
    x +=
        fmt::format("  <testcase classname=\"nanchaos.campaign.{}\" name=\"{}\" time=\"{:.3f}\">\n",
                    xml_escape(c.name), xml_escape(name), k.secs);
    if (!k.failure.empty()) {
      x += fmt::format("    <failure message=\"{}\" type=\"campaign\">{}</failure>\n",
                       xml_escape(one_line(k.failure.substr(0, k.failure.find('\n')))),
                       xml_text(k.failure));
    } else if (!k.errors.empty()) {
      x += fmt::format("    <error message=\"not measured\" type=\"error\">{}</error>\n",
                       xml_text(k.errors));
    }
    x += fmt::format("    <system-out>{}{}</system-out>\n  </testcase>\n", xml_text(k.out),
                     xml_text(k.errors));
  }
  x += "</testsuite>\n";
  write_file(path, [&](std::ofstream& out) { out << x; });
}

}  // namespace nanchaos::results
