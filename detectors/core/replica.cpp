#include "detectors/core/replica.h"

#include <algorithm>
#include <map>

#include "harness/common/cause.h"

namespace nanchaos::harness {

ReplicaVote replica_vote(const std::vector<uint64_t>& combined) {
  ReplicaVote v;
  if (combined.empty()) return v;
  // digest -> (ranks holding it, lowest such rank)
  std::map<uint64_t, std::pair<int, int>> groups;
  for (size_t r = 0; r < combined.size(); ++r) {
    auto [it, fresh] = groups.try_emplace(combined[r], 0, int(r));
    ++it->second.first;
  }
  if (groups.size() == 1) return v;
  v.diverged = true;
  uint64_t majority = combined[0];
  int best_count = -1, best_low = 0;
  for (const auto& [digest, g] : groups) {
    const auto [count, low] = g;
    if (count > best_count || (count == best_count && low < best_low)) {
      majority = digest;
      best_count = count;
      best_low = low;
    }
  }
  v.source = best_low;
  for (size_t r = 0; r < combined.size(); ++r) {
    if (combined[r] != majority) v.minority.push_back(int64_t(r));
  }
  return v;
}

int first_differing_tensor(const std::vector<uint64_t>& per_tensor, size_t tensors, int rank,
                           int source) {
  if (rank < 0 || source < 0) return -1;
  const size_t a = size_t(rank) * tensors, b = size_t(source) * tensors;
  if (a + tensors > per_tensor.size() || b + tensors > per_tensor.size()) return -1;
  for (size_t t = 0; t < tensors; ++t) {
    if (per_tensor[a + t] != per_tensor[b + t]) return int(t);
  }
  return -1;
}

Divergence classify_divergence(const std::vector<uint64_t>& per_tensor, size_t tensors,
                               size_t params, int rank, int source) {
  Divergence d;
  d.first = first_differing_tensor(per_tensor, tensors, rank, source);
  if (d.first < 0 || tensors == 0) return d;
  const size_t a = size_t(rank) * tensors, b = size_t(source) * tensors;
  if (per_tensor[a + tensors - 1] != per_tensor[b + tensors - 1]) return d;  // training_state
  size_t differing = 0;
  for (size_t t = 0; t < std::min(params, tensors - 1); ++t) {
    differing += per_tensor[a + t] != per_tensor[b + t] ? 1 : 0;
  }
  d.kind = differing >= 2 && 2 * differing >= params ? DivergenceKind::kUpdate
                                                     : DivergenceKind::kParameter;
  return d;
}

int divergence_code(const Divergence& d) { return 4 * (d.first + 1) + int(d.kind); }

Divergence divergence_from_code(double code) {
  const int c = code > 0 ? int(code) : 0;
  Divergence d;
  d.first = c / 4 - 1;
  d.kind = DivergenceKind(c % 4 <= 2 ? c % 4 : 0);
  return d;
}

Cause divergence_cause(DivergenceKind kind) {
  switch (kind) {
    case DivergenceKind::kParameter:
      return Cause::kParameter;
    case DivergenceKind::kUpdate:
      return Cause::kGradientExplosion;
    case DivergenceKind::kState:
      break;
  }
  return Cause::kReplicaDivergence;
}

}  // namespace nanchaos::harness
