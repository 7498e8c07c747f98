// Build without MPI (a GPU host with no Open MPI): one-rank NCCL jobs need none of this; every
// entry point that would need MPI says so.
#include <unistd.h>

#include <stdexcept>

#include "harness/comm/communicator.h"

namespace nanchaos::harness {
namespace {
[[noreturn]] void not_built(const char* what) {
  throw std::runtime_error(std::string(what) +
                           ": not implemented in this build (nanchaos was built without MPI; "
                           "only one-rank NCCL jobs run)");
}
}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { not_built("the MPI communicator"); }
void abort_world(int exit_code) { _exit(exit_code); }
void finalize_mpi() {}
void mpi_broadcast_bytes(void*, size_t, int) { not_built("MPI_Bcast"); }
void mpi_world(int*, int*) { not_built("MPI_Comm_size"); }

}  // namespace nanchaos::harness
