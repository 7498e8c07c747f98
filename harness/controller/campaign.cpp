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

#include "harness/controller/campaign_batch.h"
#include "harness/controller/campaign_draw.h"
#include "harness/controller/controller.h"
#include "harness/controller/external_targets.h"
#include "harness/evidence/events.h"
#include "nanchaos/config.h"

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

std::string rate_line(const char* what, const results::Rate& r) {
  if (!r.rate) return fmt::format("  {:<18} -  (no sample)\n", what);
  return fmt::format("  {:<18} {:>7}  (95% CI {:.1f}-{:.1f} %, {}/{})\n", what, percent(r.rate),
                     100 * r.ci95->lo, 100 * r.ci95->hi, r.k, r.n);
}

// The console summary after the run (stdout).
std::string console_summary(const results::Campaign& c, const std::string& out) {
  const auto& a = c.summary.all;
  std::string s = fmt::format("--- campaign {}: {} faults (seed {}), {:.1f} s, {:.1f} faults/min\n",
                              c.name, a.faults, c.seed, c.wall_s,
                              c.wall_s > 0 ? 60.0 * double(a.faults) / c.wall_s : 0.0);
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

int run_campaign(const CampaignOptions& o) {
  StopSignalHandlers stop_handlers;
  const auto t0 = std::chrono::steady_clock::now();
  if (o.faults < 1 || o.jobs < 1) {
    std::cerr << "nanchaos campaign: error: --faults and --jobs must be at least 1\n";
    return 2;
  }
  Scenario base;
  try {
    base = load_scenario(o.scenario);
  } catch (const ScenarioError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  const auto missing = unimplemented_features(base);
  if (!missing.empty()) {
    std::cerr << fmt::format("nanchaos campaign: error: {}: not implemented yet: {}\n", o.scenario,
                             fmt::join(missing, "; "));
    return 2;
  }
  if (base.job.device == Device::kCuda) {
    if (const std::string why = gpu_skip_reason(base); !why.empty()) {
      std::cerr << fmt::format("nanchaos campaign: error: {}: cannot run here: {}\n", o.scenario,
                               why);
      return 2;
    }
  }
  if (!base.faults.empty()) {
    std::cerr << fmt::format(
        "nanchaos campaign: note: {}: its {} [[fault]] and its [expect] are ignored (the "
        "campaign draws the faults and scores them against their ground truth)\n",
        o.scenario, base.faults.size());
  }
  LaunchContext ctx;
  ctx.launcher = default_launcher(o.launcher);
  ctx.self_exe = o.self_exe;
  ctx.private_mpi_tmpdir = o.jobs > 1;
  const auto words = split_words(ctx.launcher);
  if (words.empty() || !find_program(words.front())) {
    std::cerr << fmt::format("nanchaos campaign: error: launcher '{}' not found\n", ctx.launcher);
    return 2;
  }
  if (command_needs_python(base)) {
    const PythonInterpreter py = resolve_python(base.job.torch, base.job.python_packages);
    if (py.path.empty()) {
      std::cerr << "nanchaos campaign: error: " << py.error << "\n";
      return 2;
    }
    ctx.python = py.path;
  }

  const std::string out = o.out_dir.empty()
                              ? "results/campaigns/" + utc_stamp("%Y%m%dT%H%M%SZ") + "-" + base.name
                              : o.out_dir;
  // Another campaign's rows, fault folders and re-run commands must not mix with this one's.
  std::error_code exists_ec;
  if (fs::exists(fs::path(out) / "campaign.json", exists_ec) ||
      fs::exists(fs::path(out) / "faults", exists_ec)) {
    std::cerr << fmt::format(
        "nanchaos campaign: error: --out {}: holds an earlier campaign (campaign.json or "
        "faults/); give a new folder or remove it\n",
        out);
    return 2;
  }
  results::Campaign c;
  c.scenario = o.scenario;
  c.name = base.name;
  c.seed = o.seed.value_or(base.seed);
  c.requested = o.faults;
  c.jobs = o.jobs;
  c.started = utc_stamp("%Y-%m-%dT%H:%M:%SZ");
  c.nanchaos_version = NANCHAOS_VERSION;
  const std::string base_text = read_text(o.scenario);
  std::vector<DrawnFault> drawn;
  try {
    const CampaignTargets targets = targets_of(base, ctx);
    c.kinds = campaign_kinds(base, targets, o.kinds);
    drawn = draw_faults(base, base_text, targets, c.kinds, c.seed, o.faults);
  } catch (const CampaignError& e) {
    std::cerr << fmt::format("nanchaos campaign: error: {}\n", e.what());
    return 2;
  }
  auto interrupted_before_any_run = [] {
    std::cerr << fmt::format("nanchaos campaign: interrupted by {} before any fault ran\n",
                             signal_name(stop_signal()));
    return 128 + stop_signal();
  };
  if (stop_signal() != 0) return interrupted_before_any_run();
  std::vector<std::string> files(drawn.size());
  try {
    for (const auto& d : drawn) {
      if (stop_signal() != 0) return interrupted_before_any_run();
      const std::string dir = fmt::format("{}/faults/{:03}", out, d.index);
      fs::create_directories(dir);
      files[size_t(d.index)] = dir + "/scenario.toml";
      const std::string header = fmt::format(
          "# nanchaos campaign {} (seed {}), fault {} of {}: {}\n# re-run it alone: nanchaos run "
          "{}",
          o.scenario, c.seed, d.index, drawn.size(), d.fault_class, files[size_t(d.index)]);
      write_text(files[size_t(d.index)], fault_scenario_toml(base, base_text, d, header));
    }
  } catch (const std::exception& e) {
    std::cerr << fmt::format("nanchaos campaign: error: --out {}: {}\n", out, e.what());
    return 2;
  }

  std::mutex mu;
  std::vector<std::optional<results::CampaignFault>> rows(drawn.size());
  bool write_failed = false;
  auto write_files = [&](bool final_files) {
    c.faults.clear();
    for (const auto& r : rows) {
      if (r) c.faults.push_back(*r);
    }
    c.summary = results::summarize_campaign(c.faults);
    c.thresholds = check_thresholds(base, c.summary);
    c.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    try {
      results::write_campaign_json(c, out + "/campaign.json");
      if (final_files) {
        results::write_campaign_markdown(c, out + "/campaign.md");
        results::write_campaign_junit(c, out + "/campaign.xml");
      }
    } catch (const std::exception& e) {
      if (!write_failed) std::cerr << "nanchaos campaign: error: " << e.what() << "\n";
      write_failed = true;
    }
  };
  // The work: batches of in-launch faults (one per worker), then single faults.
  struct Item {
    std::vector<size_t> faults;
    bool in_launch = false;
  };
  std::vector<Item> queue;
  {
    std::vector<size_t> inlaunch;
    for (size_t i = 0; i < drawn.size(); ++i) {
      bool eligible = false;
      if (!o.one_launch_per_fault) {
        try {
          eligible = inlaunch_eligible(load_scenario(files[i]));
        } catch (const ScenarioError&) {
        }
      }
      if (eligible) {
        inlaunch.push_back(i);
      } else {
        queue.push_back({{i}, false});
      }
    }
    const size_t batches = std::min<size_t>(size_t(o.jobs), inlaunch.size());
    std::vector<std::vector<size_t>> split(batches);
    for (size_t k = 0; k < inlaunch.size(); ++k) split[k % batches].push_back(inlaunch[k]);
    for (auto& b : split) queue.insert(queue.begin(), Item{std::move(b), true});
  }
  std::atomic<int> launches{0};
  const results::ScoringRules rules = scoring_rules(base);
  auto record = [&](size_t i, results::ScenarioResult judged) {
    const DrawnFault& d = drawn[i];
    results::CampaignFault row =
        results::score_fault(d.index, d.fault, d.fault_class, d.truth, judged, rules);
    row.scenario = fmt::format("faults/{:03}/scenario.toml", d.index);
    row.rerun = "nanchaos run " + files[i];
    std::lock_guard<std::mutex> lock(mu);
    if (!o.quiet) std::cerr << progress_line(row, int(drawn.size())) << std::flush;
    rows[i] = std::move(row);
    write_files(false);  // after every fault: nothing measured is lost if the controller dies
  };
  // A batch: one launch; the faults it never started go back to the queue, as a new batch when
  // the launch got somewhere, one launch each otherwise (a clean prefix that cannot get there).
  auto run_batch = [&](const std::vector<size_t>& batch) {
    std::vector<Scenario> scenarios;
    for (size_t i : batch) scenarios.push_back(load_scenario(files[i]));
    const std::string launch_dir = fmt::format("{}/launches/{:03}", out, launches++);
    const std::string job_id = fmt::format("{}-b{}-{}", getpid(), batch.front(), now_us());
    auto judged = run_inlaunch_batch(scenarios, launch_dir, ctx, job_id);
    std::vector<size_t> rest;
    for (size_t k = 0; k < batch.size(); ++k) {
      if (!judged[k]) {
        rest.push_back(batch[k]);
      } else if (judged[k]->reason == "interrupted") {
        return;
      } else {
        record(batch[k], std::move(*judged[k]));
      }
    }
    if (rest.empty() || stop_signal() != 0) return;
    std::lock_guard<std::mutex> lock(mu);
    if (rest.size() < batch.size()) {
      queue.push_back({rest, true});
    } else {
      for (size_t i : rest) queue.push_back({{i}, false});
    }
  };
  size_t next = 0;  // the queue's next item (guarded by mu; batches may append to the queue)
  auto worker = [&] {
    while (stop_signal() == 0) {
      Item item;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (next >= queue.size()) return;
        item = queue[next++];
      }
      if (item.in_launch) {
        run_batch(item.faults);
        continue;
      }
      const size_t i = item.faults.front();
      const std::string dir = fs::path(files[i]).parent_path().string();
      results::ScenarioResult judged;
      try {
        const Scenario s = load_scenario(files[i]);
        const std::string job_id = fmt::format("{}-c{}-{}", getpid(), i, now_us());
        judged = run_scenario_job(s, dir, ctx, job_id);
      } catch (const ScenarioError& e) {
        judged.reason = e.what();  // cannot happen: draw_faults loaded it (a changed file?)
      }
      if (judged.reason == "interrupted") return;  // not measured: listed as not run
      record(i, std::move(judged));
    }
  };
  std::vector<std::thread> workers;
  for (int j = 0; j < std::min<int>(o.jobs, int(drawn.size())); ++j) workers.emplace_back(worker);
  for (auto& w : workers) w.join();

  if (stop_signal() != 0) c.interrupted = true;
  write_files(true);
  std::string html_note;
  if (!c.interrupted) {
    try {
      html_note = results::write_campaign_html(c, out + "/campaign.html");
    } catch (const std::exception& e) {
      std::cerr << "nanchaos campaign: error: " << e.what() << "\n";
      write_failed = true;
    }
  }
  if (!o.quiet) std::cout << console_summary(c, out) << std::flush;
  if (!html_note.empty())
    std::cerr << "nanchaos campaign: warning: campaign.html: " << html_note << "\n";
  if (c.interrupted) {
    std::cerr << fmt::format(
        "nanchaos campaign: interrupted by {}: {} of {} faults measured; reports: "
        "{}/campaign.json, campaign.md, campaign.xml\n",
        signal_name(stop_signal()), c.faults.size(), drawn.size(), out);
    return 128 + stop_signal();
  }
  if (write_failed) return 2;
  if (c.summary.all.errors > 0) {
    std::cerr << fmt::format(
        "nanchaos campaign: error: {} fault(s) could not be measured (their rows say why)\n",
        c.summary.all.errors);
    return 2;
  }
  bool missed = false;
  for (const auto& [key, check] : c.thresholds.items()) {
    if (check["pass"].get<bool>()) continue;
    missed = true;
    std::cerr << fmt::format("nanchaos campaign: [campaign].{} = {} missed: {}\n", key,
                             check["min"].dump(), check["actual"].dump());
  }
  return missed ? 1 : 0;
}

}  // namespace nanchaos::harness
