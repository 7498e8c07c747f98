// The judge: turns a finished job's evidence (JobEvidence: the ranks' event logs, events.h, read
// once by read_job_evidence) and exit state (JobResult) into a ScenarioResult: outcome,
// detections with latency, attribution, post-mortem of absent or dead ranks, the [expect] checks
// and the verdict. judge() is a pure function of its inputs: no clock, no file opened (the run
// folder is only named in reasons), so a test judges evidence it built in memory.
#pragma once

#include <string>
#include <vector>

#include "harness/controller/job_result.h"
#include "harness/controller/rank_evidence.h"
#include "harness/scenario/scenario.h"
#include "results/report.h"

namespace nanchaos::harness {

/// Never throws on what the evidence holds: an event with a field of the wrong type (read by
/// read_job_evidence, or met while judging) makes the result verdict `error`, reason
/// "cannot judge: an event in RUN/events has a field of the wrong type: ...".
results::ScenarioResult judge(const Scenario& s, const JobEvidence& ev, const JobResult& job);

/// read_job_evidence(s.job.ranks, run_dir, job, earlier) then judge(): what the controller calls
/// once the job has ended (the free-space sample is taken then). `earlier`: the launches before
/// the last one ([job] restarts), in order.
results::ScenarioResult judge_run(const Scenario& s, const std::string& run_dir,
                                  const JobResult& job, const std::vector<JobResult>& earlier = {});

/// How one launch ended, from its ranks' evidence and the launcher's exit state (read against the
/// ranks' exit records, as judge() reads it): killed at its timeout -> hung; every rank through
/// to its `final` record, exit 0 and no abort -> completed; a rank's abort -> aborted; else
/// crashed. Pure. The controller relaunches a job ([job] restarts) whose launch did not complete.
results::Outcome launch_outcome(const std::vector<RankEvidence>& ranks, const JobResult& job);

/// A result that names its scenario (name, file, seed, ranks) and run folder ("" for a scenario
/// that never got one), verdict still "error": what every path that judges, skips or refuses a
/// scenario starts from.
results::ScenarioResult result_for(const Scenario& s, const std::string& run_dir);

}  // namespace nanchaos::harness
