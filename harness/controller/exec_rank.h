// `nanchaos exec-rank`: the shim that turns one launcher-started process into one rank of an
// external job (docs/scenario-format.md "External jobs"). Runs in the rank's process, one thread,
// so setenv is safe; it ends in execvp (same pid), so the controller's pid watch that read the
// `launch` line follows the job's own process.
//
//   mpirun -np 2 ... nanchaos exec-rank --scenario /abs/s.toml --run-dir /abs/run
//       --master-port 29611 [--python /usr/bin/python3] [--seed 7]
//
// Environment set for the command: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR
// ($NANCHAOS_MASTER_ADDR; else under srun on several nodes the step's first node, where rank 0
// runs, when that name resolves; else 127.0.0.1), MASTER_PORT, NANCHAOS_PLAN (the plan JSON text),
// NANCHAOS_PLAN_FILE, NANCHAOS_EVENTS (RUN/events/rank-R.jsonl), NANCHAOS_RUN_DIR,
// NANCHAOS_STEPS, NANCHAOS_SEED, PYTHONPATH (agent folder first), then [job].env. Before the
// exec it writes the rank's first event, {"ev":"launch", rank, world, pid, host, pidns, command},
// then (when $NANCHAOS_CLOCK is set) its `clock` event (clock_sync.h: measured here for any
// command); when the exec fails, {"ev":"attach_error", reason} and exit 127. It also sets
// PR_SET_PDEATHSIG = SIGKILL (kept across the exec), so the command dies with its launcher
// (job_guard.h). Once it knows its rank it makes RUN/ranks/rank-R.out and .err its stdout and
// stderr when $NANCHAOS_RANK_OUTPUT names that folder (rank_output.h), so the command's output
// lands there, whole lines in order, whatever the launcher does with its pipes.
// In [job].command and the values of [job].env, `{run_dir}` becomes the run folder (absolute;
// kept across the launches of a relaunched job) and `{launch}` the launch index (0, 1, ...,
// from plan.json's "launch"; [job] restarts).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace nanchaos::harness {

struct ExecRankOptions {
  std::string scenario;  ///< absolute path of the scenario file
  std::string run_dir;   ///< absolute run folder (holds plan.json and events/)
  int master_port = 0;
  std::string python;            ///< replaces a bare "python"/"python3" command[0] when set
  std::optional<uint64_t> seed;  ///< the trial's seed (replaces [scenario].seed)
};

/// The first host of a Slurm host list: "n[1-2],gpu7" -> "n1", "node[07-09]" -> "node07",
/// "rack[1-2]-n[3,5]" -> "rack1-n3" (as `scontrol show hostnames LIST | head -1`).
std::string first_slurm_host(const std::string& hostlist);

/// Tasks on the node-th node (0-based) of a Slurm tasks-per-node list ("2(x3),1": 2, 2, 2, 1);
/// 0 when the list is shorter or malformed.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node);

/// The folder put first on PYTHONPATH: $NANCHAOS_AGENT_PATH, else <source dir>/inject/python.
std::string agent_path();

/// `text` with every `{run_dir}` replaced by `run_dir` and every `{launch}` by `launch`; other
/// braces stay as written. Pure.
std::string substitute_launch_vars(const std::string& text, const std::string& run_dir,
                                   int64_t launch);

/// Never returns on success (execvp); returns the exit status on an error (printed to stderr).
int exec_rank(const ExecRankOptions& opts);

}  // namespace nanchaos::harness
