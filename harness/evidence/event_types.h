// The typed events of a rank's log (events.h lists every type): one struct per event the judge,
// the HTML timeline or the rank itself reads back, shared by the writers (the runner, the agent,
// the stack's watchdog, the fault hooks) and the readers (harness/controller/rank_evidence.cpp,
// detections.cpp, results/html_charts.cpp). JSON lines stay the wire format; these are the data.
//
//   write_event(log, DetectEvent{.detector = "grad", .step = 3, .layer = "fc1", .cause =
//   "gradient"}); for (const auto& e : read_events(path))
//     if (auto* d = std::get_if<DetectEvent>(&(parsed = parse_event(e)))) ...
//
// Parsing keeps the readers' earlier rules field by field: an absent field takes the default its
// docstring names; an integer field that is null, or a float int64 cannot hold, counts as absent
// (int_field); a string or bool field that is null or of the wrong type, and an integer field
// of a non-number type, throw nlohmann::json::type_error (judge() makes that an `error` verdict
// naming the folder). Fields no reader uses (detail, flagged, message, ...) are kept when their
// type fits and dropped otherwise: they never make a log unreadable. Times are microseconds on
// CLOCK_MONOTONIC (`t_us`), steps are training iterations counted from 0.
//
// Writers leave `t_us` 0 (absent for AbortEvent): EventLog::write stamps the time. The hot-path
// lines have one writer each, used by every C++ writer: coll_enter/coll_leave
// (append_coll_enter/append_coll_leave: harness/comm/collective.cpp, inject/agent.cpp) and
// step_begin/step_end (append_step_begin/append_step_end, through write_event: the built-in
// loop, harness/job/runner.cpp, and the agent, inject/agent.cpp); the Python agent's twin is
// inject/python/nanchaos/agent.py. Thread-safety: plain values.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "harness/evidence/events.h"

