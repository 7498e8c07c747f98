// The in-process world; see in_process.h.
#include "harness/comm/in_process.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <limits>
#include <string>

#include "harness/common/wire.h"
#include "harness/evidence/events.h"

namespace nanchaos::harness {

WorldAborted::WorldAborted(int code)
    : std::runtime_error(fmt::format("the in-process job was aborted (exit code {})", code)),
      exit_code(code) {}

struct InProcessWorld::Slot {
  std::vector<void*> bufs;
  size_t count = 0;
  DType type = DType::kFp64;
  int joined = 0;
  bool done = false;
  std::string error;  // ranks disagreed on count or type
};

namespace {

// inout += in, elementwise, as the MPI engine's SUM of that type does.
void add_into(const void* in, void* inout, size_t n, DType t) {
  switch (t) {
    case DType::kFp64: {
      auto* a = static_cast<double*>(inout);
      const auto* b = static_cast<const double*>(in);
      for (size_t i = 0; i < n; ++i) a[i] += b[i];
      break;
    }
    case DType::kFp32: {
      auto* a = static_cast<float*>(inout);
      const auto* b = static_cast<const float*>(in);
      for (size_t i = 0; i < n; ++i) a[i] += b[i];
      break;
    }
    case DType::kInt64: {
      // Wrapping, as MPI_INT64_T's SUM on two's complement: bit patterns travel exactly.
      auto* a = static_cast<uint64_t*>(inout);
      const auto* b = static_cast<const uint64_t*>(in);
      for (size_t i = 0; i < n; ++i) a[i] += b[i];
      break;
    }
    case DType::kFp16:
      wire_sum(in, inout, n, WireType::kFp16);
      break;
    case DType::kBf16:
      wire_sum(in, inout, n, WireType::kBf16);
      break;
  }
}

}  // namespace

class InProcessWork final : public Work {
 public:
  InProcessWork(InProcessWorld& w, int64_t seq) : w_(w), seq_(seq) {}
  CollStatus wait(int64_t deadline_us) override { return w_.wait(seq_, deadline_us); }

 private:
  InProcessWorld& w_;
  int64_t seq_;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(InProcessWorld& w, int rank) : w_(w), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return w_.world_size(); }
  std::unique_ptr<Work> iallreduce_sum(void* buf, size_t count, DType type) override {
    const int64_t seq = next_++;
    w_.join(rank_, seq, buf, count, type);
    return std::make_unique<InProcessWork>(w_, seq);
  }
  [[noreturn]] void abort_job(int exit_code) override {
    w_.abort(exit_code);
    throw WorldAborted(exit_code);
  }

 private:
  InProcessWorld& w_;
  int rank_;
  int64_t next_ = 0;
};

InProcessWorld::InProcessWorld(int world_size) : world_(world_size) {}
InProcessWorld::~InProcessWorld() = default;

std::unique_ptr<Communicator> InProcessWorld::communicator(int rank) {
  return std::make_unique<InProcessCommunicator>(*this, rank);
}

bool InProcessWorld::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

void InProcessWorld::join(int rank, int64_t seq, void* buf, size_t count, DType type) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) throw WorldAborted(abort_code_);
  while (slots_.size() <= size_t(seq)) slots_.push_back(std::make_unique<Slot>());
  Slot& s = *slots_[size_t(seq)];
  if (s.bufs.empty()) {
    s.bufs.assign(size_t(world_), nullptr);
    s.count = count;
    s.type = type;
  } else if (s.count != count || s.type != type) {
    s.error = fmt::format("collective #{}: rank {} gave {} x {}, another rank {} x {}", seq, rank,
                          count, torch_name(type), s.count, torch_name(s.type));
  }
  s.bufs[size_t(rank)] = buf;
  if (++s.joined < world_) return;
  if (s.error.empty()) {
    // The sum in rank order, written to every rank's buffer.
    const size_t bytes = s.count * dtype_bytes(s.type);
    std::vector<unsigned char> sum(bytes);
    std::memcpy(sum.data(), s.bufs[0], bytes);
    for (int r = 1; r < world_; ++r) add_into(s.bufs[size_t(r)], sum.data(), s.count, s.type);
    for (void* b : s.bufs) std::memcpy(b, sum.data(), bytes);
  }
  s.done = true;
  cv_.notify_all();
}

CollStatus InProcessWorld::wait(int64_t seq, int64_t deadline_us) {
  std::unique_lock<std::mutex> lock(mu_);
  const Slot& s = *slots_.at(size_t(seq));
  const bool forever = deadline_us <= 0 || deadline_us == std::numeric_limits<int64_t>::max();
  while (!s.done && !aborted_) {
    if (!forever) {
      const int64_t left = deadline_us - now_us();
      if (left <= 0) return CollStatus::kTimeout;
      cv_.wait_for(lock, std::chrono::microseconds(left));
    } else {
      cv_.wait(lock);
    }
  }
  if (aborted_) throw WorldAborted(abort_code_);
  return s.error.empty() ? CollStatus::kOk : CollStatus::kError;
}

void InProcessWorld::abort(int exit_code) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_) abort_code_ = exit_code;
  aborted_ = true;
  cv_.notify_all();
}

}  // namespace nanchaos::harness
