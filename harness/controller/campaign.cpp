// `nanchaos campaign`: draw, write, run J at a time, score, write the reports (see campaign.h).
#include "harness/controller/campaign.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "harness/common/exit_status.h"
#include "harness/controller/campaign_batch.h"
#include "harness/controller/campaign_draw.h"
#include "harness/controller/clean_run.h"
#include "harness/controller/controller.h"
#include "harness/controller/external_targets.h"
#include "harness/controller/launch.h"
#include "harness/controller/preflight.h"
#include "harness/controller/stop_signal.h"
#include "harness/evidence/events.h"

namespace fs = std::filesystem;

namespace nanchaos::harness {
namespace {

using ojson = nlohmann::ordered_json;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
}

// What the campaign's targets come from: the built-in model, or the external job's dry run.
CampaignTargets targets_of(const Scenario& s, const LaunchContext& ctx) {
  if (!s.job.external()) return builtin_targets(s);
  const ExternalTargets ext = external_targets(s, ctx);
  if (!ext.error.empty()) throw CampaignError(ext.error);
  CampaignTargets t;
  t.modules = ext.modules;
  t.parameters = ext.parameters;
  return t;
}

std::string percent(const std::optional<double>& r) {
  return r ? fmt::format("{:.1f} %", 100.0 * *r) : "-";
}

std::string rate_line(const std::string& what, const results::Rate& r) {
  if (!r.rate) return fmt::format("  {:<18} -  (no sample)\n", what);
  return fmt::format("  {:<18} {:>7}  (95% CI {:.1f}-{:.1f} %, {}/{})\n", what, percent(r.rate),
                     100 * r.ci95->lo, 100 * r.ci95->hi, r.k, r.n);
}

// The console summary after the run (stdout).
std::string console_summary(const results::Campaign& c, const std::string& out) {
  const auto& a = c.summary.all;
  // An interrupted campaign says so here too: its figures are of the faults measured so far.
  std::string measured = fmt::format("{} faults", a.faults);
  if (c.interrupted) {
    measured = c.shard ? measured + ", interrupted"  // a shard measures part of `requested`
                       : fmt::format("{} of {} faults, interrupted", a.faults, c.requested);
  }
  std::string s =
      fmt::format("--- campaign {}: {} (seed {}), {:.1f} s, {:.1f} faults/min\n", c.name, measured,
                  c.seed, c.wall_s, c.wall_s > 0 ? 60.0 * double(a.faults) / c.wall_s : 0.0);
  s += "  the stack's own figures (what the stack under test named):\n";
  s += rate_line("coverage", a.coverage);
  s += rate_line("attribution rank", a.rank);
  s += rate_line("attribution layer", a.layer);
  s += rate_line("attribution cause", a.cause);
  s += "  outcomes:";
  for (auto o : results::campaign_outcomes()) {
    s += fmt::format(" {} {}", to_string(o), a.outcomes.at(to_string(o)));
  }
  s += fmt::format("; errors {}; false positives {}\n", a.errors, c.summary.false_positives);
  s += fmt::format(
      "  beside them: the harness's post-mortem explained {} of the {} not-masked faults the "
      "stack did not name; {} detection(s) after the window\n",
      a.harness_explained.k, a.harness_explained.n, a.late);
  // Finite faults apart, per first detector (bounded changes are the stack's hard case and would
  // hide in the overall rate), when the campaign drew any.
  if (c.summary.finite_coverage.n > 0) {
    s += rate_line("finite coverage", c.summary.finite_coverage);
    for (const auto& [detector, r] : c.summary.finite_by_detector) {
      s += rate_line("  by " + detector, r);
    }
  }
  s += fmt::format("  straggler false positives: {} of {} faults that slow no rank\n",
                   c.summary.straggler_false_positives.k, c.summary.straggler_false_positives.n);
  // An interrupted campaign writes no campaign.html.
  s += fmt::format("reports: {}/campaign.json, campaign.md, campaign.xml{}\n", out,
                   c.interrupted ? "" : ", campaign.html");
  return s;
}

std::string progress_line(const results::CampaignFault& f, int total) {
  std::string target = f.fault.contains("target") ? f.fault["target"].get<std::string>() : "";
  std::string what = f.outcome ? to_string(*f.outcome) : "error: " + f.error;
  if (f.named) {
    what += fmt::format(" ({}: {} {}{})", f.named->detector,
                        f.named->cause.empty() ? "-" : f.named->cause,
                        f.named->layer.empty() ? "-" : f.named->layer,
                        f.cause_ok && !*f.cause_ok ? ", cause wrong" : "");
  } else if (f.harness_named) {
    what += fmt::format(" (stack named nothing; harness post-mortem: rank {})",
                        fmt::join(f.harness_named->ranks, ","));
  } else if (f.late) {
    what += fmt::format(" (named late: {} at step {})", f.late->detector, f.late->step);
  }
  return fmt::format("[{:>4}/{}] f{:03} {:<18} {:<32} step {:<4} {} ({:.1f} s)\n", f.index + 1,
                     total, f.index, f.fault_class, target, f.truth.step, what, f.wall_ms / 1000);
}

}  // namespace

