// report.md (report.h write_markdown): the summary, the column table's summary rows (columns.h),
// the trial percentiles and peak memory when there are any, and per scenario that did not pass
// its reason and failed checks, and every job's output files (links).
#include <fmt/format.h>

#include <algorithm>

#include "results/columns.h"
#include "results/text.h"

namespace nanchaos::results {
namespace {

std::string summary_table(const SuiteReport& r) {
  std::string head = "|", rule = "|";
  for (const Column& c : report_columns()) {
    if (c.markdown.empty()) continue;
    head += fmt::format(" {} |", c.markdown);
    rule += c.align == Align::kRight ? "--:|" : "---|";
  }
  std::string t = head + "\n" + rule + "\n";
  for (const auto& s : r.scenarios) {
    const Row w(s, Format::kMarkdown);
    t += "|";
    for (const Column& c : report_columns()) {
      if (!c.markdown.empty()) t += " " + md_cell(c.text(w)) + " |";
    }
    t += "\n";
  }
  return t;
}

// "[ranks.log](a/ranks.log) · [rank 0 out](a/ranks/rank-0.out) · ..." ("" when no job ran).
std::string md_links(const ScenarioResult& s, const std::string& report_path) {
  std::string out;
  for (const auto& l : log_links(s, report_path)) {
    out += fmt::format("{}[{}]({})", out.empty() ? "" : " · ", l.label, l.href);
  }
  return out;
}

std::string ms_cell(const std::optional<double>& ms) {
  return ms ? fmt::format("{:.1f}", *ms) : std::string("-");
}

// "step-000006.pt (step 6)"; the file name only: the run folder is named above.
std::string checkpoint_cell(const Launch::Checkpoint& c) {
  const std::string name = c.path.substr(c.path.find_last_of('/') + 1);
  std::string out = c.step ? fmt::format("{} (step {})", name, *c.step) : name;
  if (!c.why.empty()) out += ": " + c.why;
  return md_cell(out);
}

// [job] restarts: each launch (start, end, outcome, resumed step, the checkpoint loaded and
// those rejected) and each restart's latency split (docs/scenario-format.md "Recovery by
// restart"). "" when no scenario was relaunchable.
std::string launches_section(const SuiteReport& r) {
  std::string m;
  for (const auto& s : r.scenarios) {
    if (!s.judged || !s.judged->launches) continue;
    if (m.empty()) m = "\n## Launches and restarts\n";
    m += fmt::format(
        "\n### {}\n\n| Launch | Start (ms) | End (ms) | Outcome | Resumed from step | "
        "Checkpoint loaded | Rejected |\n|--:|--:|--:|---|--:|---|---|\n",
        one_line(s.name));
    for (const Launch& l : *s.judged->launches) {
      std::vector<std::string> rejected;
      for (const auto& c : l.checkpoints_rejected) rejected.push_back(checkpoint_cell(c));
      m += fmt::format("| {} | {:.1f} | {:.1f} | {} | {} | {} | {} |\n", l.launch, l.start_ms,
                       l.end_ms, md_cell(l.outcome),
                       l.resumed_from_step ? std::to_string(*l.resumed_from_step) : "-",
                       l.checkpoint_loaded ? checkpoint_cell(*l.checkpoint_loaded) : "-",
                       rejected.empty() ? "-" : fmt::format("{}", fmt::join(rejected, "; ")));
    }
    if (!s.judged->restarts || s.judged->restarts->empty()) continue;
    m += "\n| Restart after launch | Cause | Resume (ms) | Detect | Teardown | Relaunch | Load | "
         "First step | of which import | Steps lost |\n|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|\n";
    for (const Restart& x : *s.judged->restarts) {
      m += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", x.after_launch,
                       md_cell(x.cause), ms_cell(x.resume_ms), ms_cell(x.detect_ms),
                       ms_cell(x.teardown_ms), ms_cell(x.relaunch_ms), ms_cell(x.load_ms),
                       ms_cell(x.first_step_ms), ms_cell(x.import_ms),
                       x.steps_lost ? std::to_string(*x.steps_lost) : "-");
    }
  }
  return m;
}

// Every job's per-rank step times (JobFacts::step_times): the phase split of each rank's own
// time and its straggler score, for built-in and external jobs alike. "" when no job logged any.
std::string step_times_section(const SuiteReport& r) {
  std::string m;
  for (const auto& s : r.scenarios) {
    if (!s.judged || s.judged->step_times.empty()) continue;
    if (m.empty()) {
      m = "\n## Step time per rank\n\nOwn time per phase (median ms over the steps every rank "
          "logged: wall time minus collective waits and run-queue delay); score = the rank's own "
          "total over the ranks' median at the same step (the `straggler` detector's statistic); "
          "slow steps: score > 1.5; score by step: the score step by step (a long run's steps "
          "merged by their max, 40 characters at most), ▁▂▃▄ up to 1.5 and ▅▆▇█ above it (█: 3 and "
          "more).\n\n"
          "| Scenario | Rank | Steps | Data | Compute | Backward | Comm | Own total | Waiting | "
          "Run delay | Score p50 | Score max | Slow steps | Score by step |\n"
          "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n";
    }
    const auto& series = s.judged->step_scores;
    for (const RankStepTime& t : s.judged->step_times) {
      std::string line = "-";
      if (series) {
        const auto it = std::find(series->ranks.begin(), series->ranks.end(), t.rank);
        const size_t i = size_t(it - series->ranks.begin());
        const std::string spark = it != series->ranks.end() && i < series->score.size()
                                      ? score_sparkline(series->score[i])
                                      : "";
        if (!spark.empty()) line = "`" + spark + "`";
      }
      m += fmt::format(
          "| {} | {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {} | {:.2f} | "
          "{:.2f} | {} | {} |\n",
          md_cell(s.name), t.rank, t.steps, t.own_p50_us[0] / 1e3, t.own_p50_us[1] / 1e3,
          t.own_p50_us[2] / 1e3, t.own_p50_us[3] / 1e3, t.own_total_p50_us / 1e3,
          t.wait_p50_us / 1e3,
          t.run_delay_p50_us ? fmt::format("{:.2f}", *t.run_delay_p50_us / 1e3) : "-", t.score_p50,
          t.score_max, t.slow_steps, line);
    }
  }
  return m;
}

// The scenarios that failed or errored, each with its reason, failed checks and output links,
// and then the skipped ones in one line each: what a pull-request comment must show first.
std::string not_passing_section(const SuiteReport& r, const std::string& path) {
  std::string m;
  for (const auto& s : r.scenarios) {
    if (is_pass(s) || is_skipped(s)) continue;
    if (m.empty()) m = "## Failed or errored\n";
    m += fmt::format("\n### {} ({})\n\n", one_line(s.name), to_string(s.verdict));
    if (!s.file.empty()) m += fmt::format("File: `{}`", s.file);
    if (!s.run_dir.empty())
      m += fmt::format("{}Run folder: `{}`", s.file.empty() ? "" : " · ", s.run_dir);
    if (!s.file.empty() || !s.run_dir.empty()) m += "\n\n";
    if (s.stats.is_object() && s.stats.value("trials", int64_t(1)) > 1) {
      m += fmt::format("Trials passed: {}/{}\n\n", s.stats.value("passed", int64_t(0)),
                       s.stats.value("trials", int64_t(1)));
    }
    if (!s.reason.empty()) m += fmt::format("Reason: {}\n\n", one_line(s.reason));
    if (const std::string links = md_links(s, path); !links.empty()) {
      m += "Output: " + links + "\n\n";
    }
    const auto failed = failed_checks(s);
    if (!failed.empty()) {
      m += "| Check | Expected | Actual |\n|---|---|---|\n";
      for (const Check* c : failed) {
        m += fmt::format("| {} | {} | {} |\n", md_cell(c->key), md_cell(value_text(c->expected)),
                         md_cell(value_text(c->actual)));
      }
    }
  }
  std::string skipped;
  for (const auto& s : r.scenarios) {
    if (is_skipped(s)) skipped += fmt::format("- {}: {}\n", md_cell(s.name), one_line(s.reason));
  }
  if (!skipped.empty()) {
    m += fmt::format("{}<details><summary>{} skipped</summary>\n\n{}\n</details>\n",
                     m.empty() ? "" : "\n", r.skipped(), skipped);
  }
  return m;
}

}  // namespace

