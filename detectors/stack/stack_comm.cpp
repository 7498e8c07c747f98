// The stack's logged collectives with the watchdog; see stack_comm.h.
#include "detectors/stack/stack_comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "harness/comm/collective.h"
#include "harness/common/cause.h"
#include "harness/evidence/event_types.h"

namespace nanchaos::detect {

using harness::Cause;

using harness::CollStatus;
using harness::DType;

StackComm::StackComm(harness::Communicator& comm, harness::EventLog& log, Deadline deadline,
                     bool cuda, torch::Device device, int watchdog_exit,
                     std::function<void(int)> write_exit)
    : comm_(comm),
      log_(log),
      deadline_(std::move(deadline)),
      cuda_(cuda),
      device_(device),
      watchdog_exit_(watchdog_exit),
      write_exit_(std::move(write_exit)),
      rank_(comm.rank()),
      world_(comm.world_size()) {}

void StackComm::collective(const std::string& name, void* buf, size_t count, DType type,
                           int64_t step) {
  const int64_t seq = seq_++;
  const int64_t t0 = harness::monotonic_ns(), rd0 = run_delay_.ns();
  const CollStatus st = harness::logged_allreduce(comm_, log_, seq, name, buf, count, type, step,
                                                  deadline_.timeout_ms);
  waited_.wall_ns += harness::monotonic_ns() - t0;
  waited_.run_delay_ns += run_delay_.ns() - rd0;
  if (st == CollStatus::kOk) return;
  // Watchdog: name the collective, then take the whole job down (never hang).
  const char* what = st == CollStatus::kTimeout ? "timeout" : "error";
  harness::DetectEvent det;
  det.detector = deadline_.detector;
  det.step = step;
  det.layer = name;
  det.cause = to_string(Cause::kHang);
  det.seq = seq;
  det.status = what;
  harness::write_event(log_, det);
  harness::AbortEvent ab;
  ab.step = step;
  ab.reason = fmt::format("{}: collective #{} {} {}", deadline_.detector, seq, name, what);
  ab.cause = to_string(Cause::kHang);
  harness::write_event(log_, ab);
  write_exit_(watchdog_exit_);
  comm_.abort_job(watchdog_exit_);
}

void StackComm::allreduce_rows(std::vector<double>& rows, const std::string& name, int64_t step) {
  if (!cuda_) {
    collective(name, rows.data(), rows.size(), DType::kFp64, step);
    return;
  }
  static_assert(sizeof(double) == sizeof(int64_t));
  auto host = torch::empty({int64_t(rows.size())}, torch::kInt64);
  std::memcpy(host.data_ptr<int64_t>(), rows.data(), rows.size() * sizeof(double));
  auto dev = host.to(device_);
  collective(name, dev.data_ptr(), rows.size(), DType::kInt64, step);
  host = dev.cpu();
  std::memcpy(rows.data(), host.data_ptr<int64_t>(), rows.size() * sizeof(double));
}

void StackComm::allreduce_i64(int64_t* data, size_t n, const std::string& name, int64_t step) {
  if (!cuda_) {
    collective(name, data, n, DType::kInt64, step);
    return;
  }
  auto host = torch::from_blob(data, {int64_t(n)}, torch::kInt64);
  auto dev = host.to(device_);
  collective(name, dev.data_ptr(), n, DType::kInt64, step);
  host.copy_(dev.cpu());
}

std::vector<uint64_t> StackComm::allgather_u64(const std::vector<uint64_t>& mine,
                                               const std::string& name, int64_t step) {
  std::vector<uint64_t> all(size_t(world_) * mine.size(), 0);
  std::copy(mine.begin(), mine.end(), all.begin() + ptrdiff_t(size_t(rank_) * mine.size()));
  allreduce_i64(reinterpret_cast<int64_t*>(all.data()), all.size(), name, step);
  return all;
}

}  // namespace nanchaos::detect
