// Host limits: the memory estimate's closed forms, /proc/meminfo, and the checks (host_limits.h).
// model_spec_test.cpp checks the parameter count against the summed shapes of builtin_model(),
// which it checks against the real LibTorch modules.
#include "harness/controller/host_limits.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "harness/scenario/scenario_schema.h"

namespace nanchaos::harness {

ParamCount count_parameters(WorkloadKind workload, const WorkloadConfig& w) {
  const double H = double(w.hidden), L = double(w.layers), F = double(w.features),
               C = double(w.classes), T = double(w.seq_len), V = double(w.vocab);
  ParamCount c;
  switch (workload) {
    case WorkloadKind::kMlp: {
      const double n = w.norm == Norm::kNone ? 0 : 1;
      c.parameters = F * H + H + (L - 1) * (H * H + H) + 2 * n * L * H + H * C + C;
      if (w.norm == Norm::kBatchNorm) c.buffers = (2 * H + 1) * L;
      return c;
    }
    case WorkloadKind::kTransformer:
      c.parameters = V * H + T * H + L * (12 * H * H + 13 * H) + 2 * H + H * V + V;
      return c;
    case WorkloadKind::kExternal:
      break;
  }
  throw std::logic_error("count_parameters: an external job has no built-in model");
}

double count_activations(WorkloadKind workload, const WorkloadConfig& w) {
  const double B = double(w.batch_size), H = double(w.hidden), L = double(w.layers),
               F = double(w.features), C = double(w.classes), T = double(w.seq_len),
               V = double(w.vocab), h = double(w.heads);
  switch (workload) {
    case WorkloadKind::kMlp: {
      const double n = w.norm == Norm::kNone ? 0 : 1;
      // inputs; per layer Linear, [norm], GELU outputs; logits and the loss's softmax.
      return B * F + B * H * L * (2 + n) + 2 * B * C;
    }
    case WorkloadKind::kTransformer:
      // token and position embeddings and their sum; per block 19 [B, T, D]-sized tensors (ln1,
      // qkv x3, attention output and its transposed copy, proj, residual, ln2, fc1 and GELU x4
      // each, fc2, residual) and 3 [B, h, T, T] score tensors (scores, causal mask, softmax);
      // ln_f; logits and log-softmax [B, T, V].
      return 3 * B * T * H + T * H + L * (19 * B * T * H + 3 * B * h * T * T) + 2 * B * T * V;
    case WorkloadKind::kExternal:
      break;
  }
  throw std::logic_error("count_activations: an external job has no built-in model");
}

namespace {

const char* optimizer_name(Optimizer o) {
  switch (o) {
    case Optimizer::kSgd:
      return "sgd";
    case Optimizer::kAdam:
      return "adam";
    case Optimizer::kAdamW:
      return "adamw";
  }
  return "?";
}

/// The [workload] keys that set a size, in documentation order.
const std::vector<std::string>& size_keys() {
  static const std::vector<std::string> keys = {"batch_size", "hidden", "layers",   "heads",
                                                "seq_len",    "vocab",  "features", "classes"};
  return keys;
}

int64_t& size_field(WorkloadConfig& w, const std::string& key) {
  if (key == "batch_size") return w.batch_size;
  if (key == "hidden") return w.hidden;
  if (key == "layers") return w.layers;
  if (key == "heads") return w.heads;
  if (key == "seq_len") return w.seq_len;
  if (key == "vocab") return w.vocab;
  if (key == "features") return w.features;
  return w.classes;
}

int64_t size_value(WorkloadConfig w, const std::string& key) { return size_field(w, key); }

int64_t default_of(const std::string& key) {
  for (const auto& spec : workload_keys()) {
    if (spec.name == key && spec.default_value) return std::get<int64_t>(*spec.default_value);
  }
  throw std::logic_error("host_limits: no default for [workload]." + key);
}

/// The written [workload] size key whose reset to its default shrinks the estimate most: the one
/// to point at. "" when none was written (or none matters).
std::string culprit(const Scenario& s) {
  const double full = estimate_rank_memory(s).host();
  std::string best;
  double best_gain = 0;
  for (const auto& key : size_keys()) {
    if (!s.workload.params.given(key)) continue;
    Scenario t = s;
    size_field(t.workload, key) = default_of(key);
    const double gain = full - estimate_rank_memory(t).host();
    if (gain > best_gain) {
      best_gain = gain;
      best = key;
    }
  }
  return best;
}

std::string parts(const MemoryEstimate& e, const Scenario& s) {
  std::vector<std::string> out;
  out.push_back("parameters " + format_bytes(e.parameters));
  out.push_back("gradients " + format_bytes(e.gradients));
  if (e.optimizer > 0) {
    out.push_back(fmt::format("optimizer state {} ({}: 2 moments)", format_bytes(e.optimizer),
                              optimizer_name(s.workload.optimizer)));
  }
  if (e.snapshot > 0) out.push_back("rollback snapshot " + format_bytes(e.snapshot));
  out.push_back("activations " + format_bytes(e.activations));
  return join(out);
}

std::string available(const HostResources& host) {
  return fmt::format("this host has {} available ({})", format_bytes(host.memory_bytes),
                     host.memory_source);
}

}  // namespace

MemoryEstimate estimate_rank_memory(const Scenario& s) {
  const WorkloadConfig& w = s.workload;
  const ParamCount c = count_parameters(s.job.workload, w);
  const double P = c.parameters;
  MemoryEstimate e;
  e.on_gpu = s.job.device == Device::kCuda;
  e.parameters = 4 * (P + c.buffers);
  e.gradients = 4 * P;
  if (s.job.grad_allreduce_dtype != DType::kFp32 || s.job.grad_predivide) {
    e.gradients += double(dtype_bytes(s.job.grad_allreduce_dtype)) * P;
  }
  e.optimizer = w.optimizer == Optimizer::kSgd ? 0 : 8 * P;
  if (s.recovery.has(Policy::kRollback)) e.snapshot = e.parameters + e.optimizer;
  const double act_bytes = e.on_gpu && s.job.precision != DType::kFp32 ? 2 : 4;
  e.activations = act_bytes * count_activations(s.job.workload, w);
  return e;
}

std::string format_bytes(double bytes) {
  static const std::array<const char*, 6> units = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} B", int64_t(bytes));
  double v = bytes;
  size_t u = 0;
  v /= 1024;
  while (v >= 1024 && u + 1 < units.size()) {
    v /= 1024;
    ++u;
  }
  if (v >= 1e6) return fmt::format("{:.3g} {}", v, units[u]);
  return fmt::format("{:.1f} {}", v, units[u]);
}

