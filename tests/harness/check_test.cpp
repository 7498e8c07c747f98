// The library-call check family (harness/common/check.h): the message names host, pid, rank,
// the file inside the source tree and its line, the call, and the library's own error.
#include "harness/common/check.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace nanchaos::harness {
namespace {

std::string MessageOf(const char* file, int line) {
  try {
    check_failed(file, line, "MPI_Comm_rank(MPI_COMM_WORLD, &rank)",
                 "MPI_ERR_COMM: invalid communicator");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

std::string Host() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

TEST(Check, MessageNamesProcessRankFileLineCallAndLibraryError) {
  set_check_rank(5);
  const std::string want = "[" + Host() + " " + std::to_string(getpid()) +
                           " rank 5] harness/comm/mpi_communicator.cpp:73: "
                           "MPI_Comm_rank(MPI_COMM_WORLD, &rank) failed: MPI_ERR_COMM: invalid "
                           "communicator";
  EXPECT_EQ(MessageOf("/build/src/nanchaos/harness/comm/mpi_communicator.cpp", 73), want);
  set_check_rank(-1);
}

TEST(Check, RankComesFromTheLauncherUntilTheCommunicatorSetsIt) {
  set_check_rank(-1);
  ::setenv("OMPI_COMM_WORLD_RANK", "12", 1);
  EXPECT_NE(process_origin().find(" rank 12]"), std::string::npos) << process_origin();
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  for (const char* var : {"PMI_RANK", "SLURM_PROCID", "RANK"}) ::unsetenv(var);
  EXPECT_EQ(process_origin(), "[" + Host() + " " + std::to_string(getpid()) + "]");
  set_check_rank(0);
  EXPECT_NE(process_origin().find(" rank 0]"), std::string::npos) << process_origin();
  set_check_rank(-1);
}

}  // namespace
}  // namespace nanchaos::harness
