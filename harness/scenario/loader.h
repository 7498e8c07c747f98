// The scenario loader's internals, shared by its three files (not part of the API; scenario.h is):
//   scenario.cpp        the entry points, [scenario], [job], [workload]
//   loader_values.cpp   typed values and tables against their KeySpecs, file-order walking
//   loader_tables.cpp   [[fault]], [detectors], [recovery], [expect], the external-job refusals
// Every message has the form <file>:<line>:<col>: error: <key path>: <what>.
#pragma once

#include <toml++/toml.h>

#include <functional>
#include <initializer_list>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/scenario_schema.h"

namespace nanchaos::harness::loader {

/// Maps a validated choice string to its enum (the KeySpec's choices already rejected others).
template <typename E>
E pick(const std::string& s, std::initializer_list<std::pair<const char*, E>> table) {
  for (const auto& [name, value] : table) {
    if (s == name) return value;
  }
  throw std::logic_error("scenario loader: unmapped choice \"" + s + "\"");
}

DType dtype_of(const std::string& s);
Policy policy_of(const std::string& s);
/// "string", "integer", ... as a message names a TOML value's type.
std::string toml_type(const toml::node& n);
std::string quote(const std::string& s);
/// "; did you mean "x"? <label>: a, b, c", or "; <label>: a, b, c" when nothing is close.
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates,
                       const std::string& label);

template <typename Map>
std::vector<std::string> names_of(const Map& m) {
  std::vector<std::string> out;
  for (const auto& [name, info] : m) out.push_back(name);
  return out;
}

/// Why a key of the built-in job or stack is refused for an external job.
std::string external_refusal();
/// Fault kinds the Python agent applies to an external job (inject/python/nanchaos): the
/// registered kinds with `python_agent` set, sorted.
std::set<std::string> external_fault_kinds();

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
  void load_checkpoint(const toml::table& root, Scenario& s) const;
  void load_expect(const toml::table& root, Scenario& s) const;
  void load_campaign(const toml::table& root, Scenario& s) const;
  /// Built-in workloads: [expect].layer must be a prefix of something the stack can blame.
  void check_layer_exists(const std::string& layer, const SourcePos& pos, const Scenario& s) const;
  /// External jobs: the first key of `t` (in file order) not in `allowed` is an error.
  void refuse_for_external(const toml::table* t, const std::string& label,
                           const std::set<std::string>& allowed) const;
  /// External jobs: a fault kind or option the agent cannot apply is an error.
  void check_external_fault(const FaultSpec& f, const Params& all) const;

  std::string file_;
};

}  // namespace nanchaos::harness::loader