results::ScoringRules scoring_rules(const Scenario& s) {
  results::ScoringRules r;
  const Params& det = s.detectors.params;
  const int64_t replica_every = det.has("replica_every") ? det.get_int("replica_every") : 10;
  const Params& c = s.campaign.params;  // detect_within_steps: read by the campaign only
  r.within_steps = c.has("detect_within_steps") ? c.get_int("detect_within_steps")
                                                : std::max<int64_t>(10, replica_every);
  r.restarts = s.job.restarts;
  return r;
}

ojson check_thresholds(const Scenario& s, const results::CampaignSummary& sum) {
  ojson out = ojson::object();
  const auto& a = sum.all;
  const std::pair<const char*, std::pair<const std::optional<double>*, const results::Rate*>>
      checks[] = {{"min_coverage", {&s.campaign.min_coverage, &a.coverage}},
                  {"min_attribution_rank", {&s.campaign.min_attribution_rank, &a.rank}},
                  {"min_attribution_layer", {&s.campaign.min_attribution_layer, &a.layer}},
                  {"min_attribution_cause", {&s.campaign.min_attribution_cause, &a.cause}}};
  for (const auto& [key, pair] : checks) {
    const auto& [min, rate] = pair;
    if (!*min) continue;
    const bool pass = rate->rate && *rate->rate >= **min;
    out[key] = {{"min", **min},
                {"actual", rate->rate ? ojson(*rate->rate) : ojson(nullptr)},
                {"pass", pass}};
  }
  return out;
}

