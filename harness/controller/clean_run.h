// The clean reference run of `[expect] final_matches_clean` (docs/scenario-format.md "Recovery by
// restart"): the same scenario and seed with no fault and one launch, run by the controller
// itself, whose final parameter and optimizer digests the judge compares with the faulted run's.
//
//   RUN/clean/            the clean run's own run folder (events/, ranks.log, plan.json)
//   RUN/clean/clean.json  {"key", "seed", "ranks": [{"params_hash", "optim_hash"} | null],
//                          "error"}: the cache, read back by read_job_evidence
//
// Once per scenario and seed: a second judge of the same run folder (a rerun into the same
// --out, a re-judge) reuses clean.json when its key matches, and runs the job again otherwise.
// The key is the clean job's own: XXH3 of the scenario as toml++ writes it less [scenario],
// [[fault]], [expect] and [campaign], and the seed; so a campaign's faults, each its own
// scenario file of one base, share one clean run (LaunchContext::clean_cache). Thread-safety:
// as run_scenario_job (one call per run folder at a time).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/controller/launch.h"
#include "harness/scenario/scenario.h"

namespace nanchaos::harness {

/// The clean run's end state, one entry per rank: its `final` event's (params_hash, optim_hash),
/// nullopt for a rank that wrote none. `error`: why there is nothing to compare ("" when the run
/// completed): the run could not start, a rank ended without a `final` event.
struct CleanReference {
  std::string key;  ///< the cache key (clean_run_key)
  uint64_t seed = 0;
  std::vector<std::optional<std::pair<std::string, std::string>>> ranks;
  std::string error;
};

/// RUN/clean: the clean run's folder, kept by run_scenario_job when it empties RUN.
std::string clean_run_dir(const std::string& run_dir);

/// The cache key (see above), 16 hex digits. Throws std::runtime_error when the file cannot be
/// read, toml::parse_error when it does not parse.
std::string clean_run_key(const std::string& scenario_file, uint64_t seed);

/// RUN/clean/clean.json as written by run_clean_reference; nullopt when absent or unreadable.
std::optional<CleanReference> read_clean_reference(const std::string& run_dir);

/// The reference for `s` run with `seed` (nullopt: the file's): RUN/clean/clean.json when its key
/// matches, else ctx.clean_cache's clean.json when its key matches (copied into RUN/clean), else
/// the clean run itself (its folder emptied first): built-in jobs run
/// RUN/clean/scenario.toml, the scenario less its [[fault]], [expect] and [campaign] tables;
/// external jobs run `s` with no fault in the plan. One launch, [job] timeout_ms as written;
/// `job_id` marks its processes (use one apart from the scenario's). Writes and returns the
/// reference; a failure is in its `error`, never thrown.
CleanReference run_clean_reference(const Scenario& s, const std::string& run_dir,
                                   const LaunchContext& ctx, const std::string& job_id,
                                   std::optional<uint64_t> seed);

}  // namespace nanchaos::harness
