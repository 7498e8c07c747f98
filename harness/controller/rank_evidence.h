// What one rank's event log says, read once into named fields for the judge (judge.cpp and its
// phases, judge_internal.h), and the whole job's evidence (JobEvidence), which
// read_job_evidence() gathers from the run folder once and judge() reads without opening a file.
// Internal to harness/controller: only the judge and the callers of judge.h include it.
//
// The reader is the one place that knows the log's event names (start, inject, coll_enter, final,
// ...); the judge's phases read these fields. The events the judge reads are parsed into the
// typed events of harness/evidence/event_types.h, which the writers share: a field of the wrong
// type in a corrupted log throws json::type_error there, which judge() turns into an `error`
// verdict.
#pragma once

#include <cstdint>
#include <istream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "harness/controller/clean_run.h"
#include "harness/controller/job_result.h"
#include "harness/evidence/event_types.h"
#include "results/job_facts.h"

namespace nanchaos::harness {

/// A detect or decision event: what the stack said, in log order (detections.cpp).
using StackEvent = std::variant<DetectEvent, DecisionEvent>;

/// One event of a rank's lane on report.html's timeline (timeline.h): a collective or a
/// point-to-point send/receive entered or left (each numbered by `seq` on its own), or a
/// labelled mark (inject, detect, decision, abort, exit).
struct LaneEvent {
  enum class What { kEnter, kLeave, kMark };
  What what = What::kMark;
  int64_t t_us = 0;
  bool p2p = false;   ///< p2p_enter/p2p_leave (else coll_enter/coll_leave; kMark: false)
  int64_t seq = 0;    ///< kEnter/kLeave
  std::string name;   ///< kEnter: the bar's name ("grad_allreduce", "send to 2"); kMark: its kind
  std::string label;  ///< kMark: "inject tensor s10", "detect loss", "exit 3"
};

/// One rank's evidence. Times (t_us, in `events` too) are on the controller's timeline.
struct RankEvidence {
  std::vector<StackEvent> stack_events;  ///< its detect and decision events, in log order
  bool started = false;
  bool agent = false;                       ///< external: the agent's bootstrap loaded (`agent`)
  std::string agent_kind;                   ///< external: "cpp" or "python" (its `agent` event)
  std::vector<std::string> agent_warnings;  ///< external: the C++ agent's agent_warning messages
  std::optional<std::string> attach_error;  ///< external: the agent's first attach_error reason
  std::optional<FinalEvent> final;
  std::optional<AbortEvent> abort;  ///< its last abort
  std::optional<int> exit_code;
  std::optional<int64_t> vm_hwm_kib;  ///< peak RSS the rank logged in its exit event
  /// When its own process watch saw it end (RUN/events/rank-R.gone.json, proc_watch.h), on the
  /// controller's timeline; what decides for a rank the controller could not pid-watch.
  std::optional<int64_t> gone_us;
  int64_t last_t = 0;
  std::optional<int64_t> first_t;  ///< its earliest event
  std::vector<LaneEvent> lane;     ///< its events on report.html's timeline, in log order
  /// When it was up: its `start` (built-in), or its agent's `agent` event (external, earlier).
  std::optional<int64_t> start_t;
  std::optional<int64_t> first_step;        ///< the lowest step it began (step_begin)
  std::optional<int64_t> first_step_end_t;  ///< when it completed its first step (step_end)
  /// external (Python agent): how long its bootstrap's `import torch` took, ms (`imported`)
  std::optional<double> import_ms;
  /// In log order; a save renamed into place (`ckpt_rename`) is listed again under its new path.
  std::vector<CheckpointEvent> ckpt_saves;
  std::vector<CheckpointEvent> ckpt_loads;    ///< in log order
  std::vector<CheckpointEvent> ckpt_rejects;  ///< built-in `ckpt_reject`, in log order
  int64_t steps_done = 0;                     ///< highest step_end step + 1
  std::map<int64_t, std::string> actions;     ///< step -> update/skip/early_return
  /// step -> its own phase times (step_end own_us; the last run of a re-executed step)
  std::map<int64_t, StepEndEvent::Phases> phases;
  std::vector<InjectEvent> injections;           ///< in log order
  std::map<int64_t, CollEnterEvent> coll_enter;  ///< seq -> its last coll_enter
  std::vector<P2pEnterEvent> p2p;                ///< external: its sends/receives, in log order
  std::set<int64_t> coll_left;
  std::map<int64_t, int64_t> coll_failed_t;  ///< external: seq -> t_us of a leave with an error
  std::optional<std::string> exception;      ///< external: the first uncaught exception's text
  /// its last `start`; external: the modules (with the probes that ran) and parameters the agent
  /// found
  std::optional<StartEvent> start;
  std::optional<nlohmann::json> log_error;  ///< the log could not grow: events after it were lost
  std::optional<int64_t> log_dropped;       ///< how many (written when the rank closed its log)
  std::string host;                         ///< from its first event
  nlohmann::json clock;                     ///< its `clock` event (null: none)
  std::optional<int64_t> shift_us;          ///< added to its t_us (a rank on another host)
};

/// One rank's evidence from its events (as read_events()/parse_events() give them, in log order)
/// and the time its own process watch saw it end (its gone record's t_us, on its own clock;
/// nullopt: no record). Moves a remote rank's times onto the controller's clock. Pure. Throws
/// json::type_error on a field of the wrong type.
RankEvidence rank_evidence_from_events(std::vector<nlohmann::json> events, const JobResult& job,
                                       std::optional<int64_t> gone_t_us);

/// Reads RUN/events/rank-R.jsonl (missing: an empty log) and its gone record into
/// rank_evidence_from_events(). Throws json::type_error on a field of the wrong type.
RankEvidence read_rank_evidence(const std::string& run_dir, int rank, const JobResult& job);

/// A launch of the job that ended abnormally and was followed by a relaunch ([job] restarts):
/// its ranks' evidence and how the controller saw it end. Its files are in RUN/launches/K/
/// (events/, ranks.log, ranks/, plan.json: the layout of the run folder's own, which holds the
/// last launch).
struct LaunchEvidence {
  JobResult job;
  std::vector<RankEvidence> ranks;  ///< one per rank of [job].ranks
};

/// Everything the judge reads of one finished job: the only input of judge() besides the
/// scenario and the launcher's exit state of its last launch (harness/controller/judge.h). Built
/// by read_job_evidence() from a run folder, or in memory by a test.
struct JobEvidence {
  /// The launches before the last one, in order (empty: the job was launched once). `ranks`
  /// and the rest below are the last launch's.
  std::vector<LaunchEvidence> earlier;
  /// The run folder, named in reasons and report links; judge() never opens anything in it.
  std::string run_dir;
  std::vector<RankEvidence> ranks;    ///< one per rank of [job].ranks, in rank order
  std::string ranks_log_first_error;  ///< RUN/ranks.log's first line containing "error:"
  std::string ranks_log_last_line;    ///< its last non-blank line ("": none)
  /// Slurm ended srun's step from outside (scancel of the step or the job, a node set down or
  /// failed, the time limit): slurmstepd's "*** STEP 7.0 ON n1 CANCELLED AT <time> [DUE TO ...]
  /// ***" from the launcher's output, when it came before srun reported any task failing and no
  /// task exited by itself ("srun: error: n2: task 1: Killed" first: --kill-on-bad-exit cancelled
  /// the step for that task; "task 3: Exited with exit code 4": a watchdog's MPI_Abort; both a
  /// rank's end, not Slurm's). "": not so.
  /// Measured on slurm-wlm 22.05 (tests/slurm/slurm_test.py --phase failures).
  std::string slurm_cancelled;
  /// Free bytes (statvfs f_bavail x f_frsize) of the run folder's filesystem, sampled when the
  /// evidence was read, right after the job ended; nullopt when statvfs failed or nobody sampled.
  std::optional<uint64_t> free_bytes;
  /// Why a rank's log cannot be read (a corrupted or foreign log), the ranks then partial and
  /// judge() making the scenario an `error` ("cannot judge: " and this): "an event has a field
  /// of the wrong type: PATH:LINE: event \"EV\", field \"KEY\": " and json::type_error's text,
  /// or "a line of a rank's event log is no event: PATH:LINE: not JSON: \"...\"" (a line that
  /// is no event, not the last), or "a rank's event log is no regular file ...: PATH"
  /// (events.h read_events_strict).
  std::optional<std::string> unreadable;
  /// [expect] final_matches_clean: the clean reference run's digests (RUN/clean/clean.json,
  /// clean_run.h); nullopt when there is none.
  std::optional<CleanReference> clean;
};

/// RUN/ranks.log's facts (its first "error:" line, its last non-blank line, Slurm's
/// cancellation of the step) into `ev`.
void read_ranks_log(std::istream& in, JobEvidence& ev);

/// Gathers a finished job's evidence from `run_dir`: RUN/events/rank-R.jsonl and the gone records
/// for R < [job].ranks, RUN/ranks.log's first error and last line, the free space. Never throws
/// on what the files hold (see JobEvidence::unreadable); a missing file is empty evidence.
/// `earlier`: how the controller saw each launch before the last one end; launch K's events are
/// read from RUN/launches/K/events into JobEvidence::earlier.
JobEvidence read_job_evidence(int world, const std::string& run_dir, const JobResult& job,
                              const std::vector<JobResult>& earlier = {});

/// RUN/launches/K: where launch K's evidence goes once a relaunch follows it.
std::string launch_dir(const std::string& run_dir, size_t launch);

/// When each rank's process was gone: the controller's pid watch (JobResult::rank_gone_us) for
/// the ranks of its host, the rank's own watch (RankEvidence::gone_us) for the others. A rank
/// neither saw end is absent from the map.
std::map<int, int64_t> ranks_gone_us(const std::vector<RankEvidence>& logs, const JobResult& job);

/// report.json `clock_offsets`: per rank that logged a `clock` event, what it measured and the
/// shift the judge applied (none: its events were left on their own clock).
std::map<int64_t, results::ClockOffset> clock_offsets(const std::vector<RankEvidence>& logs);

/// report.json `memory`: per-rank peak memory (VmHWM) and where each figure came from; nullopt
/// when no rank could be measured.
std::optional<results::Memory> peak_memory(const std::vector<RankEvidence>& logs,
                                           const JobResult& job);

/// Why the evidence of a job is incomplete ("" when it is not): a rank's log that could not
/// grow, or a full filesystem (free_bytes below 256 KiB) while a rank's log lacks its exit
/// record. Adds the dropped-event count of every rank whose log could not grow to `dropped`.
/// Pure: the free space is the sample in `ev`.
std::string evidence_lost(const JobEvidence& ev, int64_t& dropped);

}  // namespace nanchaos::harness
