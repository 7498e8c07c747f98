// NCCL engine: non-blocking communicator, collectives on a dedicated stream polled against the
// watchdog deadline, ncclCommAbort on expiry. See nccl_communicator.h.
#include "harness/nccl_communicator.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "harness/cuda_scan.h"
#include "harness/events.h"

namespace nanchaos::harness {
namespace {

std::string where() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return fmt::format("[{} {}]", host, getpid());
}

void cuda_check(cudaError_t err, const char* call) {
  if (err != cudaSuccess) {
    throw std::runtime_error(
        fmt::format("{} {} failed: {}", where(), call, cudaGetErrorString(err)));
  }
}

void nccl_check(ncclResult_t r, const char* call, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  const char* last = comm ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  throw std::runtime_error(
      fmt::format("{} {} failed: {} ({})", where(), call, ncclGetErrorString(r), last ? last : ""));
}

void pause_briefly(int spins) {
  if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

ncclDataType_t nccl_type(ElemType t) {
  switch (t) {
    case ElemType::kFloat64:
      return ncclFloat64;
    case ElemType::kFloat32:
      return ncclFloat32;
    case ElemType::kFloat16:
      return ncclFloat16;
    case ElemType::kBFloat16:
      return ncclBfloat16;
    case ElemType::kInt64:
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
    if (o.rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (o.world > 1) {
      if (!o.broadcast_id) {
        throw std::runtime_error("NCCL with world size > 1 needs a unique-id broadcast (MPI)");
      }
      o.broadcast_id(&id, sizeof(id));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    nccl_check(ncclCommInitRankConfig(&comm_, o.world, id, o.rank, &config),
               "ncclCommInitRankConfig");
    const int64_t deadline = now_us() + o.init_timeout_ms * 1000;
    for (int spins = 0;; ++spins) {
      ncclResult_t state = ncclInProgress;
      nccl_check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", comm_);
      if (state == ncclSuccess) break;
      if (state != ncclInProgress) nccl_check(state, "ncclCommInitRankConfig (async)", comm_);
      if (now_us() > deadline) {
        ncclCommAbort(comm_);
        throw std::runtime_error(fmt::format("{} ncclCommInitRankConfig did not finish in {} ms",
                                             where(), o.init_timeout_ms));
      }
      pause_briefly(spins);
    }
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
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

  std::unique_ptr<Work> iallreduce_sum(void* buf, size_t count, ElemType type) override {
    // Order after what LibTorch enqueued on the legacy default stream (the gradients, the rows).
    cuda_check(cudaEventRecord(ready_, nullptr), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
    nccl_check(ncclAllReduce(buf, buf, count, nccl_type(type), ncclSum, comm_, stream_),
               "ncclAllReduce", comm_);
    cudaEvent_t done = nullptr;
    cuda_check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
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
