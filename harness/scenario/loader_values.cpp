// Scenario loader: typed values and tables checked against their KeySpecs, in file order (toml++
// tables iterate alphabetically, so the first error reported is the first one in the file). See
// loader.h.
#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <utility>

#include "harness/scenario/loader.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario_schema.h"

namespace nanchaos::harness::loader {

DType dtype_of(const std::string& s) {
  // The key's choices (fp32, fp16, bf16) are validated before this runs.
  return dtype_from_string(s).value();
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

/// Why a key of the built-in job or stack is refused for an external job.
std::string external_refusal() {
  return "not accepted for workload = \"external\": the job brings its own model and stack";
}

/// Fault kinds the Python agent applies to an external job (inject/python/nanchaos).
std::set<std::string> external_fault_kinds() {
  std::set<std::string> kinds;
  for (const auto& [name, info] : fault_kinds()) {
    if (info.python_agent) kinds.insert(name);
  }
  return kinds;
}

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

}  // namespace nanchaos::harness::loader
