#include "harness/collective.h"

#include <fmt/format.h>

#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>

namespace nanchaos::harness {
namespace {

// A JSON string literal for `s`: collective names are plain identifiers, anything else is
// escaped by nlohmann-json.
std::string quoted(const std::string& s) {
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) {
      return nlohmann::json(s).dump();
    }
  }
  return "\"" + s + "\"";
}

}  // namespace

CollStatus logged_allreduce(Communicator& comm, EventLog& log, int64_t seq, const std::string& name,
                            void* buf, size_t count, ElemType type, int64_t step,
                            int64_t timeout_ms) {
  // The enter event is stamped before the collective is posted and written (flushed) right after
  // it: the write then overlaps the peers' eager sends instead of delaying them. A rank killed in
  // between has posted nothing its peers could complete, as if it had never entered.
  const int64_t t_enter = now_us();
  auto work = comm.iallreduce_sum(buf, count, type);
  const std::string name_json = quoted(name);
  // Same keys as EventLog::write would produce (sorted), formatted directly: this runs twice per
  // collective on every rank.
  log.write_line(fmt::format(
      R"({{"count":{},"dtype":"{}","ev":"coll_enter","name":{},"seq":{},"step":{},"t_us":{}}})",
      count, elem_name(type), name_json, seq, step, t_enter));
  const int64_t deadline =
      timeout_ms > 0 ? t_enter + timeout_ms * 1000 : std::numeric_limits<int64_t>::max();
  const CollStatus st = work->wait(deadline);
  if (st == CollStatus::kOk) {
    log.write_line(fmt::format(R"({{"ev":"coll_leave","name":{},"seq":{},"step":{},"t_us":{}}})",
                               name_json, seq, step, now_us()));
  }
  return st;
}

}  // namespace nanchaos::harness
