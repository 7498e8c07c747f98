// The clean reference run of [expect] final_matches_clean (clean_run.h). The clean job is the
// scenario as written less its faults: a built-in rank loads its scenario from a file, so it gets
// a copy without [[fault]]; an external job's faults come from the plan the controller writes, so
// it gets `s` with no fault. [expect] and [campaign] are dropped from the copy (a scenario with no
// fault needs no [expect]); [job] restarts stays but means nothing here: one launch.
#include "harness/controller/clean_run.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "harness/common/digest.h"
#include "harness/controller/rank_evidence.h"
#include "harness/evidence/event_paths.h"

namespace fs = std::filesystem;

namespace nanchaos::harness {
namespace {

using nlohmann::json;

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), {}};
}

json to_json(const CleanReference& c) {
  json ranks = json::array();
  for (const auto& r : c.ranks) {
    ranks.push_back(r ? json{{"params_hash", r->first}, {"optim_hash", r->second}} : json(nullptr));
  }
  return {{"key", c.key}, {"seed", c.seed}, {"ranks", ranks}, {"error", c.error}};
}

// The scenario less what makes it faulted or judged, as toml++ writes it; `keyed`: less
// [scenario] too (its name, description and tags change nothing the job computes; the seed is
// keyed apart).
std::string clean_text(const std::string& scenario_file, bool keyed) {
  toml::table root = toml::parse(file_text(scenario_file), std::string_view(scenario_file));
  for (const char* t : {"fault", "expect", "campaign"}) root.erase(t);
  if (keyed) root.erase("scenario");
  std::ostringstream out;
  out << root << "\n";
  return out.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::optional<CleanReference> read_reference_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    const json j = json::parse(in);
    CleanReference c;
    c.key = j.at("key").get<std::string>();
    c.seed = j.at("seed").get<uint64_t>();
    c.error = j.value("error", "");
    for (const auto& r : j.at("ranks")) {
      if (r.is_null()) {
        c.ranks.emplace_back(std::nullopt);
      } else {
        c.ranks.emplace_back(std::pair{r.at("params_hash").get<std::string>(),
                                       r.at("optim_hash").get<std::string>()});
      }
    }
    return c;
  } catch (const json::exception&) {
    return std::nullopt;  // a foreign or cut file: run the clean job again
  }
}

}  // namespace

std::string clean_run_dir(const std::string& run_dir) {
  return (fs::path(run_dir) / "clean").string();
}

std::string clean_run_key(const std::string& scenario_file, uint64_t seed) {
  const std::string text = clean_text(scenario_file, true);
  Digest d;
  d.add_bytes(text.data(), text.size()).add_u64(seed);
  return d.hex();
}

std::optional<CleanReference> read_clean_reference(const std::string& run_dir) {
  return read_reference_file(fs::path(clean_run_dir(run_dir)) / "clean.json");
}

CleanReference run_clean_reference(const Scenario& s, const std::string& run_dir,
                                   const LaunchContext& ctx, const std::string& job_id,
                                   std::optional<uint64_t> seed) {
  CleanReference c;
  c.seed = seed.value_or(s.seed);
  try {
    c.key = clean_run_key(s.file, c.seed);
  } catch (const std::exception& e) {
    c.error = e.what();
    return c;
  }
  if (auto cached = read_clean_reference(run_dir); cached && cached->key == c.key) return *cached;
  const std::string dir = clean_run_dir(run_dir);
  if (!ctx.clean_cache.empty()) {
    auto shared = read_reference_file(fs::path(ctx.clean_cache) / "clean.json");
    if (shared && shared->key == c.key) {
      try {
        fs::create_directories(dir);
        write_text(fs::path(dir) / "clean.json", to_json(*shared).dump(1) + "\n");
      } catch (const std::exception& e) {
        shared->error = std::string("cannot copy the clean reference: ") + e.what();
      }
      return *shared;
    }
  }
  try {
    fs::remove_all(dir);
    fs::create_directories(events_dir(dir));
    const std::string file = (fs::path(dir) / "scenario.toml").string();
    Scenario clean = s;
    clean.faults.clear();
    if (!s.job.external()) write_text(file, clean_text(s.file, false));
    const JobResult job = launch_scenario(clean, file, dir, ctx, job_id, seed);
    const JobEvidence ev = read_job_evidence(int(s.job.ranks), dir, job);
    std::vector<std::string> without;
    for (size_t r = 0; r < ev.ranks.size(); ++r) {
      const auto& f = ev.ranks[r].final;
      if (f && !f->params_hash.empty()) {
        c.ranks.emplace_back(std::pair{f->params_hash, f->optim_hash});
      } else {
        c.ranks.emplace_back(std::nullopt);
        without.push_back(std::to_string(r));
      }
    }
    if (!job.launch_error.empty()) {
      c.error = "the clean run could not start: " + job.launch_error;
    } else if (ev.unreadable) {
      c.error = "the clean run's events are unreadable: " + *ev.unreadable;
    } else if (!without.empty()) {
      c.error = fmt::format("the clean run's rank(s) {} wrote no final digests; see {}/ranks.log",
                            fmt::join(without, ", "), dir);
    }
    write_text(fs::path(dir) / "clean.json", to_json(c).dump(1) + "\n");
  } catch (const std::exception& e) {
    c.error = std::string("the clean run failed: ") + e.what();
  }
  return c;
}

}  // namespace nanchaos::harness
