// The run folder's evidence paths (see event_paths.h).
#include "harness/evidence/event_paths.h"

#include <fmt/format.h>

namespace nanchaos::harness {

std::string events_dir(const std::string& run_dir) { return run_dir + "/events"; }

std::string event_log_in(const std::string& events_dir, int64_t rank) {
  return fmt::format("{}/rank-{}.jsonl", events_dir, rank);
}

std::string event_log_path(const std::string& run_dir, int64_t rank) {
  return event_log_in(events_dir(run_dir), rank);
}

}  // namespace nanchaos::harness
