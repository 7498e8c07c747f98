// `nanchaos campaign ... --slurm-array K`: a campaign fanned out over a Slurm job array of K
// tasks and merged back, in one command (README "Sharding", docs/multi-node.md "Slurm").
//
// The controller writes OUT/slurm-array.sh, an sbatch script whose task i (SLURM_ARRAY_TASK_ID,
// 1..K) runs `nanchaos campaign SCENARIO ... --shard i/K --out OUT/shard-i` (the same draw in
// every task, each measuring the faults whose index mod K is i - 1; campaign.h), submits it with
// `sbatch --wait --array=1-K` (sbatch returns when every task has ended, with the highest of
// their exit codes: Slurm's documented behaviour for arrays), then merges OUT/shard-1..K into OUT
// (merge.h): OUT/campaign.json holds every fault, row for row the single-process campaign's for
// the same seed. Each task's output goes to OUT/shard-i/slurm-<job>_<i>.out.
//
// Needs Slurm's `sbatch` on PATH (or $NANCHAOS_SBATCH, a command line: "sbatch -p batch"); extra
// sbatch options (partition, time limit, account) go in $NANCHAOS_SBATCH. The controller's own
// host submits and merges; the tasks run wherever Slurm puts them and must see OUT (a shared
// file system) and the same nanchaos binary path.
#pragma once

#include <string>
#include <vector>

#include "harness/controller/campaign.h"

namespace nanchaos::harness {

/// The argv of array task `task` (1..tasks) of the campaign `o` (o.out_dir is the array's OUT):
/// self_exe campaign SCENARIO --faults N [--seed S] [--kinds a,b] --jobs J [--launcher L] [--quiet]
/// [--one-launch-per-fault] [--no-host-limits | --max-ranks R] --shard task/tasks
/// --out OUT/shard-task. Pure.
std::vector<std::string> slurm_array_task_argv(const CampaignOptions& o, int task, int tasks);

/// The sbatch script of the array (OUT/slurm-array.sh): one `#SBATCH` line per option and an
/// exec of slurm_array_task_argv with the task number from $SLURM_ARRAY_TASK_ID, every word
/// shell-quoted. Pure.
std::string slurm_array_script(const CampaignOptions& o, int tasks);

/// Runs the whole fan-out (see the header comment). Returns the merged campaign's exit status
/// (0 thresholds met, 1 a threshold missed, 3 a task's part missing or a fault unmeasured), 2
/// for a usage error before anything was submitted (tasks < 1, --shard given too, no sbatch, an
/// --out that holds an earlier campaign), or 128 + N when a stop signal ended the wait (the
/// array is then cancelled with `scancel`).
int run_campaign_slurm_array(const CampaignOptions& o, int tasks);

}  // namespace nanchaos::harness
