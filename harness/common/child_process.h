// The one child-process type of nanchaos: every process the controller (or a report writer)
// starts goes through ChildProcess, so every child is owned, waited for with a deadline and, when
// its owner lets go of it, killed with its whole process group (no orphan, no zombie).
//
//   SpawnOptions o;
//   o.argv = {"mpirun", "-np", "2", "..."};
//   o.env = env_with({{"NANCHAOS_JOB_ID", id}});   // nullopt: this process's environment
//   o.stdout_path = run_dir + "/ranks/launcher.log"; // stderr follows stdout
//   o.new_session = true;                           // its own session and process group
//   ChildProcess job = ChildProcess::spawn(o);      // throws SpawnError ("cannot execute ...")
//   if (auto st = job.wait_for(std::chrono::seconds(30))) use(st->code());
//   else job.kill_group(std::chrono::milliseconds(300));  // SIGTERM, grace, SIGKILL, reaped
//
// How: posix_spawn(3) (glibc's clone(CLONE_VM|CLONE_VFORK) path: nothing runs between the clone
// and the exec but the file actions and attribute syscalls), with POSIX_SPAWN_SETSID for a new
// session, the signal mask emptied and SIGINT, SIGTERM, SIGPIPE, SIGCHLD, SIGHUP, SIGQUIT reset to
// their defaults (the controller catches SIGINT/SIGTERM; its children must not inherit that).
//
// The one exception, `death_signal`: Linux's PR_SET_PDEATHSIG, which posix_spawn cannot set. Then
// the child is made with fork(2) and, between fork and exec, calls only async-signal-safe system
// calls on data prepared before the fork (setsid, prctl, getppid, open, dup2, sigprocmask,
// sigaction, execve of a path resolved before the fork, _exit): no allocation, no lock, no
// setenv. A wrapper program that sets the signal after its own exec was the alternative; it
// would cost one more start of the LibTorch-linked binary per job and need its path everywhere a
// job is launched. Caveat (prctl(2)): the signal is sent when the *thread* that spawned the child
// ends, not the process; spawn with `death_signal` only from a thread that outlives the child
// (the controller launches jobs from its main thread).
//
// Thread-safety: one ChildProcess is used by one thread; spawning from several threads at once is
// safe (no shared state). Not copyable; movable. The destructor never throws.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace nanchaos::harness {

/// The process could not be started: "cannot execute mpirun: No such file or directory".
class SpawnError : public std::runtime_error {
 public:
  SpawnError(const std::string& what, int err) : std::runtime_error(what), errno_(err) {}
  int error_number() const { return errno_; }  ///< the errno of the failed step

 private:
  int errno_;
};

/// How a child ended (from waitpid's status).
struct ExitStatus {
  bool exited = false;  ///< it called exit/_exit (then `exit_code` is set)
  int exit_code = 0;    ///< 0..255 when `exited`
  int signal = 0;       ///< the signal that killed it when !exited
  /// The shell's number: exit_code, or 128 + signal.
  int code() const { return exited ? exit_code : 128 + signal; }
  /// "exit 3", "killed by SIGKILL".
  std::string describe() const;
};

struct SpawnOptions {
  std::vector<std::string> argv;  ///< argv[0] is looked up in PATH when it has no '/'
  /// The child's whole environment ("KEY=value"); nullopt: this process's environment.
  std::optional<std::vector<std::string>> env;
  std::string stdin_path = "/dev/null";  ///< "" inherits this process's stdin
  /// Where stdout goes (created/truncated, 0644); "" inherits. Ignored with capture_output.
  std::string stdout_path;
  /// Where stderr goes; "" follows stdout (the same file, or the pipe with capture_output).
  std::string stderr_path;
  /// stdout and stderr together into a pipe, read with ChildProcess::read_output().
  bool capture_output = false;
  /// setsid(): a new session whose process group id is the child's pid, so kill_group() reaches
  /// every descendant that did not leave the group itself.
  bool new_session = true;
  /// Linux PR_SET_PDEATHSIG: sent to the child when the spawning thread ends (0: none). Uses the
  /// fork path (header comment). The child exits 127 at once if this process was already gone.
  int death_signal = 0;
};

/// This process's environment with `set` replacing or adding entries (order: the inherited
/// entries, then `set` in key order).
std::vector<std::string> env_with(const std::map<std::string, std::string>& set);

class ChildProcess {
 public:
  /// Starts the program; throws SpawnError when it cannot (program not found or not executable,
  /// a redirection that cannot be opened, no processes left). Never returns a child that failed
  /// to exec (posix_spawn reports the exec's errno; the fork path reports it through a pipe).
  static ChildProcess spawn(const SpawnOptions& o);

  ChildProcess() = default;  ///< no process (valid() false)
  ChildProcess(ChildProcess&& o) noexcept;
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  /// An unreaped child is killed with its group (SIGKILL) and reaped; never throws.
  ~ChildProcess();

  bool valid() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  /// The child's process group (== pid with new_session; else this process's group, which
  /// kill_group() then never signals: only the child itself).
  pid_t pgid() const { return pgid_; }

  /// Non-blocking: the status once the child has ended (reaped; later calls return the same).
  std::optional<ExitStatus> poll();
  /// Blocks until the child ends (EINTR is retried).
  ExitStatus wait();
  /// Waits at most `timeout` (polling every 5 ms); nullopt when it is still running.
  std::optional<ExitStatus> wait_for(std::chrono::milliseconds timeout);

  /// Sends `sig` to the child's process group (new_session) or to the child alone. A reaped child
  /// is not signalled (its pid may be reused).
  void signal_group(int sig);
  /// Ends the child: SIGTERM to the group, up to `grace` for it to exit, then SIGKILL to the
  /// group; returns its status (reaped). The group's other members get the same signals.
  ExitStatus kill_group(std::chrono::milliseconds grace);

  /// capture_output: reads everything the child writes until it closes the pipe or `timeout`
  /// passes (then the child's group is killed and what was read is returned).
  std::string read_output(std::chrono::milliseconds timeout = std::chrono::seconds(60));

 private:
  void release() noexcept;
  pid_t pid_ = -1;
  pid_t pgid_ = -1;
  int out_fd_ = -1;  ///< read end of the capture pipe
  std::optional<ExitStatus> status_;
};

}  // namespace nanchaos::harness
