// The judge: turns a finished job's event logs (events.h) and exit state (JobResult) into a
// ScenarioResult: outcome, detections with latency, attribution, post-mortem of absent or dead
// ranks, the [expect] checks and the verdict. Pure function of its inputs (no clocks, no I/O but
// reading the run folder), so a test can judge hand-written logs.
#pragma once

#include <string>

#include "harness/controller/controller.h"
#include "harness/scenario/scenario.h"
#include "results/report.h"

namespace nanchaos::harness {

/// Never throws on what the logs hold: lines that are not JSON objects are skipped (read_events),
/// and an event with a field of the wrong type makes the result verdict `error`, reason
/// "cannot judge: an event in RUN/events has a field of the wrong type: ...".
results::ScenarioResult judge(const Scenario& s, const std::string& run_dir, const JobResult& job);

/// A result that names its scenario (name, file, seed, ranks) and run folder ("" for a scenario
/// that never got one), verdict still "error": what every path that judges, skips or refuses a
/// scenario starts from.
results::ScenarioResult result_for(const Scenario& s, const std::string& run_dir);

}  // namespace nanchaos::harness
