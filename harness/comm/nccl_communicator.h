// NCCL engine of the Communicator interface (communicator.h) for device = "cuda".
//
// Torch-free: buffers are raw CUDA device pointers. Design (after c10d's ProcessGroupNCCL with
// TORCH_NCCL_ASYNC_ERROR_HANDLING):
//   - the communicator is created non-blocking (ncclConfig_t.blocking = 0) and its creation is
//     polled with ncclCommGetAsyncError until it leaves ncclInProgress, against a deadline;
//   - every collective runs on the engine's own non-blocking CUDA stream, ordered after the work
//     already enqueued on the legacy default stream (LibTorch's default current stream) by a CUDA
//     event; Work::wait polls ncclCommGetAsyncError and cudaEventQuery until the deadline, so a
//     hung collective is noticed, never waited out;
//   - abort_job calls ncclCommAbort (which ends NCCL kernels stuck on a peer), then takes the job
//     down with the exit code: a hang is ended, not waited out.
// The unique id comes from rank 0 and reaches the other ranks through `broadcast_id` (MPI_Bcast
// in the runner); with world size 1 it is generated locally and nothing else is needed (no
// MPI_Init, no mpirun).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "harness/comm/communicator.h"

namespace nanchaos::harness {

struct NcclOptions {
  int rank = 0;
  int world = 1;
  int device = 0;                   ///< CUDA device of this rank (local rank -> device)
  int64_t init_timeout_ms = 60000;  ///< deadline for the non-blocking communicator creation
  /// Broadcasts `bytes` bytes at `data` from rank 0 to every rank (blocking). Required when
  /// world > 1; unused when world == 1.
  std::function<void(void* data, size_t bytes)> broadcast_id;
  /// Called by abort_job after ncclCommAbort (e.g. MPI_Abort of the job); when empty, abort_job
  /// ends the process with _exit(code). Must not return.
  std::function<void(int code)> take_down;
};

/// Creates the rank's NCCL communicator (cudaSetDevice(device) first). Supports SUM all-reduce of
/// float64/float32/float16/bfloat16/int64 device buffers. Throws std::runtime_error naming the
/// failing NCCL/CUDA call (and "not built with NCCL" in a build without it).
std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions& options);

}  // namespace nanchaos::harness
