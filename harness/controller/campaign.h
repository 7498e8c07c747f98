// `nanchaos campaign SCENARIO.toml --faults N [--seed S] [--kinds K,...] [--values V] [--out DIR]
// [--jobs J]`
// (docs/scenario-format.md "Campaigns"): the scenario is the job and the stack under test (its
// [[fault]] and [expect] are ignored); N faults are drawn (campaign_draw.h), each is written as a
// complete scenario to DIR/faults/NNN/scenario.toml and run there as one launch through the same
// path as `nanchaos run` (run_scenario_job), J launches at a time; the judge's evidence is scored
// against each fault's ground truth (results/campaign.h) into DIR/campaign.json, campaign.md,
// campaign.xml (JUnit) and campaign.html.
//
// Built-in jobs run in-launch (campaign_batch.h): the faults that qualify (inlaunch_eligible)
// are split into J batches, one launch each, that train the clean prefix once and run every
// fault's window from an in-memory checkpoint of the whole rank; a fault whose launch died
// before its window started goes to a new launch. The rest (external jobs, hang and crash
// faults, a stack without consensus or watchdog) run one launch per fault, as does every fault
// with --one-launch-per-fault.
//
// Threads: the main thread draws, then J worker threads each run one job at a time (a launcher's
// death signal is tied to the thread that started it, and each worker outlives its jobs); rows
// and the progress lines are guarded by one mutex. A dead or hung launch is a row (crash, hang);
// SIGINT/SIGTERM end the running jobs, start no more, and the files keep what was measured.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/controller/host_limits.h"
#include "harness/controller/shard.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "results/campaign.h"

namespace nanchaos::harness {

struct CampaignOptions {
  std::string scenario;            ///< the base scenario file
  int faults = 0;                  ///< N >= 1
  std::optional<uint64_t> seed;    ///< nullopt: the scenario's [scenario].seed
  std::vector<std::string> kinds;  ///< empty: every kind valid for the job
  /// --values: what numbers the faults write (kAny: the draws campaigns always made).
  DrawValues values = DrawValues::kAny;
  std::string out_dir;                ///< "" = results/campaigns/<UTC time>-<name>
  int jobs = 1;                       ///< launches at a time
  std::string launcher;               ///< "" = $NANCHAOS_LAUNCHER or mpirun
  std::string self_exe;               ///< this binary
  bool quiet = false;                 ///< no progress lines, no summary table
  bool one_launch_per_fault = false;  ///< never in-launch (comparison, debugging)
  /// --no-host-limits / --max-ranks: the scenario passes check_host_limits() before any draw,
  /// as for `nanchaos run` (preflight.h).
  HostLimitOptions host_limits;
  /// --shard I/N: draw all `faults` (the same draws as one run) and measure only those whose
  /// index mod N is I - 1; `nanchaos merge` joins the parts (harness/controller/merge.h).
  ShardSpec shard;
};

/// Thresholds of the scenario's [campaign] table checked against a summary:
/// {"min_coverage": {"min": 0.9, "actual": 0.95, "pass": true}, ...}; a rate with no sample
/// (nothing detected) fails its minimum. Empty object when the table sets none.
nlohmann::ordered_json check_thresholds(const Scenario& s, const results::CampaignSummary& sum);

/// How the campaign scores its faults: [campaign] detect_within_steps, or max(10,
/// [detectors].replica_every) steps when absent (a replica check every N steps may take N steps
/// to see a corrupted weight).
results::ScoringRules scoring_rules(const Scenario& s);

/// Runs the campaign. Returns 0 (done, every threshold met), 1 (a [campaign] threshold missed),
/// 2 (usage or scenario error, a kind invalid for the job, a fault that could not be measured),
/// or 128 + the signal when SIGINT/SIGTERM stopped it (the caller re-raises, as for run).
int run_campaign(const CampaignOptions& o);

}  // namespace nanchaos::harness
