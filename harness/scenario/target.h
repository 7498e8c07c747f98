// A fault's tensor target ("where:pattern"), parsed once: the loader and read_plan parse the
// `target` key of the kinds that declare target wheres (FaultKindInfo::target_wheres) into
// FaultSpec::target, and every user (injectors, the C++ agent, the judge's hint, campaign draws)
// reads this struct instead of splitting the text again.
//
//   "activation:layers.1"             -> {kActivation, "layers.1"}
//   "gradient:layers.*.weight"        -> {kGradient, "layers.*.weight"}   (`*`: one path segment)
//   "optimizer:head.weight.exp_avg"   -> {kOptimizer, "head.weight.exp_avg"}, param "head.weight",
//                                        state "exp_avg"
//   "loss"                            -> {kLoss, ""}
//
// The Python agent's twin is inject/python/nanchaos/target.py; tests/data/target_vectors.json is
// the shared test vector (tests/harness/target_test.cpp, inject/python/tests/test_target.py).
// Torch-free; pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace nanchaos::harness {

/// What a target hits: a module's output, a parameter, its gradient, its optimizer state, or the
/// loss.
enum class TargetWhere { kActivation, kParameter, kGradient, kOptimizer, kLoss };

/// "activation", "parameter", "gradient", "optimizer", "loss" (the prefix as written).
const char* to_string(TargetWhere w);
/// The inverse of to_string; nullopt for any other text.
std::optional<TargetWhere> target_where_from_string(const std::string& text);
/// Every where, in to_string order.
const std::vector<TargetWhere>& all_target_wheres();

struct Target {
  TargetWhere where = TargetWhere::kLoss;
  std::string pattern;  ///< the NAME after "where:" (may hold `*`); "" for the loss

  /// The text as written: "activation:layers.1", "loss".
  std::string text() const;
  /// The module or parameter named: the pattern, or for an optimizer target the PARAM part of
  /// PARAM.STATE (what precedes the last '.'; "" when the pattern holds none); "" for the loss.
  std::string name() const;
  /// For an optimizer target the STATE part of PARAM.STATE (what follows the last '.', the whole
  /// pattern when it holds none: "exp_avg"); "" otherwise.
  std::string state() const;
};

/// Parses "where:NAME" (NAME non-empty) or exactly "loss". nullopt for anything else (an unknown
/// where, an empty NAME, "loss:x"); target_error() says why in the loader's words.
std::optional<Target> parse_target(const std::string& text);
/// parse_target, and nullopt too when the where is not one of `allowed` (a kind's
/// FaultKindInfo::target_wheres).
std::optional<Target> parse_target(const std::string& text,
                                   const std::vector<TargetWhere>& allowed);

/// The forms of `allowed`, as the loader lists them: activation:NAME or parameter:NAME or
/// optimizer:PARAM.STATE or "loss".
std::string target_forms(const std::vector<TargetWhere>& allowed);

/// "\"<text>\" is not a valid target; expected <target_forms(allowed)>": the loader's message
/// (after the "[[fault]] #N.target: " path) for a text parse_target refuses or whose where
/// `allowed` lacks.
std::string target_error(const std::string& text, const std::vector<TargetWhere>& allowed);

}  // namespace nanchaos::harness
