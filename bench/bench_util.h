// Small helpers shared by the benchmarks that launch real jobs (consensus_bench.cpp,
// step_bench.cpp): the path of this binary, running a shell command with a time limit, the
// mpirun prefix the controller uses, and summary statistics. Header-only, torch-free.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/common/percentile.h"

namespace nanchaos::bench {

/// This executable's absolute path (/proc/self/exe). Throws std::runtime_error when unreadable.
inline std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  return std::string(buf, size_t(n));
}

/// Runs `cmd` through /bin/sh under coreutils' `timeout` (seconds), all its output (also of a
/// `cmd` that is a list, "a || true") appended to `log`: the benchmark's stdout stays one JSON
/// document. Throws std::runtime_error naming the command and the log when it fails or times out.
inline void run_or_throw(const std::string& cmd, int timeout_s, const std::string& log) {
  const std::string full =
      "( timeout -s KILL " + std::to_string(timeout_s) + " " + cmd + " ) >>" + log + " 2>&1";
  const int rc = std::system(full.c_str());
  if (rc != 0) {
    throw std::runtime_error("command failed (status " + std::to_string(rc) + "; see " + log +
                             "): " + cmd);
  }
}

/// Open MPI's mpirun for `ranks` ranks on one small host, as `nanchaos run` launches jobs
/// (harness/controller/controller.cpp): oversubscribed, unbound, yielding when idle, root-safe.
inline std::string mpirun_prefix(int ranks) {
  std::string p = "mpirun -np " + std::to_string(ranks) +
                  " --oversubscribe --bind-to none --mca mpi_yield_when_idle 1";
  if (geteuid() == 0) p += " --allow-run-as-root";
  return p;
}

/// The q-quantile (q in (0, 1]) of `v` by the one nearest-rank definition of
/// harness/common/percentile.h (the reports' p50 too); 0 for an empty vector.
inline double quantile(const std::vector<double>& v, double q) {
  return v.empty() ? 0 : nanchaos::percentile(v, q * 100.0);
}

inline double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

/// True when NANCHAOS_BENCH_QUICK is set to anything but "" or "0": a short run for a smoke
/// check (a few seconds per benchmark), not for figures.
inline bool quick_mode() {
  const char* q = std::getenv("NANCHAOS_BENCH_QUICK");
  return q && *q && std::string(q) != "0";
}

/// Element counts of a GPT-2-style model's gradients in parameter order (token and position
/// embeddings; per block: ln_1 weight/bias, qkv weight/bias, proj weight/bias, ln_2 weight/bias,
/// fc weight/bias, fc_proj weight/bias; final norm; untied head): the tensor mix the scan
/// benchmarks walk. `d` model width, `ctx` positions. E.g. (1024, 24, 50304, 1024): GPT-2 medium.
inline std::vector<size_t> gpt_gradient_sizes(size_t d, size_t layers, size_t vocab, size_t ctx) {
  std::vector<size_t> sizes = {vocab * d, ctx * d};
  for (size_t l = 0; l < layers; ++l) {
    const size_t block[] = {d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, d * 4 * d, d};
    sizes.insert(sizes.end(), std::begin(block), std::end(block));
  }
  sizes.insert(sizes.end(), {d, d, vocab * d});
  return sizes;
}

}  // namespace nanchaos::bench