HostResources probe_host() {
  HostResources h;
  std::ifstream in("/proc/meminfo");
  std::string line;
  double total = 0, avail = -1;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string key;
    double kib = 0;
    ss >> key >> kib;
    if (key == "MemTotal:") total = kib * 1024;
    if (key == "MemAvailable:") avail = kib * 1024;
  }
  if (avail >= 0) {
    h.memory_bytes = avail;
    h.memory_source = "MemAvailable";
  } else if (total > 0) {
    h.memory_bytes = total;
    h.memory_source = "MemTotal";
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    h.cores = std::max(1, CPU_COUNT(&set));
  } else {
    h.cores = std::max(1u, std::thread::hardware_concurrency());
  }
  return h;
}

int64_t default_max_ranks(int cores) { return std::max<int64_t>(64, 8 * int64_t(cores)); }

void check_host_limits(const Scenario& s, const HostResources& host, const HostLimitOptions& opts) {
  if (!opts.enabled) return;
  const bool builtin = !s.job.external();
  const bool know_memory = host.memory_bytes > 0;
  const char* lift =
      "with a real hostfile, raise the limit with --max-ranks N or lift the host "
      "checks with --no-host-limits";
  std::optional<MemoryEstimate> e;
  if (builtin) e = estimate_rank_memory(s);

  auto workload_label = [&](const std::string& key) {
    return fmt::format("[workload] {} = {}", key, size_value(s.workload, key));
  };
  // 1. One rank.
  if (builtin && know_memory && e->host() > host.memory_bytes) {
    const std::string key = culprit(s);
    const SourcePos pos =
        key.empty() ? s.workload.params.pos("hidden") : s.workload.params.pos(key);
    const std::string what = key.empty() ? "[workload]" : workload_label(key);
    const std::string gpu =
        e->on_gpu ? fmt::format(
                        " of host memory (the parameters, built on the host before they "
                        "move to the GPU; ~{} in all on the GPU)",
                        format_bytes(e->total()))
                  : "";
    scenario_error(pos,
                   fmt::format("{}: one rank needs ~{}{} ({}), {}; --no-host-limits skips "
                               "this check",
                               what, format_bytes(e->host()), gpu, parts(*e, s), available(host)));
  }
  // 2. Ranks.
  const int64_t limit = opts.max_ranks.value_or(default_max_ranks(host.cores));
  const std::string job_total =
      builtin ? fmt::format("the job needs ~{}", format_bytes(e->host() * double(s.job.ranks)))
              : "";
  const std::string per_rank =
      builtin ? fmt::format("{} ranks x {}", s.job.ranks, format_bytes(e->host())) : "";
  if (s.job.ranks > limit) {
    const std::string why = opts.max_ranks
                                ? fmt::format("limit {} = --max-ranks", limit)
                                : fmt::format(
                                      "limit {} = max(64, 8 x {} cores); mpirun oversubscribes the "
                                      "cores",
                                      limit, host.cores);
    std::string msg =
        fmt::format("[job] ranks = {}: more ranks than this host can run ({})", s.job.ranks, why);
    if (builtin) {
      msg += fmt::format("; {} ({} per rank){}", job_total, per_rank,
                         know_memory ? ", " + available(host) : "");
    }
    scenario_error(s.job.params.pos("ranks"), msg + "; " + lift);
  }
  // 3. The job's total, every rank on this host.
  if (builtin && know_memory && e->host() * double(s.job.ranks) > host.memory_bytes) {
    std::string what;
    SourcePos pos;
    if (s.job.params.given("ranks") || culprit(s).empty()) {
      what = fmt::format("[job] ranks = {}", s.job.ranks);
      pos = s.job.params.pos("ranks");
    } else {
      const std::string key = culprit(s);
      what = workload_label(key);
      pos = s.workload.params.pos(key);
    }
    scenario_error(pos, fmt::format("{}: {} on this host ({}: {}), {}; {}", what, job_total,
                                    per_rank, parts(*e, s), available(host), lift));
  }
}

}  // namespace nanchaos::harness
