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
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <utility>

#include "harness/scenario/model_spec.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario_schema.h"

namespace nanchaos::harness {

const char* to_string(DType d) {
  switch (d) {
    case DType::kFp32:
      return "fp32";
    case DType::kFp16:
      return "fp16";
    case DType::kBf16:
      return "bf16";
  }
  return "?";
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

namespace {

/// Maps a validated choice string to its enum (the KeySpec's choices already rejected others).
template <typename E>
E pick(const std::string& s, std::initializer_list<std::pair<const char*, E>> table) {
  for (const auto& [name, value] : table) {
    if (s == name) return value;
  }
  throw std::logic_error("scenario loader: unmapped choice \"" + s + "\"");
}

DType dtype_of(const std::string& s) {
  return pick<DType>(s, {{"fp32", DType::kFp32}, {"fp16", DType::kFp16}, {"bf16", DType::kBf16}});
}

Policy policy_of(const std::string& s) {
  return pick<Policy>(s, {{"skip_step", Policy::kSkipStep},
                          {"rollback", Policy::kRollback},
                          {"lr_backoff", Policy::kLrBackoff},
                          {"abort", Policy::kAbort},
                          {"none", Policy::kNone},
                          {"resync", Policy::kResync}});
}

std::string toml_type(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::array:
      return "array";
    case toml::node_type::table:
      return "table";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

std::string quote(const std::string& s) { return "\"" + s + "\""; }

/// "; did you mean "x"? <label>: a, b, c", or "; <label>: a, b, c" when nothing is close.
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates,
                       const std::string& label) {
  std::string near = nearest(word, candidates);
  std::string out = near.empty() ? ";" : "; did you mean " + quote(near) + "?";
  return out + " " + label + ": " + join(candidates);
}

template <typename Map>
std::vector<std::string> names_of(const Map& m) {
  std::vector<std::string> out;
  for (const auto& [name, info] : m) out.push_back(name);
  return out;
}

/// Why a key of the built-in job or stack is refused for an external job.
std::string external_refusal() {
  return "not accepted for workload = \"external\": the job brings its own model and stack";
}

/// Fault kinds the Python agent applies to an external job (inject/python/nanchaos).
const std::set<std::string>& external_fault_kinds() {
  static const std::set<std::string> kinds = {"batch", "bitflip", "comm",     "crash",
                                              "hang",  "lr",      "overflow", "tensor"};
  return kinds;
}

class Loader {
 public:
  explicit Loader(std::string file) : file_(std::move(file)) {}

  Scenario load(const std::string& text);

 private:
  using Entry = std::pair<const toml::key*, const toml::node*>;

  SourcePos at(const toml::source_region& r) const {
    return {file_, static_cast<int>(r.begin.line), static_cast<int>(r.begin.column)};
  }
  SourcePos at(const toml::node& n) const { return at(n.source()); }
  SourcePos at(const toml::key& k) const { return at(k.source()); }
  SourcePos nowhere() const { return {file_, 0, 0}; }

  static std::vector<Entry> in_file_order(const toml::table& t);
  const toml::table* table_of(const toml::table& root, const std::string& name,
                              bool required) const;
  Params check_table(
      const toml::table& t, const std::vector<KeySpec>& specs, const std::string& label,
      const SourcePos& table_pos,
      const std::function<std::string(const std::string&)>& unknown_hint = nullptr) const;
  Value parse_value(const KeySpec& spec, const toml::node& node, const std::string& path) const;
  void check_ranks_exist(const toml::node& node, const std::string& path, int64_t world) const;

  void check_top_level(const toml::table& root) const;
  void load_scenario_table(const toml::table& root, Scenario& s) const;
  void load_job(const toml::table& root, Scenario& s) const;
  void load_workload(const toml::table& root, Scenario& s) const;
  void load_faults(const toml::table& root, Scenario& s) const;
  void load_detectors(const toml::table& root, Scenario& s) const;
  void load_recovery(const toml::table& root, Scenario& s) const;
  void load_expect(const toml::table& root, Scenario& s) const;
  /// Built-in workloads: [expect].layer must be a prefix of something the stack can blame.
  void check_layer_exists(const std::string& layer, const SourcePos& pos, const Scenario& s) const;
  /// External jobs: the first key of `t` (in file order) not in `allowed` is an error.
  void refuse_for_external(const toml::table* t, const std::string& label,
                           const std::set<std::string>& allowed) const;
  /// External jobs: a fault kind or option the agent cannot apply is an error.
  void check_external_fault(const FaultSpec& f, const Params& all, const FaultKindInfo& info) const;

  std::string file_;
};

std::vector<Loader::Entry> Loader::in_file_order(const toml::table& t) {
  std::vector<Entry> out;
  for (auto&& [k, v] : t) out.emplace_back(&k, &v);
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    const auto& pa = a.first->source().begin;
    const auto& pb = b.first->source().begin;
    return std::make_pair(pa.line, pa.column) < std::make_pair(pb.line, pb.column);
  });
  return out;
}

const toml::table* Loader::table_of(const toml::table& root, const std::string& name,
                                    bool required) const {
  const toml::node* n = root.get(name);
  if (n == nullptr) {
    if (required) scenario_error(nowhere(), "missing required table [" + name + "]");
    return nullptr;
  }
  if (!n->is_table()) {
    scenario_error(at(*n), "[" + name + "]: expected table, got " + toml_type(*n));
  }
  return n->as_table();
}

void Loader::check_top_level(const toml::table& root) const {
  const auto& known = top_level_tables();
  for (const auto& [k, n] : in_file_order(root)) {
    const std::string name(k->str());
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    std::vector<std::string> shown;
    for (const auto& t : known) shown.push_back(t == "fault" ? "[[fault]]" : "[" + t + "]");
    std::string near = nearest(name, known);
    std::string hint;
    if (!near.empty())
      hint = "; did you mean [" + std::string(near == "fault" ? "[fault]]" : near + "]") + "?";
    if (n->is_table() || n->is_array_of_tables()) {
      scenario_error(at(*k), "unknown table [" + name + "]" + hint + " tables: " + join(shown));
    }
    scenario_error(at(*k), "unknown top-level key " + quote(name) + hint +
                               " (keys belong in a table: " + join(shown) + ")");
  }
}

Value Loader::parse_value(const KeySpec& spec, const toml::node& node,
                          const std::string& path) const {
  const std::string expected = describe_expected(spec);
  auto type_error = [&](const toml::node& n) {
    scenario_error(at(n), path + ": expected " + expected + ", got " + toml_type(n));
  };
  auto in_range = [&](double v) {
    if (std::isnan(v)) return false;
    if (spec.min_exclusive ? !(v > spec.min) : !(v >= spec.min)) return false;
    return v <= spec.max;
  };
  auto int_of = [&](const toml::node& n) -> int64_t {
    const auto* i = n.as_integer();
    if (i == nullptr) type_error(n);
    int64_t v = i->get();
    if (!in_range(static_cast<double>(v))) {
      scenario_error(at(n), path + ": expected " + expected + ", got " + std::to_string(v));
    }
    return v;
  };
  auto float_of = [&](const toml::node& n) -> double {
    double v = 0;
    if (const auto* f = n.as_floating_point()) {
      v = f->get();
    } else if (const auto* i = n.as_integer()) {
      v = static_cast<double>(i->get());
    } else {
      type_error(n);
    }
    if (!in_range(v)) {
      scenario_error(at(n), path + ": expected " + expected + ", got " + format_number(v));
    }
    return v;
  };
  auto check_choice = [&](const toml::node& n, const std::string& s) {
    if (spec.choices.empty()) return;
    if (std::find(spec.choices.begin(), spec.choices.end(), s) != spec.choices.end()) return;
    scenario_error(
        at(n), path + ": " + quote(s) + " is not valid" + suggestion(s, spec.choices, "choices"));
  };
  auto check_pattern = [&](const toml::node& n, const std::string& s) {
    if (spec.pattern.empty()) return;
    std::regex re(spec.pattern);
    if (std::regex_match(s, re)) return;
    std::string why;
    // For a character-class pattern ("[a-z0-9._-]+"), name the first character that breaks it.
    if (spec.pattern.size() > 3 && spec.pattern.front() == '[' &&
        spec.pattern.compare(spec.pattern.size() - 2, 2, "]+") == 0) {
      std::regex one(spec.pattern.substr(0, spec.pattern.size() - 1));
      if (s.empty()) why = " (it is empty)";
      for (size_t i = 0; i < s.size(); ++i) {
        if (!std::regex_match(std::string(1, s[i]), one)) {
          why = fmt::format(" ('{}' is not allowed)", s[i]);
          break;
        }
      }
    }
    scenario_error(at(n), path + ": " + quote(s) + " does not match " + spec.pattern + why);
  };
  auto string_of = [&](const toml::node& n) -> std::string {
    const auto* s = n.as_string();
    if (s == nullptr) type_error(n);
    std::string v = s->get();
    check_choice(n, v);
    check_pattern(n, v);
    return v;
  };
  auto strings_of = [&](const toml::node& n) -> std::vector<std::string> {
    const auto* a = n.as_array();
    if (a == nullptr) type_error(n);
    std::vector<std::string> out;
    for (size_t i = 0; i < a->size(); ++i) {
      const toml::node& e = *a->get(i);
      if (!e.is_string()) {
        scenario_error(at(e),
                       fmt::format("{}[{}]: expected string, got {}", path, i, toml_type(e)));
      }
      out.push_back(string_of(e));
    }
    return out;
  };
  auto ints_of = [&](const toml::node& n) -> std::vector<int64_t> {
    const auto* a = n.as_array();
    if (a == nullptr) type_error(n);
    if (a->empty()) scenario_error(at(n), path + ": expected " + expected + ", got an empty array");
    std::vector<int64_t> out;
    for (size_t i = 0; i < a->size(); ++i) {
      const toml::node& e = *a->get(i);
      if (!e.is_integer()) {
        scenario_error(at(e),
                       fmt::format("{}[{}]: expected integer, got {}", path, i, toml_type(e)));
      }
      out.push_back(int_of(e));
    }
    return out;
  };

  switch (spec.type) {
    case KeyType::kBool: {
      const auto* b = node.as_boolean();
      if (b == nullptr) type_error(node);
      return b->get();
    }
    case KeyType::kInt:
      return int_of(node);
    case KeyType::kFloat:
      return float_of(node);
    case KeyType::kString:
      return string_of(node);
    case KeyType::kStringArray:
      return strings_of(node);
    case KeyType::kStringOrArray:
      if (node.is_string()) return std::vector<std::string>{string_of(node)};
      if (!node.is_array()) type_error(node);
      {
        std::vector<std::string> v = strings_of(node);
        if (v.empty()) {
          scenario_error(at(node), path + ": expected " + expected + ", got an empty array");
        }
        return v;
      }
    case KeyType::kFloatOrSpecial: {
      if (const auto* s = node.as_string()) {
        const std::string& v = s->get();
        if (v == "nan") return std::numeric_limits<double>::quiet_NaN();
        if (v == "inf" || v == "+inf") return std::numeric_limits<double>::infinity();
        if (v == "-inf") return -std::numeric_limits<double>::infinity();
        scenario_error(at(node), path + ": expected " + expected + ", got " + quote(v));
      }
      if (const auto* f = node.as_floating_point()) return f->get();  // TOML's nan/inf too
      if (const auto* i = node.as_integer()) return static_cast<double>(i->get());
      type_error(node);
      return 0.0;  // not reached: type_error throws
    }
    case KeyType::kIntOrForever: {
      if (const auto* s = node.as_string()) {
        if (s->get() == "forever") return int64_t{-1};
        scenario_error(at(node), path + ": expected " + expected + ", got " + quote(s->get()));
      }
      return int_of(node);
    }
    case KeyType::kRankSet: {
      if (const auto* s = node.as_string()) {
        if (s->get() == "all") return RankSet{true, {}};
        scenario_error(at(node), path + ": expected " + expected + ", got " + quote(s->get()));
      }
      if (node.is_integer()) return RankSet{false, {int_of(node)}};
      return RankSet{false, ints_of(node)};
    }
    case KeyType::kIntOrIntArray: {
      if (node.is_integer()) return int_of(node);
      return ints_of(node);
    }
    case KeyType::kStringTable: {
      const auto* t = node.as_table();
      if (t == nullptr) type_error(node);
      std::vector<std::string> out;
      static const std::regex name_re("[A-Za-z_][A-Za-z0-9_]*");
      for (const auto& [k, n] : in_file_order(*t)) {
        const std::string name(k->str());
        if (!std::regex_match(name, name_re)) {
          scenario_error(at(*k),
                         path + ": " + quote(name) +
                             " is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)");
        }
        if (!n->is_string()) {
          scenario_error(at(*n), path + "." + name + ": expected string, got " + toml_type(*n));
        }
        out.push_back(name + "=" + n->as_string()->get());
      }
      return out;
    }
  }
  throw std::logic_error("scenario loader: unhandled key type");
}

Params Loader::check_table(
    const toml::table& t, const std::vector<KeySpec>& specs, const std::string& label,
    const SourcePos& table_pos,
    const std::function<std::string(const std::string&)>& unknown_hint) const {
  Params p;
  p.set_table_pos(table_pos);
  std::vector<std::string> names;
  for (const auto& spec : specs) names.push_back(spec.name);
  for (const auto& [k, n] : in_file_order(t)) {
    const std::string name(k->str());
    auto it =
        std::find_if(specs.begin(), specs.end(), [&](const KeySpec& s) { return s.name == name; });
    if (it == specs.end()) {
      std::string near = nearest(name, names);
      std::string hint = unknown_hint ? unknown_hint(name) : "";
      std::string msg = label + " unknown key " + quote(name);
      if (!hint.empty()) {
        msg += hint;
      } else if (!near.empty()) {
        msg += "; did you mean " + quote(near) + "?";
      } else {
        msg += "; keys: " + join(names);
      }
      scenario_error(at(*k), msg);
    }
    p.set(name, parse_value(*it, *n, label + "." + name), at(*n));
  }
  for (const auto& spec : specs) {
    if (p.has(spec.name)) continue;
    if (spec.required) {
      scenario_error(table_pos, label + ": missing required key " + quote(spec.name) + " (" +
                                    describe_expected(spec) + ": " + spec.doc + ")");
    }
    if (!spec.default_value) continue;
    const auto* special = std::get_if<std::string>(&*spec.default_value);
    if (spec.type == KeyType::kFloatOrSpecial && special) {
      // Declared as "nan" / "inf" / "-inf": store the number, as for a written value.
      p.set(spec.name, *special == "nan"    ? std::numeric_limits<double>::quiet_NaN()
                       : *special == "-inf" ? -std::numeric_limits<double>::infinity()
                                            : std::numeric_limits<double>::infinity());
    } else {
      p.set(spec.name, *spec.default_value);
    }
  }
  return p;
}

void Loader::check_ranks_exist(const toml::node& node, const std::string& path,
                               int64_t world) const {
  auto check = [&](const toml::node& n) {
    if (const auto* i = n.as_integer(); i != nullptr && i->get() >= world) {
      scenario_error(at(n),
                     fmt::format("{}: rank {} does not exist; [job].ranks = {} (ranks 0..{})", path,
                                 i->get(), world, world - 1));
    }
  };
  if (const auto* a = node.as_array()) {
    for (const auto& e : *a) check(e);
  } else {
    check(node);
  }
}

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

