// What the detection stack costs per training step, on a compute-bound transformer.
//
// Each benchmark row is one stack at one rank count: BM_StepOverhead/ranks:R/stack:S. The jobs
// are real: this binary writes a scenario TOML per stack, runs `nanchaos run` on it (the path of
// the `nanchaos` binary is compiled in), and reads the per-step times from the ranks' event logs
// (step_end.t_us - step_begin.t_us of the same step; warm-up steps dropped; pooled over ranks).
// The stacks, measured interleaved in rounds (none, default, full, anomaly, none, ...) so that a
// neighbour's burst on a shared host hits all of them alike:
//   none     [detectors] preset "none": training and the gradient all-reduce (SUM, divide by the
//            world size), no detector, no consensus, no watchdog;
//   default  preset "default" (batch, loss, grad, post_reduce, watchdog, replica at
//            replica_every = 10, straggler + the consensus round);
//   nostraggler  the default preset's detectors without `straggler` (the list read from the
//            registry, `nanchaos keys --format json`, so it follows the preset): default against
//            it is straggler's cost (its phase times in the consensus round, 32 bytes per rank,
//            and its median per step). Its rows add ratio_default_vs_nostraggler and
//            ratio_cpu_default_vs_nostraggler (default's mean wall and CPU time per step over
//            this stack's, same run);
//   full     preset "full": every detector, which includes always-on anomaly mode;
//   anomaly  the default detectors plus `anomaly` (LibTorch's autograd anomaly mode, always on):
//            the usual debugging baseline;
//   replica  the default detectors plus `replica` with replica_every = 1 (a digest of parameters,
//            buffers and Adam state plus its exchange on every step); its rows add
//            replica_check_ms (the round's own time, from the ranks' replica_check events),
//            replica_share_of_step (= replica_check_ms / step_ms of the same jobs: the cost of a
//            step with the digest against one without) and replica_every10_overhead (that share
//            / 10: the cost at the default replica_every = 10).
//   sdc      the default detectors plus `sdc` with sdc_every = 1 (the step's forward and backward
//            recomputed and compared bit for bit on every step); its rows add sdc_recompute_ms
//            (the recompute and comparison, from the ranks' recompute_check events),
//            sdc_share_of_step (= sdc_recompute_ms / (step_ms - sdc_recompute_ms) of the same
//            jobs: a recompute against the rest of its step) and sdc_every100_overhead (that
//            share / 100: the cost at the default sdc_every = 100).
// All measurements of one rank count run when its first row runs; every row then reports
// manual time = its stack's mean step time, and counters step_ms (the same, in ms), step_p50_ms,
// ratio_vs_none (= mean step time / none's mean step time, same run), ranks, steps (measured
// steps pooled over ranks and rounds), detections (must be 0: a clean run), cpu_ms and
// ratio_cpu_vs_none (the same from the ranks' process CPU time per step, which a shared host's
// other tenants disturb far less than wall time), localize_ms and localize_share_of_step (the
// always-on localization's own time per step, timed by the ranks, and its share of the step).
//
// NANCHAOS_BENCH_STEP_RANKS=2 (or "1,2,4"): the rank counts to register (default 1 and 4).
// NANCHAOS_BENCH_DEVICE=cuda: the GPU variant (one rank over NCCL, a larger transformer; see
// workload_toml), run by .ci/gpu-check on a GPU host.
// Workload (state it with the figures): transformer, hidden 128, heads 4, layers 2, seq_len 32,
// batch_size 8 per rank, vocab 512, Adam, fp32, one torch thread per rank.
// Defaults: 4 rounds, each starting one stack later; 16 steps per job with 3 warm-up steps (5 and 1
// for full/anomaly, which are ~5x slower per step). NANCHAOS_BENCH_QUICK=1: 1 round of 4 steps (3
// for the slow stacks), 1 warm-up: a smoke run, not figures. NANCHAOS_BENCH_ROUNDS=N sets the
// rounds and NANCHAOS_BENCH_FIRST_ROUND=k the first round's stack order (bench/run.py: one round
// per repetition, the repetitions interleaved with the other programs); unset, the first round
// is NANCHAOS_BENCH_REP (which bench/run.py sets for every program, --extra ones too).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_util.h"

