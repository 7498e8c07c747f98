// The one table of cause names (see cause.h).
#include "harness/common/cause.h"

#include <cstddef>

namespace nanchaos::harness {

const std::vector<std::string>& cause_names() {
  // Indexed by Cause: keep the order of the enum.
  static const std::vector<std::string> names = {"data",
                                                 "loss_math",
                                                 "activation",
                                                 "gradient",
                                                 "parameter",
                                                 "fp16_overflow",
                                                 "gradient_explosion",
                                                 "comm_corruption",
                                                 "reduce_overflow",
                                                 "hang",
                                                 "rank_failure",
                                                 "replica_divergence",
                                                 "straggler",
                                                 "checkpoint_corruption"};
  return names;
}

const std::string& to_string(Cause c) { return cause_names().at(size_t(c)); }

std::optional<Cause> parse_cause(std::string_view text) {
  const auto& names = cause_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == text) return Cause(i);
  }
  return std::nullopt;
}

}  // namespace nanchaos::harness
