// The stack's collectives (consensus rows, replica digests, resync, the replay's exchange) and
// the job's gradient all-reduce, over the rank's communicator: each one logged as
// coll_enter/coll_leave (harness/comm/collective.h) and, with a detector that arms the
// collective deadline enabled (registry: `arms_collective_deadline`, the `watchdog`), polled
// against [detectors].collective_timeout_ms. A collective that times out or fails is that
// detector's finding: `detect` (cause `hang`, layer = the collective), `abort`, the rank's
// `exit`, then Communicator::abort_job takes every rank down; it never returns to the caller.
// Without one a collective waits forever, as a stock c10d job does (until the launcher's
// timeout).
//
// On NCCL (device = cuda) the float64 rows and int64 words travel through a device copy as
// int64 bit patterns: a SUM where one rank contributes each slot is then an exact all-gather,
// NaN payloads included (a floating-point reduction could change or drop a NaN).
// Thread-safety: the rank's one thread.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/common/run_delay.h"
#include "harness/evidence/events.h"

namespace nanchaos::detect {

/// Every collective's deadline and whose finding its expiry is.
struct Deadline {
  int64_t timeout_ms = 0;  ///< 0: none (wait forever)
  std::string detector;    ///< the `detect` event's detector on expiry
};

/// The time this rank spent inside its collectives so far (ns): the wall time, and the part of it
/// the thread sat runnable off the CPU (run_delay.h). Waiting for a peer is not being slow: the
/// job's phase clock (harness/job/phase_clock.h) takes both out of its phases.
struct Waited {
  int64_t wall_ns = 0;
  int64_t run_delay_ns = 0;
};

class StackComm {
 public:
  /// On an expired deadline the rank exits with `watchdog_exit`, after `write_exit(code)` wrote
  /// its `exit` event (the job owns that event's fields). `device` is where NCCL buffers live
  /// (`cuda`).
  StackComm(harness::Communicator& comm, harness::EventLog& log, Deadline deadline, bool cuda,
            torch::Device device, int watchdog_exit, std::function<void(int)> write_exit);

  int rank() const { return rank_; }
  int world() const { return world_; }
  /// The next collective's number (the `seq` of coll_enter); set_seq puts a checkpoint's back.
  int64_t seq() const { return seq_; }
  void set_seq(int64_t seq) { seq_ = seq; }

  /// In-place SUM all-reduce of `count` elements of `type` at `buf` (a host buffer on MPI, a
  /// device pointer on NCCL), named `name` in the log, at `step`.
  void collective(const std::string& name, void* buf, size_t count, harness::DType type,
                  int64_t step);
  /// All-reduce of a [world x width] float64 matrix in which each rank filled only its row.
  void allreduce_rows(std::vector<double>& rows, const std::string& name, int64_t step);
  /// In-place SUM of `n` int64 (an exact all-gather or broadcast with one contributor a slot).
  void allreduce_i64(int64_t* data, size_t n, const std::string& name, int64_t step);
  /// All-gather of one uint64 per slot of `mine` into a [world x mine.size()] matrix.
  std::vector<uint64_t> allgather_u64(const std::vector<uint64_t>& mine, const std::string& name,
                                      int64_t step);

  /// Cumulative time inside collective() (every collective above goes through it).
  const Waited& waited() const { return waited_; }
  /// The rank thread's run-delay reader, shared with the job's phase clock (one open file).
  harness::RunDelay& run_delay() { return run_delay_; }

 private:
  harness::Communicator& comm_;
  harness::EventLog& log_;
  Deadline deadline_;
  bool cuda_;
  torch::Device device_;
  int watchdog_exit_;
  std::function<void(int)> write_exit_;
  int rank_, world_;
  int64_t seq_ = 0;
  Waited waited_;
  harness::RunDelay run_delay_;
};

}  // namespace nanchaos::detect
