// Open MPI engine: non-blocking MPI_Iallreduce polled with MPI_Test against a deadline.
#include <fmt/format.h>
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <string>

#include "harness/comm/communicator.h"
#include "harness/common/check.h"
#include "harness/common/wire.h"
#include "harness/evidence/events.h"

// MPI's own error text for a failed call (check.h).
#define NANCHAOS_MPI_CHECK(call)                                                            \
  do {                                                                                      \
    const int nanchaos_rc_ = (call);                                                        \
    if (nanchaos_rc_ != MPI_SUCCESS) {                                                      \
      char nanchaos_msg_[MPI_MAX_ERROR_STRING];                                             \
      int nanchaos_len_ = 0;                                                                \
      MPI_Error_string(nanchaos_rc_, nanchaos_msg_, &nanchaos_len_);                        \
      ::nanchaos::harness::check_failed(__FILE__, __LINE__, #call,                          \
                                        std::string(nanchaos_msg_, size_t(nanchaos_len_))); \
    }                                                                                       \
  } while (0)

namespace nanchaos::harness {

namespace {

void fp16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  wire_sum(in, inout, size_t(*len), WireType::kFp16);
}
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  wire_sum(in, inout, size_t(*len), WireType::kBf16);
}

// The launcher's count of this host's ranks: Open MPI's, else srun --ntasks-per-node's.
const char* local_ranks_env() {
  const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return v ? v : std::getenv("SLURM_NTASKS_PER_NODE");
}

int affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

class MpiWork final : public Work {
 public:
  MpiWork(MPI_Request req, bool own_core) : req_(req), own_core_(own_core) {}
  /// Polls MPI_Test until the collective completes or `deadline_us` passes. A non-blocking
  /// collective (libnbc) moves on only inside MPI_Test, a round per call, so a gap between two
  /// tests is latency paid per round. After 64 tests a rank with a core of its own
  /// (rank_keeps_core, communicator.h) gives the core away with sched_yield between tests for
  /// up to kYieldUs, then sleeps 50 us between them, as an oversubscribed rank does at once: a
  /// yielding rank stays runnable and takes its share of the cores from every other process on
  /// the host (two 2-rank jobs on 2 cores, a rank waiting out a hung peer's watchdog deadline),
  /// while a healthy step's wait is shorter (~0.1 ms on the 2-rank mlp).
  CollStatus wait(int64_t deadline_us) override {
    if (done_) return CollStatus::kOk;
    int64_t yield_until_us = -1;
    for (int spins = 0;; ++spins) {
      int flag = 0;
      if (MPI_Test(&req_, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return CollStatus::kError;
      if (flag) {
        done_ = true;
        return CollStatus::kOk;
      }
      // The clock is read every 16th test only: a small collective completes in a few us.
      if (spins <= 64) {
        if ((spins & 15) == 15 && now_us() > deadline_us) return CollStatus::kTimeout;
        continue;
      }
      const int64_t now = now_us();
      if (now > deadline_us) return CollStatus::kTimeout;
      if (own_core_ && yield_until_us < 0) yield_until_us = now + kYieldUs;
      if (now < yield_until_us) {
        sched_yield();
      } else {
        timespec ts{0, 50000};
        nanosleep(&ts, nullptr);
      }
    }
  }

 private:
  /// How long a rank with a core of its own yields before it sleeps between tests (us).
  static constexpr int64_t kYieldUs = 500;
  MPI_Request req_;
  bool own_core_;
  bool done_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) NANCHAOS_MPI_CHECK(MPI_Init(nullptr, nullptr));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    NANCHAOS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    NANCHAOS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));
    NANCHAOS_MPI_CHECK(MPI_Op_create(&fp16_sum, /*commute=*/1, &fp16_op_));
    NANCHAOS_MPI_CHECK(MPI_Op_create(&bf16_sum, /*commute=*/1, &bf16_op_));
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  std::unique_ptr<Work> iallreduce_sum(void* buf, size_t count, DType type) override {
    MPI_Datatype dt = MPI_FLOAT;
    MPI_Op op = MPI_SUM;
    switch (type) {
      case DType::kFp64:
        dt = MPI_DOUBLE;
        break;
      case DType::kFp32:
        dt = MPI_FLOAT;
        break;
      case DType::kFp16:
        dt = MPI_UINT16_T;
        op = fp16_op_;
        break;
      case DType::kBf16:
        dt = MPI_UINT16_T;
        op = bf16_op_;
        break;
      case DType::kInt64:
        dt = MPI_INT64_T;
        break;
    }
    MPI_Request req;
    NANCHAOS_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, int(count), dt, op, MPI_COMM_WORLD, &req));
    return std::make_unique<MpiWork>(req, own_core_);
  }

  [[noreturn]] void abort_job(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    _exit(exit_code);
  }

 private:
  int rank_ = 0, world_ = 1;
  const bool own_core_ = rank_keeps_core(local_ranks_env(), affinity_cores());
  MPI_Op fp16_op_ = MPI_OP_NULL, bf16_op_ = MPI_OP_NULL;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

void abort_world(int exit_code) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) MPI_Abort(MPI_COMM_WORLD, exit_code);
  _exit(exit_code);
}

namespace {
void ensure_mpi() {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) NANCHAOS_MPI_CHECK(MPI_Init(nullptr, nullptr));
}
}  // namespace

void mpi_broadcast_bytes(void* data, size_t bytes, int root) {
  ensure_mpi();
  NANCHAOS_MPI_CHECK(MPI_Bcast(data, int(bytes), MPI_BYTE, root, MPI_COMM_WORLD));
}

void mpi_world(int* rank, int* world) {
  ensure_mpi();
  NANCHAOS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, rank));
  NANCHAOS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, world));
}

void finalize_mpi() {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Finalize();
}

}  // namespace nanchaos::harness
