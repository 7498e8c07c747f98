// `nanchaos merge RUN_DIR... --out DIR`: one report from the runs of a sharded suite
// (`nanchaos run --shard I/N`, harness/controller/shard.h) or from any runs of distinct
// scenarios: report.json, junit.xml, report.md and report.html as one run of the whole suite
// would write them, in the suite's order, with each scenario's run folder copied under DIR (the
// runs may come from other machines: a CI matrix's artifacts, a Slurm job array's folders).
//
// Errors (exit 2, nothing written unless said): a folder without a readable report.json, a
// scenario in two runs, shards of different suites or counts, the same shard twice, an existing
// DIR/report.json. Shards missing from a sharded suite: the merged report is written with their
// scenarios under `not_run` and "interrupted": true, and the exit status is 3 with the missing
// shard numbers named. Otherwise the exit status is `run`'s (harness/common/exit_status.h): 0
// all passed or skipped, 1 a check failed, 3 a scenario errored. Campaign folders
// (campaign.json, `campaign --shard I/N`) merge the same way, by fault index. Torch-free.
#pragma once

#include <string>
#include <vector>

namespace nanchaos::harness {

struct MergeOptions {
  std::vector<std::string> runs;  ///< run folders, each with a report.json
  std::string out_dir;            ///< the merged run folder (created; must hold no report.json)
  std::string junit;              ///< extra copy of junit.xml ("" none)
  bool quiet = false;             ///< no summary on stdout
};

int merge_runs(const MergeOptions& opts);

}  // namespace nanchaos::harness
