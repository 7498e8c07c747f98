#include "detectors/core/consensus.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "harness/common/cause.h"
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
  return std::any_of(counts.begin(), counts.end(), [](int64_t n) { return n != 0; });
}

double LrRaise::note(int64_t step, double lr) {
  if (last_lr > 0 && lr >= kFactor * last_lr) raised_step = step;
  last_lr = lr;
  // Steps since the last raise, whatever the window (grew_under_raised_lr applies it); -1 before
  // any raise, or on a step re-executed after a rollback to before it.
  return raised_step >= 0 && step >= raised_step ? double(step - raised_step) : -1.0;
}

namespace {

bool surfaced(const std::string& cause) {
  static const std::set<std::string> causes = {
      to_string(Cause::kActivation),   to_string(Cause::kLossMath),
      to_string(Cause::kGradient),     to_string(Cause::kParameter),
      to_string(Cause::kFp16Overflow), to_string(Cause::kReduceOverflow)};
  return causes.count(cause) > 0;
}

// Ranks whose kLrRaised is within [0, window].
std::vector<int64_t> raised_within(const std::vector<double>& rows, int world, double window) {
  std::vector<int64_t> out;
  for (int r = 0; r < world && size_t(r + 1) * kRowWidth <= rows.size(); ++r) {
    const double ago = rows[size_t(r) * kRowWidth + kLrRaised];
    if (ago >= 0 && ago <= window) out.push_back(r);
  }
  return out;
}

}  // namespace

bool grew_under_raised_lr(const std::vector<double>& rows, int world, const std::string& cause) {
  return surfaced(cause) && !raised_within(rows, world, double(LrRaise::kWindow)).empty();
}

std::vector<int64_t> drifted_ranks(const std::vector<double>& rows, int world,
                                   const std::vector<int64_t>& flagged) {
  using State = std::array<double, 3>;  // LR, step counter, loss scale
  std::map<State, std::vector<int64_t>> groups;
  for (int r = 0; r < world && size_t(r + 1) * kRowWidth <= rows.size(); ++r) {
    const double* row = &rows[size_t(r) * kRowWidth];
    groups[{row[kLr], row[kStepCounter], row[kLossScale]}].push_back(r);
  }
  if (groups.size() <= 1) return {};
  // The majority: the most ranks; among equals one without a flagged rank, the smaller
  // (LR, step counter), then the group holding the lowest rank (the replica vote's rule).
  const bool some_flagged = !flagged.empty() && flagged.size() < size_t(world);
  auto holds_flagged = [&](const std::vector<int64_t>& ranks) {
    if (!some_flagged) return 0;
    for (int64_t r : ranks) {
      if (std::find(flagged.begin(), flagged.end(), r) != flagged.end()) return 1;
    }
    return 0;
  };
  auto key = [&](const auto& g) {
    return std::make_tuple(holds_flagged(g.second), g.first[0], g.first[1], g.second.front());
  };
  auto majority = groups.begin();
  for (auto it = std::next(groups.begin()); it != groups.end(); ++it) {
    if (it->second.size() > majority->second.size() ||
        (it->second.size() == majority->second.size() && key(*it) < key(*majority))) {
      majority = it;
    }
  }
  std::vector<int64_t> out;
  for (const auto& [state, ranks] : groups) {
    if (state != majority->first) out.insert(out.end(), ranks.begin(), ranks.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void attribute_training_state(const std::vector<double>& rows, int world, Decision* d) {
  if (!d->flagged) return;
  const bool blow_up = surfaced(d->cause) || d->cause == to_string(Cause::kGradientExplosion);
  if (blow_up || d->cause == to_string(Cause::kReplicaDivergence)) {
    std::vector<int64_t> drifted =
        drifted_ranks(rows, world, d->detector == "replica" ? std::vector<int64_t>{} : d->ranks);
    if (!drifted.empty()) {
      d->cause = to_string(Cause::kReplicaDivergence);
      d->ranks = std::move(drifted);
      return;
    }
  }
  if (grew_under_raised_lr(rows, world, d->cause)) d->cause = to_string(Cause::kGradientExplosion);
  if (d->cause == to_string(Cause::kGradientExplosion)) {
    // Ranks that ever raised their LR (no window: the replica check that finds a scaled update
    // may come long after the raise).
    std::vector<int64_t> raised =
        raised_within(rows, world, std::numeric_limits<double>::infinity());
    if (!raised.empty() && raised.size() < size_t(world)) d->ranks = std::move(raised);
  }
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
