// Where a run's evidence lies, spelt once (harness/evidence/events.h describes the files):
//
//   RUN/events/                   events_dir(run)
//   RUN/events/rank-R.jsonl       event_log_path(run, R)  (= event_log_in(events_dir(run), R))
//   RUN/events/rank-R.gone.json   gone_record_path(events_dir(run), R)  (proc_watch.h)
//
// Pure string functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace nanchaos::harness {

/// RUN/events: the folder of a run's event logs and gone records.
std::string events_dir(const std::string& run_dir);
/// RUN/events/rank-R.jsonl: rank R's event log in run folder `run_dir`.
std::string event_log_path(const std::string& run_dir, int64_t rank);
/// EVENTS/rank-R.jsonl: rank R's event log in the events folder `events_dir` (RUN/events).
std::string event_log_in(const std::string& events_dir, int64_t rank);

}  // namespace nanchaos::harness
