// The stack-level attribution rules (attribution.h), one room for DESIGN.md's table.
#include "detectors/stack/attribution.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "harness/common/cause.h"

namespace nanchaos::detect {

using harness::Cause;
using harness::Decision;
using harness::kLossScale;
using harness::kLr;
using harness::kLrRaised;
using harness::kRowWidth;
using harness::kStepCounter;
using harness::LrRaise;

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

const harness::DetectorInfo& info_of(const std::string& detector) {
  return harness::detectors().at(detector);
}

}  // namespace

void attribute_replay(const std::vector<double>& rows, const harness::AttributionNames& names,
                      Decision* d) {
  const double* row = &rows.at(size_t(d->ranks.front()) * kReplayWidth);
  d->transient = row[kReproduced] < 0.5;
  if (!info_of(d->detector).refined_to_layer) return;
  // DESIGN.md: parameters non-finite at step start are the cause, whatever they made
  // non-finite downstream (module outputs, the loss, the gradients).
  const int param = int(row[kReplayParam]);
  if (param >= 0) {
    d->cause = to_string(Cause::kParameter);
    d->layer = names.backward.at(size_t(param));
    return;
  }
  const int module = int(row[kReplayModule]);
  if (module >= 0 && row[kReplayOverflow] > 0.5) {
    d->cause = to_string(Cause::kFp16Overflow);
    d->layer = names.modules.at(size_t(module));
    return;
  }
  // DESIGN.md: a module whose output is non-finite while its input was finite is the cause;
  // the replay's probe sees the first such module in forward order.
  if (module >= 0 &&
      (d->cause == to_string(Cause::kActivation) || d->cause == to_string(Cause::kGradient))) {
    d->cause = to_string(Cause::kActivation);
    d->layer = names.modules.at(size_t(module));
  }
}

void attribute_found_inf(const std::vector<double>& rows, int world, Decision* d) {
  if (!d->flagged) return;
  const auto& info = info_of(d->detector);
  if (!info.found_inf || info.reports_found_inf) return;
  const auto& order = harness::detector_order();
  const auto reporter = std::find_if(order.begin(), order.end(), [](const std::string& name) {
    return info_of(name).reports_found_inf;
  });
  if (reporter == order.end()) return;
  d->detector = *reporter;
  d->cause = to_string(Cause::kFp16Overflow);
  // ... unless the training state says why: a drifted scale or LR, or a raised LR.
  attribute_training_state(rows, world, d);
}

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
    const bool by_vote = info_of(d->detector).ranks_by_vote;
    std::vector<int64_t> drifted =
        drifted_ranks(rows, world, by_vote ? std::vector<int64_t>{} : d->ranks);
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

}  // namespace nanchaos::detect
