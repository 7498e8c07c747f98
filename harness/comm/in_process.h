// An in-process world: N ranks as N threads of one process, with a Communicator per rank whose
// collectives meet in shared memory. It lets the rank loop (harness/job/runner.h run_rank_on)
// run a whole scenario in milliseconds inside a unit test, with no launcher and no MPI: what
// recovery, replay, consensus and the loss scaler do is tested this way, and the mpirun tests
// stay for what the launcher itself does (tests/job/in_process_test.cpp).
//
// Semantics follow the MPI engine (mpi_communicator.cpp): an in-place SUM all-reduce, fp16/bf16
// rounded at every add (wire_sum), collectives matched by call order (the k-th call of every
// rank is collective #k), and Work::wait polling against its deadline. The sum is taken in rank
// order, so every rank gets the same bits. abort_job() (MPI_Abort's part) marks the world
// aborted and throws WorldAborted on the calling thread; every rank waiting in, or later
// entering, a collective then throws it too, as MPI_Abort kills every rank where it stands.
// run_rank_on() turns it into the rank's exit code. A thread cannot be killed, so faults that
// stop or kill a process (`hang`, `crash`) need the real launcher.
// Thread-safety: one thread per rank; the world's state is guarded by one mutex.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "harness/comm/communicator.h"

namespace nanchaos::harness {

/// Thrown by an in-process rank's abort_job(): the rank ends with `exit_code`.
class WorldAborted : public std::runtime_error {
 public:
  explicit WorldAborted(int exit_code);
  int exit_code;
};

class InProcessWorld {
 public:
  explicit InProcessWorld(int world_size);
  ~InProcessWorld();
  InProcessWorld(const InProcessWorld&) = delete;
  InProcessWorld& operator=(const InProcessWorld&) = delete;

  int world_size() const { return world_; }
  /// Rank `rank`'s communicator (one per rank; the world must outlive it).
  std::unique_ptr<Communicator> communicator(int rank);
  /// True after some rank called abort_job() (or abort()).
  bool aborted() const;
  /// Ends the world as abort_job(exit_code) would, from any thread (a test whose rank thread
  /// failed releases the others with it).
  void abort(int exit_code);

 private:
  friend class InProcessCommunicator;
  friend class InProcessWork;
  struct Slot;  // one collective: every rank's buffer, then the sum
  // Rank `rank` joins collective #seq; the last to join reduces into every buffer.
  void join(int rank, int64_t seq, void* buf, size_t count, DType type);
  // kOk once collective #seq is reduced (kError when ranks disagreed on its size or type),
  // kTimeout at the deadline; throws WorldAborted once the world is aborted.
  CollStatus wait(int64_t seq, int64_t deadline_us);

  int world_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Slot>> slots_;  // by sequence number
  bool aborted_ = false;
  int abort_code_ = 0;
};

}  // namespace nanchaos::harness
