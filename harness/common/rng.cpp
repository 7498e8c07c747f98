// The portable generator; see rng.h. Signed inputs are folded as their two's-complement 64-bit
// words, as the Python twin masks its integers to 64 bits.
#include "harness/common/rng.h"

#include <algorithm>
#include <unordered_set>

namespace nanchaos::inject {

bool fires(uint64_t seed, int64_t fault_index, int64_t step, int64_t rank, double probability) {
  if (probability >= 1.0) return true;
  const uint64_t key =
      mix(mix(mix(seed, kFireSalt + uint64_t(fault_index)), uint64_t(step)), uint64_t(rank));
  return SplitMix64(key).uniform01() < probability;
}

int64_t element_count(int64_t numel, std::optional<int64_t> count, std::optional<double> fraction) {
  if (numel <= 0) return 0;
  int64_t want = 1;
  if (fraction) {
    want = std::max<int64_t>(1, int64_t(*fraction * double(numel) + 0.5));
  } else if (count) {
    want = *count;
  }
  return std::min(want, numel);
}

std::vector<int64_t> pick_elements(uint64_t seed, int64_t fault_index, int64_t step, int64_t numel,
                                   int64_t want) {
  std::vector<int64_t> out;
  if (numel <= 0 || want <= 0) return out;
  want = std::min(want, numel);
  if (want == numel) {
    out.resize(size_t(numel));
    for (int64_t i = 0; i < numel; ++i) out[size_t(i)] = i;
    return out;
  }
  SplitMix64 rng(mix(mix(seed, kPickSalt + uint64_t(fault_index)), uint64_t(step)));
  std::unordered_set<int64_t> chosen;
  for (int64_t j = numel - want; j < numel; ++j) {
    const auto t = int64_t(rng.below(uint64_t(j) + 1));
    const int64_t take = chosen.count(t) ? j : t;
    chosen.insert(take);
    out.push_back(take);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace nanchaos::inject
