// nanchaos command line: run, campaign, validate, compare, targets, keys, rank (internal),
// --version.
#include <fmt/format.h>
#include <limits.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "harness/controller/campaign.h"
#include "harness/controller/campaign_draw.h"
#include "harness/controller/controller.h"
#include "harness/controller/exec_rank.h"
#include "harness/controller/external_targets.h"
#include "harness/controller/host_limits.h"
#include "harness/controller/host_probe.h"
#include "harness/controller/launch.h"
#include "harness/controller/merge.h"
#include "harness/controller/preflight.h"
#include "harness/controller/slurm_array.h"
#include "harness/controller/stop_signal.h"
#include "harness/job/runner.h"
#include "harness/job/workload.h"
#include "harness/scenario/keys_doc.h"
#include "harness/scenario/registry_json.h"
#include "harness/scenario/scenario.h"
#include "nanchaos/config.h"
#include "results/campaign_compare.h"
#include "results/compare.h"

namespace {

// A count option's text is a whole number before its range is checked: CLI11's Range alone says
// "Value abc not in range 1 to 256" of a word and of 1.5.
const CLI::Validator kWholeNumber(
    [](std::string& text) -> std::string {
      long long v = 0;
      const char* end = text.data() + text.size();
      const auto [p, ec] = std::from_chars(text.data(), end, v);
      if (ec == std::errc::result_out_of_range && p == end) return "out of range: " + text;
      return ec == std::errc() && p == end ? "" : "not a whole number: " + text;
    },
    "");

// A seed is what [scenario].seed accepts: a whole number >= 0 (CLI11 alone took "-1" for a
// uint64_t as 18446744073709551615, a seed nobody asked for).
const CLI::Validator kSeed(
    [](std::string& text) -> std::string {
      uint64_t v = 0;
      const char* end = text.data() + text.size();
      const auto [p, ec] = std::from_chars(text.data(), end, v);
      if (ec == std::errc() && p == end) return "";
      if (ec == std::errc::result_out_of_range) return "out of range (at most 2^64-1): " + text;
      return "expected a whole number >= 0 (as [scenario].seed), got " + text;
    },
    "");

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
  Preflight preflight(limits);  // a suite's names must be unique (result folders)
  for (const auto& f : files) {
    try {
      const Scenario s = preflight.load(f);
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

// The host checks (harness/controller/host_limits.h), the same for run, validate and campaign.
void add_host_limit_flags(CLI::App* cmd, nanchaos::harness::HostLimitOptions& o) {
  cmd->add_flag_function(
      "--no-host-limits", [&o](int64_t) { o.enabled = false; },
      "the ranks do not all run on this host (a launcher with a real hostfile, Slurm): skip the "
      "rank limit and the memory checks");
  cmd->add_option_function<int64_t>(
         "--max-ranks", [&o](const int64_t& n) { o.max_ranks = n; },
         "this host can run N ranks (default max(64, 8 x cores); mpirun oversubscribes)")
      ->check(kWholeNumber)
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
}

// After run or campaign was interrupted: die of the signal (the shell's and CI's convention),
// after the reports. Returns `rc` when there was none.
int reraise_stop_signal(int rc) {
  if (const int sig = nanchaos::harness::stop_signal()) {
    std::cout.flush();
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  return rc;
}

// --shard I/N of `run` and `campaign` ("" = not sharded); false after saying what is wrong.
bool shard_option(const char* command, const std::string& text, nanchaos::harness::ShardSpec& out) {
  if (text.empty()) return true;
  try {
    out = nanchaos::harness::parse_shard(text);
    return true;
  } catch (const std::invalid_argument& e) {
    std::cerr << "nanchaos " << command << ": error: " << e.what() << "\n";
    return false;
  }
}

// Each subcommand: its options (add) and what it does once parsed (exec).
struct RunCommand {
  nanchaos::harness::RunOptions opts;
  std::string resume;
  std::string shard;
  CLI::App* cmd = nullptr;

  void add(CLI::App& app) {
    cmd = app.add_subcommand("run", "run scenario files or folders and judge them");
    // Required unless --resume is given (checked below, so that `run --resume DIR` alone gets
    // --resume's own answer rather than "paths is required").
    cmd->add_option("paths", opts.paths, "scenario files or folders (*.toml, recursive)");
    cmd->add_option("--out", opts.out_dir,
                    "run folder (default results/runs/<UTC>-<suite>); an earlier run there is "
                    "cleared (its reports and scenario folders)");
    cmd->add_option("--tag", opts.tags,
                    "run only scenarios with this tag (repeatable: any of the tags)");
    cmd->add_option("--exclude-tag", opts.exclude_tags,
                    "then drop scenarios with this tag (repeatable), e.g. --exclude-tag slow");
    cmd->add_option("--junit", opts.junit, "also write junit.xml here");
    cmd->add_option("--launcher", opts.launcher,
                    "launcher command (default $NANCHAOS_LAUNCHER or mpirun), e.g. "
                    "\"mpirun --hostfile hosts\" or \"srun --mpi=pmix\"");
    cmd->add_flag(
        "--quiet", opts.quiet,
        "no console table, no progress lines on stderr (a failed scenario is still named there); "
        "one summary line at the end");
    cmd->add_flag("--fail-on-skip", opts.fail_on_skip,
                  "exit 1 when a scenario is skipped (e.g. a GPU suite on a host without one)");
    cmd->add_option("--trials", opts.trials,
                    "run each scenario N times (trial i uses seed + i); report.json gets "
                    "p50/p95/max per scenario and detector")
        ->check(kWholeNumber)
        ->check(CLI::Range(1, 10000));
    cmd->add_option("--jobs,-j", opts.jobs,
                    "run N scenarios at a time, in suite order (one with more ranks than twice "
                    "this host's cores runs alone); the reports stay in suite order")
        ->capture_default_str()
        ->check(kWholeNumber)
        ->check(CLI::Range(1, 256));
    add_host_limit_flags(cmd, opts.host_limits);
    cmd->add_option("--shard", shard,
                    "run only part I of N of the suite (e.g. 2/4; after --tag); "
                    "`nanchaos merge` joins the parts' run folders");
    cmd->add_option("--shard-balance", opts.shard_balance,
                    "an earlier run's report.json: split by its wall times (else round robin)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--resume", resume,
                    "go on with the run in DIR whose controller died or was stopped (its "
                    "run-state.json has the options; judged scenarios are kept)");
  }

  int exec(const char* argv0) {
    if (!resume.empty()) {
      if (!opts.paths.empty()) {
        std::cerr << "nanchaos run: error: --resume DIR takes no paths (the run folder's "
                     "run-state.json has them)\n";
        return 2;
      }
      // Nor other options: the resumed run keeps the options it was started with.
      for (const CLI::Option* o : cmd->get_options()) {
        const std::string name = o->get_name();
        if (o->count() == 0 || name == "--resume" || name == "paths") continue;
        std::cerr << "nanchaos run: error: --resume DIR takes no other option (" << name
                  << "): it goes on with the options the run was started with (run-state.json)\n";
        return 2;
      }
      return reraise_stop_signal(nanchaos::harness::resume_suite(resume, self_exe(argv0)));
    }
    if (opts.paths.empty()) {
      std::cerr << "nanchaos run: error: paths is required (scenario files or folders)\n"
                << "Run with --help for more information.\n";
      return 2;
    }
    if (!shard_option("run", shard, opts.shard)) return 2;
    if (shard.empty() && !opts.shard_balance.empty()) {
      std::cerr << "nanchaos run: error: --shard-balance needs --shard I/N\n";
      return 2;
    }
    opts.self_exe = self_exe(argv0);
    return reraise_stop_signal(nanchaos::harness::run_suite(opts));
  }
};

struct MergeCommand {
  nanchaos::harness::MergeOptions opts;
  CLI::App* cmd = nullptr;

  void add(CLI::App& app) {
    cmd = app.add_subcommand(
        "merge",
        "join the run folders of a sharded suite (run --shard I/N) into one report: report.json, "
        "junit.xml, report.md, report.html in the suite's order");
    cmd->add_option("runs", opts.runs, "run folders, each with its report.json")
        ->required()
        ->check(CLI::ExistingDirectory);
    cmd->add_option("--out", opts.out_dir, "the merged run folder (must not hold a report)")
        ->required();
    cmd->add_option("--junit", opts.junit, "also write junit.xml here");
    cmd->add_flag("--quiet", opts.quiet, "no console table and no summary line");
  }
  int exec() const { return nanchaos::harness::merge_runs(opts); }
};

struct ValidateCommand {
  std::vector<std::string> paths;
  nanchaos::harness::HostLimitOptions limits;
  CLI::App* cmd = nullptr;

  void add(CLI::App& app) {
    cmd = app.add_subcommand("validate", "check scenario files without running them");
    cmd->add_option("paths", paths, "scenario files or folders")->required();
    add_host_limit_flags(cmd, limits);
  }
  int exec() const { return cmd_validate(paths, limits); }
};

struct TargetsCommand {
  std::string workload_name;
  nanchaos::harness::Scenario tscen;
  std::string norm = "none";
  CLI::App* cmd = nullptr;

  void add(CLI::App& app) {
    cmd = app.add_subcommand(
        "targets",
        "list module and parameter names of a workload or of an external scenario's job");
    cmd->add_option("workload", workload_name,
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
    cmd->add_option("--layers", tscen.workload.layers, "hidden layers / decoder blocks")
        ->check(CLI::Range(1, 1024));
    cmd->add_option("--hidden", tscen.workload.hidden, "width")->check(CLI::Range(1, 1 << 16));
    cmd->add_option("--heads", tscen.workload.heads, "heads")->check(CLI::Range(1, 1024));
    cmd->add_option("--norm", norm, "mlp norm")
        ->check(CLI::IsMember({"none", "batchnorm", "layernorm"}));
  }

  int exec(const char* argv0) {
    using namespace nanchaos::harness;
    if (workload_name != "mlp" && workload_name != "transformer") {
      Scenario s;
      try {
        s = load_scenario(workload_name);
      } catch (const ScenarioError& e) {
        std::cerr << e.what() << "\n";
        return 2;
      }
      if (s.job.external()) return cmd_targets_external(s, self_exe(argv0));
      auto t = list_targets(s);
      print_targets(t.modules, t.parameters, s.workload.optimizer != Optimizer::kSgd);
      return 0;
    }
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
};

struct CompareCommand {
  std::string base, fresh, format = "text";
  nanchaos::results::CompareOptions opts;
  CLI::App* cmd = nullptr;

  void add(CLI::App& app) {
    cmd = app.add_subcommand(
        "compare",
        "compare two report.json files; exit 1 on a regression, 2 when they share no scenario "
        "(results/compare.h)");
    cmd->add_option("base", base, "the reference report.json (or campaign.json)")->required();
    cmd->add_option("new", fresh, "the report.json (or campaign.json) to check")->required();
    cmd->add_option("--max-slowdown", opts.max_slowdown,
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
    cmd->add_option("--min-trials", opts.min_trials,
                    "both sides need this many trials before milliseconds are gated")
        ->capture_default_str()
        ->check(CLI::Range(1, 1000000));
    cmd->add_option("--min-delta-ms", opts.min_delta_ms,
                    "and the p50 must have grown by more than this many ms")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_flag("--common", opts.common_only,
                  "compare only the scenarios in both reports (e.g. a --tag subset against a "
                  "full baseline); none is then `missing`");
    cmd->add_option("--format", format, "md (pull request), text or json")
        ->capture_default_str()
        ->check(CLI::IsMember({"md", "text", "json"}));
  }

  int exec() const {
    // Campaign files are recognised by content (results/campaign_compare.h).
    auto is_campaign = [](const std::string& path) {
      std::ifstream in(path);
      const auto doc = nlohmann::json::parse(in, nullptr, false);
      return !doc.is_discarded() && nanchaos::results::is_campaign_json(doc);
    };
    if (is_campaign(base) || is_campaign(fresh)) {
      return nanchaos::results::run_campaign_compare(base, fresh, format, std::cout, std::cerr);
    }
    return nanchaos::results::run_compare(base, fresh, opts, format, std::cout, std::cerr);
  }
};

struct CampaignCommand {
  nanchaos::harness::CampaignOptions opts;
  uint64_t seed = 0;
  std::string kinds;
  std::string values;
  std::string shard;
  int slurm_array = 0;
  CLI::App* cmd = nullptr;
  CLI::Option* seed_opt = nullptr;
  CLI::Option* kinds_opt = nullptr;
  CLI::Option* values_opt = nullptr;

  void add(CLI::App& app) {
    cmd = app.add_subcommand(
        "campaign",
        "draw N faults, run each against the scenario's job and stack, score detection and "
        "attribution against ground truth (docs/scenario-format.md \"Campaigns\")");
    cmd->add_option("scenario", opts.scenario, "the job and stack under test (*.toml)")->required();
    cmd->add_option("--faults", opts.faults, "how many faults to draw")
        ->required()
        ->check(kWholeNumber)
        ->check(CLI::Range(1, 1000000));
    seed_opt =
        cmd->add_option("--seed", seed, "draw seed (default: [scenario].seed)")->check(kSeed);
    kinds_opt = cmd->add_option("--kinds", kinds,
                                "comma-separated fault kinds to draw from (default: every kind "
                                "valid for the job)");
    values_opt = cmd->add_option(
        "--values", values,
        "what numbers the faults write: any (default; NaN, Inf, 1e30, any bit), finite (tensor: a "
        "factor in [1.01, 100]; bitflip, comm: a mantissa or low exponent bit; kinds that cannot "
        "be finite are not drawn) or nonfinite (NaN and Inf only)");
    cmd->add_option("--out", opts.out_dir,
                    "campaign folder (default results/campaigns/<UTC>-<name>)");
    cmd->add_option("--jobs", opts.jobs, "launches at a time")
        ->capture_default_str()
        ->check(kWholeNumber)
        ->check(CLI::Range(1, 256));
    cmd->add_option("--launcher", opts.launcher,
                    "launcher command (default $NANCHAOS_LAUNCHER or mpirun)");
    cmd->add_flag("--quiet", opts.quiet, "no progress lines and no summary");
    cmd->add_flag("--one-launch-per-fault", opts.one_launch_per_fault,
                  "run every fault in its own launch (built-in jobs otherwise run many faults "
                  "per launch from in-memory checkpoints)");
    add_host_limit_flags(cmd, opts.host_limits);
    cmd->add_option("--shard", shard,
                    "measure only part I of N of the drawn faults (index mod N = I - 1; e.g. "
                    "${SLURM_ARRAY_TASK_ID}/4); `nanchaos merge` joins the parts' folders");
    cmd->add_option("--slurm-array", slurm_array,
                    "fan out over a Slurm job array of K tasks (sbatch --wait; $NANCHAOS_SBATCH "
                    "for sbatch options) and merge them into --out")
        ->check(CLI::Range(1, 100000));
  }

  int exec(const char* argv0) {
    using namespace nanchaos::harness;
    if (!shard_option("campaign", shard, opts.shard)) return 2;
    opts.self_exe = self_exe(argv0);
    if (seed_opt->count()) opts.seed = seed;
    if (kinds_opt->count()) {
      try {
        opts.kinds = split_kinds_option(kinds);
      } catch (const CampaignError& e) {
        std::cerr << "nanchaos campaign: error: " << e.what() << "\n";
        return 2;
      }
    }
    if (values_opt->count()) {
      try {
        opts.values = parse_values_option(values);
      } catch (const CampaignError& e) {
        std::cerr << "nanchaos campaign: error: " << e.what() << "\n";
        return 2;
      }
    }
    if (slurm_array > 0) return reraise_stop_signal(run_campaign_slurm_array(opts, slurm_array));
    return reraise_stop_signal(run_campaign(opts));
  }
};

struct KeysCommand {
  std::string format = "md";
  CLI::App* cmd = nullptr;

  void add(CLI::App& app) {
    cmd = app.add_subcommand("keys", "print the Markdown reference of every scenario key");
    cmd->add_option("--format", format,
                    "md (docs/keys.md) or json (the registry snapshot of torch-free builds, "
                    "tests/fuzz/registry.json)")
        ->capture_default_str()
        ->check(CLI::IsMember({"md", "json"}));
  }
  int exec() const {
    if (format == "json")
      std::cout << nanchaos::harness::registry_json().dump(2) << "\n";
    else
      std::cout << nanchaos::harness::keys_markdown();
    return 0;
  }
};

// The internal subcommands the launcher starts, hidden from --help.
struct RankCommand {
  std::string scenario, dir, campaign;
  uint64_t seed = 0;
  std::vector<int> skip_faults;
  CLI::App* cmd = nullptr;
  CLI::Option* seed_opt = nullptr;

  void add(CLI::App& app) {
    cmd = app.add_subcommand("rank", "internal: one MPI rank of a job (launched by run)");
    cmd->add_option("--scenario", scenario)->required();
    cmd->add_option("--run-dir", dir)->required();
    seed_opt = cmd->add_option("--seed", seed, "replaces [scenario].seed (a repeated trial)");
    cmd->add_option("--campaign", campaign,
                    "an in-launch campaign: a file of fault scenario paths, one a line "
                    "(harness/job/runner.h run_campaign_on)");
    cmd->add_option("--skip-faults", skip_faults,
                    "[[fault]] indices (0-based) of one-shot faults that fired in an earlier "
                    "launch ([job] restarts): they do not fire again")
        ->delimiter(',');
    cmd->group("");  // hidden from --help
  }
  int exec() const {
    return nanchaos::harness::run_rank(
        scenario, dir, seed_opt->count() ? std::optional<uint64_t>(seed) : std::nullopt, campaign,
        skip_faults);
  }
};

struct ExecRankCommand {
  nanchaos::harness::ExecRankOptions opts;
  uint64_t seed = 0;
  CLI::App* cmd = nullptr;
  CLI::Option* seed_opt = nullptr;

  void add(CLI::App& app) {
    cmd = app.add_subcommand(
        "exec-rank", "internal: one rank of an external job (launched by run; see exec_rank.h)");
    cmd->add_option("--scenario", opts.scenario)->required();
    cmd->add_option("--run-dir", opts.run_dir)->required();
    cmd->add_option("--master-port", opts.master_port)->required();
    cmd->add_option("--python", opts.python);
    seed_opt = cmd->add_option("--seed", seed);
    cmd->group("");
  }
  int exec() {
    if (seed_opt->count()) opts.seed = seed;
    return nanchaos::harness::exec_rank(opts);
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "nanchaos: fault injection and chaos testing for numerical faults in distributed "
      "training"};
  app.set_version_flag("--version", std::string("nanchaos ") + NANCHAOS_VERSION + " (LibTorch " +
                                        NANCHAOS_TORCH_VERSION + ")");
  app.require_subcommand(1);
  RunCommand run;
  ValidateCommand validate;
  TargetsCommand targets;
  CompareCommand compare;
  MergeCommand merge;
  CampaignCommand campaign;
  KeysCommand keys;
  RankCommand rank;
  ExecRankCommand exec;
  // The order of --help's list.
  run.add(app);
  validate.add(app);
  targets.add(app);
  compare.add(app);
  merge.add(app);
  campaign.add(app);
  keys.add(app);
  rank.add(app);
  exec.add(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (*run.cmd) return run.exec(argv[0]);
  if (*validate.cmd) return validate.exec();
  if (*campaign.cmd) return campaign.exec(argv[0]);
  if (*compare.cmd) return compare.exec();
  if (*merge.cmd) return merge.exec();
  if (*keys.cmd) return keys.exec();
  if (*rank.cmd) return rank.exec();
  if (*exec.cmd) return exec.exec();
  if (*targets.cmd) return targets.exec(argv[0]);
  return 2;
}
