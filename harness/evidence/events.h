// Per-rank structured event log: JSON lines in <run>/events/rank-N.jsonl, one fact per line,
// handed to the kernel as it happens (a shared file mapping, see EventLog), so a rank that dies
// mid-step still leaves its evidence.
//
// Every event carries "ev" (its type) and "t_us", microseconds on CLOCK_MONOTONIC, which the
// ranks of one host and the controller share; the judge moves the times of ranks on other hosts
// onto the controller's clock with their `clock` event (clock_sync.h). Event types written by the
// rank runner:
//   start {rank, world, pid, host, pidns}   (pidns: readlink /proc/self/ns/pid, rank_host.h)
//   clock {offset_us, rtt_us, samples, server, real_minus_mono_us} or clock {error, ...}
//                                         (when $NANCHAOS_CLOCK is set; clock_sync.h)
//   step_begin {step, cpu_us}             step_end {step, loss, action, lr, cpu_us}
//   (cpu_us: process_cpu_us() at that moment)
//   inject {fault, kind, step, target, detail, replay}
//   detect {detector, step, layer, cause}   (local, before consensus)
//   decision {step, detector, ranks, layer, cause, action, flagged}
//   coll_enter {seq, name, count, dtype}  coll_leave {seq, name, status}
//   p2p_enter {seq, op (send|recv), peer, numel, dtype, step}  p2p_leave {seq, status}
//         (the Python agent's point-to-point calls, numbered apart from the collectives)
//   final {steps_completed, eval_loss, initial_eval_loss, params_hash, optim_hash, params_finite}
//         (params_hash/optim_hash: XXH3-64 digests, harness/common/digest.h)
//   abort {step, reason, cause}           exit {code, vm_hwm_kib (peak RSS, KiB)}
// Written by the Python agent when an external job saves or loads its own training state
// (inject/python/nanchaos/ckpt_io.py; [job] restarts):
//   ckpt_save {path, step, agent_step, tensors, format, digests}
//   ckpt_load {path, step, tensors, format, digests}
//   ckpt_rename {from, path}   (an atomic save's temporary file renamed into place)
//   (step: the object's own "step"/"global_step"/"iteration", or null; agent_step: steps;
//   format: "torch" (torch.save) or "dcp" (torch.distributed.checkpoint, dcp_io.py: path is the
//   folder, plus rank, shard [file names], shard_bytes); digests: {NAME: CRC-32 hex})
//   ckpt_reject {path, step: null, why, format: "dcp", rank}   (a DCP load that raised)
// Written by a built-in rank's checkpoints ([checkpoint], harness/job/checkpoint_rank.cpp):
//   ckpt_save {path, step, agent_step, tensors}   ckpt_load {path, step, validated}
//   ckpt_reject {path, step, layer, why, shard_rank}   (a checkpoint its validation refused)
// The typed structs of start, launch, p2p_*, ckpt_* and the rest: event_types.h.
// Beside the log, by the rank's own process watch when its process ended (proc_watch.h):
//   RUN/events/rank-R.gone.json  {"ev":"gone", rank, pid, t_us}
// Written by EventLog itself when its file cannot grow (disk full, quota, RLIMIT_FSIZE), into
// space reserved for them (see EventLog):
//   log_error {path, errno, error, op}    log_dropped {count}  (events lost after log_error)
// Thread-safety: one writer per file (the rank's thread).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace nanchaos::harness {

/// CLOCK_MONOTONIC in microseconds.
int64_t now_us();
/// CPU time of this whole process (all threads, CLOCK_PROCESS_CPUTIME_ID) in microseconds. The
/// step events carry it so that a step's cost can be told from time spent descheduled on a
/// shared host (bench/step_bench.cpp).
int64_t process_cpu_us();