namespace fs = std::filesystem;
namespace nb = nanchaos::bench;
using nlohmann::json;

namespace {

const char* const kStacks[] = {"none",    "default", "nostraggler", "full",
                               "anomaly", "replica", "sdc"};

struct StackTimes {
  std::vector<double> step_ms, cpu_ms;  // wall and process CPU time per step
  std::vector<double> replica_ms;       // replica_check events (stack replica)
  std::vector<double> recompute_ms;     // recompute_check events (stack sdc)
  std::vector<double> localize_ms;      // step_end.localize_us: the always-on localization
  int detections = 0;
};

// Jobs per stack and rank count (rounds), steps per job (slow_steps for full/anomaly, whose
// steps take ~5x longer) and the warm-up steps dropped from each job.
struct Plan {
  int rounds = 4, steps = 16, slow_steps = 5, warmup = 3, slow_warmup = 1;
};

// NANCHAOS_BENCH_DEVICE=cuda: the GPU variant (one rank over NCCL, a transformer sized to keep
// one GPU busy; see gpu_workload). Anything else, or unset: the CPU benchmark above.
bool cuda_mode() {
  const char* d = std::getenv("NANCHAOS_BENCH_DEVICE");
  return d != nullptr && std::string(d) == "cuda";
}

Plan plan() {
  Plan p;
  if (cuda_mode()) p = Plan{3, 24, 8, 4, 2};  // GPU steps are ms, job start-up (CUDA, NCCL) is s
  if (nb::quick_mode()) p = Plan{1, 4, 3, 1, 1};
  if (const char* r = std::getenv("NANCHAOS_BENCH_ROUNDS")) p.rounds = std::max(1, std::atoi(r));
  return p;
}

// NANCHAOS_BENCH_FIRST_ROUND=k: the stack order of round k first (bench/run.py runs one round per
// repetition and passes the repetition's index, so the order still rotates across repetitions);
// unset, NANCHAOS_BENCH_REP (bench/run.py's repetition index, set for every program).
int first_round() {
  const char* r = std::getenv("NANCHAOS_BENCH_FIRST_ROUND");
  if (!r) r = std::getenv("NANCHAOS_BENCH_REP");
  return r ? std::max(0, std::atoi(r)) : 0;
}

// NANCHAOS_BENCH_STEP_RANKS: comma-separated rank counts (each >= 1); unset or empty: 1 and 4 on
// CPU, 1 on the GPU (one GPU per host here). Throws std::invalid_argument on anything else.
std::vector<int> rank_counts() {
  const char* e = std::getenv("NANCHAOS_BENCH_STEP_RANKS");
  if (!e || !*e) return cuda_mode() ? std::vector<int>{1} : std::vector<int>{1, 4};
  std::vector<int> out;
  std::string item;
  for (const char* c = e;; ++c) {
    if (*c && *c != ',') {
      item += *c;
      continue;
    }
    const bool digits =
        !item.empty() && item.size() <= 4 &&
        std::all_of(item.begin(), item.end(), [](char d) { return d >= '0' && d <= '9'; });
    if (!digits || std::stoi(item) < 1) {
      throw std::invalid_argument(
          "NANCHAOS_BENCH_STEP_RANKS: want rank counts like \"2\" or "
          "\"1,2,4\", got \"" +
          std::string(e) + "\"");
    }
    out.push_back(std::stoi(item));
    item.clear();
    if (!*c) break;
  }
  return out;
}

// The default preset's detectors without `straggler`, from the registry (`nanchaos keys --format
// json`: each detector's presets; an fp16-only member such as loss_scale is left out, the jobs
// are fp32). Read once. Throws std::runtime_error when straggler is no longer in the preset (the
// nostraggler row would then measure nothing).
const std::vector<std::string>& default_without_straggler(const fs::path& dir) {
  static std::vector<std::string> names;
  if (!names.empty()) return names;
  const fs::path out = dir / "registry.json";
  fs::remove(out);
  nb::run_or_throw(std::string(NANCHAOS_BINARY) + " keys --format json", 60, out.string());
  std::ifstream in(out);
  const json reg = json::parse(in);
  bool had_straggler = false;
  for (const json& d : reg.at("detectors")) {
    const auto& presets = d.at("presets");
    if (std::find(presets.begin(), presets.end(), "default") == presets.end()) continue;
    if (d.value("preset_fp16_only", false)) continue;
    const std::string name = d.at("name").get<std::string>();
    if (name == "straggler") {
      had_straggler = true;
      continue;
    }
    names.push_back(name);
  }
  if (!had_straggler) {
    throw std::runtime_error("stack nostraggler: `straggler` is not in the default preset");
  }
  return names;
}

// CPU: ~200 ms of compute per step on one thread. GPU: hidden 1024, 16 heads, 4 blocks, seq 256,
// batch 16 (~60 M parameters, ~4 k tokens, ~1.5 TFLOP per step): long enough kernels that the
// step is GPU-bound rather than launch-bound.
std::string workload_toml() {
  if (cuda_mode()) {
    return "[workload]\nhidden = 1024\nheads = 16\nlayers = 4\nseq_len = 256\n"
           "batch_size = 16\nvocab = 8192\n";
  }
  return "[workload]\nhidden = 128\nheads = 4\nlayers = 2\nseq_len = 32\nbatch_size = 8\n"
         "vocab = 512\n";
}

std::string scenario_toml(const std::string& stack, int ranks, int steps, const fs::path& dir) {
  std::string detectors;
  if (stack == "nostraggler") {
    detectors = "enabled = [";
    for (const std::string& name : default_without_straggler(dir)) {
      detectors += (detectors.back() == '[' ? "\"" : ", \"") + name + "\"";
    }
    detectors += "]\n";
  } else if (stack == "anomaly") {
    detectors =
        "enabled = [\"batch\", \"loss\", \"grad\", \"post_reduce\", \"watchdog\", "
        "\"anomaly\"]\n";
  } else if (stack == "replica") {
    detectors =
        "enabled = [\"batch\", \"loss\", \"grad\", \"post_reduce\", \"watchdog\", "
        "\"replica\"]\nreplica_every = 1\n";
  } else if (stack == "sdc") {
    detectors =
        "enabled = [\"batch\", \"loss\", \"grad\", \"post_reduce\", \"watchdog\", "
        "\"sdc\"]\nsdc_every = 1\n";
  } else {
    detectors = "preset = \"" + stack + "\"\n";
  }
  return "[scenario]\nname = \"bench-step-" + stack +
         "\"\nseed = 7\n"
         "[job]\nworkload = \"transformer\"\nranks = " +
         std::to_string(ranks) + "\nsteps = " + std::to_string(steps) + "\ntimeout_ms = 600000\n" +
         std::string(cuda_mode() ? "device = \"cuda\"\nbackend = \"nccl\"\n" : "") +
         workload_toml() + "[detectors]\n" + detectors + "[expect]\ndetected = false\n";
}

// One job: returns its step times (warm-up dropped) and how many detections its ranks logged.
StackTimes run_job(const fs::path& dir, const std::string& stack, int ranks, int steps,
                   int warmup) {
  const fs::path toml = dir / (stack + ".toml");
  std::ofstream(toml) << scenario_toml(stack, ranks, steps, dir);
  const fs::path out = dir / "out";
  fs::remove_all(out);
  // `nanchaos run` exits 1 when an [expect] check fails; the outcome is checked below instead.
  const std::string cmd = std::string(NANCHAOS_BINARY) + " run " + toml.string() +
                          " --quiet --out " + out.string() + " || true";
  nb::run_or_throw(cmd, 900, (dir / "run.log").string());
  std::ifstream rep(out / "report.json");
  const json report = json::parse(rep);
  const json& s = report.at("scenarios").at(0);
  if (s.value("verdict", json()) == "skipped") {
    throw std::runtime_error("bench job " + stack +
                             " skipped: " + s.value("reason", std::string()));
  }
  if (s.value("outcome", json()) != "completed") {
    throw std::runtime_error("bench job " + stack + " did not complete: " + s.dump());
  }
  StackTimes t;
  for (int r = 0; r < ranks; ++r) {
    std::ifstream in(out / ("bench-step-" + stack) / "events" /
                     ("rank-" + std::to_string(r) + ".jsonl"));
    std::map<int64_t, int64_t> begin, begin_cpu;
    for (std::string line; std::getline(in, line);) {
      const json e = json::parse(line, nullptr, false);
      if (e.is_discarded()) continue;
      const std::string ev = e.value("ev", "");
      const int64_t step = e.value("step", int64_t(-1));
      if (ev == "step_begin") {
        begin[step] = e.value("t_us", int64_t(0));
        begin_cpu[step] = e.value("cpu_us", int64_t(0));
      }
      if (ev == "decision") ++t.detections;
      if (ev == "replica_check" && step >= warmup) {
        t.replica_ms.push_back(double(e.value("us", int64_t(0))) / 1000.0);
      }
      if (ev == "recompute_check" && step >= warmup) {
        t.recompute_ms.push_back(double(e.value("us", int64_t(0))) / 1000.0);
      }
      if (ev == "step_end" && step >= warmup && begin.count(step)) {
        t.step_ms.push_back(double(e.value("t_us", int64_t(0)) - begin[step]) / 1000.0);
        t.cpu_ms.push_back(double(e.value("cpu_us", int64_t(0)) - begin_cpu[step]) / 1000.0);
        t.localize_ms.push_back(double(e.value("localize_us", int64_t(0))) / 1000.0);
      }
    }
  }
  return t;
}

// Every stack at `ranks`, interleaved; measured once per rank count and cached.
const std::map<std::string, StackTimes>& measure(int ranks) {
  static std::map<int, std::map<std::string, StackTimes>> cache;
  auto it = cache.find(ranks);
  if (it != cache.end()) return it->second;
  const Plan p = plan();
  const fs::path dir =
      fs::temp_directory_path() /
      ("nanchaos-step-bench-" + std::to_string(getpid()) + "-" + std::to_string(ranks));
  fs::create_directories(dir);
  std::map<std::string, StackTimes> all;
  for (int round = 0; round < p.rounds; ++round) {
    // Each round starts one stack later (none, default, full, anomaly; then default, full, ...), so
    // no stack always runs first after a cold start or right after the slow anomaly jobs.
    for (size_t k = 0; k < std::size(kStacks); ++k) {
      const char* stack = kStacks[(k + size_t(round + first_round())) % std::size(kStacks)];
      const bool slow = std::string(stack) == "full" || std::string(stack) == "anomaly";
      StackTimes t = run_job(dir, stack, ranks, slow ? p.slow_steps : p.steps,
                             slow ? p.slow_warmup : p.warmup);
      auto& acc = all[stack];
      acc.step_ms.insert(acc.step_ms.end(), t.step_ms.begin(), t.step_ms.end());
      acc.cpu_ms.insert(acc.cpu_ms.end(), t.cpu_ms.begin(), t.cpu_ms.end());
      acc.replica_ms.insert(acc.replica_ms.end(), t.replica_ms.begin(), t.replica_ms.end());
      acc.recompute_ms.insert(acc.recompute_ms.end(), t.recompute_ms.begin(), t.recompute_ms.end());
      acc.localize_ms.insert(acc.localize_ms.end(), t.localize_ms.begin(), t.localize_ms.end());
      acc.detections += t.detections;
    }
  }
  fs::remove_all(dir);
  return cache[ranks] = std::move(all);
}

void BM_StepOverhead(benchmark::State& state, int ranks, std::string stack) {
  const std::map<std::string, StackTimes>* times = nullptr;
  for (auto _ : state) {
    try {
      times = &measure(ranks);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      return;
    }
    state.SetIterationTime(nb::mean(times->at(stack).step_ms) * 1e-3);
  }
  const StackTimes& t = times->at(stack);
  const double none_ms = nb::mean(times->at("none").step_ms);
  state.counters["ranks"] = ranks;
  state.counters["steps"] = double(t.step_ms.size());
  state.counters["step_ms"] = nb::mean(t.step_ms);
  state.counters["step_p50_ms"] = nb::quantile(t.step_ms, 0.5);
  state.counters["ratio_vs_none"] = none_ms > 0 ? nb::mean(t.step_ms) / none_ms : 0;
  // The same ratio of medians: robust to the occasional descheduled step of a shared host.
  const double none_p50 = nb::quantile(times->at("none").step_ms, 0.5);
  state.counters["ratio_p50_vs_none"] = none_p50 > 0 ? nb::quantile(t.step_ms, 0.5) / none_p50 : 0;
  state.counters["detections"] = t.detections;
  // CPU time per step (the rank process's, all threads): what the step itself consumed, without
  // the time a busy host kept it descheduled. Waiting in a collective with the engine's sleeps
  // costs little CPU, so this ratio is the stack's work, not its waits.
  const double none_cpu = nb::mean(times->at("none").cpu_ms);
  state.counters["cpu_ms"] = nb::mean(t.cpu_ms);
  state.counters["ratio_cpu_vs_none"] = none_cpu > 0 ? nb::mean(t.cpu_ms) / none_cpu : 0;
  // The always-on localization's own time per step (its sums, timed in the runner) against the
  // step: the cost of the default stack's per-module finiteness, measured in the same steps.
  state.counters["localize_ms"] = nb::mean(t.localize_ms);
  state.counters["localize_share_of_step"] = nb::mean(t.localize_ms) / nb::mean(t.step_ms);
  if (stack == "nostraggler") {
    // default against the same stack without straggler, side by side in the same rounds.
    const StackTimes& d = times->at("default");
    state.counters["ratio_default_vs_nostraggler"] =
        nb::mean(t.step_ms) > 0 ? nb::mean(d.step_ms) / nb::mean(t.step_ms) : 0;
    state.counters["ratio_cpu_default_vs_nostraggler"] =
        nb::mean(t.cpu_ms) > 0 ? nb::mean(d.cpu_ms) / nb::mean(t.cpu_ms) : 0;
  }
  if (!t.replica_ms.empty()) {
    const double share = nb::mean(t.replica_ms) / nb::mean(t.step_ms);
    state.counters["replica_check_ms"] = nb::mean(t.replica_ms);
    state.counters["replica_share_of_step"] = share;
    state.counters["replica_every10_overhead"] = share / 10.0;
  }
  if (!t.recompute_ms.empty()) {
    // The recompute against the rest of the same steps (a step without it): what one recompute
    // adds to a step, and a hundredth of that at the default sdc_every = 100.
    const double rec = nb::mean(t.recompute_ms), rest = nb::mean(t.step_ms) - rec;
    const double share = rest > 0 ? rec / rest : 0;
    state.counters["sdc_recompute_ms"] = rec;
    state.counters["sdc_share_of_step"] = share;
    state.counters["sdc_every100_overhead"] = share / 100.0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // On the GPU one rank (one H200 per host here; several ranks would need several GPUs).
  std::vector<int> counts;
  try {
    counts = rank_counts();
  } catch (const std::exception& e) {
    fprintf(stderr, "nanchaos_bench_step: %s\n", e.what());
    return 2;
  }
  for (int ranks : counts) {
    for (const char* stack : kStacks) {
      benchmark::RegisterBenchmark(
          ("BM_StepOverhead/ranks:" + std::to_string(ranks) + "/stack:" + stack).c_str(),
          BM_StepOverhead, ranks, std::string(stack))
          ->Iterations(1)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
