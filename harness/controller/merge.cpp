#include "harness/controller/merge.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "harness/common/exit_status.h"
#include "results/campaign.h"
#include "results/html.h"
#include "results/report.h"
#include "results/stats.h"

namespace nanchaos::harness {
namespace {

namespace fs = std::filesystem;

struct Part {
  std::string dir;
  results::SuiteReport report;
};

Part read_part(const std::string& dir) {
  const std::string path = (fs::path(dir) / "report.json").string();
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read (not a nanchaos run folder?)");
  try {
    return {dir, results::suite_from_json(nlohmann::json::parse(in))};
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

// The scenario's folder in the merged run: DIR/<name>, or DIR/<name>/trial-K for a trial.
std::string moved_run_dir(const std::string& old_dir, const std::string& name,
                          const std::string& out) {
  if (old_dir.empty()) return old_dir;
  const std::string leaf = fs::path(old_dir).filename().string();
  const fs::path base = fs::path(out) / name;
  return (leaf.rfind("trial-", 0) == 0 ? base / leaf : base).string();
}

void move_dirs(results::ScenarioResult& r, const std::string& out) {
  r.run_dir = moved_run_dir(r.run_dir, r.name, out);
  for (auto& t : r.trials) t.run_dir = moved_run_dir(t.run_dir, r.name, out);
}

// Copies PART/<name> to OUT/<name> (the whole folder: events, logs, trials) and reads the
// representative trial's timeline.json back for report.html.
void copy_scenario(const Part& part, results::ScenarioResult& r, const std::string& out) {
  const fs::path from = fs::path(part.dir) / r.name;
  std::error_code ec;
  if (fs::is_directory(from, ec)) {
    fs::copy(from, fs::path(out) / r.name,
             fs::copy_options::recursive | fs::copy_options::overwrite_existing, ec);
    if (ec) {
      throw std::runtime_error(fmt::format("cannot copy {} to {}: {}", from.string(),
                                           (fs::path(out) / r.name).string(), ec.message()));
    }
  }
  move_dirs(r, out);
  if (r.run_dir.empty()) return;
  std::ifstream tl(fs::path(r.run_dir) / "timeline.json");
  if (!tl) return;
  try {
    r.timeline = results::timeline_from_json(nlohmann::json::parse(tl));
  } catch (const std::exception& e) {
    std::cerr << fmt::format("nanchaos merge: warning: {}/timeline.json: {} (no timeline)\n",
                             r.run_dir, e.what());
  }
}

// The suite order and the shards missing, after checking that the parts fit together.
struct Plan {
  std::vector<std::string> order;  ///< scenario names in suite order ("" when not sharded)
  std::vector<int> missing;        ///< shard numbers no part brought
};

Plan plan(const std::vector<Part>& parts) {
  Plan p;
  const auto& first = parts.front().report.shard;
  std::set<int> seen;
  for (const auto& part : parts) {
    const auto& s = part.report.shard;
    if (bool(s) != bool(first)) {
      throw std::runtime_error(fmt::format(
          "{}: mixes sharded and unsharded runs (report.json \"shard\" present in some only)",
          part.dir));
    }
    if (!s) continue;
    if (s->count != first->count || s->suite != first->suite) {
      throw std::runtime_error(
          fmt::format("{}: shard {}/{} of another suite or split (the first run is shard {}/{})",
                      part.dir, s->index, s->count, first->index, first->count));
    }
    if (!seen.insert(s->index).second) {
      throw std::runtime_error(
          fmt::format("{}: shard {}/{} given twice", part.dir, s->index, s->count));
    }
  }
  if (first) {
    p.order = first->suite;
    for (int i = 1; i <= first->count; ++i) {
      if (!seen.count(i)) p.missing.push_back(i);
    }
  }
  return p;
}

results::SuiteReport combine(std::vector<Part>& parts, const Plan& p, const std::string& out) {
  results::SuiteReport merged;
  const results::SuiteReport& first = parts.front().report;
  merged.suite = first.suite;
  merged.nanchaos_version = first.nanchaos_version;
  merged.started = first.started;
  std::set<std::string> hosts;
  std::map<std::string, results::ScenarioResult> by_name;
  std::vector<std::string> arrival;
  for (auto& part : parts) {
    const auto& r = part.report;
    if (r.nanchaos_version != merged.nanchaos_version) {
      std::cerr << fmt::format(
          "nanchaos merge: warning: {} was written by nanchaos {}, the first run by {}\n", part.dir,
          r.nanchaos_version, merged.nanchaos_version);
    }
    if (!r.started.empty() && (merged.started.empty() || r.started < merged.started)) {
      merged.started = r.started;
    }
    if (!r.host.empty()) hosts.insert(r.host);
    merged.trials = std::max(merged.trials, r.trials);
    if (r.interrupted && !merged.interrupted) {
      merged.interrupted = true;
      merged.interrupt_signal = r.interrupt_signal;
    }
    for (auto s : r.scenarios) {
      if (by_name.count(s.name)) {
        throw std::runtime_error(
            fmt::format("{}: scenario {} is in two of the runs", part.dir, s.name));
      }
      copy_scenario(part, s, out);
      arrival.push_back(s.name);
      by_name.emplace(s.name, std::move(s));
    }
    merged.not_run.insert(merged.not_run.end(), r.not_run.begin(), r.not_run.end());
    merged.pending.insert(merged.pending.end(), r.pending.begin(), r.pending.end());
    merged.complete = merged.complete && r.complete;
  }
  merged.host = fmt::format("{}", fmt::join(hosts, ","));
  for (const auto& name : p.order.empty() ? arrival : p.order) {
    auto it = by_name.find(name);
    if (it != by_name.end()) {
      merged.scenarios.push_back(std::move(it->second));
      by_name.erase(it);
    } else if (std::find(merged.not_run.begin(), merged.not_run.end(), name) ==
                   merged.not_run.end() &&
               std::find(merged.pending.begin(), merged.pending.end(), name) ==
                   merged.pending.end()) {
      merged.not_run.push_back(name);  // its shard is missing
    }
  }
  if (!p.missing.empty()) merged.interrupted = true;
  if (merged.interrupted) merged.complete = false;
  merged.detector_stats = results::suite_detector_stats(merged);
  return merged;
}

// --- campaigns (`nanchaos campaign --shard I/N`) ---

bool is_campaign_dir(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / "campaign.json", ec) &&
         !fs::exists(fs::path(dir) / "report.json", ec);
}

results::Campaign read_campaign(const std::string& dir) {
  const std::string path = (fs::path(dir) / "campaign.json").string();
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read");
  try {
    return results::campaign_from_json(nlohmann::ordered_json::parse(in));
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

// The shards of one campaign: same scenario, seed, draws and split; each shard once.
std::vector<int> check_campaign_parts(const std::vector<std::string>& dirs,
                                      const std::vector<results::Campaign>& parts) {
  const results::Campaign& a = parts.front();
  std::set<int> seen;
  for (size_t k = 0; k < parts.size(); ++k) {
    const results::Campaign& c = parts[k];
    if (c.name != a.name || c.seed != a.seed || c.requested != a.requested || c.kinds != a.kinds ||
        c.values != a.values) {
      throw std::runtime_error(fmt::format(
          "{}: campaign {} (seed {}, {} faults, --values {}) is not the first's {} (seed {}, {} "
          "faults, --values {})",
          dirs[k], c.name, c.seed, c.requested, c.values, a.name, a.seed, a.requested, a.values));
    }
    if (bool(c.shard) != bool(a.shard) || (c.shard && c.shard->count != a.shard->count)) {
      throw std::runtime_error(dirs[k] + ": split differently from the first run (--shard)");
    }
    const int index = c.shard ? c.shard->index : 1;
    if (!seen.insert(index).second) {
      throw std::runtime_error(fmt::format("{}: shard {} given twice", dirs[k], index));
    }
  }
  std::vector<int> missing;
  const int count = a.shard ? a.shard->count : 1;
  for (int i = 1; i <= count; ++i) {
    if (!seen.count(i)) missing.push_back(i);
  }
  return missing;
}

int merge_campaigns(const MergeOptions& opts) {
  std::vector<results::Campaign> parts;
  for (const auto& d : opts.runs) parts.push_back(read_campaign(d));
  const std::vector<int> missing = check_campaign_parts(opts.runs, parts);
  std::error_code ec;
  if (fs::exists(fs::path(opts.out_dir) / "campaign.json", ec)) {
    throw std::runtime_error(fmt::format(
        "--out {}: holds a campaign.json already (merge into a new folder)", opts.out_dir));
  }
  fs::create_directories(fs::path(opts.out_dir) / "faults", ec);
  if (ec) throw std::runtime_error("--out " + opts.out_dir + ": " + ec.message());
  results::Campaign merged = parts.front();
  merged.faults.clear();
  merged.shard.reset();
  std::map<int, results::CampaignFault> rows;
  for (size_t k = 0; k < parts.size(); ++k) {
    const results::Campaign& c = parts[k];
    merged.started = std::min(merged.started, c.started);
    merged.wall_s = std::max(merged.wall_s, c.wall_s);  // the parts ran side by side
    merged.interrupted = merged.interrupted || c.interrupted;
    merged.complete = merged.complete && c.complete;
    for (auto f : c.faults) {
      const std::string dir = fmt::format("faults/{:03}", f.index);
      fs::copy(fs::path(opts.runs[k]) / dir, fs::path(opts.out_dir) / dir,
               fs::copy_options::recursive | fs::copy_options::overwrite_existing, ec);
      f.rerun = "nanchaos run " + (fs::path(opts.out_dir) / f.scenario).string();
      if (!rows.emplace(f.index, std::move(f)).second) {
        throw std::runtime_error(
            fmt::format("{}: fault {} is in two of the runs", opts.runs[k], f.index));
      }
    }
  }
  for (auto& [index, f] : rows) merged.faults.push_back(std::move(f));
  if (!missing.empty()) merged.interrupted = true;
  merged.summary = results::summarize_campaign(merged.faults);
  merged.thresholds = results::recheck_thresholds(parts.front().thresholds, merged.summary);
  const std::string out = opts.out_dir;
  results::write_campaign_json(merged, out + "/campaign.json");
  results::write_campaign_markdown(merged, out + "/campaign.md");
  results::write_campaign_junit(merged, out + "/campaign.xml");
  if (!opts.junit.empty()) results::write_campaign_junit(merged, opts.junit);
  const std::string note = results::write_campaign_html(merged, out + "/campaign.html");
  if (!note.empty()) std::cerr << "nanchaos merge: warning: campaign.html: " << note << "\n";
  if (!opts.quiet) {
    std::cout << fmt::format(
        "merged {} campaign run(s): {} of {} faults measured: {}/campaign.json\n", parts.size(),
        merged.faults.size(), merged.requested, out);
  }
  if (!missing.empty()) {
    std::cerr << fmt::format(
        "nanchaos merge: error: shard(s) {} of {} missing: {} of {} faults measured\n",
        fmt::join(missing, ", "), parts.front().shard ? parts.front().shard->count : 1,
        merged.faults.size(), merged.requested);
    return kExitErrored;
  }
  if (merged.summary.all.errors > 0) return kExitErrored;
  for (const auto& [key, check] : merged.thresholds.items()) {
    if (!check["pass"].get<bool>()) return 1;
  }
  return 0;
}

}  // namespace

int merge_runs(const MergeOptions& opts) {
  try {
    if (opts.runs.empty()) throw std::runtime_error("no run folder given");
    const size_t campaigns =
        size_t(std::count_if(opts.runs.begin(), opts.runs.end(), is_campaign_dir));
    if (campaigns == opts.runs.size()) return merge_campaigns(opts);
    if (campaigns > 0) {
      throw std::runtime_error(
          "mixes campaign folders (campaign.json) and suite runs (report.json)");
    }
    std::vector<Part> parts;
    for (const auto& d : opts.runs) parts.push_back(read_part(d));
    const Plan p = plan(parts);
    std::error_code ec;
    if (fs::exists(fs::path(opts.out_dir) / "report.json", ec)) {
      throw std::runtime_error(fmt::format(
          "--out {}: holds a report.json already (merge into a new folder)", opts.out_dir));
    }
    fs::create_directories(opts.out_dir, ec);
    if (ec) throw std::runtime_error("--out " + opts.out_dir + ": " + ec.message());
    const results::SuiteReport merged = combine(parts, p, opts.out_dir);
    results::write_report_json(merged, opts.out_dir + "/report.json");
    results::write_junit(merged, opts.out_dir + "/junit.xml");
    results::write_markdown(merged, opts.out_dir + "/report.md");
    if (!opts.junit.empty()) results::write_junit(merged, opts.junit);
    const std::string html_note = results::write_html(merged, opts.out_dir + "/report.html");
    if (!html_note.empty())
      std::cerr << "nanchaos merge: warning: report.html: " << html_note << "\n";
    if (!opts.quiet) {  // the whole suite's console table, as one unsharded `run` prints it
      std::cout << results::console_header();
      for (const auto& sc : merged.scenarios) std::cout << results::console_row(sc);
      std::cout << results::console_footer(merged);
      std::cout << fmt::format("merged {} run(s), {} scenario(s): {}/report.json\n", parts.size(),
                               merged.scenarios.size(), opts.out_dir);
    }
    if (!p.missing.empty()) {
      std::cerr << fmt::format(
          "nanchaos merge: error: shard(s) {} of {} missing: their {} scenario(s) are listed as "
          "not run in {}/report.json\n",
          fmt::join(p.missing, ", "), parts.front().report.shard->count, merged.not_run.size(),
          opts.out_dir);
      return kExitErrored;
    }
    if (merged.errors() > 0) return kExitErrored;
    return merged.failed() > 0 ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "nanchaos merge: error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace nanchaos::harness
