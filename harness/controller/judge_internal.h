// The judge's phases (judge.cpp runs them in this order), internal to harness/controller:
// - postmortem.cpp: which collectives each rank was in, the absent, dead and deadlocked ranks;
// - detections.cpp: the stack's detections merged across ranks, attributed, with latencies;
// - external_job.cpp: why an external job never got going, and why a target matched nothing;
// - launcher_exit.cpp: whether the launcher's exit status is the job's, or its own teardown crash;
// - launches.cpp: the launches of a relaunched job ([job] restarts) and what each restart cost.
// Each reads the per-rank evidence (rank_evidence.h) and the launcher's exit state only.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/controller/job_result.h"
#include "harness/controller/rank_evidence.h"
#include "harness/scenario/scenario.h"
#include "results/report.h"

namespace nanchaos::harness {

/// What the collectives and the processes' ends say about each rank.
struct Postmortem {
  /// rank -> its last coll_enter (nullopt: it entered none)
  std::map<int64_t, std::optional<results::LastCollective>> last_collective;
  int64_t first_gap_seq = -1;  ///< the first collective some ranks entered and others not
  /// the ranks missing from it; with no such collective, the ranks that the others' unmatched
  /// point-to-point sends and receives wait on and that wait on no one (find_p2p_stall)
  std::vector<int64_t> absent;
  /// One collective number entered at different steps/names/sizes (nullopt: none).
  std::optional<results::CollectiveMismatch> mismatch;
  /// The first mismatch as evidence (mismatch not null): the ranks that diverged (the minority
  /// of the (step, op, size) groups; on a tie the group furthest ahead, which skipped a
  /// collective), the earliest step among the entries, and when the disagreement became
  /// visible (us: the first entry that differed from an earlier one).
  std::vector<int64_t> mismatch_ranks;
  int64_t mismatch_step = -1;
  int64_t mismatch_t_us = 0;
  std::vector<int64_t> dead;  ///< crashed or aborted jobs: the ranks that died
  bool deadlock = false;      ///< a rank waited in a collective past collective_timeout_ms + 1 s
  double longest_wait_ms = 0;
};

/// `outcome` is the job's (completed, aborted, hung, crashed): it decides how the dead are found.
Postmortem postmortem(const Scenario& s, const std::vector<RankEvidence>& logs,
                      const JobResult& job, results::Outcome outcome);

/// Fills `res.detections` (sorted) and `res.first_detection` (with its latencies) from the
/// ranks' detect and decision events; returns the false positives (detections before the first
/// fault step, or with no fault at all). `pm` gives the ranks absent from the first collective
/// gap and, for external jobs, the first collective mismatch: when it became visible before
/// every other detection it is the first one (`collective_mismatch`, the diverged ranks, the
/// step; ../shared/SCENARIO_FORMAT.md "Modern PyTorch jobs": the earliest evidence first).
int64_t judge_detections(const Scenario& s, const std::vector<RankEvidence>& logs,
                         const JobResult& job, const Postmortem& pm,
                         std::optional<int64_t> first_fault_step,
                         std::optional<int64_t> first_inject_t, results::ScenarioResult& res);

/// Why an external job's rank never got to `start` (docs/scenario-format.md "External jobs");
/// `ranks_log_tail` is the last line of RUN/ranks.log (JobEvidence).
std::string external_setup_error(const std::vector<RankEvidence>& logs, const JobResult& job,
                                 const std::string& ranks_log_tail);

/// How the launcher ended, read against the ranks' own exit records (mpirun 4.1 was seen to
/// segfault in its teardown in 3 of 5 runs of one scenario, after every rank had exited).
struct LauncherExit {
  int status = -1;  ///< the launcher's status as reaped: exit code, or 128 + signal
  int signal = 0;   ///< the signal that ended it when status > 128 (0: it exited)
  /// Every rank wrote its `exit` record (the rank's own word that it ended, and with what code)
  /// and the controller did not end the job itself (timeout, interruption, a rank that never
  /// attached).
  bool after_ranks_exited = false;
  /// The launcher's own crash in its teardown: a crash signal (SIGSEGV, SIGBUS, SIGABRT, SIGILL,
  /// SIGFPE) after every rank exited. Then `counted` is what the ranks' records say, not status.
  bool teardown_crash = false;
  /// The status the judge uses for the job: `status`, or for a teardown crash the first nonzero
  /// code among the ranks' exit records (0 when all exited 0), as mpirun would have returned.
  int counted = -1;
  std::string note;  ///< why `counted` differs from `status` ("" when it does not)
};
/// Reads `job.exit_code` against `logs` (see LauncherExit). Pure.
LauncherExit launcher_exit(const std::vector<RankEvidence>& logs, const JobResult& job);
/// report.json `launcher_exit`: the status, the signal's name, whether every rank had exited,
/// whether the verdict counted the status, and why not.
results::LauncherExitFacts launcher_exit_facts(const LauncherExit& l);

/// One launch of a job as the judge reads it: its ranks' evidence and the launcher's exit state.
struct LaunchView {
  const std::vector<RankEvidence>* ranks;
  const JobResult* job;
};

/// The launches of a job, judged together (launches.cpp).
struct LaunchesJudged {
  /// report.json `launches`: per launch {launch, start_ms, end_ms (from the first launch's
  /// start), outcome, resumed_from_step, checkpoint_loaded ({path, step} or null),
  /// steps_reached}.
  std::vector<results::Launch> launches;
  /// report.json `restarts`: per relaunch {after_launch, cause (the launch's outcome),
  /// failed_ms, resume_ms (the failing event -> every rank of the next launch completed its
  /// first step), detect_ms (-> the first rank of the launch gone), teardown_ms (-> every
  /// process of it gone), relaunch_ms (-> every rank of the next launch up: `start`, or an external
  /// rank's `agent`; includes [job] restart_delay_ms), load_ms (-> every rank that loads a
  /// checkpoint loaded it; null when none did), first_step_ms (-> every rank completed its first
  /// step)}; null phases where the evidence lacks the event. The failing event: the first abort
  /// (aborted), the deadline t0 + timeout_ms (hung), the crash fault's injection or else the first
  /// rank gone (crashed).
  std::vector<results::Restart> restarts;
  std::optional<int64_t> last_resumed_from_step;
  /// [expect] resume_ms_max: the largest restart's resume_ms; nullopt when no restart happened
  /// or one never resumed (its next launch completed no step).
  std::optional<double> resume_ms_max;
  /// [expect] steps_lost_max: every restart's steps_lost summed (0 with no restart); nullopt
  /// when a launch after a restart began no step.
  std::optional<int64_t> steps_lost = 0;
};
/// `launches` in launch order (the last is the job's last launch). Pure.
LaunchesJudged judge_launches(const Scenario& s, const std::vector<LaunchView>& launches);
/// The step launch k resumed from: the step recorded in the first checkpoint it loaded; else,
/// for a load whose object carries no step, the agent's step count at the latest save of that
/// path in an earlier launch; else the first step the launch began (0 for a built-in relaunch,
/// which has no checkpoint). nullopt for a first launch that loaded nothing, or a launch that
/// began no step. Pure.
std::optional<int64_t> resumed_from_step(const std::vector<LaunchView>& launches, size_t k);

/// Why a target may have matched nothing, given rank 0's `start` event (nullptr: none).
std::string target_hint(const FaultSpec& fault, const StartEvent* start);

}  // namespace nanchaos::harness
