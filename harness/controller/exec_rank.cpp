// exec-rank: rank identity from the launcher, torchrun's environment, the launch event, exec.
// See exec_rank.h.
#include "harness/controller/exec_rank.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
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
#include "harness/evidence/event_types.h"
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
  bool from_slurm = false;
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
    // This node's count in the step's "2(x3),1" (SLURM_NODEID: the node's index in the step);
    // SLURM_NTASKS_PER_NODE is set only when --ntasks-per-node was given.
    id.local_world = 0;
    if (const char* t = env_or_null("SLURM_STEP_TASKS_PER_NODE")) {
      id.local_world = slurm_tasks_on_node(t, num(env_or_null("SLURM_NODEID"), 0));
    }
    if (id.local_world <= 0) id.local_world = num(env_or_null("SLURM_NTASKS_PER_NODE"), id.world);
    id.from_slurm = true;
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

bool resolves(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const bool ok = getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0;
  if (res) freeaddrinfo(res);
  return ok;
}

// MASTER_ADDR: $NANCHAOS_MASTER_ADDR; under srun on several nodes, the step's first node (rank 0
// is there: srun's block and cyclic distributions both start on it), as torchrun-on-Slurm
// recipes do; else (one node, mpirun) 127.0.0.1.
std::string master_addr(const Identity& id) {
  if (const char* a = env_or_null("NANCHAOS_MASTER_ADDR")) return a;
  const char* nodes = env_or_null("SLURM_STEP_NODELIST");
  const char* n_nodes = env_or_null("SLURM_STEP_NUM_NODES");
  if (!id.from_slurm || !nodes || !n_nodes || std::atoi(n_nodes) <= 1) return "127.0.0.1";
  const std::string first = first_slurm_host(nodes);
  if (!first.empty() && resolves(first)) return first;
  std::cerr << fmt::format(
      "nanchaos exec-rank: warning: rank 0's node {} (first of SLURM_STEP_NODELIST={}) does not "
      "resolve to an address; MASTER_ADDR=127.0.0.1, right only when every node of the step is "
      "this host: set NANCHAOS_MASTER_ADDR to rank 0's host\n",
      first, nodes);
  return "127.0.0.1";
}

}  // namespace

std::string substitute_launch_vars(const std::string& text, const std::string& run_dir,
                                   int64_t launch) {
  static const std::string kRunDir = "{run_dir}", kLaunch = "{launch}";
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, kRunDir.size(), kRunDir) == 0) {
      out += run_dir;
      i += kRunDir.size();
    } else if (text.compare(i, kLaunch.size(), kLaunch) == 0) {
      out += std::to_string(launch);
      i += kLaunch.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

std::string first_slurm_host(const std::string& hostlist) {
  std::string out;
  for (size_t i = 0; i < hostlist.size(); ++i) {
    const char c = hostlist[i];
    if (c == ',') break;
    if (c != '[') {
      out += c;
      continue;
    }
    // A range set: its first element ("01" of "[01-04,07]"), then past the ']'.
    size_t j = i + 1;
    while (j < hostlist.size() && hostlist[j] != '-' && hostlist[j] != ',' && hostlist[j] != ']') {
      out += hostlist[j++];
    }
    const size_t close = hostlist.find(']', j);
    if (close == std::string::npos) return "";
    i = close;
  }
  return out;
}

int slurm_tasks_on_node(const std::string& tasks_per_node, int node) {
  std::istringstream in(tasks_per_node);
  int index = 0;
  for (std::string group; std::getline(in, group, ',');) {
    char* end = nullptr;
    const long tasks = std::strtol(group.c_str(), &end, 10);
    if (end == group.c_str() || tasks <= 0) return 0;
    long repeat = 1;
    if (*end == '(') {  // "2(x3)"
      if (end[1] != 'x') return 0;
      repeat = std::strtol(end + 2, &end, 10);
      if (*end != ')' || repeat <= 0) return 0;
    } else if (*end != '\0') {
      return 0;
    }
    if (node < index + repeat) return node >= index ? int(tasks) : 0;
    index += int(repeat);
  }
  return 0;
}

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
  // Which launch of the job this is ([job] restarts): the controller wrote it into the plan.
  const auto plan_json = nlohmann::json::parse(plan_text, nullptr, /*allow_exceptions=*/false);
  const int64_t launch = plan_json.is_object() && plan_json.contains("launch") &&
                                 plan_json["launch"].is_number_integer()
                             ? plan_json["launch"].get<int64_t>()
                             : 0;
  auto vars = [&](const std::string& text) {
    return substitute_launch_vars(text, opts.run_dir, launch);
  };

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
    set("MASTER_ADDR", master_addr(id));
    set("MASTER_PORT", std::to_string(opts.master_port));
    // torchrun's default: with more than one rank on a host, OMP_NUM_THREADS=1 unless the
    // environment sets it (torch.distributed.run); [job] env, applied below, still overrides.
    // OpenBLAS's pthread pool reads it too, so ranks do not each start a thread per core.
    if (id.local_world > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) {
      set("OMP_NUM_THREADS", "1");
    }
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
    set(k.c_str(), k == "PYTHONPATH" ? agent + ":" + vars(v) : vars(v));
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
  for (auto& a : argv) a = vars(a);
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
  LaunchEvent launched;
  launched.rank = id.rank;
  launched.world = id.world;
  launched.pid = getpid();
  launched.host = this_host();
  launched.pidns = this_pid_namespace();
  launched.command = argv;
  launched.t_us = now_us();
  nlohmann::json line = to_json(launched);
  line["ev"] = LaunchEvent::kEv;
  write_line(fd, line);
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
