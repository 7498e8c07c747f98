#include "detectors/core/consensus.h"

#include <algorithm>
#include <cmath>

#include "harness/scenario/detector_registry.h"

namespace nanchaos::harness {

int detector_bit(const std::string& name) {
  const auto& order = detector_order();
  for (size_t i = 0; i < order.size(); ++i) {
    if (name == order[i]) return int(i);
  }
  return -1;
}

size_t summary_width() { return detector_order().size(); }

SummaryCounts summary_counts(uint64_t bits) {
  SummaryCounts c(summary_width(), 0);
  for (size_t b = 0; b < c.size(); ++b) c[b] = (bits >> b) & 1u;
  return c;
}

bool summary_flagged(const SummaryCounts& counts) {
  const auto end = counts.begin() + ptrdiff_t(std::min(counts.size(), summary_width()));
  return std::any_of(counts.begin(), end, [](int64_t n) { return n != 0; });
}

void put_phase_times(SummaryCounts& counts, int rank, int world, const PhaseTimes& mine) {
  const size_t base = summary_width();
  counts.resize(base + size_t(world) * kStepPhases, 0);
  for (size_t k = 0; k < kStepPhases; ++k) {
    const double us = std::isfinite(mine[k]) && mine[k] > 0 ? mine[k] : 0.0;
    counts[base + size_t(rank) * kStepPhases + k] = std::llround(std::min(us, 1e15));
  }
}

std::vector<PhaseTimes> phase_times(const SummaryCounts& counts, int world) {
  std::vector<PhaseTimes> out(size_t(world), PhaseTimes{});
  const size_t base = summary_width();
  if (counts.size() < base + size_t(world) * kStepPhases) return out;
  for (size_t r = 0; r < out.size(); ++r) {
    for (size_t k = 0; k < kStepPhases; ++k) out[r][k] = double(counts[base + r * kStepPhases + k]);
  }
  return out;
}

double LrRaise::note(int64_t step, double lr) {
  if (last_lr > 0 && lr >= kFactor * last_lr) raised_step = step;
  last_lr = lr;
  // Steps since the last raise, whatever the window (grew_under_raised_lr applies it); -1 before
  // any raise, or on a step re-executed after a rollback to before it.
  return raised_step >= 0 && step >= raised_step ? double(step - raised_step) : -1.0;
}

double global_max_abs(const std::vector<double>& rows, int world) {
  double m = 0;
  for (int r = 0; r < world; ++r) m = std::max(m, rows[size_t(r) * kRowWidth + kMaxAbs]);
  return m;
}

Decision decide(const std::vector<double>& rows, int world,
                const std::vector<std::string>& bwd_names,
                const std::vector<std::string>& module_names,
                const std::vector<std::string>& replica_names) {
  Decision d;
  auto bits_of = [&](int r) { return uint64_t(rows[size_t(r) * kRowWidth + kBits]); };
  uint64_t any = 0;
  for (int r = 0; r < world; ++r) any |= bits_of(r);
  if (!any) return d;
  d.flagged = true;
  int first_bit = 0;
  while (!(any & (uint64_t(1) << first_bit))) ++first_bit;
  const auto& order = detector_order();
  d.detector = order.at(size_t(first_bit));
  for (int r = 0; r < world; ++r) {
    const uint64_t bits = bits_of(r);
    if (!bits) continue;
    nlohmann::json dets = nlohmann::json::array();
    for (size_t b = 0; b < order.size(); ++b) {
      if (bits & (uint64_t(1) << b)) dets.push_back(order[b]);
    }
    d.flagged_detail.push_back({{"rank", r}, {"detectors", dets}});
    if (bits & (uint64_t(1) << first_bit)) d.ranks.push_back(r);
  }
  // Attribution (DESIGN.md) from the first blamed rank's row, by the detector's own rule.
  const auto& info = detectors().at(d.detector);
  if (info.attribute) {
    const double* row = &rows[size_t(d.ranks.front()) * kRowWidth];
    info.attribute(row, AttributionNames{bwd_names, module_names, replica_names}, &d);
  }
  return d;
}

}  // namespace nanchaos::harness
