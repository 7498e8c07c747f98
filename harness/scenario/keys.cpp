// Key declarations and the typed Params map (see keys.h).
#include "harness/scenario/keys.h"

#include <algorithm>
#include <stdexcept>

namespace nanchaos::harness {

std::string SourcePos::str() const {
  // A position without a line (a missing file, a missing table) names the file alone, so the
  // message still reads "file: error: ...".
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(col);
}

bool RankSet::contains(int64_t rank) const {
  return all || std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

namespace {

[[noreturn]] void undeclared(const std::string& key) {
  throw std::logic_error("Params: key `" + key +
                         "` is not present (not declared, or optional and not written)");
}

[[noreturn]] void wrong_type(const std::string& key, const char* want) {
  throw std::logic_error("Params: key `" + key + "` does not hold " + want);
}

}  // namespace

void Params::set(const std::string& key, Value v, SourcePos pos) {
  values_[key] = std::move(v);
  // A key is "given" when the loader passes where it was written; defaults come without one.
  if (pos.line > 0 || !pos.file.empty()) {
    given_[key] = std::move(pos);
  } else {
    given_.erase(key);
  }
}

void Params::set_table_pos(SourcePos pos) { table_pos_ = std::move(pos); }

bool Params::has(const std::string& key) const { return values_.count(key) != 0; }

bool Params::given(const std::string& key) const { return given_.count(key) != 0; }

const Value& Params::get(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) undeclared(key);
  return it->second;
}

bool Params::get_bool(const std::string& key) const {
  const Value& v = get(key);
  if (auto* b = std::get_if<bool>(&v)) return *b;
  wrong_type(key, "a bool");
}

int64_t Params::get_int(const std::string& key) const {
  const Value& v = get(key);
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  wrong_type(key, "an integer");
}

double Params::get_float(const std::string& key) const {
  const Value& v = get(key);
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  wrong_type(key, "a number");
}

const std::string& Params::get_string(const std::string& key) const {
  const Value& v = get(key);
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  wrong_type(key, "a string");
}

std::vector<std::string> Params::get_strings(const std::string& key) const {
  const Value& v = get(key);
  if (auto* s = std::get_if<std::string>(&v)) return {*s};
  if (auto* a = std::get_if<std::vector<std::string>>(&v)) return *a;
  wrong_type(key, "a string or an array of strings");
}

const RankSet& Params::get_ranks(const std::string& key) const {
  const Value& v = get(key);
  if (auto* r = std::get_if<RankSet>(&v)) return *r;
  wrong_type(key, "a rank set");
}

std::vector<int64_t> Params::get_ints(const std::string& key) const {
  const Value& v = get(key);
  if (auto* i = std::get_if<int64_t>(&v)) return {*i};
  if (auto* a = std::get_if<std::vector<int64_t>>(&v)) return *a;
  wrong_type(key, "an integer or an array of integers");
}

SourcePos Params::pos(const std::string& key) const {
  auto it = given_.find(key);
  if (it != given_.end()) return it->second;
  return table_pos_;
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  // Levenshtein distance with adjacent transpositions counted as one edit (optimal string
  // alignment), so "cdua" is nearer to "cuda" than to "cpu". Candidate lists are short.
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      for (size_t j = 1; j <= b.size(); ++j) {
        size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
      }
    }
    return d[a.size()][b.size()];
  };
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    size_t d = distance(word, c);
    if (d < best_distance) {  // first candidate wins ties: lists are in a meaningful order
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::string type_name(KeyType type) {
  switch (type) {
    case KeyType::kBool:
      return "boolean";
    case KeyType::kInt:
      return "integer";
    case KeyType::kFloat:
      return "float";
    case KeyType::kString:
      return "string";
    case KeyType::kStringArray:
      return "array of strings";
    case KeyType::kStringOrArray:
      return "string or array of strings";
    case KeyType::kFloatOrSpecial:
      return "number, \"nan\", \"inf\" or \"-inf\"";
    case KeyType::kIntOrForever:
      return "integer or \"forever\"";
    case KeyType::kRankSet:
      return "\"all\", integer or array of integers";
    case KeyType::kIntOrIntArray:
      return "integer or array of integers";
    case KeyType::kStringTable:
      return "table of strings";
  }
  return "value";
}

}  // namespace nanchaos::harness
