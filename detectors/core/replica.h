// The majority vote of the `replica` detector (SCENARIO_FORMAT.md "More detectors and
// recovery"): every `replica_every` steps each rank digests its parameters, buffers, optimizer
// state and training state (loss scale, learning-rate factor); the ranks exchange one 64-bit
// digest each, and only when they differ one digest per tensor. Data-parallel replicas must be
// bit-identical after every update (DDP's invariant), so any difference is a divergence: finite
// silent corruption (a bit flip in a weight) that no finiteness check sees, or one rank's state
// drifting (a different loss scale or learning rate, after nanotron 242 and pytorch 136009).
//
// Rules:
// - the majority is the digest the most ranks hold; a tie goes to the group holding the lowest
//   rank (with 2 ranks nothing can tell which replica is right: rank 1 is blamed, rank 0 is the
//   source);
// - every rank outside the majority is flagged; `source` is the lowest majority rank, the one
//   `resync` copies from;
// - the layer is the first tensor (forward order: parameters, then buffers, then
//   "training_state") whose digest differs from the source's;
// - the cause is read from which digests differ (classify_divergence): the training state (loss
//   scale, learning-rate factor, optimizer step counters) -> `replica_divergence`; a few
//   parameters (with their optimizer state) -> `parameter`, a weight corrupted on one rank;
//   most parameters under an equal training state -> `gradient_explosion`, one update applied
//   with a different step size. The last rests on DDP's invariant: the all-reduced gradient is
//   the same on every rank, so only a different learning rate (DESIGN.md "growth under a raised
//   LR") moves every parameter of one replica differently.
// Torch-free; every function is pure, so every rank derives the same vote from the same data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "harness/common/cause.h"

namespace nanchaos::harness {

struct ReplicaVote {
  bool diverged = false;
  int source = 0;                 ///< lowest rank of the majority: resync's source
  std::vector<int64_t> minority;  ///< ranks whose digest differs from the majority's, ascending
};

/// What kind of difference a divergent replica shows (its consensus code, replica.cpp).
enum class DivergenceKind {
  kState = 0,      ///< training_state differs: cause replica_divergence
  kParameter = 1,  ///< fewer than half of the parameters differ: cause parameter
  kUpdate = 2,     ///< at least half of the parameters (and >= 2) differ: gradient_explosion
};

struct Divergence {
  int first = -1;  ///< first differing tensor (replica order); -1: the rows are equal
  DivergenceKind kind = DivergenceKind::kState;
};

/// How `rank`'s row of `per_tensor` ([world x tensors], row-major; replica order: `params`
/// parameters, then buffers, then "training_state" last) differs from `source`'s, by the rules
/// above. Buffers (e.g. BatchNorm running statistics, computed from each rank's own forward)
/// never count. `first` is -1 (kind kState) when the rows are equal or out of range.
Divergence classify_divergence(const std::vector<uint64_t>& per_tensor, size_t tensors,
                               size_t params, int rank, int source);

/// The consensus code of a Divergence (a small non-negative integer that a double holds
/// exactly) and back: code = 4 * (first + 1) + kind.
int divergence_code(const Divergence& d);
Divergence divergence_from_code(double code);

/// The cause a DivergenceKind names (the rules above).
Cause divergence_cause(DivergenceKind kind);

/// The vote over `combined[r]`, rank r's whole-state digest (size = world >= 1).
ReplicaVote replica_vote(const std::vector<uint64_t>& combined);

/// The first tensor index where `rank`'s row of `per_tensor` (a [world x tensors] row-major
/// matrix) differs from `source`'s row; -1 when the rows are equal or out of range.
int first_differing_tensor(const std::vector<uint64_t>& per_tensor, size_t tensors, int rank,
                           int source);

}  // namespace nanchaos::harness
