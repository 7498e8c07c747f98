// ChildProcess: posix_spawn, or fork with only async-signal-safe calls when a death signal is
// asked for. See child_process.h for the contract and why there are two paths.
#include "harness/common/child_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

extern char** environ;  // NOLINT: POSIX

namespace nanchaos::harness {
namespace {

// Signals a child gets back at their default action: the controller catches SIGINT/SIGTERM, and a
// parent that ignores SIGINT or SIGPIPE must not hand that to a launcher.
constexpr int kResetSignals[] = {SIGINT, SIGTERM, SIGPIPE, SIGCHLD, SIGHUP, SIGQUIT};

// The program execve would run: `name` itself when it has a '/', else the first executable
// regular file of that name in PATH. "" when there is none.
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string full = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st {};
    if (::stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(full.c_str(), X_OK) == 0) {
      return full;
    }
  }
  return "";
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);  // glibc 2.32+
  return abbrev ? std::string("SIG") + abbrev : fmt::format("signal {}", sig);
}

ExitStatus from_wait_status(int st) {
  ExitStatus s;
  if (WIFEXITED(st)) {
    s.exited = true;
    s.exit_code = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    s.signal = WTERMSIG(st);
  }
  return s;
}

// What the fork path's child writes to the error pipe when a step fails before exec succeeds.
struct ChildFailure {
  int step;  // 0 exec, 1 stdin, 2 stdout, 3 stderr, 4 parent already gone
  int err;
};

}  // namespace

std::string ExitStatus::describe() const {
  if (exited) return fmt::format("exit {}", exit_code);
  return "killed by " + signal_name(signal);
}

std::vector<std::string> env_with(const std::map<std::string, std::string>& set) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    if (!set.count(entry.substr(0, entry.find('=')))) out.push_back(entry);
  }
  for (const auto& [k, v] : set) out.push_back(k + "=" + v);
  return out;
}

ChildProcess ChildProcess::spawn(const SpawnOptions& o) {
  if (o.argv.empty()) throw SpawnError("cannot execute: empty command", EINVAL);
  const std::string& name = o.argv[0];
  const std::string path = resolve_program(name);
  if (path.empty()) {
    throw SpawnError(fmt::format("cannot execute {}: not found in PATH", name), ENOENT);
  }
  // Everything the child touches is built here, before any process exists.
  std::vector<char*> cargv;
  for (const auto& a : o.argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<char*> cenv;
  if (o.env) {
    for (const auto& e : *o.env) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
  }
  char* const* envp = o.env ? cenv.data() : environ;
  int pipe_fds[2] = {-1, -1};
  if (o.capture_output && pipe2(pipe_fds, O_CLOEXEC) != 0) {
    const int err = errno;
    throw SpawnError(fmt::format("cannot execute {}: pipe: {}", name, std::strerror(err)), err);
  }
  const char* stdout_path =
      o.capture_output || o.stdout_path.empty() ? nullptr : o.stdout_path.c_str();
  const char* stderr_path = o.stderr_path.empty() ? nullptr : o.stderr_path.c_str();
  const char* stdin_path = o.stdin_path.empty() ? nullptr : o.stdin_path.c_str();
  constexpr int kWriteFlags = O_WRONLY | O_CREAT | O_TRUNC;
  sigset_t empty_mask, reset;
  sigemptyset(&empty_mask);
  sigemptyset(&reset);
  for (int sig : kResetSignals) sigaddset(&reset, sig);

  ChildProcess child;
  if (o.death_signal == 0) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    if (stdin_path) posix_spawn_file_actions_addopen(&fa, 0, stdin_path, O_RDONLY, 0);
    if (o.capture_output) {
      posix_spawn_file_actions_adddup2(&fa, pipe_fds[1], 1);
      posix_spawn_file_actions_adddup2(&fa, pipe_fds[1], 2);
    } else {
      if (stdout_path) posix_spawn_file_actions_addopen(&fa, 1, stdout_path, kWriteFlags, 0644);
      if (stderr_path) {
        posix_spawn_file_actions_addopen(&fa, 2, stderr_path, kWriteFlags, 0644);
      } else if (stdout_path) {
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
      }
    }
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    if (o.new_session) flags |= POSIX_SPAWN_SETSID;  // glibc 2.26+
    posix_spawnattr_setflags(&attr, flags);
    posix_spawnattr_setsigmask(&attr, &empty_mask);
    posix_spawnattr_setsigdefault(&attr, &reset);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, path.c_str(), &fa, &attr, cargv.data(), envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (o.capture_output) close(pipe_fds[1]);
    if (rc != 0) {
      if (o.capture_output) close(pipe_fds[0]);
      throw SpawnError(fmt::format("cannot execute {}: {}", name, std::strerror(rc)), rc);
    }
    child.pid_ = pid;
  } else {
    // The fork path (child_process.h): prepared data only; async-signal-safe calls only.
    int err_pipe[2];
    if (pipe2(err_pipe, O_CLOEXEC) != 0) {
      const int err = errno;
      if (o.capture_output) {
        close(pipe_fds[0]);
        close(pipe_fds[1]);
      }
      throw SpawnError(fmt::format("cannot execute {}: pipe: {}", name, std::strerror(err)), err);
    }
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      auto fail = [&](int step) {
        const ChildFailure f{step, errno};
        (void)!write(err_pipe[1], &f, sizeof(f));
        _exit(127);
      };
      if (o.new_session) setsid();
      prctl(PR_SET_PDEATHSIG, o.death_signal);
      if (getppid() != parent) {  // the parent died before prctl: the signal will never come
        errno = ESRCH;
        fail(4);
      }
      auto redirect = [&](const char* p, int target, int flags, int step) {
        const int fd = open(p, flags, 0644);
        if (fd < 0) fail(step);
        if (fd != target) {
          dup2(fd, target);
          close(fd);
        }
      };
      if (stdin_path) redirect(stdin_path, 0, O_RDONLY, 1);
      if (o.capture_output) {
        dup2(pipe_fds[1], 1);
        dup2(pipe_fds[1], 2);
      } else {
        if (stdout_path) redirect(stdout_path, 1, kWriteFlags, 2);
        if (stderr_path) {
          redirect(stderr_path, 2, kWriteFlags, 3);
        } else if (stdout_path) {
          dup2(1, 2);
        }
      }
      for (int sig : kResetSignals) sigaction(sig, &dfl, nullptr);
      sigprocmask(SIG_SETMASK, &empty_mask, nullptr);
      execve(path.c_str(), cargv.data(), envp);
      fail(0);
    }
    const int fork_err = errno;
    close(err_pipe[1]);
    if (o.capture_output) close(pipe_fds[1]);
    if (pid < 0) {
      close(err_pipe[0]);
      if (o.capture_output) close(pipe_fds[0]);
      throw SpawnError(fmt::format("cannot execute {}: fork: {}", name, std::strerror(fork_err)),
                       fork_err);
    }
    ChildFailure f{};
    ssize_t n;
    do {
      n = read(err_pipe[0], &f, sizeof(f));
    } while (n < 0 && errno == EINTR);
    close(err_pipe[0]);
    if (n == ssize_t(sizeof(f))) {  // exec never happened: reap the child and say why
      int st = 0;
      while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      if (o.capture_output) close(pipe_fds[0]);
      static const char* const kStep[] = {"", ": stdin ", ": stdout ", ": stderr ", ""};
      const char* file = f.step == 1 ? stdin_path : f.step == 2 ? stdout_path : stderr_path;
      throw SpawnError(fmt::format("cannot execute {}{}{}: {}", name, kStep[f.step],
                                   f.step >= 1 && f.step <= 3 ? file : "",
                                   f.step == 4 ? "the parent ended first" : std::strerror(f.err)),
                       f.err);
    }
    child.pid_ = pid;
  }
  child.pgid_ = o.new_session ? child.pid_ : -1;
  child.out_fd_ = o.capture_output ? pipe_fds[0] : -1;
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& o) noexcept
    : pid_(o.pid_), pgid_(o.pgid_), out_fd_(o.out_fd_), status_(o.status_) {
  o.pid_ = o.pgid_ = o.out_fd_ = -1;
  o.status_.reset();
}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    release();
    pid_ = o.pid_;
    pgid_ = o.pgid_;
    out_fd_ = o.out_fd_;
    status_ = o.status_;
    o.pid_ = o.pgid_ = o.out_fd_ = -1;
    o.status_.reset();
  }
  return *this;
}

