#include "detectors/core/straggler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

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

// The nearest-rank median of harness/common/percentile.h (the ceil(n/2)-th smallest sample),
// found in O(n) in place: `v` is reordered. Samples are finite (sane()). 0 when empty.
double median_in_place(std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const size_t k = (v.size() + 1) / 2 - 1;
  std::nth_element(v.begin(), v.begin() + ptrdiff_t(k), v.end());
  return v[k];
}

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
  if (!(p_.min_excess_steps >= 0)) {
    throw std::invalid_argument("straggler min_excess_steps must be >= 0");
  }
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
  const size_t world = times.size();
  clean_.resize(world);
  totals_.resize(world);
  for (size_t r = 0; r < world; ++r) {
    double sum = 0;
    for (size_t k = 0; k < kStepPhases; ++k) sum += clean_[r][k] = sane(times[r][k]);
    totals_[r] = sum;
  }
  scratch_.assign(totals_.begin(), totals_.end());
  const double median = median_in_place(scratch_);
  if (!(median > 0)) return {};  // no times yet (the first step), or nothing measured
  const bool warming = steps_ < p_.warmup_steps;
  ++steps_;
  push_capped(medians_, median, p_.baseline_steps);
  scratch_.assign(medians_.begin(), medians_.end());
  const double typical = median_in_place(scratch_);
  const double min_excess =
      std::max(p_.min_excess_us, std::max(p_.factor - 1.0, p_.min_excess_steps) * typical);
  std::vector<StragglerFlag> flags;
  PhaseTimes phase_median{};
  bool phase_medians = false;  // computed on the first flag only
  for (size_t r = 0; r < world; ++r) {
    RankState& st = ranks_[r];
    const double score = totals_[r] / median;
    // Cheap necessary conditions first (baseline >= 1): on a clean step no rank passes them and
    // the step costs O(world).
    bool slow = !warming && score > p_.factor && totals_[r] - median > min_excess;
    if (slow && !st.scores.empty()) {
      // The rank's usual score, between 1 and factor: a rank steadily up to factor x slower is
      // tolerated; one slower than that from its first step on is still a straggler. Its
      // spread: the MAD of the same window.
      scratch_.assign(st.scores.begin(), st.scores.end());
      const double usual = median_in_place(scratch_);
      for (double& v : scratch_) v = std::fabs(v - usual);
      const double spread = 1.4826 * median_in_place(scratch_);
      const double baseline = std::clamp(usual, 1.0, p_.factor);
      slow = score > p_.factor * baseline && score > baseline + p_.mad_k * spread;
    }
    if (!slow) {
      st.slow_run = 0;
      push_capped(st.scores, score, p_.baseline_steps);
      continue;
    }
    if (++st.slow_run < p_.consecutive) continue;
    // The phase that grew: where this rank's own time exceeds the ranks' median for that phase
    // at this step by the most (its own past would not do: a rank slow from its first step has
    // no usual phase times).
    if (!phase_medians) {
      for (size_t k = 0; k < kStepPhases; ++k) {
        scratch_.clear();
        for (const PhaseTimes& t : clean_) scratch_.push_back(t[k]);
        phase_median[k] = median_in_place(scratch_);
      }
      phase_medians = true;
    }
    size_t grew = size_t(StepPhase::kCompute);
    double most = -1;
    for (size_t k = 0; k < kStepPhases; ++k) {
      if (clean_[r][k] - phase_median[k] > most) {
        most = clean_[r][k] - phase_median[k];
        grew = k;
      }
    }
    flags.push_back({int64_t(r), StepPhase(grew), score});
  }
  return flags;
}

}  // namespace nanchaos::harness
