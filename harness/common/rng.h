// The portable generator (docs/generator.md): every random choice a fault makes comes from here,
// keyed by (scenario seed, fault index, step[, rank]), identical to the Python agent's
// inject/python/nanchaos/rng.py bit for bit, so a scenario hits the same elements in a built-in
// and an external job, on any standard library. Never std::*_distribution (implementation-defined
// output). tests/data/generator_vectors.json is the shared test vector.
//
//   SplitMix64 g(mix(mix(seed, kPickSalt + index), step));
//   uint64_t i = g.below(numel);  // unbiased, in [0, numel)
//
// Torch-free, header-only, no state outside the objects; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace nanchaos::inject {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kPickSalt = 0xE1E;   ///< element choice: key(seed, 0xe1e + index, step)
constexpr uint64_t kFireSalt = 0xFA17;  ///< probability draw: key(seed, 0xfa17 + index, step, rank)

/// SplitMix64's output function (Vigna's splitmix64.c constants).
constexpr uint64_t splitmix_finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Folds `v` into the key `h`: hash_combine, then the SplitMix64 finalizer.
constexpr uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + kGolden + (h << 6) + (h >> 2);
  h += kGolden;
  return splitmix_finalize(h);
}

/// A SplitMix64 stream: state += golden; return finalize(state).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t key) : state_(key) {}
  uint64_t next() {
    state_ += kGolden;
    return splitmix_finalize(state_);
  }
  /// A double in [0, 1): the top 53 bits of one output times 2^-53.
  double uniform01() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
  /// An integer in [0, n), n >= 1, unbiased: outputs below (2^64 - n) % n are rejected.
  uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;  // (2^64 - n) mod n in 64-bit arithmetic
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

 private:
  uint64_t state_;
};

/// The per-(step, rank) probability draw of a fault; probability >= 1 fires without drawing.
bool fires(uint64_t seed, int64_t fault_index, int64_t step, int64_t rank, double probability);

/// Elements a fault hits: round-half-up(fraction x numel), at least 1, when `fraction` is given,
/// else `count` (default 1); never more than numel; 0 when numel <= 0.
int64_t element_count(int64_t numel, std::optional<int64_t> count, std::optional<double> fraction);

/// `want` distinct flat indices in [0, numel), ascending, identical on every rank (Floyd's
/// sampling: for j in [numel - want, numel) take t = below(j + 1), or j when t is taken).
std::vector<int64_t> pick_elements(uint64_t seed, int64_t fault_index, int64_t step, int64_t numel,
                                   int64_t want);

}  // namespace nanchaos::inject
