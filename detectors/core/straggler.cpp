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
}

void StragglerTracker::reset() {
  steps_ = 0;
  ranks_.clear();
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
  PhaseTimes phase_median{};
  for (size_t k = 0; k < kStepPhases; ++k) {
    std::vector<double> column;
    for (const PhaseTimes& t : clean) column.push_back(t[k]);
    phase_median[k] = percentile(column, 50);
  }
  const bool warming = steps_ < p_.warmup_steps;
  ++steps_;
  std::vector<StragglerFlag> flags;
  for (size_t r = 0; r < times.size(); ++r) {
    RankState& st = ranks_[r];
    const double score = median > 0 ? totals[r] / median : 1.0;
    // The rank's usual score, between 1 and factor: a rank steadily up to factor x slower is
    // tolerated; one slower than that from its first step on is still a straggler.
    const double usual =
        st.scores.empty() ? 1.0
                          : percentile(std::vector<double>(st.scores.begin(), st.scores.end()), 50);
    const double baseline = std::clamp(usual, 1.0, p_.factor);
    const bool slow =
        !warming && score > p_.factor * baseline && totals[r] - median > p_.min_excess_us;
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