namespace {

// Step 1, the checks before anything is drawn (preflight.h, as for `nanchaos run`): the options,
// the scenario, the launcher, that it can run here. Prints what is wrong; returns the exit status
// (0: `base` and `ctx` are set).
int preflight_campaign(const CampaignOptions& o, Scenario& base, LaunchContext& ctx) {
  if (o.faults < 1 || o.jobs < 1) {
    std::cerr << "nanchaos campaign: error: --faults and --jobs must be at least 1\n";
    return 2;
  }
  Preflight preflight(o.host_limits);
  try {
    base = preflight.load(o.scenario);
  } catch (const ScenarioError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  ctx.launcher = default_launcher(o.launcher);
  ctx.self_exe = o.self_exe;
  ctx.private_mpi_tmpdir = o.jobs > 1;
  if (const std::string e = launcher_error(ctx.launcher, {base}); !e.empty()) {
    std::cerr << "nanchaos campaign: error: " << e << "\n";
    return 2;
  }
  preflight.probe_pythons({base});
  // A campaign has one scenario: what would skip it in a suite is an error here.
  if (const Blocker blocked = preflight.blocker(base)) {
    using What = Blocker::What;
    std::cerr << "nanchaos campaign: error: "
              << (blocked.what == What::kNoPython ? ""
                  : blocked.what == What::kNoGpu  ? o.scenario + ": cannot run here: "
                                                  : o.scenario + ": ")
              << blocked.reason << "\n";
    return 2;
  }
  ctx.python = preflight.python_for(base).path;
  if (!base.faults.empty()) {
    std::cerr << fmt::format(
        "nanchaos campaign: note: {}: its {} [[fault]] and its [expect] are ignored (the "
        "campaign draws the faults and scores them against their ground truth)\n",
        o.scenario, base.faults.size());
  }
  return 0;
}

int interrupted_before_any_run() {
  std::cerr << fmt::format("nanchaos campaign: interrupted by {} before any fault ran\n",
                           signal_name(stop_signal()));
  return 128 + stop_signal();
}

// One campaign once its scenario passed the preflight: draw, write, run, score, report.
class CampaignRun {
 public:
  // `t0`: when the command started (campaign.json's wall_s counts from there).
  CampaignRun(const CampaignOptions& o, Scenario base, LaunchContext ctx,
              std::chrono::steady_clock::time_point t0)
      : o_(o), base_(std::move(base)), ctx_(std::move(ctx)), rules_(scoring_rules(base_)), t0_(t0) {
    out_ = o.out_dir.empty() ? "results/campaigns/" + utc_stamp("%Y%m%dT%H%M%SZ") + "-" + base_.name
                             : o.out_dir;
    c_.scenario = o.scenario;
    c_.name = base_.name;
    c_.seed = o.seed.value_or(base_.seed);
    c_.requested = o.faults;
    c_.values = to_string(o.values);
    c_.jobs = o.jobs;
    c_.started = utc_stamp("%Y-%m-%dT%H:%M:%SZ");
    c_.nanchaos_version = NANCHAOS_VERSION;
  }

  // Step 2, draw the faults and write each as a scenario file under out/faults/NNN/. Returns
  // the exit status (0: drawn; 128 + signal: interrupted).
  int draw() {
    // Another campaign's rows, fault folders and re-run commands must not mix with this one's.
    std::error_code exists_ec;
    if (fs::exists(fs::path(out_) / "campaign.json", exists_ec) ||
        fs::exists(fs::path(out_) / "faults", exists_ec)) {
      std::cerr << fmt::format(
          "nanchaos campaign: error: --out {}: holds an earlier campaign (campaign.json or "
          "faults/); give a new folder or remove it\n",
          out_);
      return 2;
    }
    const std::string base_text = read_text(o_.scenario);
    try {
      const CampaignTargets targets = targets_of(base_, ctx_);
      c_.kinds = campaign_kinds(base_, targets, o_.kinds, o_.values);
      drawn_ = draw_faults(base_, base_text, targets, c_.kinds, c_.seed, o_.faults, o_.values);
    } catch (const CampaignError& e) {
      std::cerr << fmt::format("nanchaos campaign: error: {}\n", e.what());
      return 2;
    }
    if (stop_signal() != 0) return interrupted_before_any_run();
    const size_t all_drawn = drawn_.size();
    if (o_.shard.on()) keep_shard();
    files_.resize(drawn_.size());
    try {
      for (size_t i = 0; i < drawn_.size(); ++i) {
        const DrawnFault& d = drawn_[i];
        if (stop_signal() != 0) return interrupted_before_any_run();
        const std::string dir = fmt::format("{}/faults/{:03}", out_, d.index);
        fs::create_directories(dir);
        files_[i] = dir + "/scenario.toml";
        const std::string header = fmt::format(
            "# nanchaos campaign {} (seed {}), fault {} of {}: {}\n# re-run it alone: nanchaos "
            "run {}",
            o_.scenario, c_.seed, d.index, all_drawn, d.fault_class, files_[i]);
        write_text(files_[i], fault_scenario_toml(base_, base_text, d, header));
      }
    } catch (const std::exception& e) {
      std::cerr << fmt::format("nanchaos campaign: error: --out {}: {}\n", out_, e.what());
      return 2;
    }
    return 0;
  }

  // --shard I/N: the drawn faults whose index mod N is I - 1 (every shard draws all of them
  // with the same seed, so the parts are disjoint and cover the campaign).
  void keep_shard() {
    std::vector<DrawnFault> mine;
    for (auto& d : drawn_) {
      if (d.index % o_.shard.count == o_.shard.index - 1) mine.push_back(std::move(d));
    }
    drawn_ = std::move(mine);
    c_.shard = results::ShardInfo{o_.shard.index, o_.shard.count, {}};
  }

  // Step 3, run every fault, J workers at a time: batches of in-launch faults (one per worker)
  // first, then single faults.
  void run() {
    share_clean_reference();
    plan_queue();
    rows_.resize(drawn_.size());
    std::vector<std::thread> workers;
    for (int j = 0; j < std::min<int>(o_.jobs, int(drawn_.size())); ++j) {
      workers.emplace_back([this] { worker(); });
    }
    for (auto& w : workers) w.join();
  }

  // Step 4, the final reports, the summary and the exit status.
  int finish() {
    if (stop_signal() != 0) c_.interrupted = true;
    write_files(true);
    std::string html_note;
    if (!c_.interrupted) {
      try {
        html_note = results::write_campaign_html(c_, out_ + "/campaign.html");
      } catch (const std::exception& e) {
        std::cerr << "nanchaos campaign: error: " << e.what() << "\n";
        write_failed_ = true;
      }
    }
    if (!o_.quiet) std::cout << console_summary(c_, out_) << std::flush;
    if (!html_note.empty())
      std::cerr << "nanchaos campaign: warning: campaign.html: " << html_note << "\n";
    if (c_.interrupted) {
      std::cerr << fmt::format(
          "nanchaos campaign: interrupted by {}: {} of {} faults measured; reports: "
          "{}/campaign.json, campaign.md, campaign.xml\n",
          signal_name(stop_signal()), c_.faults.size(), drawn_.size(), out_);
      return 128 + stop_signal();
    }
    if (write_failed_) return kExitReportUnwritten;
    if (c_.summary.all.errors > 0) {
      std::cerr << fmt::format(
          "nanchaos campaign: error: {} fault(s) could not be measured (their rows say why)\n",
          c_.summary.all.errors);
      return kExitErrored;
    }
    bool missed = false;
    for (const auto& [key, check] : c_.thresholds.items()) {
      if (check["pass"].get<bool>()) continue;
      missed = true;
      std::cerr << fmt::format("nanchaos campaign: [campaign].{} = {} missed: {}\n", key,
                               check["min"].dump(), check["actual"].dump());
    }
    return missed ? 1 : 0;
  }

 private:
  struct Item {
    std::vector<size_t> faults;
    bool in_launch = false;
  };

  // [job] restarts on a built-in job: faults that stop the job expect final_matches_clean
  // (campaign_draw.cpp fault_scenario_toml). Their clean run is one (same job, same seed), run
  // here once in DIR/clean before the workers share it (LaunchContext::clean_cache).
  void share_clean_reference() {
    for (const auto& file : files_) {
      const Scenario s = load_scenario(file);
      if (!s.expect.final_matches_clean) continue;
      const std::string job_id = fmt::format("{}-clean-{}", getpid(), now_us());
      const CleanReference c = run_clean_reference(s, out_, ctx_, job_id, std::nullopt);
      if (!c.error.empty()) {
        std::cerr << "nanchaos campaign: warning: " << c.error << "\n";
      }
      ctx_.clean_cache = clean_run_dir(out_);
      return;
    }
  }

  // The in-launch faults split into J batches at the front; every other fault one launch.
  void plan_queue() {
    std::vector<size_t> inlaunch;
    for (size_t i = 0; i < drawn_.size(); ++i) {
      bool eligible = false;
      if (!o_.one_launch_per_fault) {
        try {
          eligible = inlaunch_eligible(load_scenario(files_[i]));
        } catch (const ScenarioError&) {
        }
      }
      if (eligible) {
        inlaunch.push_back(i);
      } else {
        queue_.push_back({{i}, false});
      }
    }
    const size_t batches = std::min<size_t>(size_t(o_.jobs), inlaunch.size());
    std::vector<std::vector<size_t>> split(batches);
    for (size_t k = 0; k < inlaunch.size(); ++k) split[k % batches].push_back(inlaunch[k]);
    for (auto& b : split) queue_.insert(queue_.begin(), Item{std::move(b), true});
  }

  void worker() {
    while (stop_signal() == 0) {
      Item item;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (next_ >= queue_.size()) return;
        item = queue_[next_++];
      }
      if (item.in_launch) {
        run_batch(item.faults);
        continue;
      }
      const size_t i = item.faults.front();
      const std::string dir = fs::path(files_[i]).parent_path().string();
      results::ScenarioResult judged;
      try {
        const Scenario s = load_scenario(files_[i]);
        const std::string job_id = fmt::format("{}-c{}-{}", getpid(), i, now_us());
        judged = run_scenario_job(s, dir, ctx_, job_id);
      } catch (const ScenarioError& e) {
        judged.reason = e.what();  // cannot happen: draw_faults loaded it (a changed file?)
      }
      if (judged.reason == "interrupted") return;  // not measured: listed as not run
      record(i, std::move(judged));
    }
  }

  // A batch: one launch; the faults it never started go back to the queue, as a new batch when
  // the launch got somewhere, one launch each otherwise (a clean prefix that cannot get there).
  void run_batch(const std::vector<size_t>& batch) {
    std::vector<Scenario> scenarios;
    for (size_t i : batch) scenarios.push_back(load_scenario(files_[i]));
    const std::string launch_dir = fmt::format("{}/launches/{:03}", out_, launches_++);
    const std::string job_id = fmt::format("{}-b{}-{}", getpid(), batch.front(), now_us());
    auto judged = run_inlaunch_batch(scenarios, launch_dir, ctx_, job_id);
    std::vector<size_t> rest;
    std::vector<std::pair<size_t, results::ScenarioResult>> done;
    bool interrupted = false;
    for (size_t k = 0; k < batch.size(); ++k) {
      if (!judged[k]) {
        rest.push_back(batch[k]);
      } else if (judged[k]->reason == "interrupted") {
        interrupted = true;
        break;
      } else {
        done.emplace_back(batch[k], std::move(*judged[k]));
      }
    }
    record(std::move(done));  // the batch's rows were judged together: one rewrite of the files
    if (interrupted) return;
    if (rest.empty() || stop_signal() != 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (rest.size() < batch.size()) {
      queue_.push_back({rest, true});
    } else {
      for (size_t i : rest) queue_.push_back({{i}, false});
    }
  }

  void record(size_t i, results::ScenarioResult judged) {
    std::vector<std::pair<size_t, results::ScenarioResult>> one;
    one.emplace_back(i, std::move(judged));
    record(std::move(one));
  }

  // Scores judged faults (drawn_ index, the judge's result) and rewrites campaign.json once:
  // after every fault's (or in-launch batch's) judgement, nothing measured is lost if the
  // controller dies.
  void record(std::vector<std::pair<size_t, results::ScenarioResult>> judged) {
    if (judged.empty()) return;
    std::vector<std::pair<size_t, results::CampaignFault>> rows;
    for (auto& [i, res] : judged) {
      const DrawnFault& d = drawn_[i];
      results::CampaignFault row =
          results::score_fault(d.index, d.fault, d.fault_class, d.truth, res, rules_);
      row.finite = d.finite;
      row.slows = d.slows;
      row.scenario = fmt::format("faults/{:03}/scenario.toml", d.index);
      row.rerun = "nanchaos run " + files_[i];
      rows.emplace_back(i, std::move(row));
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [i, row] : rows) {
      if (!o_.quiet) std::cerr << progress_line(row, int(c_.requested)) << std::flush;
      rows_[i] = std::move(row);
    }
    write_files(false);
  }

  // campaign.json (and with `final_files` campaign.md and campaign.xml) from the rows so far.
  // Called under mu_ or after the workers are joined.
  void write_files(bool final_files) {
    c_.complete = final_files && !c_.interrupted;  // while it runs (or if it dies): not finished
    c_.faults.clear();
    for (const auto& r : rows_) {
      if (r) c_.faults.push_back(*r);
    }
    c_.summary = results::summarize_campaign(c_.faults);
    c_.thresholds = check_thresholds(base_, c_.summary);
    c_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    try {
      results::write_campaign_json(c_, out_ + "/campaign.json");
      if (final_files) {
        results::write_campaign_markdown(c_, out_ + "/campaign.md");
        results::write_campaign_junit(c_, out_ + "/campaign.xml");
      }
    } catch (const std::exception& e) {
      if (!write_failed_) std::cerr << "nanchaos campaign: error: " << e.what() << "\n";
      write_failed_ = true;
    }
  }

  const CampaignOptions& o_;
  const Scenario base_;
  LaunchContext ctx_;  // clean_cache set before the workers start (share_clean_reference)
  const results::ScoringRules rules_;
  const std::chrono::steady_clock::time_point t0_;
  std::string out_;
  results::Campaign c_;
  std::vector<DrawnFault> drawn_;
  std::vector<std::string> files_;  // drawn_[i]'s scenario file
  std::mutex mu_;  // guards what follows, c_ and the progress lines while the workers run
  std::vector<std::optional<results::CampaignFault>> rows_;
  std::vector<Item> queue_;
  size_t next_ = 0;  // the queue's next item (batches may append to the queue)
  std::atomic<int> launches_{0};
  bool write_failed_ = false;
};

}  // namespace

int run_campaign(const CampaignOptions& o) {
  StopSignalHandlers stop_handlers;
  const auto t0 = std::chrono::steady_clock::now();
  Scenario base;
  LaunchContext ctx;
  if (const int rc = preflight_campaign(o, base, ctx); rc != 0) return rc;
  CampaignRun campaign(o, std::move(base), std::move(ctx), t0);
  if (const int rc = campaign.draw(); rc != 0) return rc;
  campaign.run();
  return campaign.finish();
}

}  // namespace nanchaos::harness
