// nanchaos command line: run, campaign, validate, compare, targets, keys, rank (internal),
// --version.
#include <fmt/format.h>
#include <limits.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "harness/controller/campaign.h"
#include "harness/controller/campaign_draw.h"
#include "harness/controller/controller.h"
#include "harness/controller/exec_rank.h"
#include "harness/controller/external_targets.h"
#include "harness/controller/host_limits.h"
#include "harness/controller/judge.h"
#include "harness/evidence/events.h"
#include "harness/job/runner.h"
#include "harness/job/workload.h"
#include "harness/scenario/keys_doc.h"
#include "harness/scenario/registry_json.h"
#include "harness/scenario/scenario.h"
#include "nanchaos/config.h"
#include "results/campaign_compare.h"
#include "results/compare.h"

namespace {

std::string self_exe(const char* argv0) {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) return std::string(buf, size_t(n));
  return argv0;
}

int cmd_validate(const std::vector<std::string>& paths,
                 const nanchaos::harness::HostLimitOptions& limits) {
  using namespace nanchaos::harness;
  std::vector<std::string> files;
  try {
    files = expand_scenario_paths(paths);
  } catch (const ScenarioError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  int bad = 0;
  std::map<std::string, std::string> names;  // a suite's names must be unique (result folders)
  const HostResources host = probe_host();
  for (const auto& f : files) {
    try {
      Scenario s = load_scenario(f);
      check_host_limits(s, host, limits);
      if (auto [it, fresh] = names.emplace(s.name, f); !fresh) {
        std::cerr << fmt::format("{}: error: [scenario].name \"{}\" is also used by {}\n", f,
                                 s.name, it->second);
        ++bad;
        continue;
      }
      auto missing = unimplemented_features(s);
      if (missing.empty()) {
        std::cout << fmt::format("ok    {} ({})\n", f, s.name);
      } else {
        std::cout << fmt::format("ok    {} ({}); runs once built: {}\n", f, s.name,
                                 fmt::join(missing, "; "));
      }
    } catch (const ScenarioError& e) {
      std::cerr << e.what() << "\n";
      ++bad;
    }
  }
  std::cout << fmt::format("{} file(s), {} valid, {} invalid\n", files.size(),
                           files.size() - size_t(bad), bad);
  return bad ? 2 : 0;
}

/// `optimizer_state`: the job's optimizer keeps Adam's per-parameter state (built-in jobs with
/// adam/adamw; optimizer: targets of SCENARIO_FORMAT.md "More faults").
void print_targets(const std::vector<std::string>& modules,
                   const std::vector<std::string>& parameters, bool optimizer_state = false) {
  std::cout << "# activation targets (forward order)\n";
  for (const auto& m : modules) std::cout << "activation:" << m << "\n";
  std::cout << "# parameter / gradient targets\n";
  for (const auto& p : parameters) std::cout << "parameter:" << p << "  gradient:" << p << "\n";
  if (optimizer_state) {
    std::cout << "# optimizer state targets (after the optimizer step)\n";
    for (const auto& p : parameters) {
      std::cout << "optimizer:" << p << ".exp_avg  optimizer:" << p << ".exp_avg_sq\n";
    }
  }
  std::cout << "loss\n";
}

// `nanchaos targets SCENARIO.toml` for an external job: one dry run of the job
// (harness/controller/external_targets.h), then the names rank 0's agent logged.
int cmd_targets_external(const nanchaos::harness::Scenario& s, const std::string& self) {
  using namespace nanchaos::harness;
  LaunchContext ctx;
  ctx.launcher = default_launcher();
  ctx.self_exe = self;
  if (command_needs_python(s)) {
    auto interp = resolve_python(s.job.torch, s.job.python_packages);
    if (interp.path.empty()) {
      std::cerr << "nanchaos targets: error: " << interp.error << "\n";
      return 2;
    }
    ctx.python = interp.path;
  }
  const ExternalTargets t = external_targets(s, ctx);
  if (!t.modules.empty() || !t.parameters.empty()) print_targets(t.modules, t.parameters);
  if (!t.error.empty()) {
    std::cerr << "nanchaos targets: error: " << t.error << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace nanchaos::harness;
  CLI::App app{
      "nanchaos: fault injection and chaos testing for numerical faults in distributed "
      "training"};
  app.set_version_flag("--version", std::string("nanchaos ") + NANCHAOS_VERSION + " (LibTorch " +
                                        NANCHAOS_TORCH_VERSION + ")");
  app.require_subcommand(1);
  // The host checks (harness/controller/host_limits.h), the same for run and validate.
  auto add_host_limit_flags = [](CLI::App* cmd, HostLimitOptions& o) {
    cmd->add_flag_function(
        "--no-host-limits", [&o](int64_t) { o.enabled = false; },
        "the ranks do not all run on this host (a launcher with a real hostfile, Slurm): skip the "
        "rank limit and the memory checks");
    cmd->add_option_function<int64_t>(
           "--max-ranks", [&o](const int64_t& n) { o.max_ranks = n; },
           "this host can run N ranks (default max(64, 8 x cores); mpirun oversubscribes)")
        ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  };

  RunOptions run_opts;
  auto* run = app.add_subcommand("run", "run scenario files or folders and judge them");
  // Required unless --resume is given (checked below, so that `run --resume DIR` alone gets
  // --resume's own answer rather than "paths is required").
  run->add_option("paths", run_opts.paths, "scenario files or folders (*.toml, recursive)");
  run->add_option("--out", run_opts.out_dir, "run folder (default results/runs/<UTC>-<suite>)");
  run->add_option("--tag", run_opts.tags, "run only scenarios with this tag (repeatable)");
  run->add_option("--junit", run_opts.junit, "also write junit.xml here");
  run->add_option("--launcher", run_opts.launcher,
                  "launcher command (default $NANCHAOS_LAUNCHER or mpirun), e.g. "
                  "\"mpirun --hostfile hosts\" or \"srun --mpi=pmix\"");
  run->add_flag(
      "--quiet", run_opts.quiet,
      "no console table, no progress lines on stderr (a failed scenario is still named there)");
  run->add_flag("--fail-on-skip", run_opts.fail_on_skip,
                "exit 1 when a scenario is skipped (e.g. a GPU suite on a host without one)");
  run->add_option("--trials", run_opts.trials,
                  "run each scenario N times (trial i uses seed + i); report.json gets "
                  "p50/p95/max per scenario and detector")
      ->check(CLI::Range(1, 10000));
  add_host_limit_flags(run, run_opts.host_limits);
  std::string run_resume;
  run->add_option("--resume", run_resume,
                  "continue a suite whose controller died: not implemented yet (an error)");

  std::vector<std::string> validate_paths;
  HostLimitOptions validate_limits;
  auto* validate = app.add_subcommand("validate", "check scenario files without running them");
  validate->add_option("paths", validate_paths, "scenario files or folders")->required();
  add_host_limit_flags(validate, validate_limits);

  std::string workload_name;
  Scenario tscen;
  std::string norm = "none";
  auto* targets = app.add_subcommand(
      "targets", "list module and parameter names of a workload or of an external scenario's job");
  targets
      ->add_option("workload", workload_name,
                   "mlp, transformer, or a scenario file (*.toml; an external job is run once, "
                   "without faults, to its first iteration)")
      ->required()
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v == "mlp" || v == "transformer") return "";
            if (v.size() > 5 && v.compare(v.size() - 5, 5, ".toml") == 0) return "";
            return "expected mlp, transformer or a scenario file (*.toml), got '" + v + "'";
          },
          "WORKLOAD|SCENARIO.toml"));
  targets->add_option("--layers", tscen.workload.layers, "hidden layers / decoder blocks")
      ->check(CLI::Range(1, 1024));
  targets->add_option("--hidden", tscen.workload.hidden, "width")->check(CLI::Range(1, 1 << 16));
  targets->add_option("--heads", tscen.workload.heads, "heads")->check(CLI::Range(1, 1024));
  targets->add_option("--norm", norm, "mlp norm")
      ->check(CLI::IsMember({"none", "batchnorm", "layernorm"}));

  std::string cmp_base, cmp_new, cmp_format = "text";
  nanchaos::results::CompareOptions cmp_opts;
  auto* compare = app.add_subcommand(
      "compare",
      "compare two report.json files; exit 1 on a regression, 2 when they share no scenario "
      "(results/compare.h)");
  compare->add_option("base", cmp_base, "the reference report.json (or campaign.json)")->required();
  compare->add_option("new", cmp_new, "the report.json (or campaign.json) to check")->required();
  compare
      ->add_option("--max-slowdown", cmp_opts.max_slowdown,
                   "latency_ms p50 ratio new/base that counts as a regression")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end != '\0' || !std::isfinite(x) || x <= 0) {
              return "must be a finite number > 0 (a ratio, e.g. 1.5), got '" + v + "'";
            }
            return "";
          },
          "RATIO > 0"));
  compare
      ->add_option("--min-trials", cmp_opts.min_trials,
                   "both sides need this many trials before milliseconds are gated")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  compare
      ->add_option("--min-delta-ms", cmp_opts.min_delta_ms,
                   "and the p50 must have grown by more than this many ms")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  compare->add_flag("--common", cmp_opts.common_only,
                    "compare only the scenarios in both reports (e.g. a --tag subset against a "
                    "full baseline); none is then `missing`");
  compare->add_option("--format", cmp_format, "md (pull request), text or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"md", "text", "json"}));

  CampaignOptions camp;
  uint64_t camp_seed = 0;
  std::string camp_kinds;
  auto* campaign = app.add_subcommand(
      "campaign",
      "draw N faults, run each against the scenario's job and stack, score detection and "
      "attribution against ground truth (docs/scenario-format.md \"Campaigns\")");
  campaign->add_option("scenario", camp.scenario, "the job and stack under test (*.toml)")
      ->required();
  campaign->add_option("--faults", camp.faults, "how many faults to draw")
      ->required()
      ->check(CLI::Range(1, 1000000));
  auto* camp_seed_opt =
      campaign->add_option("--seed", camp_seed, "draw seed (default: [scenario].seed)");
  auto* camp_kinds_opt =
      campaign->add_option("--kinds", camp_kinds,
                           "comma-separated fault kinds to draw from (default: every kind valid "
                           "for the job)");
  campaign->add_option("--out", camp.out_dir,
                       "campaign folder (default results/campaigns/<UTC>-<name>)");
  campaign->add_option("--jobs", camp.jobs, "launches at a time")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  campaign->add_option("--launcher", camp.launcher,
                       "launcher command (default $NANCHAOS_LAUNCHER or mpirun)");
  campaign->add_flag("--quiet", camp.quiet, "no progress lines and no summary");
  campaign->add_flag("--one-launch-per-fault", camp.one_launch_per_fault,
                     "run every fault in its own launch (built-in jobs otherwise run many faults "
                     "per launch from in-memory checkpoints)");

  auto* keys = app.add_subcommand("keys", "print the Markdown reference of every scenario key");
  std::string keys_format = "md";
  keys->add_option("--format", keys_format,
                   "md (docs/keys.md) or json (the registry snapshot of torch-free builds, "
                   "tests/fuzz/registry.json)")
      ->capture_default_str()
      ->check(CLI::IsMember({"md", "json"}));

  std::string rank_scenario, rank_dir;
  uint64_t rank_seed = 0;
  auto* rank = app.add_subcommand("rank", "internal: one MPI rank of a job (launched by run)");
  rank->add_option("--scenario", rank_scenario)->required();
  rank->add_option("--run-dir", rank_dir)->required();
  auto* rank_seed_opt =
      rank->add_option("--seed", rank_seed, "replaces [scenario].seed (a repeated trial)");
  std::string rank_campaign;
  rank->add_option("--campaign", rank_campaign,
                   "an in-launch campaign: a file of fault scenario paths, one a line "
                   "(harness/job/runner.h run_campaign_on)");
  std::vector<int> rank_skip_faults;
  rank->add_option("--skip-faults", rank_skip_faults,
                   "[[fault]] indices (0-based) of one-shot faults that fired in an earlier launch "
                   "([job] restarts): they do not fire again")
      ->delimiter(',');
  rank->group("");  // hidden from --help

  ExecRankOptions exec_opts;
  uint64_t exec_seed = 0;
  auto* exec = app.add_subcommand(
      "exec-rank", "internal: one rank of an external job (launched by run; see exec_rank.h)");
  exec->add_option("--scenario", exec_opts.scenario)->required();
  exec->add_option("--run-dir", exec_opts.run_dir)->required();
  exec->add_option("--master-port", exec_opts.master_port)->required();
  exec->add_option("--python", exec_opts.python);
  auto* exec_seed_opt = exec->add_option("--seed", exec_seed);
  exec->group("");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  if (*run) {
    if (!run_resume.empty()) {
      std::cerr << "nanchaos run: error: --resume " << run_resume
                << ": not implemented yet (continuing a suite after the controller died); "
                   "rerun the suite\n";
      return 2;
    }
    if (run_opts.paths.empty()) {
      std::cerr << "nanchaos run: error: paths is required (scenario files or folders)\n"
                << "Run with --help for more information.\n";
      return 2;
    }
    run_opts.self_exe = self_exe(argv[0]);
    const int rc = run_suite(run_opts);
    if (const int sig = stop_signal()) {
      // Interrupted: die of the signal (the shell's and CI's convention), after the reports.
      std::cout.flush();
      std::signal(sig, SIG_DFL);
      std::raise(sig);
    }
    return rc;
  }
  if (*validate) return cmd_validate(validate_paths, validate_limits);
  if (*campaign) {
    camp.self_exe = self_exe(argv[0]);
    if (camp_seed_opt->count()) camp.seed = camp_seed;
    if (camp_kinds_opt->count()) {
      try {
        camp.kinds = split_kinds_option(camp_kinds);
      } catch (const CampaignError& e) {
        std::cerr << "nanchaos campaign: error: " << e.what() << "\n";
        return 2;
      }
    }
    const int rc = run_campaign(camp);
    if (const int sig = stop_signal()) {
      std::cout.flush();
      std::signal(sig, SIG_DFL);
      std::raise(sig);
    }
    return rc;
  }
  if (*compare) {
    // Campaign files are recognised by content (results/campaign_compare.h).
    auto is_campaign = [](const std::string& path) {
      std::ifstream in(path);
      const auto doc = nlohmann::json::parse(in, nullptr, false);
      return !doc.is_discarded() && nanchaos::results::is_campaign_json(doc);
    };
    if (is_campaign(cmp_base) || is_campaign(cmp_new)) {
      return nanchaos::results::run_campaign_compare(cmp_base, cmp_new, cmp_format, std::cout,
                                                     std::cerr);
    }
    return nanchaos::results::run_compare(cmp_base, cmp_new, cmp_opts, cmp_format, std::cout,
                                          std::cerr);
  }
  if (*keys) {
    if (keys_format == "json")
      std::cout << nanchaos::harness::registry_json().dump(2) << "\n";
    else
      std::cout << keys_markdown();
    return 0;
  }
  if (*rank) {
    return run_rank(rank_scenario, rank_dir,
                    rank_seed_opt->count() ? std::optional<uint64_t>(rank_seed) : std::nullopt,
                    rank_campaign, rank_skip_faults);
  }
  if (*exec) {
    if (exec_seed_opt->count()) exec_opts.seed = exec_seed;
    return exec_rank(exec_opts);
  }
  if (*targets && workload_name != "mlp" && workload_name != "transformer") {
    Scenario s;
    try {
      s = load_scenario(workload_name);
    } catch (const ScenarioError& e) {
      std::cerr << e.what() << "\n";
      return 2;
    }
    if (s.job.external()) return cmd_targets_external(s, self_exe(argv[0]));
    auto t = list_targets(s);
    print_targets(t.modules, t.parameters, s.workload.optimizer != Optimizer::kSgd);
    return 0;
  }
  if (*targets) {
    tscen.workload.norm = norm == "batchnorm"   ? Norm::kBatchNorm
                          : norm == "layernorm" ? Norm::kLayerNorm
                                                : Norm::kNone;
    tscen.job.workload = workload_name == "mlp" ? WorkloadKind::kMlp : WorkloadKind::kTransformer;
    if (tscen.workload.hidden % tscen.workload.heads != 0 &&
        tscen.job.workload == WorkloadKind::kTransformer) {
      std::cerr << "nanchaos targets: error: --hidden must be a multiple of --heads\n";
      return 2;
    }
    auto t = list_targets(tscen);
    print_targets(t.modules, t.parameters, tscen.workload.optimizer != Optimizer::kSgd);
    return 0;
  }
  return 2;
}
