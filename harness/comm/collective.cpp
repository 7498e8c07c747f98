#include "harness/comm/collective.h"

#include <fmt/format.h>

#include <limits>
#include <string_view>

#include "harness/evidence/event_types.h"

namespace nanchaos::harness {

CollStatus logged_allreduce(Communicator& comm, EventLog& log, int64_t seq, const std::string& name,
                            void* buf, size_t count, DType type, int64_t step, int64_t timeout_ms) {
  // The enter event is stamped before the collective is posted and written (flushed) right after
  // it, so the write overlaps the peers' eager sends instead of delaying them. Caveat: a rank
  // killed in that window leaves no enter event although its contribution may be on its way; it
  // is dead, and the judge names dead ranks from their process state before absent ones.
  const int64_t t_enter = now_us();
  auto work = comm.iallreduce_sum(buf, count, type);
  // Formatted into a stack buffer with compile-time formats (append_coll_enter): this runs twice
  // per collective on every rank. (A heap-built JSON object costs ~10 us here, a run-time fmt
  // format ~0.4 us, this ~0.15 us: bench/README.md.)
  fmt::memory_buffer line;
  append_coll_enter(line, t_enter, seq, name, int64_t(count), torch_name(type), step);
  log.write_line(std::string_view(line.data(), line.size()));
  const int64_t deadline =
      timeout_ms > 0 ? t_enter + timeout_ms * 1000 : std::numeric_limits<int64_t>::max();
  const CollStatus st = work->wait(deadline);
  if (st == CollStatus::kOk) {
    line.clear();
    append_coll_leave(line, now_us(), seq, name, step, "ok");
    log.write_line(std::string_view(line.data(), line.size()));
  }
  return st;
}

}  // namespace nanchaos::harness