/// One rank's event log. Lines go into a shared memory mapping of the file (MAP_SHARED): a copy
/// into the page cache, with no system call per event, that outlives the process however it
/// ends (SIGKILL, MPI_Abort) and that other processes read at once, as a flushed write() would
/// be. The file is grown in 256 KiB blocks allocated up front (posix_fallocate, so a full disk
/// fails here and never as SIGBUS later) and cut to its written length by the destructor. A
/// process that dies without it leaves NUL bytes after its last line: read_events() skips
/// them and trim_event_log() (the controller, after each job) removes them. Where the file
/// cannot be mapped (a filesystem without shared mappings or fallocate), the log falls back to
/// one write(2) per event.
///
/// Evidence that cannot be written is never lost silently: the last kReserveBytes of the
/// mapping are kept for the log's own records. When a block cannot be allocated because the
/// filesystem is full (ENOSPC, EDQUOT, EFBIG from posix_fallocate), `log_error` goes into that
/// reserve, every later event is counted as dropped, and the destructor adds
/// `log_dropped {count}`; a failed write(2) in the fallback mode is counted the same way. The
/// judge makes such a scenario an `error` naming the path and errno
/// (harness/controller/rank_evidence.cpp, evidence_lost).
class EventLog {
 public:
  EventLog() = default;
  /// Opens `path`, truncated, or with `append` after the lines already there (an external
  /// job's agent continues the log exec-rank began with `launch` and `clock`); throws
  /// std::runtime_error naming the path on failure.
  explicit EventLog(const std::string& path, bool append = false);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  /// Adds "ev" and "t_us" (unless present) and writes one line, visible to readers and kept
  /// if the process dies right after (see above).
  void write(const std::string& ev, nlohmann::json fields = nlohmann::json::object());
  /// Hot-path variant for fixed-schema events (the collectives' enter/leave, written twice per
  /// collective): `line` is one complete JSON object, already formatted, carrying "ev" and
  /// "t_us"; a newline is added. Building an nlohmann::json object costs ~10x the formatting
  /// (bench/README.md).
  void write_line(std::string_view line);
  bool is_open() const { return fd_ >= 0; }
  /// Exchanges the two logs' files: every holder of a reference to this log writes to `other`'s
  /// file from now on (an in-launch campaign's fault window, harness/job/rank_runner.h).
  void swap(EventLog& other) noexcept;
  /// The lines written so far (what a reader of the file sees).
  std::string text() const;
  /// Events that could not be written (0 while the file could grow).
  int64_t dropped() const { return dropped_; }
  /// errno of the first failed allocation or write (0: none).
  int error() const { return errno_; }

  /// Bytes at the end of the mapping kept for `log_error` and `log_dropped` (2 x 2 KiB).
  static constexpr size_t kReserveBytes = 4096;

 private:
  void append(std::string_view line);        // line + '\n'
  bool grow(size_t need);                    // false: no room for `need` bytes (full or write mode)
  void put_reserved(std::string_view line);  // into the reserve; never fails silently
  void lose(int err, const char* op);        // first loss: log_error into the reserve
  std::string path_;
  int fd_ = -1;
  char* map_ = nullptr;  // nullptr: write(2) mode
  size_t cap_ = 0, len_ = 0;
  bool full_ = false;  // the filesystem refused a block: events are counted, not written
  int64_t dropped_ = 0;
  int errno_ = 0;
};

/// Cuts the NUL bytes a killed writer left after the last complete line of an event log (see
/// EventLog): NULs up to the end of the file, with the torn line before them. NULs with lines
/// after them are no such tail and stay (the judge names them). No-op for a clean or missing
/// file, or one that is no regular file. Never throws.
void trim_event_log(const std::string& path);

/// Reads a JSON-lines file; a truncated or garbled last line (a rank killed mid-write) is skipped.
/// A missing file, or one that is no regular file (a directory, a link to /dev/zero), gives an
/// empty vector.
std::vector<nlohmann::json> read_events(const std::string& path);

/// The events of a log's text, as read_events() reads them from a file: one JSON object per
/// line, lines that are not JSON objects (a garbled last line, NUL bytes) skipped. Pure.
std::vector<nlohmann::json> parse_events(const std::string& text);

/// A line of an event log that is no event: not JSON, not an object, or an object without a
/// string "ev". what(): "a line of a rank's event log is no event: PATH:LINE: " and which of
/// these, with the line's first 80 bytes; or "a rank's event log is no regular file ...: PATH".
struct BadEventLine : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// read_events() for the judge: a line that is no event throws BadEventLine, unless it is the
/// file's last line and torn (no newline ends it, or it holds NUL bytes: a rank killed
/// mid-write), which is skipped. Blank lines and lines of NUL bytes alone (a gap a writer left)
/// are skipped. A path that is no regular file (a directory, a link to /dev/zero) throws
/// BadEventLine too. Writers write whole lines (EventLog, the Python
/// agent), so a bad line with lines after it is a corrupted log or a job writing something else
/// into it, whose events (a detection among them) cannot be vouched for. A missing file gives an
/// empty vector.
std::vector<nlohmann::json> read_events_strict(const std::string& path);

}  // namespace nanchaos::harness
