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
//   "training_state") whose digest differs from the source's.
// Torch-free; every function is pure, so every rank derives the same vote from the same data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nanchaos::harness {

struct ReplicaVote {
  bool diverged = false;
  int source = 0;                 ///< lowest rank of the majority: resync's source
  std::vector<int64_t> minority;  ///< ranks whose digest differs from the majority's, ascending
};

/// The vote over `combined[r]`, rank r's whole-state digest (size = world >= 1).
ReplicaVote replica_vote(const std::vector<uint64_t>& combined);

/// The first tensor index where `rank`'s row of `per_tensor` (a [world x tensors] row-major
/// matrix) differs from `source`'s row; -1 when the rows are equal or out of range.
int first_differing_tensor(const std::vector<uint64_t>& per_tensor, size_t tensors, int rank,
                           int source);

}  // namespace nanchaos::harness
