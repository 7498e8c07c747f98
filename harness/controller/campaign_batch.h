// In-launch batches of a campaign (docs/architecture.md "Campaigns"): one launch of a
// built-in job runs many faults (`nanchaos rank --campaign FILE`, harness/job/runner.h
// run_campaign_on): the clean prefix is trained once, each fault runs its window from an
// in-memory checkpoint of the whole rank into its own folder, and the ranks restore.
//
//   if (inlaunch_eligible(s, one_launch_per_fault)) batch.push_back(s);
//   auto judged = run_inlaunch_batch(batch, "OUT/launches/000", ctx, job_id);
//   // judged[i]: the fault's result, or nullopt when the launch ended before it started
//
// Torch-free (the controller never links the rank loop). Safe to call from several threads for
// different launch folders and job ids, as run_scenario_job.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/controller/launch.h"
#include "harness/scenario/scenario.h"
#include "results/report.h"

namespace nanchaos::harness {

/// Whether a fault scenario can run in an in-launch batch: a built-in job, consensus on, the
/// `watchdog` detector enabled (a rank a fault stalls takes the launch down instead of hanging
/// it for [job].timeout_ms), and no fault of kind hang or crash (they end the launch by design).
bool inlaunch_eligible(const Scenario& s);

/// Runs `faults` (complete scenarios of one job, each `s.file` in its own folder, where its
/// evidence goes) in one launch from `launch_dir` (the launch's own log, campaign.txt, ranks.log)
/// with a timeout of [job].timeout_ms x (faults + 1). Each fault's folder is judged with the
/// judge of `nanchaos run`: a finished window with a JobResult whose exit code is its ranks'
/// (0, or 3 after a coordinated abort); the window the launch died or timed out in with the
/// launch's own JobResult. A fault whose window never started is nullopt (run it again in a new
/// launch). A launch that cannot start makes every fault an `error` result with the reason.
std::vector<std::optional<results::ScenarioResult>> run_inlaunch_batch(
    const std::vector<Scenario>& faults, const std::string& launch_dir, const LaunchContext& ctx,
    const std::string& job_id);

}  // namespace nanchaos::harness