void write_markdown(const SuiteReport& r, const std::string& path) {
  std::string m = fmt::format("# nanchaos report: {}\n\n", one_line(r.suite));
  m += fmt::format("Started {} on `{}`, nanchaos {}.\n\n", md_cell(r.started), md_cell(r.host),
                   md_cell(r.nanchaos_version));
  m += fmt::format("**{}**\n\n", summary_text(r));
  // What failed first, then every scenario folded: report.md is also a pull-request comment.
  if (const std::string np = not_passing_section(r, path); !np.empty()) m += np + "\n";
  m += fmt::format("<details{}><summary>All {} scenarios</summary>\n\n",
                   r.failed() + r.errors() > 0 ? "" : " open", r.scenarios.size());
  m += summary_table(r);
  m += "\nLatency (steps): steps from the first injection to the first detection. Latency (ms): "
       "the same in ms of the ranks' shared clock. Wall (s): the job's wall time. \"-\": no value "
       "(nothing detected, or no job ran).\n\n</details>\n";
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
  // Peak memory per rank (JobFacts::memory, written by the judge; VmHWM counts shared library
  // pages in every rank, so the total is an upper bound).
  bool mem_heading = false;
  for (const auto& s : r.scenarios) {
    if (!s.judged || !s.judged->memory) continue;
    const Memory& mem = *s.judged->memory;
    if (!mem_heading) {
      m += "\n## Memory per rank (peak RSS, VmHWM)\n\n| Scenario | Ranks | Max (MiB) | Mean (MiB) "
           "| Total (MiB) |\n|---|--:|--:|--:|--:|\n";
      mem_heading = true;
    }
    m +=
        fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.1f} |\n", md_cell(s.name), mem.ranks_measured,
                    mem.per_rank_max_mib, mem.per_rank_mean_mib, mem.total_mib);
  }
  m += step_times_section(r);
  m += launches_section(r);
  // Every job's output files: the merged view and each rank's own.
  bool out_heading = false;
  for (const auto& s : r.scenarios) {
    const std::string links = md_links(s, path);
    if (links.empty()) continue;
    if (!out_heading) {
      m += "\n## Output\n\n";
      out_heading = true;
    }
    m += fmt::format("- {}{}: {}\n", md_cell(s.name),
                     s.trial_count > 1 ? fmt::format(" (trial {})", s.trial) : "", links);
  }
  write_file(path, [&](std::ofstream& out) { out << m; });
}

}  // namespace nanchaos::results
