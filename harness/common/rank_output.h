// Where a job's output goes: one stdout and one stderr file per rank, the launcher's own output
// beside them, and (written by the controller, harness/controller/merged_log.h) the merged view.
//
//   RUN/ranks/rank-N.out    rank N's stdout, exactly as it wrote it
//   RUN/ranks/rank-N.err    rank N's stderr
//   RUN/ranks/launcher.log  the launcher's stdout and stderr (mpirun's own messages, and what a
//                           rank wrote before it redirected itself)
//   RUN/ranks.log           the merged view: every whole line of the files above, prefixed
//                           `[rank N] `, `[rank N err] ` or `[launcher] `
//
// Why the ranks write their own files: under mpirun every rank's stdout and stderr are pipes that
// the launcher copies into its own stdout in chunks of whatever was read, so two ranks printing at
// once came out split and glued in one file (771-1,159 of 20,000 lines). A file
// with one writer holds the rank's bytes in order, whatever the launcher (mpirun, srun, none).
//
// The controller names the folder in $NANCHAOS_RANK_OUTPUT (passed on by `mpirun -x`); each rank
// process (`nanchaos rank`, or the `exec-rank` shim before it execs an external job's command)
// calls redirect_rank_output() first thing, while it has one thread. With the variable unset
// (a rank started by hand) nothing is redirected. The run folder must be on a filesystem every
// host sees (docs/multi-node.md), as for the event logs.
#pragma once

#include <string>

namespace nanchaos::harness {

/// The environment variable that names the folder (absolute) of the per-rank output files.
inline constexpr const char* kRankOutputEnv = "NANCHAOS_RANK_OUTPUT";

/// RUN/ranks: the folder of the per-rank files of the run folder `run_dir`.
std::string rank_output_dir(const std::string& run_dir);
/// DIR/rank-N.out and DIR/rank-N.err (DIR: a rank_output_dir()).
std::string rank_stdout_path(const std::string& dir, int rank);
std::string rank_stderr_path(const std::string& dir, int rank);
/// DIR/launcher.log.
std::string launcher_log_path(const std::string& dir);

/// When $NANCHAOS_RANK_OUTPUT is set: creates that folder if needed, opens (truncates) its
/// rank-`rank`.out and .err and makes them this process's fds 1 and 2 (dup2: kept across exec,
/// inherited by children such as DataLoader workers, O_APPEND so their writes never overwrite each
/// other), and sets C stdio's stdout to line buffering (stderr stays unbuffered), so what a rank
/// printed before it crashed is on disk. Returns "" on success or when the variable is unset, else
/// the reason ("cannot open /run/ranks/rank-1.out: Permission denied"); on failure fds 1 and 2 are
/// left as they were. Call it early, from the process's only thread. Never throws.
std::string redirect_rank_output(int rank);

}  // namespace nanchaos::harness
