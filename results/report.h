// The report model (report.json, the part others rely on: docs/scenario-format.md "Results"), its
// writers: report.json (report.cpp), junit.xml (junit.cpp), report.md (markdown.cpp) and the
// console table (console.cpp); the summary columns of the last two and of report.html come from
// one table (columns.h).
//
// The judge (harness/controller/judge.cpp) fills a ScenarioResult per scenario from the ranks'
// event logs; this module only models and writes. Writers throw std::runtime_error naming the path
// when a file cannot be written. Nothing here includes torch.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "results/job_facts.h"

namespace nanchaos::results {

/// A scenario's verdict. Written as "pass", "fail", "error", "skipped" (to_string) in every
/// format; a scenario starts as kError until something judges, skips or refuses it.
enum class Verdict { kPass, kFail, kError, kSkipped };

/// The verdict as report.json spells it.
const char* to_string(Verdict v);
/// The inverse of to_string; nullopt for anything else.
std::optional<Verdict> parse_verdict(std::string_view s);
std::ostream& operator<<(std::ostream& os, Verdict v);  ///< to_string (logs, test messages)

/// How a job ended (report.json "outcome"): every rank through to its final record, aborted by a
/// rank, crashed, or killed at its timeout; kNone when no job ran (written as null).
enum class Outcome { kNone, kCompleted, kAborted, kHung, kCrashed };

/// "completed", "aborted", "hung", "crashed"; "" for kNone.
const char* to_string(Outcome o);
std::ostream& operator<<(std::ostream& os, Outcome o);

/// What the fault did (report.json "fault_outcome"; docs/scenario-format.md): kNone for a
/// scenario with no [[fault]] (written as null).
enum class FaultOutcome {
  kNone,
  kMasked,               ///< no detection, and the job recovered, stayed consistent, no divergence
  kDetectedRecovered,    ///< detected, and the job completed with finite state
  kDetectedUnrecovered,  ///< detected, and the job did not recover
  kSilentCorruption,     ///< not detected, and the end state is wrong
  kHang,                 ///< the job hung or deadlocked
};

/// "masked", "detected_recovered", "detected_unrecovered", "silent_corruption", "hang"; "" for
/// kNone.
const char* to_string(FaultOutcome f);
std::ostream& operator<<(std::ostream& os, FaultOutcome f);

/// One [expect] key judged.
struct Check {
  std::string key;
  nlohmann::json expected;
  nlohmann::json actual;  ///< null when the run gave no value (e.g. no detection)
  bool pass = false;
};

/// A detection the stack made (after consensus: the ranks that flagged, and the decision).
struct Detection {
  std::string detector;        ///< batch, loss, grad, param, post_reduce, watchdog, ...
  std::vector<int64_t> ranks;  ///< blamed ranks (empty: the stack could not tell)
  int64_t step = -1;
  std::string layer;                     ///< module/parameter, "inputs"/"labels", "" when unknown
  std::string cause;                     ///< data, loss_math, gradient, ... ("" when unknown)
  std::optional<bool> transient;         ///< set by the replay
  std::optional<int64_t> latency_steps;  ///< detection step - first fault step
  std::optional<double> latency_ms;      ///< first injection -> first local detection (ms)
  std::optional<double> decision_us;     ///< first local detection -> all ranks agreed (us)
  std::string action;                    ///< skip_step, abort, none, ...
};

/// One logged firing of a fault.
struct Injection {
  int fault = 0;  ///< index into the scenario's [[fault]] array
  std::string kind;
  int64_t rank = 0;
  int64_t step = 0;
  std::string target;   ///< "" when the kind has none
  double t_ms = 0;      ///< ms since the job started (controller clock)
  bool replay = false;  ///< fired during a replay/re-execution
};

/// The files a job's output went to (harness/common/rank_output.h), each a path relative to the
/// scenario's run_dir ("ranks.log", "ranks/rank-0.out"), so a report compares equal across runs
/// and survives moving the folder; a file the job never made is "" (a rank with neither is absent
/// from `ranks`). report.json `logs`, linked from report.md and report.html.
struct JobLogs {
  std::string merged;    ///< RUN/ranks.log: every line of the files below, tagged `[rank N]`
  std::string launcher;  ///< RUN/ranks/launcher.log: the launcher's own stdout and stderr
  struct Rank {
    int64_t rank = 0;
    std::string stdout_path;  ///< RUN/ranks/rank-N.out
    std::string stderr_path;  ///< RUN/ranks/rank-N.err
  };
  std::vector<Rank> ranks;  ///< by rank
  bool empty() const { return merged.empty() && launcher.empty() && ranks.empty(); }
};

/// Every rank's events of a job as report.html draws them (html.h), built by the judge from the
/// evidence it read (harness/controller/timeline.cpp); not written into report.json. Times are ms
/// since the job started (its first launch), on the controller's clock: a rank on another host is
/// moved by its measured clock offset.
struct Timeline {
  struct Bar {
    int rank = 0;
    double t0_ms = 0, t1_ms = 0;
    std::string name;   ///< consensus, grad_allreduce, ...; "send to 2", "recv from 1" (p2p)
    bool open = false;  ///< entered, never left: t1 is the rank's last event (or the job's end)
    bool p2p = false;   ///< a point-to-point send or receive (p2p_enter..p2p_leave)
  };
  struct Mark {
    int rank = 0;
    double t_ms = 0;
    std::string kind;   ///< inject, detect, decision, abort, exit
    std::string label;  ///< e.g. "inject tensor s10", "detect loss", "exit 3"
  };
  int ranks = 0;
  double begin_ms = 0;  ///< the earliest event of any rank (launch and set-up come before it)
  double end_ms =
      0;  ///< the latest event of any rank (or the job's end, for a rank killed waiting)
  std::vector<Bar> bars;
  std::vector<Mark> marks;
};

struct ScenarioResult {
  std::string name;
  std::string file;
  Verdict verdict = Verdict::kError;
  std::string reason;  ///< why not pass (first failed check, error text, skip reason)
  Outcome outcome = Outcome::kNone;
  double wall_ms = 0;
  uint64_t seed = 0;
  int64_t ranks = 0;
  std::vector<Check> checks;
  FaultOutcome fault_outcome = FaultOutcome::kNone;
  std::optional<Detection> first_detection;
  std::vector<Detection> detections;
  std::vector<Injection> injections;
  int64_t steps_completed = 0;       ///< steps every rank finished (min over ranks)
  std::optional<double> final_loss;  ///< held-out eval loss (null when the job did not finish)
  std::string run_dir;               ///< folder with events/, per-rank logs
  JobLogs logs;                      ///< the job's output files (empty: no job ran)
  /// Events the ranks could not write (a full disk: harness/evidence/events.h `log_dropped`, summed
  /// over ranks); > 0 only with verdict `error`.
  int64_t dropped_events = 0;
  // --- written at the scenario's top level after the fields above (results/job_facts.h) ---
  std::optional<JobFacts> judged;             ///< the judge's post-mortem and facts (a job ran)
  std::optional<ControllerFacts> controller;  ///< the controller's figures after the job
  std::optional<Interpreter> interpreter;     ///< an external Python job's interpreter
  std::string interrupted_by;  ///< "SIGINT"/"SIGTERM" that stopped it ("": not; report.json key)
  std::string in_launch;       ///< campaigns: the batch launch it ran in ("": its own job)
  Timeline timeline;           ///< report.html's timeline of the job (empty: no job was judged)
  // --- repeated trials (`nanchaos run --trials N`; docs/scenario-format.md "Trials") ---
  int trial = 0;        ///< which trial the fields above describe (its seed is seed + trial)
  int trial_count = 1;  ///< N
  /// Every trial, trial 0 first, when N > 1 (empty when N == 1: the fields above are the trial).
  std::vector<ScenarioResult> trials;
  nlohmann::json stats;  ///< scenario_stats() over the trials (results/stats.h); null: not computed
};

/// `nanchaos run --shard I/N` (report.json "shard"): which part of the suite this run is, and the
/// whole suite's scenario names in suite order, so that `nanchaos merge` can put the shards back
/// in order and say which part is missing.
struct ShardInfo {
  int index = 0;                   ///< I, 1-based
  int count = 0;                   ///< N
  std::vector<std::string> suite;  ///< every scenario of the suite (all shards), in suite order
};

struct SuiteReport {
  std::string suite;
  std::string started;  ///< ISO-8601 UTC
  std::string nanchaos_version;
  std::string host;
  std::vector<ScenarioResult> scenarios;
  int trials = 1;                 ///< --trials N of the run
  nlohmann::json detector_stats;  ///< suite_detector_stats() (results/stats.h); null: not computed
  /// SIGINT/SIGTERM stopped the run (report.json "interrupted", always written): the scenario
  /// it stopped is an `error` with reason "interrupted", and `not_run` names, in suite order,
  /// those never started.
  bool interrupted = false;
  std::string interrupt_signal;  ///< "SIGINT", "SIGTERM" ("" when not interrupted)
  std::vector<std::string> not_run;
  /// Whether the controller finished the run (report.json "complete", always written): false in
  /// the reports written after each scenario while the run goes on, so also in what a
  /// controller killed with SIGKILL leaves behind, and after an interruption. `pending` names,
  /// in suite order, the planned scenarios not judged yet (running or queued; those an
  /// interruption left are in `not_run`). A report without the key (written before it existed)
  /// reads as complete.
  bool complete = true;
  std::vector<std::string> pending;
  std::optional<ShardInfo> shard;  ///< set for `run --shard I/N` (absent from report.json if not)
  int passed() const;
  int failed() const;
  int errors() const;
  int skipped() const;
};

nlohmann::json to_json(const Detection& d);
nlohmann::json to_json(const ScenarioResult& r);
nlohmann::json to_json(const SuiteReport& r);

/// Reads what to_json() wrote back (results/report_read.cpp): to_json(scenario_from_json(j)) == j.
/// Throws std::runtime_error naming the scenario and key for a malformed report (an unknown
/// verdict, outcome or fault_outcome string, a missing name or verdict, a wrong type).
ScenarioResult scenario_from_json(const nlohmann::json& j);
/// The whole report.json (scenarios, trials, detector stats, interruption, shard); throws as above.
SuiteReport suite_from_json(const nlohmann::json& j);
/// ScenarioResult::timeline as JSON (RUN/<scenario>/timeline.json, which `merge` reads back for
/// report.html) and back.
nlohmann::json to_json(const Timeline& t);
Timeline timeline_from_json(const nlohmann::json& j);

void write_report_json(const SuiteReport& r, const std::string& path);
void write_junit(const SuiteReport& r, const std::string& path);
void write_markdown(const SuiteReport& r, const std::string& path);

/// Console table: header row, one line per scenario (verdict, first detector, rank, layer, cause,
/// latency in steps and ms, wall time), and a summary footer.
std::string console_header();
std::string console_row(const ScenarioResult& r);
std::string console_footer(const SuiteReport& r);

/// Escapes text for XML and HTML content and attributes: & < > " ' as entities, tab/newline/CR
/// as numeric references, other control characters as U+FFFD (XML 1.0 cannot carry them).
std::string xml_escape(const std::string& s);

}  // namespace nanchaos::results
