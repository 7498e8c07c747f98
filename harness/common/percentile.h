// The one percentile definition of nanchaos: nearest rank. For n sorted samples x[1..n] and p in
// (0, 100], the p-th percentile is x[ceil(p/100 * n)] (p50 of {1,2,3,4} is 2, p95 of 5 samples is
// the max): always a sample that was measured, never an interpolated value. Trial statistics
// (results/stats.h) and the benchmarks (bench/bench_util.h) both use it, so a p50 in a report and
// a p50 in a benchmark mean the same thing.
// Header-only and torch-free (the benchmarks compile without the library).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

namespace nanchaos {

/// Nearest-rank percentile of `samples` (any order), p in (0, 100].
/// Throws std::invalid_argument for an empty sample set, p outside (0, 100] or a NaN sample.
inline double percentile(std::vector<double> samples, double p) {
  if (samples.empty()) throw std::invalid_argument("percentile of an empty sample set");
  if (!(p > 0 && p <= 100)) throw std::invalid_argument("percentile p must be in (0, 100]");
  for (double v : samples) {
    if (std::isnan(v)) throw std::invalid_argument("percentile of a NaN sample");
  }
  std::sort(samples.begin(), samples.end());
  // Nearest rank: the smallest sample with at least p% of the samples at or below it.
  const double rank = std::ceil(p / 100.0 * double(samples.size()));
  const size_t idx = std::clamp<size_t>(size_t(rank), 1, samples.size()) - 1;
  return samples[idx];
}

}  // namespace nanchaos
