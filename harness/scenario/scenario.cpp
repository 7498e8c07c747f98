// Scenario loader: toml++ parse, table-driven validation against the KeySpec tables, defaults,
// typed model (see scenario.h; docs/scenario-format.md is the contract).
//
// Validation walks each table's keys in file order (toml++ tables iterate alphabetically), so the
// first error reported is the first one in the file. Every message has the form
//   <file>:<line>:<col>: error: <key path>: <what>
// with the position of the offending value (or of the key, for an unknown key).
#include "harness/scenario/scenario.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "harness/common/version_req.h"
#include "harness/scenario/loader.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario_schema.h"

namespace nanchaos::harness {

StackConfig stack_config(const Scenario& s) {
  StackConfig c;
  c.file = s.file;
  c.seed = s.seed;
  c.job = s.job;
  c.workload = s.workload;
  c.detectors = s.detectors;
  c.recovery = s.recovery;
  return c;
}

bool RecoveryConfig::has(Policy p) const {
  return std::find(policy.begin(), policy.end(), p) != policy.end();
}

std::vector<std::string> preset_detectors(Preset p, DType precision) {
  // Membership is declared in each detector's registration (registry.h DetectorInfo::presets).
  std::vector<std::string> out;
  if (p == Preset::kNone) return out;
  const unsigned flag = p == Preset::kDefault ? kPresetDefault
                        : p == Preset::kNaive ? kPresetNaive
                                              : 0;
  for (const auto& name : detector_order()) {
    const DetectorInfo& info = detectors().at(name);
    if (info.preset_fp16_only && precision != DType::kFp16) continue;
    if (p == Preset::kFull || (info.presets & flag) != 0) out.push_back(name);
  }
  return out;
}

namespace loader {

void Loader::load_scenario_table(const toml::table& root, Scenario& s) const {
  const toml::table* t = table_of(root, "scenario", true);
  Params p = check_table(*t, scenario_keys(), "[scenario]", at(*t));
  s.name = p.get_string("name");
  s.description = p.get_string("description");
  s.tags = p.get_strings("tags");
  s.seed = static_cast<uint64_t>(p.get_int("seed"));
}

void Loader::load_job(const toml::table& root, Scenario& s) const {
  const toml::table* t = table_of(root, "job", true);
  Params p = check_table(*t, job_keys(), "[job]", at(*t));
  JobConfig& j = s.job;
  j.workload =
      pick<WorkloadKind>(p.get_string("workload"), {{"mlp", WorkloadKind::kMlp},
                                                    {"transformer", WorkloadKind::kTransformer},
                                                    {"external", WorkloadKind::kExternal}});
  j.steps = p.get_int("steps");
  j.ranks = p.get_int("ranks");
  j.device = pick<Device>(p.get_string("device"), {{"cpu", Device::kCpu}, {"cuda", Device::kCuda}});
  if (p.has("backend")) {
    j.backend =
        pick<Backend>(p.get_string("backend"), {{"mpi", Backend::kMpi}, {"nccl", Backend::kNccl}});
    if (j.backend == Backend::kNccl && j.device != Device::kCuda) {
      scenario_error(p.pos("backend"), "[job].backend: \"nccl\" needs device = \"cuda\"");
    }
    if (j.backend == Backend::kMpi && j.device == Device::kCuda) {
      scenario_error(p.pos("backend"),
                     "[job].backend: \"mpi\" with device = \"cuda\" is not implemented (it would "
                     "need a CUDA-aware MPI); use \"nccl\"");
    }
  } else {
    j.backend = j.device == Device::kCuda ? Backend::kNccl : Backend::kMpi;
  }
  j.precision = dtype_of(p.get_string("precision"));
  j.grad_allreduce_dtype = dtype_of(p.get_string("grad_allreduce_dtype"));
  j.grad_predivide = p.get_bool("grad_predivide");
  j.timeout_ms = p.get_int("timeout_ms");
  j.restarts = p.get_int("restarts");
  j.restart_delay_ms = p.get_int("restart_delay_ms");
  if (p.given("restart_delay_ms") && j.restarts == 0) {
    scenario_error(p.pos("restart_delay_ms"),
                   "[job].restart_delay_ms: the wait between launches, and [job].restarts = 0 "
                   "relaunches nothing (set restarts, or drop the key)");
  }

  // External jobs: the command and its environment; the built-in stack's keys are refused.
  static const std::set<std::string> external_only = {
      "command", "env", "micro_batches", "attach_timeout_ms", "torch", "python_packages", "launch"};
  static const std::set<std::string> builtin_only = {"backend", "precision", "grad_allreduce_dtype",
                                                     "grad_predivide"};
  for (const auto& [k, n] : in_file_order(*t)) {
    const std::string name(k->str());
    if (!j.external() && external_only.count(name)) {
      scenario_error(at(*n), "[job]." + name + ": only for workload = \"external\" (workload is " +
                                 quote(p.get_string("workload")) + ")");
    }
    if (j.external() && builtin_only.count(name)) {
      scenario_error(at(*n), "[job]." + name + ": " + external_refusal());
    }
  }
  if (!j.external()) {
    j.params = std::move(p);
    return;
  }
  if (!p.has("command")) {
    scenario_error(at(*t),
                   "[job]: missing required key \"command\" for workload = \"external\" "
                   "(array of strings: the program and its arguments, run once per rank)");
  }
  j.command = p.get_strings("command");
  if (j.command.empty()) {
    scenario_error(p.pos("command"),
                   "[job].command: expected a non-empty array of strings (the program and its "
                   "arguments), got an empty array");
  }
  if (j.command[0].empty()) {
    scenario_error(p.pos("command"), "[job].command[0]: the program name is empty");
  }
  // exec-rank sets these for every rank (controller/exec_rank.cpp): a scenario that overrides
  // one would cut the agent off its plan or give the ranks the wrong identity.
  static const std::set<std::string> owned = {"RANK",
                                              "WORLD_SIZE",
                                              "LOCAL_RANK",
                                              "LOCAL_WORLD_SIZE",
                                              "MASTER_ADDR",
                                              "MASTER_PORT",
                                              "NANCHAOS_PLAN",
                                              "NANCHAOS_PLAN_FILE",
                                              "NANCHAOS_EVENTS",
                                              "NANCHAOS_RUN_DIR",
                                              "NANCHAOS_STEPS",
                                              "NANCHAOS_SEED"};
  for (const auto& kv : p.get_strings("env")) {
    const auto eq = kv.find('=');
    const std::string name = kv.substr(0, eq);
    if (owned.count(name)) {
      scenario_error(p.pos("env"),
                     "[job].env." + name +
                         ": set by nanchaos for every rank (RANK, WORLD_SIZE, LOCAL_RANK, "
                         "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and the NANCHAOS_* plan, "
                         "events, run folder, steps and seed); remove it from the scenario");
    }
    j.env.emplace_back(name, kv.substr(eq + 1));
  }
  j.micro_batches = p.get_int("micro_batches");
  j.attach_timeout_ms = p.get_int("attach_timeout_ms");
  j.torch = p.get_string("torch");
  std::string why;
  if (!VersionRequirement::parse(j.torch, &why)) {
    scenario_error(p.pos("torch"),
                   "[job].torch: " + quote(j.torch) + " is not a version requirement: " + why);
  }
  j.python_packages = p.get_strings("python_packages");
  if (p.given("python_packages")) {
    const toml::array* entries = (*t)["python_packages"].as_array();
    std::map<std::string, size_t> seen;  // normalized name -> index
    for (size_t i = 0; i < j.python_packages.size(); ++i) {
      const SourcePos where =
          entries && i < entries->size() ? at((*entries)[i]) : p.pos("python_packages");
      const std::string label = "[job].python_packages[" + std::to_string(i) + "]: ";
      const auto req = PackageRequirement::parse(j.python_packages[i], &why);
      if (!req) {
        scenario_error(
            where, label + quote(j.python_packages[i]) + " is not a package requirement: " + why);
      }
      const auto [it, fresh] = seen.emplace(req->key, i);
      if (!fresh) {
        scenario_error(where, label + quote(req->name) + " is already listed at [" +
                                  std::to_string(it->second) + "]; give each package once");
      }
    }
  }
  j.launch = p.get_string("launch") == "plain" ? Launch::kPlain : Launch::kTorchrun;
  if (j.launch == Launch::kPlain && j.ranks != 1) {
    scenario_error(p.pos("launch"),
                   "[job].launch: \"plain\" starts one process with none of torchrun's variables, "
                   "so it needs ranks = 1 (ranks is " +
                       std::to_string(j.ranks) + ")");
  }
  j.params = std::move(p);
}

void Loader::load_checkpoint(const toml::table& root, Scenario& s) const {
  const toml::table* t = table_of(root, "checkpoint", false);
  if (t == nullptr) return;
  if (s.job.external()) {
    const auto first = in_file_order(*t);
    scenario_error(first.empty() ? at(*t) : at(*first.front().first),
                   "[checkpoint]: built-in jobs only; an external job checkpoints itself (the "
                   "agent observes its torch.save/torch.load and torch.distributed.checkpoint "
                   "calls) and uses {run_dir} in its command for the folder");
  }
  Params p = check_table(*t, checkpoint_keys(), "[checkpoint]", at(*t));
  CheckpointConfig& c = s.checkpoint;
  c.every = p.get_int("every");
  c.keep = p.get_int("keep");
  c.validate = p.get_bool("validate");
  c.format = p.get_string("format");
  if (c.every >= s.job.steps) {
    scenario_error(p.pos("every"),
                   fmt::format("[checkpoint].every: {} is not below [job].steps = {}: no "
                               "checkpoint would be written",
                               c.every, s.job.steps));
  }
}

void Loader::load_workload(const toml::table& root, Scenario& s) const {
  const toml::table* t = table_of(root, "workload", false);
  if (s.job.external()) {
    refuse_for_external(t, "[workload]", {});
    return;
  }
  const toml::table empty;
  Params p = check_table(t ? *t : empty, workload_keys(), "[workload]", t ? at(*t) : nowhere());
  WorkloadConfig& w = s.workload;
  w.batch_size = p.get_int("batch_size");
  w.hidden = p.get_int("hidden");
  w.layers = p.get_int("layers");
  w.heads = p.get_int("heads");
  w.seq_len = p.get_int("seq_len");
  w.vocab = p.get_int("vocab");
  w.features = p.get_int("features");
  w.classes = p.get_int("classes");
  w.optimizer = pick<Optimizer>(
      p.get_string("optimizer"),
      {{"sgd", Optimizer::kSgd}, {"adam", Optimizer::kAdam}, {"adamw", Optimizer::kAdamW}});
  w.lr = p.get_float("lr");
  w.warmup_steps = p.get_int("warmup_steps");
  w.schedule = pick<Schedule>(p.get_string("schedule"),
                              {{"constant", Schedule::kConstant}, {"cosine", Schedule::kCosine}});
  w.grad_clip = p.get_float("grad_clip");
  w.norm = pick<Norm>(
      p.get_string("norm"),
      {{"none", Norm::kNone}, {"batchnorm", Norm::kBatchNorm}, {"layernorm", Norm::kLayerNorm}});
  w.loss = pick<LossKind>(p.get_string("loss"), {{"cross_entropy", LossKind::kCrossEntropy},
                                                 {"naive_log_softmax", LossKind::kNaiveLogSoftmax},
                                                 {"mse", LossKind::kMse},
                                                 {"masked_mse", LossKind::kMaskedMse}});
  w.normalize_inputs = p.get_bool("normalize_inputs");

  // Combinations the workloads cannot build: refuse them here rather than at rank start-up.
  const bool transformer = s.job.workload == WorkloadKind::kTransformer;
  if (transformer && w.hidden % w.heads != 0) {
    scenario_error(
        p.pos(p.given("heads") ? "heads" : "hidden"),
        fmt::format("[workload]: hidden ({}) must be a multiple of heads ({})", w.hidden, w.heads));
  }
  if (transformer && (w.loss == LossKind::kMse || w.loss == LossKind::kMaskedMse)) {
    scenario_error(p.pos("loss"),
                   "[workload].loss: " + quote(p.get_string("loss")) + " needs workload = \"mlp\"");
  }
  if (transformer && w.norm != Norm::kNone) {
    scenario_error(p.pos("norm"),
                   "[workload].norm: \"" + p.get_string("norm") +
                       "\" needs workload = \"mlp\" (the transformer has LayerNorm)");
  }
  w.params = std::move(p);
}

Scenario Loader::load(const std::string& text) {
  toml::table root;
  try {
    root = toml::parse(text, std::string_view(file_));
  } catch (const toml::parse_error& e) {
    scenario_error(at(e.source()), "invalid TOML: " + std::string(e.description()));
  }
  Scenario s;
  s.file = file_;
  check_top_level(root);
  // [job] before the rest: fault and expect ranks are checked against job.ranks, the default
  // preset depends on job.precision. Errors still come table by table in a fixed order.
  load_scenario_table(root, s);
  load_job(root, s);
  load_workload(root, s);
  load_checkpoint(root, s);  // before [[fault]]: a `checkpoint` fault needs its saves
  load_faults(root, s);
  load_detectors(root, s);
  load_recovery(root, s);
  load_expect(root, s);
  load_campaign(root, s);
  return s;
}

}  // namespace loader

using loader::Loader;

Scenario load_scenario_string(const std::string& toml_text, const std::string& path) {
  return Loader(path).load(toml_text);
}

Scenario load_scenario(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw ScenarioError(path + ": error: cannot open file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ScenarioError(path + ": error: cannot open file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ScenarioError(path + ": error: cannot read file");
  return load_scenario_string(text.str(), path);
}

std::vector<std::string> expand_scenario_paths(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& f) {
    if (seen.insert(f).second) out.push_back(f);
  };
  for (const auto& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::string> found;
      for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
        if (it->is_regular_file(ec) && it->path().extension() == ".toml") {
          found.push_back(it->path().string());
        }
      }
      if (ec) throw ScenarioError(path + ": error: cannot read folder: " + ec.message());
      std::sort(found.begin(), found.end());
      for (const auto& f : found) add(f);
    } else if (fs::exists(path, ec)) {
      add(path);
    } else {
      throw ScenarioError(path + ": error: no such file or folder");
    }
  }
  return out;
}

std::vector<std::string> unimplemented_features(const Scenario& s) {
  std::vector<std::string> out;
  auto add = [&](const std::string& what) {
    if (std::find(out.begin(), out.end(), what) == out.end()) out.push_back(what);
  };
  for (const auto& f : s.faults) {
    if (fault_kinds().count(f.kind) == 0)
      add("fault kind `" + f.kind + "`: not registered in this build");
  }
  for (const auto& name : s.detectors.enabled) {
    if (detectors().count(name) == 0) add("detector `" + name + "`: not registered in this build");
  }
  return out;
}

}  // namespace nanchaos::harness
