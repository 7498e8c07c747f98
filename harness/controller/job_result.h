// How a launched job ended, as the controller saw it (JobResult): what launch_job (launch.h)
// hands the judge (judge.h) and the rank evidence reader (rank_evidence.h). Plain data.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace nanchaos::harness {

/// How a launched job ended, as the controller saw it.
struct JobResult {
  int exit_code = -1;      ///< launcher exit code (or 128 + signal)
  bool timed_out = false;  ///< the controller killed it at timeout_ms
  int64_t t0_us = 0;       ///< launch time (CLOCK_MONOTONIC us, as in events.h)
  int64_t t_end_us = 0;    ///< launcher reaped
  /// Every process of the job gone (after the orphan sweep; CLOCK_MONOTONIC us); 0: not recorded.
  int64_t t_gone_us = 0;
  int orphans_killed = 0;    ///< job processes still alive after the launcher was reaped
  std::string launch_error;  ///< the launcher could not start: "cannot execute mpirun: ..."
  /// SIGINT or SIGTERM when the controller got one while the job ran (0: not interrupted); the
  /// job was then ended like a timed-out one (its process group and job id, SIGTERM, SIGKILL).
  int interrupted_by = 0;
  /// Post-mortem of process exit states (single host): for each rank whose pid the controller saw
  /// (from its `start` event), when the controller first saw that process gone (CLOCK_MONOTONIC
  /// us). Polled every 10 ms while the job runs. Ranks on other hosts are absent here.
  std::map<int, int64_t> rank_gone_us;
  /// Peak resident set size (VmHWM, KiB; proc_status.h) of each watched rank, as last sampled
  /// from /proc while it was alive (every ~250 ms). A rank's own `exit` event, when it writes
  /// one, carries the exact figure; this covers ranks that never write it (hung, killed).
  std::map<int, int64_t> rank_vm_hwm_kib;
  /// Ranks whose first event says they run on another host or in another PID namespace
  /// (rank_host.h): never pid-watched nor memory-sampled (absent from rank_gone_us and
  /// rank_vm_hwm_kib); their post-mortem comes from their event logs and the launcher's status.
  std::set<int> remote_ranks;
  /// The controller's host name and CLOCK_REALTIME - CLOCK_MONOTONIC (us) at launch: with each
  /// rank's `clock` event they put remote ranks' events on the controller's timeline
  /// (clock_sync.h). Empty / 0 (a JobResult not made by launch_job): no rank's times are shifted.
  std::string host;
  int64_t real_minus_mono_us = 0;
  /// External jobs: why the controller ended the job early because a rank never attached ("" when
  /// it did not): "rank 1: cannot execute ./x: ..." (its attach_error, once its process was
  /// gone), or "rank 0: the nanchaos agent never loaded (no `agent` event): ..." (its process gone
  /// without one, or attach_timeout_ms passed after its `launch` line).
  std::string attach_failure;
};

/// "rank R: the nanchaos agent never loaded (...)": an external rank that never wrote `agent`
/// (neither the Python bootstrap nor a LibTorch program's nanchaos::Agent ran).
std::string agent_never_loaded(int64_t rank);

}  // namespace nanchaos::harness
