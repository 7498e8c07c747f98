// Scenario key declarations: the one table that validation, `nanchaos validate`, error messages
// and docs/keys.md come from.
//
// Each fault kind (inject/<kind>.cpp) and each detector (detectors/<name>.cpp) declares the keys it
// reads next to its code and registers them by name with NANCHAOS_REGISTER_FAULT_KIND /
// NANCHAOS_REGISTER_DETECTOR (see registry.h). Tables with a fixed schema ([scenario], [job],
// [workload], [recovery], [expect]) declare theirs in scenario_schema.cpp.
//
// Thread-safety: the tables are built during static initialization and read-only afterwards.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace nanchaos::harness {

/// Position of a key or table in a scenario file (1-based, from toml++'s source regions).
struct SourcePos {
  std::string file;
  int line = 0;
  int col = 0;
  /// "file:line:col"
  std::string str() const;
};

/// What TOML shapes a key accepts.
enum class KeyType {
  kBool,
  kInt,             ///< integer within [min, max]
  kFloat,           ///< float (an integer is accepted too) within [min, max]
  kString,          ///< string; one of `choices` when choices is not empty; `pattern` when set
  kStringArray,     ///< array of strings (each one of `choices` when set)
  kStringOrArray,   ///< a string or an array of strings (recovery.policy)
  kFloatOrSpecial,  ///< number, or "nan" / "inf" / "-inf" (stored as double)
  kIntOrForever,    ///< integer >= min, or "forever" (stored as -1)
  kRankSet,         ///< integer, array of integers, or "all" (stored as RankSet)
  kIntOrIntArray,   ///< integer or array of integers (expect.rank)
  kStringTable,     ///< table of strings (job.env), stored as "NAME=VALUE" strings in file order
};

/// A set of ranks; `all` means every rank of the job.
struct RankSet {
  bool all = false;
  std::vector<int64_t> ranks;
  bool contains(int64_t rank) const;
};

/// A parsed, validated value. Floats that were written as integers are stored as double.
using Value = std::variant<bool, int64_t, double, std::string, std::vector<std::string>,
                           std::vector<int64_t>, RankSet>;

/// The declaration of one key.
struct KeySpec {
  std::string name;
  KeyType type = KeyType::kString;
  std::optional<Value> default_value;  ///< nullopt: required, or optional with no default
  bool required = false;
  std::string doc;                   ///< one line; goes into docs and error messages
  std::vector<std::string> choices;  ///< allowed strings (kString, kStringArray)
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;  ///< (0,1] style ranges
  std::string pattern;         ///< ECMAScript regex a string must match fully
};

/// Typed key/value map of one table after validation, defaults filled in.
/// Accessors throw std::logic_error when the key was not declared (a programming error, not a
/// user error: the loader already rejected unknown and mistyped keys).
class Params {
 public:
  void set(const std::string& key, Value v, SourcePos pos = {});
  bool has(const std::string& key) const;    ///< present in the file or defaulted
  bool given(const std::string& key) const;  ///< written in the file (not defaulted)
  bool get_bool(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  ///< also accepts an int value
  const std::string& get_string(const std::string& key) const;
  std::vector<std::string> get_strings(const std::string& key) const;  ///< string or array
  const RankSet& get_ranks(const std::string& key) const;
  std::vector<int64_t> get_ints(const std::string& key) const;  ///< int or int array
  const Value& get(const std::string& key) const;
  SourcePos pos(const std::string& key) const;  ///< where the key was written (or the table)
  void set_table_pos(SourcePos pos);  ///< what pos() returns for keys not written in the file
  const std::map<std::string, Value>& values() const { return values_; }

 private:
  std::map<std::string, Value> values_;
  std::map<std::string, SourcePos> given_;
  SourcePos table_pos_;
};

/// Levenshtein-nearest candidate for a misspelt name, or "" when nothing is close
/// (distance > max(2, len/3)).
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

/// Human name of a key type for error messages ("integer", "string", "\"all\", integer or array").
std::string type_name(KeyType type);

}  // namespace nanchaos::harness
