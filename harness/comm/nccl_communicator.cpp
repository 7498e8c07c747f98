// NCCL engine: non-blocking communicator, collectives on a dedicated stream polled against the
// watchdog deadline, ncclCommAbort on expiry. See nccl_communicator.h.
#include "harness/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "harness/common/check.h"
#include "harness/common/cuda_check.h"
#include "harness/common/cuda_device.h"
#include "harness/evidence/events.h"

namespace nanchaos::harness {
namespace {

// A failed NCCL call, with NCCL's last error of `comm` (nullptr: the process-wide one).
// ncclInProgress is not a failure: the non-blocking engine polls ncclCommGetAsyncError.
#define NANCHAOS_NCCL_CHECK(call, comm)                                                          \
  do {                                                                                           \
    const ncclResult_t nanchaos_nr_ = (call);                                                    \
    if (nanchaos_nr_ != ncclSuccess && nanchaos_nr_ != ncclInProgress) {                         \
      const char* nanchaos_last_ = ncclGetLastError(comm);                                       \
      ::nanchaos::harness::check_failed(__FILE__, __LINE__, #call,                               \
                                        fmt::format("{} ({})", ncclGetErrorString(nanchaos_nr_), \
                                                    nanchaos_last_ ? nanchaos_last_ : ""));      \
    }                                                                                            \
  } while (0)

void pause_briefly(int spins) {
  if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kFp64:
      return ncclFloat64;
    case DType::kFp32:
      return ncclFloat32;
    case DType::kFp16:
      return ncclFloat16;
    case DType::kBf16:
      return ncclBfloat16;
    case DType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

// A collective in flight: first the (possibly deferred) enqueue, then the kernel's completion.
class NcclWork final : public Work {
 public:
  NcclWork(ncclComm_t comm, cudaStream_t stream, cudaEvent_t done)
      : comm_(comm), stream_(stream), done_(done) {}

  CollStatus wait(int64_t deadline_us) override {
    if (finished_) return CollStatus::kOk;
    for (int spins = 0;; ++spins) {
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) != ncclSuccess) return CollStatus::kError;
      if (async != ncclSuccess && async != ncclInProgress) return CollStatus::kError;
      if (async == ncclSuccess && !recorded_) {
        // The enqueue finished: the event now follows the collective on the stream.
        if (cudaEventRecord(done_, stream_) != cudaSuccess) return CollStatus::kError;
        recorded_ = true;
      }
      if (recorded_) {
        const cudaError_t q = cudaEventQuery(done_);
        if (q == cudaSuccess) {
          finished_ = true;
          return CollStatus::kOk;
        }
        if (q != cudaErrorNotReady) return CollStatus::kError;
      }
      if (now_us() > deadline_us) return CollStatus::kTimeout;
      pause_briefly(spins);
    }
  }

 private:
  ncclComm_t comm_;
  cudaStream_t stream_;
  cudaEvent_t done_;
  bool recorded_ = false;
  bool finished_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(const NcclOptions& o) : o_(o) {
    cuda_set_device(o.device);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (o.rank == 0) NANCHAOS_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
    if (o.world > 1) {
      if (!o.broadcast_id) {
        throw std::runtime_error("NCCL with world size > 1 needs a unique-id broadcast (MPI)");
      }
      o.broadcast_id(&id, sizeof(id));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    NANCHAOS_NCCL_CHECK(ncclCommInitRankConfig(&comm_, o.world, id, o.rank, &config), nullptr);
    const int64_t deadline = now_us() + o.init_timeout_ms * 1000;
    for (int spins = 0;; ++spins) {
      ncclResult_t async_init_result = ncclInProgress;  // of ncclCommInitRankConfig
      NANCHAOS_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async_init_result), comm_);
      if (async_init_result == ncclSuccess) break;
      NANCHAOS_NCCL_CHECK(async_init_result, comm_);  // a failure other than "in progress"
      if (now_us() > deadline) {
        ncclCommAbort(comm_);
        throw std::runtime_error(fmt::format("{} ncclCommInitRankConfig did not finish in {} ms",
                                             process_origin(), o.init_timeout_ms));
      }
      pause_briefly(spins);
    }
    NANCHAOS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    NANCHAOS_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  }

  ~NcclCommunicator() override {
    // Normal end of a rank: every collective finished (the runner waited on each).
    for (auto e : events_) cudaEventDestroy(e);
    if (ready_) cudaEventDestroy(ready_);
    if (comm_) {
      // Non-blocking communicator: finalize, poll it out (bounded), then destroy.
      ncclCommFinalize(comm_);
      {
        const int64_t deadline = now_us() + 10'000'000;
        ncclResult_t state = ncclInProgress;
        for (int spins = 0; state == ncclInProgress && now_us() < deadline; ++spins) {
          if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
          pause_briefly(spins);
        }
      }
      ncclCommDestroy(comm_);
    }
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return o_.rank; }
  int world_size() const override { return o_.world; }

  std::unique_ptr<Work> iallreduce_sum(void* buf, size_t count, DType type) override {
    // Order after what LibTorch enqueued on the legacy default stream (the gradients, the rows).
    NANCHAOS_CUDA_CHECK(cudaEventRecord(ready_, nullptr));
    NANCHAOS_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
    NANCHAOS_NCCL_CHECK(ncclAllReduce(buf, buf, count, nccl_type(type), ncclSum, comm_, stream_),
                        comm_);
    cudaEvent_t done = nullptr;
    NANCHAOS_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    events_.push_back(done);
    if (events_.size() > 64) {  // finished long ago (each Work was waited on in turn)
      cudaEventDestroy(events_.front());
      events_.erase(events_.begin());
    }
    return std::make_unique<NcclWork>(comm_, stream_, done);
  }

  bool enqueue_stall(int64_t duration_ms) override {
    cuda_enqueue_spin(stream_, duration_ms);
    return true;
  }

  [[noreturn]] void abort_job(int exit_code) override {
    // Last resort if the abort itself hangs (a driver stuck on a dead peer).
    std::thread([exit_code] {
      std::this_thread::sleep_for(std::chrono::seconds(20));
      _exit(exit_code);
    }).detach();
    cuda_release_spins();
    ncclCommAbort(comm_);
    comm_ = nullptr;
    if (o_.take_down) o_.take_down(exit_code);
    _exit(exit_code);
  }

 private:
  NcclOptions o_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  std::vector<cudaEvent_t> events_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions& options) {
  return std::make_unique<NcclCommunicator>(options);
}

}  // namespace nanchaos::harness