namespace nanchaos::harness {

/// An integer field of an event, or `def` when absent or null. A float is accepted when it fits:
/// nlohmann's value<int64_t>() of 2e120 is undefined behaviour (found by nanchaos_fuzz_report).
/// Other types throw json::type_error as value() does.
int64_t int_field(const nlohmann::json& e, const char* key, int64_t def);

/// Not-a-number: how a double that the log holds as null (not finite, or unknown) reads.
inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

/// `inject {fault, kind, step, target, detail, replay}`: a fault fired on this rank
/// (inject/faults.cpp; the Python agent writes the same).
struct InjectEvent {
  static constexpr const char* kEv = "inject";
  int fault = 0;          ///< index into the scenario's [[fault]] array (absent: 0)
  std::string kind;       ///< the fault kind: bitflip, crash, hang, ... (absent: "")
  int64_t step = 0;       ///< the step it fired in (steps; absent: 0)
  std::string target;     ///< what it hit, "" when the kind has none (absent: "")
  nlohmann::json detail;  ///< the kind's own record (bit position, value, ...); any JSON
  bool replay = false;    ///< fired during a replay/re-execution (absent: false)
  int64_t t_us = 0;       ///< when (us; absent: 0)
};

/// `detect {detector, step, layer, cause}`: a detector fired on this rank, before consensus.
/// The watchdog adds the collective (seq, status); an external job's agent adds `source`.
struct DetectEvent {
  static constexpr const char* kEv = "detect";
  std::string detector;  ///< grad, loss, watchdog, observed:skip, ... (absent: "")
  int64_t step = -1;     ///< the step it fired in (steps; absent: -1)
  std::string layer;     ///< module/parameter or collective name, "" when unknown (absent: "")
  std::string cause;     ///< data, loss_math, gradient, hang, ... (absent: "")
  /// External jobs: "stack" (the job's report_detection) or "observed" (what the agent saw the
  /// job do); absent for the built-in stack. Present and not a string: type_error.
  std::optional<std::string> source;
  std::optional<int64_t> seq;          ///< watchdog: the collective's sequence number
  std::optional<std::string> status;   ///< watchdog: "timeout" or "error"
  std::optional<std::string> message;  ///< observed:exception: the exception's text
  int64_t t_us = 0;                    ///< when (us; absent: 0)
};

/// `decision {step, detector, ranks, layer, cause, action, ...}`: what the stack decided at a
/// step. Three shapes, chosen by the fields set:
/// - consensus (the built-in stack): + transient (bool, or null before a replay), flagged,
///   first_local_us, t_us (when every rank agreed);
/// - local (`local` true: the naive stack's early return on one rank, no consensus):
///   + local, first_local_us;
/// - an external job's stack (`source` set): {step, action, source} only.
struct DecisionEvent {
  static constexpr const char* kEv = "decision";
  int64_t step = -1;              ///< steps (absent: -1)
  std::string detector;           ///< the detector decided on (absent: "")
  std::vector<int64_t> ranks;     ///< the ranks that flagged (absent or not an array: none)
  std::string layer;              ///< (absent: "")
  std::string cause;              ///< (absent: "")
  std::string action;             ///< skip_step, rollback, abort, early_return, ... (absent: "")
  std::optional<bool> transient;  ///< the replay's answer (absent, null or not a bool: unset)
  nlohmann::json flagged = nlohmann::json::array();  ///< consensus: [{rank, detectors}] per rank
  bool local = false;          ///< a decision of this rank alone (absent: false)
  int64_t first_local_us = 0;  ///< this rank's first local detection of the step (us; 0: none)
  std::optional<std::string> source;  ///< external jobs: "stack"
  int64_t t_us = 0;                   ///< when (us; absent: 0)
};

/// `abort {step, reason, cause}`: the rank gives up (its watchdog, a collective's deadline, the
/// job's stack deciding `abort`, which adds source "stack").
struct AbortEvent {
  static constexpr const char* kEv = "abort";
  int64_t step = -1;   ///< steps (absent: -1)
  std::string reason;  ///< human text (absent: "")
  std::string cause;   ///< hang, gradient, ... or "" (absent: "")
  std::optional<std::string> source;
  std::optional<int64_t> t_us;  ///< when (us; absent or null: unknown, the judge ignores it)
};

/// `final {steps_completed, eval_loss, initial_eval_loss, params_hash, optim_hash, params_finite}`:
/// the rank's end state after its last step. Doubles the log holds as null (not finite) or
/// not as a number read as kNoValue.
struct FinalEvent {
  static constexpr const char* kEv = "final";
  int64_t steps_completed = 0;               ///< steps (absent: 0)
  double eval_loss = kNoValue;               ///< held-out loss at the end (null: not finite)
  std::optional<std::string> eval_loss_str;  ///< the runner's fmt of eval_loss ("nan", "inf")
  double initial_eval_loss = kNoValue;       ///< held-out loss before step 0
  std::string params_hash;                   ///< XXH3-64 of the parameters, hex (absent: "")
  std::string optim_hash;                    ///< XXH3-64 of the optimizer state (absent: "")
  bool params_finite = false;                ///< every parameter finite (absent: false)
  std::optional<double> loss_scale;          ///< fp16 loss scaler's scale (absent/null: none)
  /// false: the rank computes no loss by design (a pipeline stage before the last, whose
  /// eval_loss is null); the judge reads the loss off the ranks that do (absent: true)
  bool has_loss = true;
  int64_t t_us = 0;  ///< when (us; absent: 0)
};

/// `exit {code, vm_hwm_kib}`: the rank's last record.
struct ExitEvent {
  static constexpr const char* kEv = "exit";
  int code = -1;                      ///< its exit status (absent: -1)
  std::optional<int64_t> vm_hwm_kib;  ///< peak RSS (KiB; present but null: 0)
  int64_t t_us = 0;                   ///< when (us; absent: 0)
};

/// `step_begin {step, cpu_us}`: an iteration began on this rank.
struct StepBeginEvent {
  static constexpr const char* kEv = "step_begin";
  int64_t step = 0;               ///< steps (absent: 0)
  std::optional<int64_t> cpu_us;  ///< process CPU time at the start (us; the built-in loop's)
  int64_t t_us = 0;               ///< when (us; absent: 0)
};

/// `step_end {step, action, loss, lr, ...}`: an iteration ended on this rank.
struct StepEndEvent {
  static constexpr const char* kEv = "step_end";
  int64_t step = 0;                    ///< steps (absent: 0)
  std::string action;                  ///< update, skip, early_return (absent: "")
  std::optional<double> loss;          ///< training loss (NaN is written as null)
  std::optional<double> lr;            ///< learning rate used
  std::optional<double> loss_scale;    ///< fp16 loss scaler's scale after the step
  std::optional<int64_t> localize_us;  ///< the step's cost of localizing findings (us)
  std::optional<int64_t> cpu_us;       ///< process CPU time at the end (us, process_cpu_us())
  /// The rank's own time per phase of the step (SCENARIO_FORMAT.md "Slow ranks"; written by
  /// harness/job/phase_clock.h and the Python agent's phases.py): `own_us` {data, compute,
  /// backward, comm} (us, each phase's wall time minus collective waits and run delay),
  /// `wait_us` (us inside collectives), `run_delay_us` (us runnable off the CPU; absent where
  /// unknown). Absent as a whole when the writer has no phase times (a pipeline job). A field
  /// of own_us that is missing reads 0.
  struct Phases {
    std::array<int64_t, 4> own_us{};  ///< data, compute, backward, comm (StepPhase order)
    int64_t wait_us = 0;
    std::optional<int64_t> run_delay_us;
  };
  std::optional<Phases> phases;
  int64_t t_us = 0;  ///< when (us; absent: 0)
};

/// The `own_us` keys of StepEndEvent::Phases, in its order.
inline constexpr const char* kPhaseKeys[4] = {"data", "compute", "backward", "comm"};

/// `coll_enter {seq, name, count, dtype, step}`: the rank entered collective #seq.
struct CollEnterEvent {
  static constexpr const char* kEv = "coll_enter";
  int64_t seq = 0;               ///< the collective's number on this rank (absent: 0)
  std::string name;              ///< grad_allreduce, consensus, ... (absent: "")
  std::optional<int64_t> count;  ///< elements
  std::optional<std::string> dtype;
  int64_t step = 0;  ///< steps (absent: 0)
  int64_t t_us = 0;  ///< when (us; absent: 0)
};

/// `coll_leave {seq, name, status}`: the rank left collective #seq.
struct CollLeaveEvent {
  static constexpr const char* kEv = "coll_leave";
  int64_t seq = 0;  ///< (absent: 0)
  std::optional<std::string> name;
  std::string status = "ok";  ///< ok, timeout, error (absent: "ok")
  std::optional<int64_t> step;
  int64_t t_us = 0;  ///< when (us; absent: 0)
};

/// Which process a rank is, where: the identity `launch` and `start` both carry. A rank whose
/// host or PID namespace differ from the controller's is not in its /proc (rank_host.h).
struct RankIdentity {
  int64_t rank = -1;                 ///< (absent: -1)
  int64_t world = 0;                 ///< world size (absent: 0)
  int64_t pid = 0;                   ///< its process id on its host (absent: 0)
  std::string host;                  ///< gethostname() (absent: "")
  std::optional<std::string> pidns;  ///< readlink /proc/self/ns/pid (absent: unknown)
};

/// `launch {rank, world, pid, host, pidns, command}`: exec-rank's first line for an external
/// job's rank (harness/controller/exec_rank.cpp), written before it execs the job's command.
struct LaunchEvent : RankIdentity {
  static constexpr const char* kEv = "launch";
  std::vector<std::string> command;  ///< the argv it execs (entries not strings skipped)
  int64_t t_us = 0;                  ///< when (us; absent: 0)
};

/// `start {rank, world, pid, host, ...}`: the rank is up with its model built. The built-in
/// rank (harness/job/rank_runner.cpp) adds pidns and seed; an external job's agent
/// (inject/agent.cpp, inject/python/nanchaos/agent.py) adds external, agent, the model's names
/// and what it found of the job (torch, python, optimizer, scaler, ddp, micro_batches).
struct StartEvent : RankIdentity {
  static constexpr const char* kEv = "start";
  std::optional<int64_t> seed;       ///< built-in: the scenario's seed
  bool external = false;             ///< written by an external job's agent (absent: false)
  std::optional<std::string> agent;  ///< external: "cpp" or "python"
  /// external: the model's module names (nanchaos.probe names that ran are added by the
  /// reader) and parameter names, as targets name them; absent: none, entries not strings skipped.
  std::vector<std::string> modules;
  std::vector<std::string> parameters;
  /// Every other field as written (torch, python, optimizer, scaler, ddp, micro_batches): read
  /// by people and tests, never by the judge. An object.
  nlohmann::json more = nlohmann::json::object();
  int64_t t_us = 0;  ///< when (us; absent: 0)
};

/// `p2p_enter {seq, op, peer, numel, dtype, step}`: the rank entered a point-to-point send or
/// receive (the Python agent's, pipeline parallelism: inject/python/nanchaos/collectives.py),
/// numbered on its own, apart from the collectives.
struct P2pEnterEvent {
  static constexpr const char* kEv = "p2p_enter";
  int64_t seq = 0;               ///< its number among this rank's sends and receives (absent: 0)
  std::string op;                ///< "send" or "recv" (absent: "")
  int64_t peer = -1;             ///< the other rank; -1: any (null or absent)
  std::optional<int64_t> numel;  ///< elements
  std::optional<std::string> dtype;
  int64_t step = 0;  ///< steps (absent: 0)
  int64_t t_us = 0;  ///< when (us; absent: 0)
  bool send() const { return op == "send"; }
};

/// `p2p_leave {seq, status}`: the rank left send/receive #seq.
struct P2pLeaveEvent {
  static constexpr const char* kEv = "p2p_leave";
  int64_t seq = 0;            ///< (absent: 0)
  std::string status = "ok";  ///< ok, error (absent: "ok")
  int64_t t_us = 0;           ///< when (us; absent: 0)
};

/// A checkpoint saved, loaded or refused, as `ckpt_save`, `ckpt_load` and `ckpt_reject` write
/// it (the Python agent when an external job saves or loads its own training state, ckpt_io.py
/// and dcp_io.py; the built-in rank's checkpoints, harness/job/checkpoint_rank.cpp).
struct CheckpointEvent {
  std::string path;  ///< file or DCP folder as the job passed it ("" for a file object; absent: "")
  /// the object's own step ("step", "global_step", "iteration"; steps); null or absent: unknown
  std::optional<int64_t> step;
  std::optional<int64_t> agent_step;  ///< save: iterations the agent had seen complete (steps)
  std::string why;                    ///< reject: why it was refused (absent: "")
  /// Every other field as written (tensors, format, digests, validated, layer, shard_rank, rank,
  /// shard, shard_bytes): read by people and tests, never by the judge. An object.
  nlohmann::json more = nlohmann::json::object();
  int64_t t_us = 0;  ///< when (us; absent: 0)
};
struct CkptSaveEvent : CheckpointEvent {
  static constexpr const char* kEv = "ckpt_save";
};
struct CkptLoadEvent : CheckpointEvent {
  static constexpr const char* kEv = "ckpt_load";
};
struct CkptRejectEvent : CheckpointEvent {
  static constexpr const char* kEv = "ckpt_reject";
};

/// `ckpt_rename {from, path}`: an atomic save's temporary file renamed into place (the Python
/// agent's os.rename/os.replace wrapper).
struct CkptRenameEvent {
  static constexpr const char* kEv = "ckpt_rename";
  std::string from;  ///< (absent: "")
  std::string path;  ///< (absent: "")
  int64_t t_us = 0;  ///< when (us; absent: 0)
};

/// Any other event (clock, probe, exception, agent, log_error, ...): its type and time.
struct OtherEvent {
  std::string ev;    ///< its "ev" (absent: "")
  int64_t t_us = 0;  ///< (absent: 0)
};

using TypedEvent =
    std::variant<OtherEvent, InjectEvent, DetectEvent, DecisionEvent, AbortEvent, FinalEvent,
                 ExitEvent, StepBeginEvent, StepEndEvent, CollEnterEvent, CollLeaveEvent,
                 LaunchEvent, StartEvent, P2pEnterEvent, P2pLeaveEvent, CkptSaveEvent,
                 CkptLoadEvent, CkptRejectEvent, CkptRenameEvent>;

/// The fields of an event as EventLog::write takes them (no "ev"; "t_us" only when set).
nlohmann::json to_json(const InjectEvent& e);
nlohmann::json to_json(const DetectEvent& e);
nlohmann::json to_json(const DecisionEvent& e);
nlohmann::json to_json(const AbortEvent& e);
nlohmann::json to_json(const FinalEvent& e);
nlohmann::json to_json(const ExitEvent& e);
nlohmann::json to_json(const CollEnterEvent& e);
nlohmann::json to_json(const CollLeaveEvent& e);
nlohmann::json to_json(const LaunchEvent& e);
nlohmann::json to_json(const StartEvent& e);
nlohmann::json to_json(const P2pEnterEvent& e);
nlohmann::json to_json(const P2pLeaveEvent& e);
/// ckpt_save, ckpt_load, ckpt_reject (the type comes from the derived struct's kEv).
nlohmann::json to_json(const CheckpointEvent& e);
nlohmann::json to_json(const CkptRenameEvent& e);

/// One event by its type (the "ev" field, ignored otherwise). Throws json::type_error as the
/// header comment says.
InjectEvent parse_inject(const nlohmann::json& e);
DetectEvent parse_detect(const nlohmann::json& e);
DecisionEvent parse_decision(const nlohmann::json& e);
AbortEvent parse_abort(const nlohmann::json& e);
FinalEvent parse_final(const nlohmann::json& e);
ExitEvent parse_exit(const nlohmann::json& e);
StepBeginEvent parse_step_begin(const nlohmann::json& e);
StepEndEvent parse_step_end(const nlohmann::json& e);
CollEnterEvent parse_coll_enter(const nlohmann::json& e);
CollLeaveEvent parse_coll_leave(const nlohmann::json& e);
LaunchEvent parse_launch(const nlohmann::json& e);
StartEvent parse_start(const nlohmann::json& e);
P2pEnterEvent parse_p2p_enter(const nlohmann::json& e);
P2pLeaveEvent parse_p2p_leave(const nlohmann::json& e);
/// The fields of ckpt_save, ckpt_load and ckpt_reject (their "ev" is not checked).
CheckpointEvent parse_checkpoint(const nlohmann::json& e);
CkptRenameEvent parse_ckpt_rename(const nlohmann::json& e);

/// The flight recorder's hot-path lines, appended to `out` (the caller's stack buffer: no JSON
/// object is built per collective, bench/README.md) as one JSON object with no newline, keys
/// sorted as EventLog::write sorts them, `name` JSON-escaped (a name with a `"` or a control
/// character stays one valid line). `t_us`: CLOCK_MONOTONIC us (now_us()); `count`: elements;
/// `step`: the training iteration. parse_coll_enter/parse_coll_leave read them back.
void append_coll_enter(fmt::memory_buffer& out, int64_t t_us, int64_t seq, std::string_view name,
                       int64_t count, std::string_view dtype, int64_t step);
/// `status`: "ok", "timeout" or "error" (plain words, not escaped).
void append_coll_leave(fmt::memory_buffer& out, int64_t t_us, int64_t seq, std::string_view name,
                       int64_t step, std::string_view status);

/// The per-step lines, appended to `out` as the collectives' are (no JSON object built per step),
/// keys sorted, `t_us` the line's time and the event's own t_us ignored. A double that is not
/// finite is written as null (as EventLog::write does); an integral one keeps a ".0" (1.0, as
/// nlohmann writes it). parse_step_begin/parse_step_end read them back.
void append_step_begin(fmt::memory_buffer& out, int64_t t_us, const StepBeginEvent& e);
void append_step_end(fmt::memory_buffer& out, int64_t t_us, const StepEndEvent& e);

/// An event's type for a reader that watches a live log (the controller during the job): its "ev"
/// when that is a string, else "" (a hostile line never throws there; the judge's parse_event
/// stays strict and makes it an `error` verdict).
std::string event_type(const nlohmann::json& e);

/// Dispatches on "ev" (a string; absent: "", another type: type_error) to the parsers above.
TypedEvent parse_event(const nlohmann::json& e);

/// The time of any typed event (us; an abort without one: 0).
int64_t event_time_us(const TypedEvent& e);

/// Writes one typed event: log.write(Event::kEv, to_json(e)).
template <class Event>
void write_event(EventLog& log, const Event& e) {
  log.write(Event::kEv, to_json(e));
}
/// The per-step lines through their one writer (append_step_begin/append_step_end), stamped
/// with `e.t_us`, or now when it is 0.
void write_event(EventLog& log, const StepBeginEvent& e);
void write_event(EventLog& log, const StepEndEvent& e);

}  // namespace nanchaos::harness
