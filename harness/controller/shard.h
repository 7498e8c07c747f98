// Splitting a suite over N independent runs (`nanchaos run --shard I/N`) and putting the runs
// back together (`nanchaos merge`): a CI matrix or a Slurm job array runs each part on its own
// runner, the merged report equals one run of the whole suite in verdicts.
//
// Which scenarios a shard runs is a pure function of the suite (its scenario names in suite
// order, after --tag), N and optional weights: every shard computes the same partition without
// talking to the others. Without weights, scenario k goes to shard (k mod N) + 1 (round robin
// over suite order). With weights (ms, each scenario's wall time in an earlier run's report.json,
// `--shard-balance`), the longest-processing-time-first rule (Graham 1969): scenarios by weight,
// heaviest first (ties: suite order), each to the shard with the least total so far (ties: the
// lowest index); a scenario the earlier run lacks weighs the median of those it has. A shard may
// be empty (N larger than the suite): it runs nothing and exits 0. Torch-free.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace nanchaos::harness {

/// --shard I/N: index 1-based. count == 0: not sharded.
struct ShardSpec {
  int index = 0;
  int count = 0;
  bool on() const { return count > 0; }
};

/// Parses "I/N" (1 <= I <= N <= 100000). Throws std::invalid_argument with a message that quotes
/// the text and says what is expected.
ShardSpec parse_shard(const std::string& text);

/// For each name (suite order), whether shard `s` runs it. `weights` may be empty (round robin)
/// or hold wall times (ms, >= 0) by scenario name.
std::vector<bool> shard_members(const std::vector<std::string>& names,
                                const std::map<std::string, double>& weights, ShardSpec s);

/// Each scenario's wall_ms from a report.json (the representative trial's; with --trials, the
/// sum over its trials). Throws std::runtime_error naming the file when it cannot be read or is
/// not a nanchaos report.
std::map<std::string, double> shard_weights_from_report(const std::string& report_json);

}  // namespace nanchaos::harness
