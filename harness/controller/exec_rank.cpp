// exec-rank: rank identity from the launcher, torchrun's environment, the launch event, exec.
// See exec_rank.h.
#include "harness/controller/exec_rank.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "harness/common/job_guard.h"
#include "harness/common/log.h"
#include "harness/common/rank_host.h"
#include "harness/common/rank_output.h"
#include "harness/evidence/clock_sync.h"
#include "harness/evidence/event_paths.h"
#include "harness/evidence/events.h"
#include "harness/evidence/proc_watch.h"
#include "harness/scenario/scenario.h"

#ifndef NANCHAOS_AGENT_DIR
#define NANCHAOS_AGENT_DIR ""
#endif

namespace fs = std::filesystem;

namespace nanchaos::harness {
namespace {

struct Identity {
  int rank = -1, world = 0, local_rank = 0, local_world = 1;
};

const char* env_or_null(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// Open MPI, then Slurm, then PMIx (rank only; world from the scenario).
bool identity_from_launcher(Identity& id, int scenario_world) {
  auto num = [](const char* v, int fallback) { return v ? std::atoi(v) : fallback; };
  if (const char* r = env_or_null("OMPI_COMM_WORLD_RANK")) {
    id.rank = std::atoi(r);
    id.world = num(env_or_null("OMPI_COMM_WORLD_SIZE"), scenario_world);
    id.local_rank = num(env_or_null("OMPI_COMM_WORLD_LOCAL_RANK"), id.rank);
    id.local_world = num(env_or_null("OMPI_COMM_WORLD_LOCAL_SIZE"), id.world);
    return true;
  }
  if (const char* r = env_or_null("SLURM_PROCID")) {
    id.rank = std::atoi(r);
    id.world = num(env_or_null("SLURM_NTASKS"), scenario_world);
    id.local_rank = num(env_or_null("SLURM_LOCALID"), id.rank);
    // SLURM_NTASKS_PER_NODE may read "2(x3)": atoi takes the leading count.
    id.local_world = num(env_or_null("SLURM_NTASKS_PER_NODE"), id.world);
    return true;
  }
  if (const char* r = env_or_null("PMIX_RANK")) {
    id.rank = std::atoi(r);
    id.world = scenario_world;
    id.local_rank = id.rank;
    id.local_world = id.world;
    return true;
  }
  return false;
}

// One line with one write(2): the agent appends after it, readers see whole lines.
void write_line(int fd, const nlohmann::json& e) {
  const std::string line = e.dump() + "\n";
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(fd, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += size_t(n);
  }
}

}  // namespace

std::string agent_path() {
  if (const char* p = env_or_null("NANCHAOS_AGENT_PATH")) return p;
  return NANCHAOS_AGENT_DIR;
}

int exec_rank(const ExecRankOptions& opts) {
  Scenario s;
  try {
    s = load_scenario(opts.scenario);
  } catch (const ScenarioError& e) {
    std::cerr << "nanchaos exec-rank: " << e.what() << "\n";
    return 2;
  }
  if (opts.seed) s.seed = *opts.seed;
  Identity id;
  if (!identity_from_launcher(id, int(s.job.ranks))) {
    std::cerr << "nanchaos exec-rank: error: no rank from the launcher: none of "
                 "OMPI_COMM_WORLD_RANK (Open MPI's mpirun), SLURM_PROCID (srun), PMIX_RANK is "
                 "set\n";
    return 2;
  }
  // From here on, this rank's stdout and stderr (and its command's, across the exec) are its own
  // files in RUN/ranks/ (rank_output.h), not the launcher's pipes.
  if (const std::string why = redirect_rank_output(id.rank); !why.empty()) {
    std::cerr << "nanchaos exec-rank: warning: " << why << "; output stays with the launcher\n";
  }
  const pid_t launcher = getppid();
  const std::string plan_file = opts.run_dir + "/plan.json";
  std::ifstream in(plan_file, std::ios::binary);
  std::ostringstream plan;
  plan << in.rdbuf();
  if (!in) {
    std::cerr << "nanchaos exec-rank: error: cannot read " << plan_file << "\n";
    return 2;
  }
  std::string plan_text = plan.str();
  while (!plan_text.empty() && (plan_text.back() == '\n' || plan_text.back() == '\r')) {
    plan_text.pop_back();
  }
  const std::string events = event_log_path(opts.run_dir, id.rank);

  auto set = [](const char* k, const std::string& v) { setenv(k, v.c_str(), 1); };
  if (s.job.launch == Launch::kPlain) {
    // [job] launch = "plain" (one rank): none of torchrun's variables, not even inherited ones,
    // so a script that turns distributed on when RANK is set stays single-process.
    for (const char* k :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
      unsetenv(k);
    }
  } else {
    set("RANK", std::to_string(id.rank));
    set("WORLD_SIZE", std::to_string(id.world));
    set("LOCAL_RANK", std::to_string(id.local_rank));
    set("LOCAL_WORLD_SIZE", std::to_string(id.local_world));
    const char* addr = env_or_null("NANCHAOS_MASTER_ADDR");
    set("MASTER_ADDR", addr ? addr : "127.0.0.1");
    set("MASTER_PORT", std::to_string(opts.master_port));
  }
  set("NANCHAOS_PLAN", plan_text);
  set("NANCHAOS_PLAN_FILE", plan_file);
  set("NANCHAOS_EVENTS", events);
  set("NANCHAOS_RUN_DIR", opts.run_dir);
  set("NANCHAOS_STEPS", std::to_string(s.job.steps));
  set("NANCHAOS_SEED", std::to_string(s.seed));
  const std::string agent = agent_path();
  const char* old_path = env_or_null("PYTHONPATH");
  set("PYTHONPATH", old_path ? agent + ":" + old_path : agent);
  for (const auto& [k, v] : s.job.env) {
    // The agent's folder stays first on a PYTHONPATH the scenario sets.
    set(k.c_str(), k == "PYTHONPATH" ? agent + ":" + v : v);
  }
  // A bare program name is searched in PATH, then in the folder of this nanchaos binary, where
  // the C++ example job (examples/libtorch, nanchaos-example-libtorch) is built.
  std::error_code self_ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", self_ec);
  if (!self_ec) {
    const char* path = env_or_null("PATH");
    set("PATH",
        (path && *path ? std::string(path) + ":" : std::string()) + self.parent_path().string());
  }

  // The scenario's folder is the working directory; a relative program with a '/' is taken
  // from there (execvp searches PATH only for a bare name).
  const fs::path folder = fs::absolute(opts.scenario).parent_path();
  std::vector<std::string> argv = s.job.command;
  if (chdir(folder.c_str()) != 0) {
    std::cerr << fmt::format("nanchaos exec-rank: error: cannot enter {}: {}\n", folder.string(),
                             std::strerror(errno));
    return 2;
  }
  if ((argv[0] == "python" || argv[0] == "python3") && !opts.python.empty()) {
    argv[0] = opts.python;
  } else if (argv[0].find('/') != std::string::npos && fs::path(argv[0]).is_relative()) {
    argv[0] = (folder / argv[0]).lexically_normal().string();
  }

  const int fd = open(events.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::cerr << fmt::format("nanchaos exec-rank: error: cannot open {}: {}\n", events,
                             std::strerror(errno));
    return 2;
  }
  write_line(fd, {{"ev", "launch"},
                  {"t_us", now_us()},
                  {"rank", id.rank},
                  {"world", id.world},
                  {"pid", getpid()},
                  {"host", this_host()},
                  {"pidns", this_pid_namespace()},
                  {"command", argv}});
  // Measured here, once, for any command (the Python agent need not): see clock_sync.h.
  log_clock_from_env([&](nlohmann::json fields) {
    fields["ev"] = "clock";
    fields["t_us"] = now_us();
    write_line(fd, fields);
  });
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  // The watch that records when the job's process ended (proc_watch.h): forked here, while this
  // process is one thread, it outlives the exec and watches the job's own process (same pid).
  start_exit_watch(gone_record_path(events_dir(opts.run_dir), id.rank), id.rank);
  // Kept across the exec: the job's process dies with its launcher (the thread of it that
  // started this process; Open MPI's launch thread lives as long as the job). Together with the
  // agent's guard (guard.py) and the launcher's own death signal (job_guard.h), no rank outlives
  // a dead controller, Python or not.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(kJobGuardExit);  // it died before prctl
  log::debug("exec-rank {}/{}: exec {}", id.rank, id.world, fmt::join(argv, " "));
  execvp(cargv[0], cargv.data());
  const int err = errno;
  const std::string reason = fmt::format("cannot execute {}: {}", argv[0], std::strerror(err));
  write_line(fd,
             {{"ev", "attach_error"}, {"t_us", now_us()}, {"rank", id.rank}, {"reason", reason}});
  std::cerr << "nanchaos exec-rank: error: " << reason << "\n";
  _exit(127);
}

}  // namespace nanchaos::harness
