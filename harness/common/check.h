// One family of checks for library calls (MPI, NCCL, CUDA): a failed call throws
// std::runtime_error whose text names where it happened, the call and the library's own error:
//
//   [gpu-node-3 48121 rank 5] harness/comm/nccl_communicator.cpp:115: ncclCommInitRankConfig(...)
//   failed: unhandled system error (ncclSocketInit: connect to 10.0.0.2<39211> failed)
//
// so that a message collected from any rank of a 64-node job says which host, process and rank
// it came from. The rank is the one set_check_rank() recorded, else the launcher's variable
// (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, RANK); a process that is no rank (the
// controller) says "[host pid]".
//
//   NANCHAOS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));          // harness/comm/mpi_*.cpp
//   NANCHAOS_CUDA_CHECK(cudaSetDevice(device));                        //
//   harness/common/cuda_check.h NANCHAOS_NCCL_CHECK(ncclAllReduce(...), comm); //
//   harness/comm/nccl_*.cpp
//
// The library-specific macros live next to their library's headers; this file is library-free.
// Thread-safe: set_check_rank may be called once at start, the rest only reads.
#pragma once

#include <string>

namespace nanchaos::harness {

/// Records this process's rank for later check messages (the communicator calls it once it
/// knows). Negative: unknown.
void set_check_rank(int rank);

/// "[host pid rank R]" ("[host pid]" outside a rank): where this process runs, as check messages
/// and log lines say it.
std::string process_origin();

/// Throws std::runtime_error("<process_origin()> <file>:<line>: <call> failed: <library_error>").
/// `file` is trimmed to the path inside the source tree.
[[noreturn]] void check_failed(const char* file, int line, const char* call,
                               const std::string& library_error);

}  // namespace nanchaos::harness
