// The merged view of a job's output, RUN/ranks.log: every whole line of the per-rank files and
// of the launcher's log (harness/common/rank_output.h), each prefixed with where it came from,
// in the order the controller read them (about every 50 ms while the job runs).
//
//   [launcher] mpirun noticed that process rank 1 with PID 0 on node h exited on signal 11
//   [rank 0] step 3 loss 1.25
//   [rank 1 err] Traceback (most recent call last):
//
// A line is copied only once its newline is there, so a line is never split or glued to another
// source's; a source's last bytes without a newline (a rank killed mid-line) are copied by
// finish(), ended with a newline. Lines of one source keep their order; lines of different
// sources are ordered by when they were read, not when they were written (each rank's own file
// is the exact record). The per-rank files stay as they are.
//
// Owned by launch_job() (controller, main thread). Not thread-safe. Never throws: an unreadable
// source is skipped and tried again at the next poll; a merged file that cannot be written loses
// the view, not the job (the per-rank files are the evidence).
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <string>

#include "results/report.h"

namespace nanchaos::harness {

/// The output files of the job run in `run_dir` with `world` ranks, as the report links them
/// (results::JobLogs): ranks.log, ranks/launcher.log and each rank's ranks/rank-N.out and .err,
/// relative to `run_dir`; a file that does not exist is left out.
results::JobLogs job_logs(const std::string& run_dir, int world);

class MergedLog {
 public:
  /// `ranks_dir`: the folder of the per-rank files (read); `merged_path`: the view (truncated).
  MergedLog(std::string ranks_dir, const std::string& merged_path);
  ~MergedLog();  ///< closes the sources (never throws)
  MergedLog(const MergedLog&) = delete;
  MergedLog& operator=(const MergedLog&) = delete;

  /// Copies the whole lines written since the last call (new rank files are found by name).
  void poll();
  /// poll(), then each source's unterminated tail as a line of its own. Call once the job's
  /// processes are gone.
  void finish();

 private:
  struct Source {
    std::string prefix;
    int fd = -1;          ///< kept open: 64 ranks' 129 files are not reopened every 50 ms
    int64_t offset = 0;   ///< bytes of the file consumed so far
    std::string partial;  ///< read, no newline yet
  };
  void read_source(Source& src);

  std::string dir_;
  std::ofstream out_;
  std::map<std::string, Source> sources_;  ///< file name in dir_ -> its state
};

}  // namespace nanchaos::harness
