#include "harness/common/version_req.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace nanchaos {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// -1, 0, 1: a against b, the shorter padded with zeros.
int compare(const std::vector<long>& a, const std::vector<long>& b) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const long x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

bool prefix_equal(const std::vector<long>& v, const std::vector<long>& prefix) {
  for (size_t i = 0; i < prefix.size(); ++i) {
    if ((i < v.size() ? v[i] : 0) != prefix[i]) return false;
  }
  return true;
}

}  // namespace

std::vector<long> release_numbers(const std::string& version) {
  std::vector<long> out;
  size_t i = 0;
  while (i < version.size() && std::isdigit(static_cast<unsigned char>(version[i]))) {
    long n = 0;
    while (i < version.size() && std::isdigit(static_cast<unsigned char>(version[i]))) {
      n = n * 10 + (version[i++] - '0');
      if (n > 1000000000L) return {};
    }
    out.push_back(n);
    if (i + 1 < version.size() && version[i] == '.' &&
        std::isdigit(static_cast<unsigned char>(version[i + 1]))) {
      ++i;
    } else {
      break;
    }
  }
  return out;
}

std::optional<VersionRequirement> VersionRequirement::parse(const std::string& text,
                                                            std::string* why) {
  VersionRequirement r;
  r.text_ = trim(text);
  if (r.text_.empty()) return r;
  std::stringstream ss(r.text_ + ",");  // a trailing comma leaves an empty last clause
  std::string part;
  int n = 0;
  static const char* kOps[] = {">=", "<=", "==", "!=", "~=", ">", "<"};
  while (std::getline(ss, part, ',')) {
    ++n;
    const std::string c = trim(part);
    auto fail = [&](const std::string& what) {
      if (why) {
        *why = "clause " + std::to_string(n) + " \"" + c + "\": " + what +
               " (expected OP VERSION, OP one of >= <= > < == != ~=, VERSION like 2.4; "
               "clauses separated by commas, e.g. \">=2.4,<3\")";
      }
      return std::nullopt;
    };
    Clause cl;
    for (const char* op : kOps) {
      if (c.rfind(op, 0) == 0) {
        cl.op = op;
        break;
      }
    }
    if (c.empty()) return fail("empty");
    if (cl.op.empty()) return fail("no comparison operator");
    const std::string v = trim(c.substr(cl.op.size()));
    cl.release = release_numbers(v);
    std::string canon;
    for (size_t i = 0; i < cl.release.size(); ++i) {
      canon += (i ? "." : "") + std::to_string(cl.release[i]);
    }
    if (cl.release.empty() || canon.size() != v.size()) {
      return fail(v.empty() ? "no version"
                            : "\"" + v + "\" is not a version of dot-separated numbers");
    }
    if (cl.op == "~=" && cl.release.size() < 2)
      return fail("~= needs at least two numbers (~=2.4)");
    r.clauses_.push_back(std::move(cl));
  }
  if (r.clauses_.empty()) {
    if (why) *why = "no clause";
    return std::nullopt;
  }
  return r;
}

bool VersionRequirement::satisfied_by(const std::string& version) const {
  if (clauses_.empty()) return true;
  const std::vector<long> v = release_numbers(version);
  if (v.empty()) return false;
  for (const Clause& c : clauses_) {
    const int cmp = compare(v, c.release);
    bool ok = false;
    if (c.op == ">=") ok = cmp >= 0;
    if (c.op == "<=") ok = cmp <= 0;
    if (c.op == ">") ok = cmp > 0;
    if (c.op == "<") ok = cmp < 0;
    if (c.op == "==") ok = prefix_equal(v, c.release);
    if (c.op == "!=") ok = !prefix_equal(v, c.release);
    if (c.op == "~=") {
      ok = cmp >= 0 && prefix_equal(v, std::vector<long>(c.release.begin(), c.release.end() - 1));
    }
    if (!ok) return false;
  }
  return true;
}

std::string normalized_package_name(const std::string& name) {
  std::string out;
  for (const char ch : name) {
    if (ch == '-' || ch == '_' || ch == '.') {
      if (out.empty() || out.back() != '-') out += '-';
    } else {
      out += char(std::tolower(static_cast<unsigned char>(ch)));
    }
  }
  return out;
}

std::optional<PackageRequirement> PackageRequirement::parse(const std::string& text,
                                                            std::string* why) {
  PackageRequirement p;
  p.text = trim(text);
  auto fail = [&](const std::string& what) {
    if (why) *why = what;
    return std::nullopt;
  };
  const auto name_char = [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.';
  };
  size_t n = 0;
  while (n < p.text.size() && name_char(p.text[n])) ++n;
  p.name = p.text.substr(0, n);
  const std::string usage =
      " (expected a distribution name of letters, digits, -, _ and ., optionally followed by a "
      "version requirement, e.g. \"lightning>=2.0\")";
  if (p.name.empty()) {
    return fail(p.text.empty() ? "empty" + usage : "no distribution name" + usage);
  }
  if (!std::isalnum(static_cast<unsigned char>(p.name.front())) ||
      !std::isalnum(static_cast<unsigned char>(p.name.back()))) {
    return fail("\"" + p.name + "\" must start and end with a letter or digit" + usage);
  }
  const std::string rest = trim(p.text.substr(n));
  if (!rest.empty() && std::string("<>=!~").find(rest.front()) == std::string::npos) {
    return fail("after the name \"" + p.name + "\": \"" + rest + "\" is not a version requirement" +
                usage);
  }
  std::string vwhy;
  auto v = VersionRequirement::parse(rest, &vwhy);
  if (!v) return fail("after the name \"" + p.name + "\": " + vwhy);
  p.version = std::move(*v);
  p.key = normalized_package_name(p.name);
  return p;
}

}  // namespace nanchaos
