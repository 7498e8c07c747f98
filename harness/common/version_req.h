// Version requirements such as `>=2.4` or `>=1.13,<2`, for `[job] torch` and `[job]
// python_packages` (which interpreter runs an external job). Torch-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace nanchaos {

/// A comma-separated list of clauses `OP VERSION`, every one of which must hold. OP is one of
/// `>=`, `<=`, `>`, `<`, `==`, `!=`, `~=` (PEP 440's operators; `~=2.4` means >=2.4 and ==2.*,
/// `~=2.4.1` means >=2.4.1 and ==2.4.*); VERSION is dot-separated non-negative integers ("2",
/// "2.4", "2.4.1"). `==2.4` matches 2.4, 2.4.0 and 2.4.1 alike (prefix match, as PEP 440's
/// `==2.4.*`); other comparisons pad the shorter side with zeros.
/// Versions are compared on their release numbers only: a local label and a pre-release tag are
/// ignored, so PyPI's "2.15.0+cu132" is 2.15.0 and Debian's "1.13.0a0" is 1.13.0 (stricter than
/// PEP 440, where 1.13.0a0 < 1.13; Debian's torch should satisfy ">=1.13").
class VersionRequirement {
 public:
  /// The requirement, or nullopt with *why set ("clause 2 \"<<2\": ...") when `text` is not one.
  /// An empty (or all-blank) text is the requirement that every version satisfies.
  static std::optional<VersionRequirement> parse(const std::string& text, std::string* why);

  /// True when `version` (e.g. torch.__version__) meets every clause; false when it has no
  /// leading release number ("unknown").
  bool satisfied_by(const std::string& version) const;

  bool any() const { return clauses_.empty(); }
  const std::string& text() const { return text_; }

 private:
  struct Clause {
    std::string op;
    std::vector<long> release;
  };
  std::string text_;
  std::vector<Clause> clauses_;
};

/// One entry of `[job] python_packages`: a Python distribution name, optionally followed by a
/// VersionRequirement ("lightning>=2.0", "accelerate >= 0.26, <1", "transformers").
/// The name is letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit (PEP
/// 508); names compare as pip does, case-insensitively with runs of `-`, `_`, `.` equivalent
/// (normalized_package_name). Extras (`name[extra]`), markers (`; python_version...`) and URLs are
/// not accepted.
struct PackageRequirement {
  std::string name;            ///< as written ("Lightning")
  std::string key;             ///< normalized_package_name(name) ("lightning")
  VersionRequirement version;  ///< any() when no requirement follows the name
  std::string text;            ///< the entry, trimmed

  /// The requirement, or nullopt with *why set when `text` is not one, e.g. for "lightning 2":
  /// "after the name \"lightning\": clause 1 \"2\": no comparison operator (...)".
  static std::optional<PackageRequirement> parse(const std::string& text, std::string* why);
};

/// pip's name comparison key (PEP 503): lower case, each run of `-`, `_`, `.` one `-`
/// ("Pytorch_Lightning" -> "pytorch-lightning").
std::string normalized_package_name(const std::string& name);

/// The leading release numbers of a version string ("2.15.0+cu132" -> {2, 15, 0}; "1.13.0a0" ->
/// {1, 13, 0}); empty when it does not start with a digit.
std::vector<long> release_numbers(const std::string& version);

}  // namespace nanchaos