  // External jobs: the command and its environment; the built-in stack's keys are refused.
  static const std::set<std::string> external_only = {"command", "env", "micro_batches",
                                                      "attach_timeout_ms"};
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
  for (const auto& kv : p.get_strings("env")) {
    const auto eq = kv.find('=');
    j.env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  j.micro_batches = p.get_int("micro_batches");
  j.attach_timeout_ms = p.get_int("attach_timeout_ms");
  j.params = std::move(p);
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

void Loader::load_faults(const toml::table& root, Scenario& s) const {
  const toml::node* node = root.get("fault");
  if (node == nullptr) return;
  const toml::array* arr = node->as_array();
  if (arr == nullptr) {
    scenario_error(at(*node),
                   "[[fault]]: expected an array of tables (write each as [[fault]]), got " +
                       toml_type(*node));
  }
  const auto& kinds = fault_kinds();
  const std::vector<std::string> kind_names = names_of(kinds);
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::node& e = *arr->get(i);
    FaultSpec f;
    f.index = static_cast<int>(i);
    f.pos = at(e);
    const std::string label = fault_label(f);
    const toml::table* t = e.as_table();
    if (t == nullptr) scenario_error(at(e), label + ": expected table, got " + toml_type(e));

    const toml::node* kind_node = t->get("kind");
    if (kind_node == nullptr) {
      scenario_error(f.pos, label + ": missing required key \"kind\"; kinds: " + join(kind_names));
    }
    if (!kind_node->is_string()) {
      scenario_error(at(*kind_node),
                     label + ".kind: expected string, got " + toml_type(*kind_node));
    }
    f.kind = kind_node->as_string()->get();
    auto kit = kinds.find(f.kind);
    if (kit == kinds.end()) {
      scenario_error(at(*kind_node), label + " kind " + quote(f.kind) + " is unknown" +
                                         suggestion(f.kind, kind_names, "kinds"));
    }
    const FaultKindInfo& info = kit->second;

    std::vector<KeySpec> specs = fault_common_keys();
    specs.insert(specs.end(), info.keys.begin(), info.keys.end());
    // An unknown key that another kind declares is a common mix-up; say whose key it is.
    auto other_kinds = [&](const std::string& key) -> std::string {
      std::vector<std::string> owners;
      for (const auto& [name, other] : kinds) {
        for (const auto& spec : other.keys) {
          if (spec.name == key) owners.push_back(name);
        }
      }
      if (owners.empty()) return "";
      return " for kind " + quote(f.kind) + " (it belongs to kind " + join(owners, ", ") +
             "; keys of " + quote(f.kind) + ": " + join([&] {
               std::vector<std::string> own;
               for (const auto& spec : info.keys) own.push_back(spec.name);
               return own;
             }()) +
             ")";
    };
    Params all = check_table(*t, specs, label, f.pos, other_kinds);
    if (s.job.external()) check_external_fault(f, all, info);

    f.ranks = all.get_ranks("ranks");
    f.step = all.get_int("step");
    if (f.step >= s.job.steps) {
      scenario_error(all.pos("step"),
                     fmt::format("{}.step: {} is past the end of the job ([job].steps = {}, steps "
                                 "are 0-based); the fault could never fire",
                                 label, f.step, s.job.steps));
    }
    f.repeat = all.get_int("repeat");
    f.probability = all.get_float("probability");
    f.persistent = all.get_bool("persistent");
    f.params.set_table_pos(f.pos);
    for (const auto& spec : info.keys) {
      if (!all.has(spec.name)) continue;
      f.params.set(spec.name, all.get(spec.name),
                   all.given(spec.name) ? all.pos(spec.name) : SourcePos{});
    }
    if (const toml::node* r = t->get("ranks")) check_ranks_exist(*r, label + ".ranks", s.job.ranks);
    if (info.check) info.check(f);
    if (info.check_job) info.check_job(f, s);
    s.faults.push_back(std::move(f));
  }
}

void Loader::load_detectors(const toml::table& root, Scenario& s) const {
  const toml::table* t = table_of(root, "detectors", false);
  if (s.job.external()) refuse_for_external(t, "[detectors]", {"collective_timeout_ms"});
  const toml::table empty;
  const auto& registered = detectors();
  const std::vector<std::string> detector_names = names_of(registered);

  // Common keys, then every registered detector's keys (the first declaration of a name wins).
  std::vector<KeySpec> specs = detector_common_keys();
  for (const auto& [name, info] : registered) {
    for (const auto& key : info.keys) {
      bool seen = std::any_of(specs.begin(), specs.end(),
                              [&](const KeySpec& k) { return k.name == key.name; });
      if (!seen) specs.push_back(key);
    }
  }
  Params p = check_table(t ? *t : empty, specs, "[detectors]", t ? at(*t) : nowhere());
  DetectorConfig& d = s.detectors;
  d.preset = pick<Preset>(p.get_string("preset"), {{"default", Preset::kDefault},
                                                   {"full", Preset::kFull},
                                                   {"naive", Preset::kNaive},
                                                   {"none", Preset::kNone}});
  if (p.has("enabled")) {
    d.enabled_given = true;
    const toml::array& arr = *t->get("enabled")->as_array();
    for (size_t i = 0; i < arr.size(); ++i) {
      const toml::node& e = *arr.get(i);
      const std::string name = e.as_string()->get();
      if (registered.count(name) == 0) {
        scenario_error(at(e), "[detectors].enabled: " + quote(name) + " is not a detector" +
                                  suggestion(name, detector_names, "detectors"));
      }
      if (std::find(d.enabled.begin(), d.enabled.end(), name) != d.enabled.end()) {
        scenario_error(at(e), "[detectors].enabled: " + quote(name) + " is listed twice");
      }
      d.enabled.push_back(name);
    }
  } else {
    // A preset may name a detector that is not built. One marked "optional:" (the stack works
    // without it, e.g. the watchdog) is dropped silently; any other stays in the list and
    // unimplemented_features() reports it.
    for (const auto& name : preset_detectors(d.preset, s.job.precision)) {
      auto it = registered.find(name);
      if (it != registered.end() && it->second.not_implemented.rfind("optional:", 0) == 0) {
        continue;
      }
      d.enabled.push_back(name);
    }
    p.set("enabled", d.enabled);
  }
  const bool naive = d.preset == Preset::kNaive;
  if (!p.has("consensus")) p.set("consensus", !naive);
  d.consensus = p.get_bool("consensus");
  d.replay_given = p.given("replay");
  if (!p.has("replay")) p.set("replay", !naive);
  d.replay = p.get_bool("replay");
  if (p.has("collective_timeout_ms")) d.collective_timeout_ms = p.get_int("collective_timeout_ms");
  if (p.has("max_abs")) d.max_abs = p.get_float("max_abs");
  if (p.has("spike_window")) d.spike_window = p.get_int("spike_window");
  if (p.has("spike_zscore")) d.spike_zscore = p.get_float("spike_zscore");
  d.params = std::move(p);
  // The job's own stack detects; nothing of the built-in one runs.
  if (s.job.external()) d.enabled.clear();
}

void Loader::load_recovery(const toml::table& root, Scenario& s) const {
  const toml::table* t = table_of(root, "recovery", false);
  if (s.job.external()) {
    refuse_for_external(t, "[recovery]", {});
    return;
  }
  const toml::table empty;
  Params p = check_table(t ? *t : empty, recovery_keys(), "[recovery]", t ? at(*t) : nowhere());
  RecoveryConfig& r = s.recovery;
  r.policy.clear();
  for (const auto& name : p.get_strings("policy")) {
    Policy pol = policy_of(name);
    if (!r.has(pol)) r.policy.push_back(pol);
  }
  if (r.has(Policy::kNone) && r.policy.size() > 1) {
    scenario_error(p.pos("policy"), "[recovery].policy: \"none\" cannot be combined with others");
  }
  r.snapshot_every = p.get_int("snapshot_every");
  r.lr_backoff_factor = p.get_float("lr_backoff_factor");
  r.max_consecutive = p.get_int("max_consecutive");
  r.scaler.init_scale = p.get_float("init_scale");
  r.scaler.growth_factor = p.get_float("growth_factor");
  r.scaler.backoff_factor = p.get_float("backoff_factor");
  r.scaler.growth_interval = p.get_int("growth_interval");
  r.scaler.max_scale = p.get_float("max_scale");
  r.scaler.min_scale = p.get_float("min_scale");
  if (!(r.scaler.min_scale <= r.scaler.init_scale && r.scaler.init_scale <= r.scaler.max_scale)) {
    std::string key = p.given("init_scale")  ? "init_scale"
                      : p.given("max_scale") ? "max_scale"
                                             : "min_scale";
    scenario_error(p.pos(key), fmt::format("[recovery].{}: need min_scale <= init_scale <= "
                                           "max_scale, got {} <= {} <= {}",
                                           key, format_number(r.scaler.min_scale),
                                           format_number(r.scaler.init_scale),
                                           format_number(r.scaler.max_scale)));
  }
}

void Loader::load_expect(const toml::table& root, Scenario& s) const {
  const toml::table* t = table_of(root, "expect", false);
  const toml::table empty;
  Params p = check_table(t ? *t : empty, expect_keys(), "[expect]", t ? at(*t) : nowhere());
  ExpectConfig& x = s.expect;
  if (p.has("first_detector")) {
    const std::string& name = p.get_string("first_detector");
    std::vector<std::string> names = names_of(detectors());
    // An external job's stack names its own detectors (report_detection, observed:*).
    if (!s.job.external() && detectors().count(name) == 0) {
      scenario_error(p.pos("first_detector"), "[expect].first_detector: " + quote(name) +
                                                  " is not a detector" +
                                                  suggestion(name, names, "detectors"));
    }
    x.first_detector = name;
  }
  if (p.has("rank")) {
    check_ranks_exist(*t->get("rank"), "[expect].rank", s.job.ranks);
    x.rank = p.get_ints("rank");
  }
  if (p.has("detected")) x.detected = p.get_bool("detected");
  if (p.has("within_steps")) x.within_steps = p.get_int("within_steps");
  if (p.has("within_ms")) x.within_ms = p.get_float("within_ms");
  if (p.has("layer")) {
    x.layer = p.get_string("layer");
    check_layer_exists(*x.layer, p.pos("layer"), s);
  }
  if (p.has("cause")) x.cause = p.get_string("cause");
  if (p.has("transient")) x.transient = p.get_bool("transient");
  if (p.has("outcome")) x.outcome = p.get_string("outcome");
  x.deadlock = p.get_bool("deadlock");
  if (p.has("abort_within_ms")) x.abort_within_ms = p.get_float("abort_within_ms");
  if (p.has("recovered")) x.recovered = p.get_bool("recovered");
  if (p.has("final_loss_max")) x.final_loss_max = p.get_float("final_loss_max");
  if (p.has("consistent")) x.consistent = p.get_bool("consistent");
  if (p.has("fault_outcome")) x.fault_outcome = p.get_string("fault_outcome");
  x.max_false_positives = p.get_int("max_false_positives");
  x.params = std::move(p);
  // A fault nobody judges passes whatever the stack does: a forgotten assertion would be green.
  if (!s.faults.empty() && (t == nullptr || t->empty())) {
    const std::string what = s.faults.size() == 1
                                 ? std::string("the scenario's fault")
                                 : fmt::format("the scenario's {} faults", s.faults.size());
    const std::string fix =
        "say what the stack must do (e.g. detected = true, outcome = \"completed\"), even if only "
        "deadlock = false";
    if (t == nullptr) {
      scenario_error(s.faults.front().pos,
                     fmt::format("{} has no [expect] to judge it; add an [expect] table and {}",
                                 fault_label(s.faults.front()), fix));
    }
    scenario_error(at(*t), fmt::format("[expect] is empty, so nothing judges {}; {}", what, fix));
  }
}

void Loader::check_layer_exists(const std::string& layer, const SourcePos& pos,
                                const Scenario& s) const {
  const std::optional<ModelSpec> model = listed_model(s);
  if (!model) return;  // an external job's stack names its own layers
  // What a detection can blame: a module, a parameter, the loss or the batch (detectors/*.cpp),
  // or, for the anomaly detector, the autograd op that produced the NaN ("MulBackward0"); the
  // replica detector also names buffers and "training_state" (detectors/core/replica.h).
  static const std::regex backward_op("[A-Za-z0-9_]+Backward[0-9]*");
  if (std::regex_match(layer, backward_op)) return;
  std::vector<std::string> names = {"loss", "inputs", "labels", "training_state"};
  names.insert(names.end(), model->modules.begin(), model->modules.end());
  for (const auto& p : model->parameters) names.push_back(p.name);
  for (const auto& b : model->buffers) names.push_back(b.name);
  for (const auto& n : names) {
    if (n.rfind(layer, 0) == 0) return;  // the judge's prefix match
  }
  names.erase(names.begin(), names.begin() + 4);
  scenario_error(pos, fmt::format("[expect].layer: \"{}\" is no module, parameter or buffer of "
                                  "the {} workload (nor loss, inputs, labels, training_state){}",
                                  layer, workload_name(s.job.workload),
                                  name_hint(layer, names, "", "names", s)));
}

void Loader::refuse_for_external(const toml::table* t, const std::string& label,
                                 const std::set<std::string>& allowed) const {
  if (t == nullptr) return;
  for (const auto& [k, n] : in_file_order(*t)) {
    const std::string name(k->str());
    if (allowed.count(name)) continue;
    std::string why = external_refusal();
    if (!allowed.empty()) why += " (only " + join({allowed.begin(), allowed.end()}) + " applies)";
    scenario_error(at(*k), label + "." + name + ": " + why);
  }
}

void Loader::check_external_fault(const FaultSpec& f, const Params& all,
                                  const FaultKindInfo& info) const {
  const std::string label = fault_label(f);
  if (!external_fault_kinds().count(f.kind) || !info.not_implemented.empty()) {
    scenario_error(all.pos("kind"),
                   label + " kind " + quote(f.kind) +
                       " is not implemented for workload = \"external\"; the agent applies: " +
                       join({external_fault_kinds().begin(), external_fault_kinds().end()}));
  }
  if (all.has("mode") && all.get_string("mode") == "empty_mask") {
    scenario_error(all.pos("mode"), label +
                                        ": mode = \"empty_mask\" is not available for workload = "
                                        "\"external\" (it needs the built-in transformer's "
                                        "token mask)");
  }
  if (all.has("stall") && all.get_string("stall") == "device") {
    scenario_error(all.pos("stall"), label +
                                         ".stall: \"device\" is not available for workload = "
                                         "\"external\" (a CUDA stall of the built-in stack's "
                                         "gradient all-reduce); use \"host\"");
  }
  for (const auto& [key, value] : all.values()) {
    const auto* str = std::get_if<std::string>(&value);
    if (str && str->rfind("optimizer:", 0) == 0) {
      scenario_error(all.pos(key), label + "." + key + ": " + quote(*str) +
                                       ": optimizer-state targets are not available for "
                                       "workload = \"external\" (the agent cannot apply them "
                                       "faithfully)");
    }
  }
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
  load_faults(root, s);
  load_detectors(root, s);
  load_recovery(root, s);
  load_expect(root, s);
  return s;
}

}  // namespace

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
  auto strip_optional = [](std::string text) {
    const std::string prefix = "optional:";
    if (text.rfind(prefix, 0) == 0) {
      text.erase(0, prefix.size());
      text.erase(0, text.find_first_not_of(' '));
    }
    return text;
  };
  for (const auto& f : s.faults) {
    auto it = fault_kinds().find(f.kind);
    if (it == fault_kinds().end()) {
      add("fault kind `" + f.kind + "`: not registered in this build");
    } else if (!it->second.not_implemented.empty()) {
      add("fault kind `" + f.kind + "`: " + it->second.not_implemented);
    }
  }
  for (const auto& name : s.detectors.enabled) {
    auto it = detectors().find(name);
    if (it == detectors().end()) {
      add("detector `" + name + "`: not registered in this build");
    } else if (!it->second.not_implemented.empty()) {
      add("detector `" + name + "`: " + strip_optional(it->second.not_implemented));
    }
  }
  return out;
}

}  // namespace nanchaos::harness
