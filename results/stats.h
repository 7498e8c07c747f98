// Statistics over repeated trials of one scenario (`nanchaos run --trials N`) and over a suite.
//
// A single run's milliseconds on a shared machine are noise; percentiles over trials are what a
// report compares. Steps (latency_steps) do not drift with machine load, milliseconds do.
//
// Percentile method: nearest rank, the one definition of harness/common/percentile.h (p50 of
// {1,2,3,4} is 2, p95 of 5 samples is the max), shared with the benchmarks.
//
// Pure functions, no I/O, nothing here includes torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "harness/common/percentile.h"
#include "results/report.h"

namespace nanchaos::results {

using nanchaos::percentile;  // nearest rank (harness/common/percentile.h)

/// p50/p95/max of a sample set, and how many samples (n) it came from.
struct Summary {
  size_t n = 0;
  double p50 = 0;
  double p95 = 0;
  double max = 0;
};

/// A two-sided confidence interval [lo, hi] of a proportion.
struct Interval {
  double lo = 0;
  double hi = 0;
};

/// The Wilson score interval (E. B. Wilson, "Probable inference, the law of succession, and
/// statistical inference", JASA 22(158), 1927) of k successes in n trials at 95% (z = 1.96):
///   p = k/n,  d = 1 + z^2/n,  center = (p + z^2/(2n)) / d,
///   half = z * sqrt(p(1-p)/n + z^2/(4n^2)) / d,  [center - half, center + half] clamped to [0, 1].
/// Unlike the normal (Wald) interval it never collapses to a point at k = 0 or k = n (0 of 20
/// gives [0, 0.161]), which is where a detection stack's rates live. Newcombe (Stat. Med. 17,
/// 1998, table I) lists 81/263 -> [0.2553, 0.3662] and 1/29 -> [0.0061, 0.1718]; the tests check
/// those. Throws std::invalid_argument unless 0 <= k <= n and n >= 1.
Interval wilson95(int64_t k, int64_t n);

/// The exact one-sided McNemar test on paired binary outcomes (Q. McNemar, "Note on the sampling
/// error of the difference between correlated proportions or percentages", Psychometrika 12,
/// 1947; the exact form is the sign test on the discordant pairs): of the pairs whose two
/// outcomes differ, `worse` went from success in A to failure in B and `better` the other way.
/// Under "A and B are equally good" each discordant pair is worse with probability 1/2, so the
/// p-value is P(X >= worse) for X ~ Binomial(worse + better, 1/2). 1 when there is no discordant
/// pair. Throws std::invalid_argument on a negative count.
double mcnemar_exact_p(int64_t worse, int64_t better);

/// Summary of `samples`; nullopt when there is none. Non-finite samples are dropped (a NaN
/// latency means "not measured"); throws nothing.
std::optional<Summary> summarize(const std::vector<double>& samples);

/// {"n", "p50", "p95", "max"}, or null for nullopt.
nlohmann::json to_json(const std::optional<Summary>& s);

/// The trial whose fields a scenario's top level of report.json shows: the first trial with the
/// worst verdict (error > fail > pass > skipped), so trial 0 when every trial passed and a failing
/// trial's own evidence when one failed. Returns a copy without `trials`/`stats`.
/// Throws std::invalid_argument when `trials` is empty.
ScenarioResult representative_trial(const std::vector<ScenarioResult>& trials);

/// Statistics of one scenario over its trials (trial 0 first). The JSON (report.json
/// `scenarios[].stats`, documented in docs/scenario-format.md):
///   {"trials": N, "passed": k, "pass_rate": k/N, "verdicts": {"pass": k, ...},
///    "detected": d, "first_detectors": {"loss": d, ...},
///    "latency_steps": S, "latency_ms": S, "decision_us": S, "abort_latency_ms": S, "wall_ms": S,
///    "by_detector": {"loss": {"n", "latency_steps": S, "latency_ms": S, "decision_us": S,
///                             "abort_latency_ms": S}}}
/// where S is to_json(Summary) (null when no trial measured it). Latencies come from each
/// trial's first detection (injection -> first detection); `by_detector` groups trials by the
/// detector that caught the fault first; abort latency (ms, first injection -> job end) only
/// counts trials that ended aborted or crashed.
/// Throws std::invalid_argument when `trials` is empty.
nlohmann::json scenario_stats(const std::vector<ScenarioResult>& trials);

/// Pools every scenario's trials by first detector across the suite (report.json `detectors`):
///   {"loss": {"scenarios": [names], "n", "latency_steps": S, "latency_ms": S,
///             "decision_us": S, "abort_latency_ms": S}, ...}
/// A scenario without `trials` counts its top-level result as its only trial.
nlohmann::json suite_detector_stats(const SuiteReport& r);

}  // namespace nanchaos::results
