#include "detectors/core/straggler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "harness/common/percentile.h"

namespace nanchaos::harness {

const char* phase_name(StepPhase p) {
  switch (p) {
    case StepPhase::kData:
      return "data";
    case StepPhase::kCompute:
      return "compute";
    case StepPhase::kBackward:
      return "backward";
    case StepPhase::kComm:
      return "comm";
  }
  return "?";
}

namespace {

// A measured time as the statistic uses it: a negative or non-finite reading (a clock that went
// backwards, a missing sample) counts as 0 rather than poisoning the median.
double sane(double us) { return std::isfinite(us) && us > 0 ? us : 0.0; }

template <class T>
void push_capped(std::deque<T>& window, const T& v, int64_t cap) {
  window.push_back(v);
  while (int64_t(window.size()) > cap) window.pop_front();
}

}  // namespace

StragglerTracker::StragglerTracker(StragglerParams p) : p_(p) {
  if (!(p_.factor > 1.0)) {
    throw std::invalid_argument("straggler_factor must be > 1 (a rank is slow at factor x median)");
  }
  if (p_.consecutive < 1) throw std::invalid_argument("straggler_steps must be >= 1");
  if (p_.warmup_steps < 0) throw std::invalid_argument("straggler warm-up steps must be >= 0");
  if (p_.baseline_steps < 1) throw std::invalid_argument("straggler baseline steps must be >= 1");
  if (!(p_.min_excess_us >= 0)) throw std::invalid_argument("straggler min excess must be >= 0");
  if (!(p_.mad_k >= 0)) throw std::invalid_argument("straggler mad_k must be >= 0");
}

void StragglerTracker::reset() {
  steps_ = 0;
  ranks_.clear();
  medians_.clear();
}

std::vector<StragglerFlag> StragglerTracker::observe(const std::vector<PhaseTimes>& times) {
  if (times.size() != ranks_.size()) {
    reset();
    ranks_.resize(times.size());
  }
  if (times.empty()) return {};
  std::vector<PhaseTimes> clean(times.size());
  std::vector<double> totals(times.size());
  for (size_t r = 0; r < times.size(); ++r) {
    for (size_t k = 0; k < kStepPhases; ++k) clean[r][k] = sane(times[r][k]);
    double sum = 0;
    for (double v : clean[r]) sum += v;
    totals[r] = sum;
  }
  const double median = percentile(totals, 50);
  if (!(median > 0)) return {};  // no times yet (the first step), or nothing measured
  PhaseTimes phase_median{};
  for (size_t k = 0; k < kStepPhases; ++k) {
    std::vector<double> column;
    for (const PhaseTimes& t : clean) column.push_back(t[k]);
    phase_median[k] = percentile(column, 50);
  }
  const bool warming = steps_ < p_.warmup_steps;
  ++steps_;
  push_capped(medians_, median, p_.baseline_steps);
  const double typical = percentile(std::vector<double>(medians_.begin(), medians_.end()), 50);
  const double min_excess = std::max(p_.min_excess_us, (p_.factor - 1.0) * typical);
  std::vector<StragglerFlag> flags;
  std::vector<double> window, deviation;
  for (size_t r = 0; r < times.size(); ++r) {
    RankState& st = ranks_[r];
    const double score = totals[r] / median;
    // The rank's usual score, between 1 and factor: a rank steadily up to factor x slower is
    // tolerated; one slower than that from its first step on is still a straggler. Its spread:
    // the MAD of the same window (0 with fewer than 2 scores).
    double usual = 1.0, spread = 0.0;
    if (!st.scores.empty()) {
      window.assign(st.scores.begin(), st.scores.end());
      usual = percentile(window, 50);
      deviation.clear();
      for (double v : window) deviation.push_back(std::fabs(v - usual));
      spread = 1.4826 * percentile(deviation, 50);
    }
    const double baseline = std::clamp(usual, 1.0, p_.factor);
    const bool slow = !warming && score > p_.factor * baseline &&
                      score > baseline + p_.mad_k * spread && totals[r] - median > min_excess;
    if (!slow) {
      st.slow_run = 0;
      push_capped(st.scores, score, p_.baseline_steps);
      continue;
    }
    if (++st.slow_run < p_.consecutive) continue;
    // The phase that grew: where this rank's own time exceeds the ranks' median for that phase
    // at this step by the most (its own past would not do: a rank slow from its first step has
    // no usual phase times).
    size_t grew = size_t(StepPhase::kCompute);
    double most = -1;
    for (size_t k = 0; k < kStepPhases; ++k) {
      if (clean[r][k] - phase_median[k] > most) {
        most = clean[r][k] - phase_median[k];
        grew = k;
      }
    }
    flags.push_back({int64_t(r), StepPhase(grew), score});
  }
  return flags;
}

}  // namespace nanchaos::harness
