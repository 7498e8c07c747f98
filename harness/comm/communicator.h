// Communicator: the collectives a rank runs (consensus and gradient all-reduce).
//
// Contract (after c10d's ProcessGroup/Work): every collective is non-blocking and returns a
// Work; Work::wait(deadline) polls it and returns kTimeout once the deadline passes instead of
// blocking forever (the watchdog's job). Nothing here throws on the hot path; setup errors throw
// std::runtime_error with the MPI error string and [host pid rank].
// Thread-safety: one thread per rank calls everything; collectives are issued in the same order
// on every rank (the runner guarantees it; the controller checks it from the event logs).
// Engines: Open MPI (CPU tensors, MPI_Iallreduce + MPI_Test, mpi_communicator.cpp) and NCCL (CUDA
// device buffers, nccl_communicator.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "harness/common/dtype.h"

namespace nanchaos::harness {

// Element types are harness/common/dtype.h's DType. kInt64 carries the consensus rows on NCCL: a
// SUM where one rank contributes each slot is an exact all-gather of the bit patterns (a
// floating-point reduction could turn a NaN into another value or drop it, as a float max does).

enum class CollStatus { kOk, kTimeout, kError };

/// A collective in flight. Destroying an unfinished Work is not allowed (MPI needs the buffer):
/// either wait() returned kOk, or the job is being aborted.
class Work {
 public:
  virtual ~Work() = default;
  /// Polls until done or `deadline_us` (CLOCK_MONOTONIC, see events.h) passes. Never blocks
  /// past the deadline by more than one poll interval (~50 us).
  virtual CollStatus wait(int64_t deadline_us) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// In-place SUM all-reduce of `count` elements. fp16/bf16 sums round at every add, like a
  /// half-precision NCCL all-reduce, so a sum can overflow to inf although every input is finite.
  virtual std::unique_ptr<Work> iallreduce_sum(void* buf, size_t count, DType type) = 0;
  /// Enqueues a device-side stall of `duration_ms` (< 0: forever) ahead of the next collective on
  /// the engine's stream (the `hang` fault's device stall). Returns false when the engine has no
  /// device stream (MPI). Throws std::runtime_error on a CUDA error.
  virtual bool enqueue_stall(int64_t /*duration_ms*/) { return false; }
  /// Takes every rank of the job down (MPI_Abort). Does not return.
  [[noreturn]] virtual void abort_job(int exit_code) = 0;
};

/// Whether a rank waiting on a collective may keep polling on its core for a while (sched_yield
/// between MPI_Test calls, up to 0.5 ms a wait) before it sleeps 50 us between them: true when
/// `local_ranks` (the launcher's count of ranks on this host: OMPI_COMM_WORLD_LOCAL_SIZE, or srun's
/// SLURM_NTASKS_PER_NODE) is a number from 1 to `cores` (the cores this process may run on).
/// Unknown or oversubscribed: false, so ranks with work get the cores (Open MPI decides its own
/// mpi_yield_when_idle from the same count). Measured on the 2-rank mlp (2 cores): the sleeping
/// poll cost ~0.6 ms of a ~1.7 ms step, since a non-blocking all-reduce only moves on inside
/// MPI_Test.
inline bool rank_keeps_core(const char* local_ranks, int cores) {
  if (local_ranks == nullptr || *local_ranks == '\0') return false;
  char* end = nullptr;
  const long n = std::strtol(local_ranks, &end, 10);
  return *end == '\0' && n >= 1 && n <= cores;
}

/// Initializes MPI (once per process) and returns the world communicator. Throws on failure.
std::unique_ptr<Communicator> make_mpi_communicator();
/// MPI_Abort on the world communicator (initializing MPI first if needed). Does not return.
[[noreturn]] void abort_world(int exit_code);
/// MPI_Finalize when MPI was initialized; safe to call twice.
void finalize_mpi();
/// Initializes MPI if needed and broadcasts `bytes` bytes at `data` from `root` (MPI_Bcast on the
/// world communicator): how the NCCL unique id reaches the other ranks. Throws on failure.
void mpi_broadcast_bytes(void* data, size_t bytes, int root);
/// Rank and size of the MPI world (initializing MPI if needed). Throws on failure.
void mpi_world(int* rank, int* world);

}  // namespace nanchaos::harness