ChildProcess::~ChildProcess() { release(); }

void ChildProcess::release() noexcept {
  if (pid_ > 0) {
    // The whole group goes, reaped leader or not: a descendant left in it is an orphan otherwise.
    if (pgid_ > 0) ::kill(-pgid_, SIGKILL);
    if (!status_) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
    }
  }
  if (out_fd_ >= 0) close(out_fd_);
  pid_ = pgid_ = out_fd_ = -1;
  status_.reset();
}

std::optional<ExitStatus> ChildProcess::poll() {
  if (status_ || pid_ <= 0) return status_;
  int st = 0;
  pid_t w;
  do {
    w = waitpid(pid_, &st, WNOHANG);
  } while (w < 0 && errno == EINTR);
  if (w == pid_) {
    status_ = from_wait_status(st);
  } else if (w < 0) {
    status_ = ExitStatus{};  // ECHILD: reaped elsewhere (SIGCHLD ignored); the status is lost
    status_->signal = 0;
  }
  return status_;
}

ExitStatus ChildProcess::wait() {
  if (status_ || pid_ <= 0) return status_.value_or(ExitStatus{});
  int st = 0;
  pid_t w;
  do {
    w = waitpid(pid_, &st, 0);
  } while (w < 0 && errno == EINTR);
  status_ = w == pid_ ? from_wait_status(st) : ExitStatus{};
  return *status_;
}

std::optional<ExitStatus> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto st = poll()) return st;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void ChildProcess::signal_group(int sig) {
  if (pid_ <= 0) return;
  if (pgid_ > 0) {
    ::kill(-pgid_, sig);  // the group outlives a reaped leader while members are left
  } else if (!status_) {
    ::kill(pid_, sig);
  }
}

ExitStatus ChildProcess::kill_group(std::chrono::milliseconds grace) {
  signal_group(SIGTERM);
  wait_for(grace);
  signal_group(SIGKILL);  // members that ignored SIGTERM, or the leader itself
  return wait();
}

std::string ChildProcess::read_output(std::chrono::milliseconds timeout) {
  std::string out;
  if (out_fd_ < 0) return out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill_group(std::chrono::milliseconds(0));
      break;
    }
    pollfd p{out_fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: every writer closed the pipe
    out.append(buf, size_t(n));
  }
  close(out_fd_);
  out_fd_ = -1;
  return out;
}

}  // namespace nanchaos::harness
