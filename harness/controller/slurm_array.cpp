// `campaign --slurm-array K` (slurm_array.h): the sbatch script, its submission with --wait, and
// the merge of the tasks' folders.
#include "harness/controller/slurm_array.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string_view>

#include "harness/common/child_process.h"
#include "harness/common/exit_status.h"
#include "harness/controller/launch.h"
#include "harness/controller/merge.h"
#include "harness/controller/stop_signal.h"

namespace nanchaos::harness {
namespace fs = std::filesystem;
namespace {

// POSIX shell single quotes where a word needs them: 'it'\''s', 'a b'; plain words stay bare.
std::string sh_quote(const std::string& w) {
  const bool plain = !w.empty() && std::all_of(w.begin(), w.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("_./,:=+-@%").find(c) != std::string_view::npos;
  });
  if (plain) return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string shard_dir(const std::string& out, int task) {
  return fmt::format("{}/shard-{}", out, task);
}

// The sbatch command: $NANCHAOS_SBATCH's words (options included) or "sbatch".
std::vector<std::string> sbatch_words() {
  const char* env = std::getenv("NANCHAOS_SBATCH");
  std::vector<std::string> w = split_words(env && *env ? env : "sbatch");
  return w.empty() ? std::vector<std::string>{"sbatch"} : w;
}

}  // namespace

std::vector<std::string> slurm_array_task_argv(const CampaignOptions& o, int task, int tasks) {
  std::vector<std::string> a = {o.self_exe, "campaign", o.scenario, "--faults",
                                std::to_string(o.faults)};
  if (o.seed) a.insert(a.end(), {"--seed", std::to_string(*o.seed)});
  if (!o.kinds.empty()) a.insert(a.end(), {"--kinds", fmt::format("{}", fmt::join(o.kinds, ","))});
  if (o.values != DrawValues::kAny) a.insert(a.end(), {"--values", to_string(o.values)});
  a.insert(a.end(), {"--jobs", std::to_string(o.jobs)});
  if (!o.launcher.empty()) a.insert(a.end(), {"--launcher", o.launcher});
  if (o.quiet) a.push_back("--quiet");
  if (o.one_launch_per_fault) a.push_back("--one-launch-per-fault");
  if (!o.host_limits.enabled) a.push_back("--no-host-limits");
  if (o.host_limits.max_ranks) {
    a.insert(a.end(), {"--max-ranks", std::to_string(*o.host_limits.max_ranks)});
  }
  a.insert(a.end(),
           {"--shard", fmt::format("{}/{}", task, tasks), "--out", shard_dir(o.out_dir, task)});
  return a;
}

std::string slurm_array_script(const CampaignOptions& o, int tasks) {
  std::vector<std::string> argv = slurm_array_task_argv(o, 1, tasks);
  argv.resize(argv.size() - 4);  // --shard 1/K --out OUT/shard-1: from Slurm's task id instead
  std::string words;
  for (const auto& w : argv) words += (words.empty() ? "" : " ") + sh_quote(w);
  words += fmt::format(
      " \\\n  --shard \"$SLURM_ARRAY_TASK_ID\"/{} --out {}/shard-\"$SLURM_ARRAY_TASK_ID\"", tasks,
      sh_quote(o.out_dir));
  return fmt::format(
      "#!/bin/sh\n"
      "# A nanchaos campaign fanned out over a Slurm job array, written by `nanchaos campaign "
      "--slurm-array {0}`.\n"
      "# Again by hand: sbatch this file, then `nanchaos merge {1}/shard-* --out DIR`.\n"
      "#SBATCH --job-name=nanchaos-campaign\n"
      "#SBATCH --array=1-{0}\n"
      "#SBATCH --ntasks=1\n"
      "#SBATCH --output={1}/shard-%a.slurm-%A_%a.out\n"
      "exec {2}\n",
      tasks, o.out_dir, words);
}

int run_campaign_slurm_array(const CampaignOptions& given, int tasks) {
  const char* who = "nanchaos campaign";
  if (tasks < 1) {
    std::cerr << fmt::format("{}: error: --slurm-array {}: needs at least 1 task\n", who, tasks);
    return kExitNothingRan;
  }
  if (given.shard.on()) {
    std::cerr << fmt::format(
        "{}: error: --slurm-array and --shard: the array gives each task its shard\n", who);
    return kExitNothingRan;
  }
  if (given.out_dir.empty()) {
    std::cerr << fmt::format(
        "{}: error: --slurm-array needs --out DIR on a file system the array's tasks see\n", who);
    return kExitNothingRan;
  }
  CampaignOptions o = given;
  o.out_dir = fs::absolute(given.out_dir).lexically_normal().string();
  o.scenario = fs::absolute(given.scenario).lexically_normal().string();
  std::error_code ec;
  if (fs::exists(o.out_dir + "/campaign.json", ec) || fs::exists(o.out_dir + "/faults", ec) ||
      fs::exists(shard_dir(o.out_dir, 1), ec)) {
    std::cerr << fmt::format(
        "{}: error: --out {}: holds an earlier campaign (campaign.json, faults/ or shard-1/); give "
        "a new folder or remove it\n",
        who, o.out_dir);
    return kExitNothingRan;
  }
  fs::create_directories(o.out_dir, ec);
  const std::string script = o.out_dir + "/slurm-array.sh";
  {
    std::ofstream out(script);
    out << slurm_array_script(o, tasks);
    if (!out) {
      std::cerr << fmt::format("{}: error: cannot write {}\n", who, script);
      return kExitNothingRan;
    }
  }
  StopSignalHandlers stop_handlers;
  SpawnOptions spawn;
  spawn.argv = sbatch_words();
  spawn.argv.insert(spawn.argv.end(), {"--wait", "--parsable", script});
  spawn.stdout_path = o.out_dir + "/sbatch.out";
  const auto t0 = std::chrono::steady_clock::now();
  if (!o.quiet) {
    std::cerr << fmt::format("{}: submitting {} array task(s): {}\n", who, tasks,
                             fmt::join(spawn.argv, " "));
  }
  int sbatch_rc = 0;
  try {
    ChildProcess sbatch = ChildProcess::spawn(spawn);
    for (;;) {
      if (auto st = sbatch.wait_for(std::chrono::milliseconds(200))) {
        sbatch_rc = st->code();
        break;
      }
      if (stop_signal() != 0) {
        std::ifstream id_file(spawn.stdout_path);
        std::string job_id;
        std::getline(id_file, job_id);
        job_id = job_id.substr(0, job_id.find(';'));  // "123;cluster"
        if (!job_id.empty()) {
          SpawnOptions cancel;
          cancel.argv = {"scancel", job_id};
          try {
            ChildProcess::spawn(cancel).wait_for(std::chrono::seconds(30));
          } catch (const SpawnError&) {
          }
        }
        sbatch.kill_group(std::chrono::milliseconds(300));
        std::cerr << fmt::format("{}: interrupted: array job {} cancelled\n", who,
                                 job_id.empty() ? "(not submitted)" : job_id);
        return 128 + stop_signal();
      }
    }
  } catch (const SpawnError& e) {
    std::cerr << fmt::format(
        "{}: error: --slurm-array: {} (is Slurm installed? $NANCHAOS_SBATCH "
        "names another sbatch)\n",
        who, e.what());
    return kExitNothingRan;
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!o.quiet) {
    std::cerr << fmt::format("{}: the array ended after {:.1f} s (sbatch exit {}); merging\n", who,
                             wall_s, sbatch_rc);
  }
  MergeOptions m;
  for (int t = 1; t <= tasks; ++t) {
    const std::string dir = shard_dir(o.out_dir, t);
    if (fs::exists(dir + "/campaign.json", ec)) m.runs.push_back(dir);
  }
  if (m.runs.empty()) {
    std::cerr << fmt::format(
        "{}: error: no array task wrote its campaign.json (sbatch exit {}); their output: "
        "{}/shard-*.slurm-*.out\n",
        who, sbatch_rc, o.out_dir);
    return kExitErrored;
  }
  m.out_dir = o.out_dir;
  m.quiet = o.quiet;
  return merge_runs(m);
}

}  // namespace nanchaos::harness
