// What report.json says about a job besides its verdict and detections: the harness's
// post-mortem, peak memory, the launches of a relaunched job, how the launcher ended, the ranks'
// clock offsets, the controller's own footprint, the interpreter an external job ran with. The
// judge (harness/controller/judge.cpp) and the controller (controller.cpp) fill these structs;
// the writers (results/*.cpp) read their fields.
//
// Wire format: each struct is written by to_json() as the keys report.json has always had, at
// the scenario's top level (docs/scenario-format.md "Results"; write_facts() lists them), and
// read back by from_json(), which accepts reports written before a key existed (the key keeps
// its default). Nothing here includes torch.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/evidence/event_types.h"

namespace nanchaos::results {

/// report.json `last_collective[rank]`: the last collective the rank entered.
struct LastCollective {
  int64_t seq = 0;  ///< the collective's number on the rank
  std::string name;
  int64_t step = 0;
  bool left = false;  ///< it logged coll_leave for it
};

/// One rank's entry in collective #seq, when the ranks disagree about what #seq is.
struct MismatchEntry {
  int64_t rank = 0;
  int64_t step = 0;
  std::string name;
  std::optional<int64_t> count;  ///< elements (absent when the rank did not log it)
};

/// report.json `collective_mismatch`: the first collective number entered at different steps,
/// names or sizes (postmortem.cpp).
struct CollectiveMismatch {
  int64_t seq = 0;
  std::vector<MismatchEntry> ranks;  ///< every rank's entry, in entry order
  std::vector<int64_t> diverged;     ///< the ranks that diverged (sorted)
  int64_t step = 0;                  ///< the earliest step among the entries
};

/// report.json `postmortem`: the harness's blame when the stack detected nothing.
struct Blame {
  std::vector<int64_t> ranks;
  std::string cause;  ///< rank_failure or hang (harness/common/cause.h)
};

/// What the collectives and the processes' ends said about the ranks (postmortem.cpp), and whom
/// the harness blamed.
struct PostMortem {
  std::optional<Blame> blame;  ///< `postmortem` (null: the stack detected, or nobody to blame)
  /// `last_collective`: per rank; nullopt for a rank that entered none.
  std::map<int64_t, std::optional<LastCollective>> last_collective;
  std::optional<CollectiveMismatch> collective_mismatch;
  std::vector<int64_t> absent_ranks;  ///< missing from first_gap_collective (or a p2p stall)
  std::optional<int64_t> first_gap_collective;  ///< some ranks entered it, others not
  std::vector<int64_t> dead_ranks;
  bool deadlock = false;  ///< a rank waited past collective_timeout_ms + 1 s
  double longest_collective_wait_ms = 0;
};

/// report.json `memory`: peak memory (VmHWM) per rank, MiB rounded to 0.1.
struct Memory {
  int64_t ranks_measured = 0;
  double per_rank_max_mib = 0;
  double per_rank_mean_mib = 0;
  double total_mib = 0;
  std::map<int64_t, double> per_rank_mib;  ///< the ranks measured
  /// Every rank: "exit_event", "controller_sample", "none", "none (remote, no exit event)".
  std::map<int64_t, std::string> measured_by;
};

/// report.json `step_times`: one row per rank whose job logged its own phase times (the step_end
/// `own_us` of harness/job/phase_clock.h and of the Python agent's phases.py: each phase's wall
/// time minus collective waits and run-queue delay), over the steps every such rank logged
/// (a re-executed step counts once, its last run). Times in us; medians are nearest-rank
/// (harness/common/percentile.h). The score is the straggler detector's: a step's own total over
/// the ranks' median own total at that step.
struct RankStepTime {
  int64_t rank = 0;
  int64_t steps = 0;                       ///< steps with times (on every reporting rank)
  std::array<double, 4> own_p50_us{};      ///< data, compute, backward, comm (kPhaseKeys order)
  double own_total_p50_us = 0;             ///< median own total
  double wait_p50_us = 0;                  ///< median time inside collectives
  std::optional<double> run_delay_p50_us;  ///< median run delay (null: not logged)
  double score_p50 = 0;
  double score_max = 0;
  int64_t slow_steps = 0;  ///< steps with score > kSlowScore
};

/// The score above which a step counts as slow in the table and the chart: the `straggler`
/// detector's default straggler_factor (SCENARIO_FORMAT.md "Slow ranks and finite silent data
/// corruption"). The report does not use a scenario's own straggler_factor: the table and chart
/// are drawn alike whether or not the job's stack has a straggler check.
inline constexpr double kSlowScore = 1.5;

/// The most points per rank in report.json `step_scores` (a long run is downsampled to it).
inline constexpr size_t kStepScorePoints = 200;

/// report.json `step_scores`: every rank's straggler score step by step, for report.html's
/// step-time chart (a slow rank's onset shows as its line crossing kSlowScore). Over the same
/// steps as `step_times` (those every reporting rank logged, in step order). A run of more than
/// `max_points` such steps is cut into consecutive groups of `stride` steps (stride =
/// ceil(steps / max_points)) and each group keeps its largest score per rank, so a short slow
/// spell is never averaged away. Scores are rounded to 0.001.
struct StepScores {
  int64_t stride = 1;                      ///< steps per point (1: one point per step)
  std::vector<int64_t> steps;              ///< each point's first step
  std::vector<int64_t> ranks;              ///< the ranks, in `step_times` order
  std::vector<std::vector<double>> score;  ///< [index in `ranks`][point]: the max over its steps
};

/// The table from every rank's phase times by step (index = rank; a rank with none is left out).
/// Empty when fewer than one rank logged any.
std::vector<RankStepTime> rank_step_times(
    const std::vector<std::map<int64_t, harness::StepEndEvent::Phases>>& by_rank);

/// The per-step score series from the same phase times (see StepScores); nullopt when no step
/// was logged by every reporting rank. Throws std::invalid_argument when max_points is 0.
std::optional<StepScores> step_scores(
    const std::vector<std::map<int64_t, harness::StepEndEvent::Phases>>& by_rank,
    size_t max_points = kStepScorePoints);

/// report.json `launcher_exit`: how the launcher ended (harness/controller/launcher_exit.cpp).
struct LauncherExitFacts {
  int status = -1;     ///< as reaped: exit code, or 128 + signal
  std::string signal;  ///< "SIGSEGV" ("" when it exited: null)
  bool after_ranks_exited = false;
  bool counted = true;  ///< the verdict used `status` (false: a teardown crash, not counted)
  std::string note;     ///< why it was not counted ("" : null)
};

/// report.json `clock_offsets[rank]`: what a rank's `clock` event measured, and the shift the
/// judge applied to its times (nullopt: its events stayed on their own clock).
struct ClockOffset {
  std::string host;
  std::optional<int64_t> applied_shift_us;
  std::optional<std::string> error;  ///< the measurement failed; then no offset/rtt/samples
  int64_t offset_us = 0;
  int64_t rtt_us = 0;
  int64_t samples = 0;
};

/// report.json `launches[k]` (harness/controller/launches.cpp): ms from the first launch's start.
struct Launch {
  int64_t launch = 0;
  double start_ms = 0;
  double end_ms = 0;
  std::string outcome;  ///< completed, aborted, hung, crashed
  std::optional<int64_t> resumed_from_step;
  struct Checkpoint {
    std::string path;
    std::optional<int64_t> step;
    std::string why;  ///< checkpoints_rejected: why the loader refused it
  };
  std::optional<Checkpoint> checkpoint_loaded;  ///< the first checkpoint a rank loaded
  /// The checkpoints the loader refused before the one it loaded (one rank's, in order; built-in
  /// [checkpoint] validate), each with why.
  std::vector<Checkpoint> checkpoints_rejected;
  int64_t steps_reached = 0;
};

/// report.json `restarts[k]`: one relaunch and its phases (ms; nullopt where the evidence lacks
/// the event). The phases add up to resume_ms.
struct Restart {
  int64_t after_launch = 0;
  std::string cause;  ///< the failed launch's outcome
  double failed_ms = 0;
  std::optional<double> resume_ms, detect_ms, teardown_ms, relaunch_ms, load_ms, first_step_ms;
  /// External jobs: the part of load_ms (or of first_step_ms when nothing was loaded) the next
  /// launch spent importing torch, ms: the longest rank's (the Python agent times its own
  /// `import torch`, event `imported`). Not a phase: it is inside one. Null for built-in jobs.
  std::optional<double> import_ms;
  /// Steps computed twice or lost: the failed launch's steps_reached - the next launch's resumed
  /// step (never below 0); nullopt when the next launch began no step.
  std::optional<int64_t> steps_lost;
};

/// What the judge decided besides the verdict: written for every judged job.
struct JobFacts {
  PostMortem postmortem;
  /// Fault -> last rank gone, for an aborted or crashed job (null otherwise).
  std::optional<double> abort_latency_ms;
  int64_t false_positives = 0;
  std::optional<bool> consistent;  ///< ranks' end states agree (null: not checked)
  bool recovered = false;
  int launcher_exit_code = -1;  ///< as reaped
  LauncherExitFacts launcher_exit;
  int64_t orphans_killed = 0;
  std::optional<Memory> memory;                  ///< null: no rank measured
  std::map<int64_t, ClockOffset> clock_offsets;  ///< empty: null
  std::vector<int64_t> remote_ranks;             ///< ranks on another host than the controller
  /// [job] restarts > 0: every launch and every restart (absent from report.json otherwise).
  std::optional<std::vector<Launch>> launches;
  std::optional<std::vector<Restart>> restarts;
  /// Per-rank step times (empty: no rank logged phase times; absent from report.json then).
  std::vector<RankStepTime> step_times;
  /// Their scores step by step (absent from report.json when nullopt).
  std::optional<StepScores> step_scores;
};

/// The controller's own figures after a job (controller.cpp).
struct ControllerFacts {
  int64_t job_start_us = 0;  ///< CLOCK_MONOTONIC us of the first launch (the timeline's zero)
  int64_t orphans_left = 0;  ///< processes of the job alive after the sweep (0, or a bug)
  int64_t vm_rss_kib = 0;    ///< report.json `controller`: its footprint (the soak test bounds it)
  int64_t vm_hwm_kib = 0;
  int64_t fds = 0;
};

/// The interpreter an external Python job ran with (report.json `python`, `torch`,
/// `python_packages`).
struct Interpreter {
  std::string python;
  std::string torch;
  /// [job] python_packages: each listed package's version (absent when none was listed).
  std::optional<std::map<std::string, std::string>> packages;
};

void to_json(nlohmann::json& j, const LastCollective& v);
void from_json(const nlohmann::json& j, LastCollective& v);
void to_json(nlohmann::json& j, const CollectiveMismatch& v);
void from_json(const nlohmann::json& j, CollectiveMismatch& v);
void to_json(nlohmann::json& j, const Memory& v);
void from_json(const nlohmann::json& j, Memory& v);
void to_json(nlohmann::json& j, const LauncherExitFacts& v);
void from_json(const nlohmann::json& j, LauncherExitFacts& v);
void to_json(nlohmann::json& j, const ClockOffset& v);
void from_json(const nlohmann::json& j, ClockOffset& v);
void to_json(nlohmann::json& j, const Launch& v);
void from_json(const nlohmann::json& j, Launch& v);
void to_json(nlohmann::json& j, const Restart& v);
void from_json(const nlohmann::json& j, Restart& v);
void to_json(nlohmann::json& j, const StepScores& v);
void from_json(const nlohmann::json& j, StepScores& v);

/// JobFacts as report.json's top-level keys of a scenario, added to `scenario` (an object):
/// postmortem, last_collective, collective_mismatch, absent_ranks, first_gap_collective,
/// dead_ranks, deadlock, longest_collective_wait_ms, abort_latency_ms, false_positives,
/// consistent, recovered, launcher_exit_code, launcher_exit, orphans_killed, memory,
/// clock_offsets, remote_ranks, and launches/restarts, step_times and step_scores when set.
void write_facts(const JobFacts& f, nlohmann::json& scenario);
/// job_start_us, orphans_left, controller {vm_rss_kib, vm_hwm_kib, fds}.
void write_facts(const ControllerFacts& f, nlohmann::json& scenario);
/// python, torch, python_packages (when set).
void write_facts(const Interpreter& f, nlohmann::json& scenario);

/// The inverses, from a scenario object of report.json: nullopt when the scenario has none of
/// the keys (no job ran, or the report predates them). Missing keys keep their defaults; a key
/// of the wrong type throws nlohmann::json::type_error.
std::optional<JobFacts> read_job_facts(const nlohmann::json& scenario);
std::optional<ControllerFacts> read_controller_facts(const nlohmann::json& scenario);
std::optional<Interpreter> read_interpreter(const nlohmann::json& scenario);

}  // namespace nanchaos::results
