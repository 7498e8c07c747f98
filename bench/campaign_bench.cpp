// nanchaos_bench_campaign: faults per minute of `nanchaos campaign` run in-launch (the built-in
// jobs' default: many faults per launch from in-memory checkpoints, campaign_batch.h) against
// `--one-launch-per-fault`, the same N faults of the same seed, side by side in one run.
//
// One benchmark row, BM_CampaignFaultsPerMinute, with user counters:
//   faults_per_min_one_launch   N / wall minutes of the --one-launch-per-fault campaign
//   faults_per_min_in_launch    N / wall minutes of the in-launch campaign
//   ratio_vs_one_launch         in-launch / one-launch (goal >= 30, limit >= 10)
//   rows_equal                  1 when both campaign.json list the same outcome, named
//                               detector/rank/step/layer/cause and latency for every fault
// Wall time is the campaign command's own (campaign.json `wall_s`). Default: campaigns/
// mlp-default.toml, 40 faults, seed 1, --jobs 1, every kind but hang and crash (they end their
// launch by design); NANCHAOS_BENCH_QUICK=1: 8 faults (a smoke run, not a figure).
// NANCHAOS_BENCH_CAMPAIGN / _FAULTS / _JOBS / _KINDS (a --kinds list, or "all") override.
// Torch-free: it launches the nanchaos binary.
#include <benchmark/benchmark.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/bench_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// Runs the campaign into `out` and returns its campaign.json.
json run_campaign(const std::string& scenario, int faults, int jobs, const std::string& kinds,
                  bool one_launch, const std::string& out) {
  fs::remove_all(out);
  fs::create_directories(fs::path(out).parent_path());
  const std::string cmd = std::string(NANCHAOS_BINARY) + " campaign " + scenario + " --faults " +
                          std::to_string(faults) + " --seed 1 --jobs " + std::to_string(jobs) +
                          " --quiet --out " + out + (kinds.empty() ? "" : " --kinds " + kinds) +
                          (one_launch ? " --one-launch-per-fault" : "");
  const std::string log = out + ".log";
  // Exit 1 (a [campaign] threshold missed) is a measured campaign too.
  const int rc = std::system(("timeout -s KILL 3600 " + cmd + " >" + log + " 2>&1").c_str());
  if (rc != 0 && !(WIFEXITED(rc) && WEXITSTATUS(rc) == 1)) {
    throw std::runtime_error("campaign failed (see " + log + "): " + cmd);
  }
  std::ifstream in(out + "/campaign.json");
  return json::parse(in);
}

// The scored row fields both modes must agree on.
json row_key(const json& f) {
  return {f.value("outcome", json()), f.value("named", json()), f.value("latency_steps", json())};
}

void BM_CampaignFaultsPerMinute(benchmark::State& state) {
  const bool quick = nanchaos::bench::quick_mode();
  const std::string scenario = env_or(
      "NANCHAOS_BENCH_CAMPAIGN", std::string(NANCHAOS_SOURCE_DIR) + "/campaigns/mlp-default.toml");
  const int faults = std::stoi(env_or("NANCHAOS_BENCH_FAULTS", quick ? "8" : "40"));
  const int jobs = std::stoi(env_or("NANCHAOS_BENCH_JOBS", "1"));
  // hang and crash faults end their launch by design (one launch each in both modes): the
  // default measures the kinds that run in-launch; NANCHAOS_BENCH_KINDS=all draws every kind.
  std::string kinds = env_or("NANCHAOS_BENCH_KINDS", "batch,bitflip,comm,lr,state,tensor");
  if (kinds == "all") kinds.clear();
  const std::string tmp =
      (fs::temp_directory_path() / ("nanchaos-bench-campaign-" + std::to_string(getpid())))
          .string();
  double one = 0, in = 0;
  bool equal = true;
  for (auto _ : state) {
    try {
      const json a = run_campaign(scenario, faults, jobs, kinds, true, tmp + "/one");
      const json b = run_campaign(scenario, faults, jobs, kinds, false, tmp + "/in");
      one = faults / (a.at("wall_s").get<double>() / 60.0);
      in = faults / (b.at("wall_s").get<double>() / 60.0);
      const auto& fa = a.at("faults");
      const auto& fb = b.at("faults");
      equal = fa.size() == fb.size();
      for (size_t i = 0; equal && i < fa.size(); ++i) equal = row_key(fa[i]) == row_key(fb[i]);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      return;
    }
  }
  state.counters["faults"] = faults;
  state.counters["faults_per_min_one_launch"] = one;
  state.counters["faults_per_min_in_launch"] = in;
  state.counters["ratio_vs_one_launch"] = one > 0 ? in / one : 0;
  state.counters["rows_equal"] = equal ? 1 : 0;
  if (!std::getenv("NANCHAOS_KEEP_RUNS")) fs::remove_all(tmp);
}

BENCHMARK(BM_CampaignFaultsPerMinute)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
