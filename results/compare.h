// `nanchaos compare BASE.json NEW.json`: compares two report.json files scenario by scenario and
// flags regressions, for a CI gate and for a pull-request comment.
//
// Scenarios are matched by name. Per scenario the table shows the verdict and pass rate before
// and after, the first detector, whether the attribution (rank, layer, cause of the first
// detection) still matches, the detection latency in steps (max over trials) and in ms (p50/p95
// over trials) before and after, and the p50 ratio new/base.
//
// Regression kinds (any one makes the exit status 1):
//   verdict      the scenario passed in BASE and does not pass in NEW (fail or error)
//   attribution  both detected, and the first detection's rank, layer or cause differ
//   detection    detected later in steps (max latency_steps grew), or no longer detected
//   latency      latency_ms p50 ratio new/base > max_slowdown, only when both sides have at least
//                min_trials trials and the p50 grew by more than min_delta_ms (milliseconds on a
//                shared machine are noise; steps are not). A slowdown on fewer trials is shown
//                with the note "latency not gated (N < min_trials)", never as a pass in silence.
//   decision     the same rule on decision_us p50 (the stack's time to decide after its
//                detection; min_delta_ms x 1000 us)
//   abort_latency  the same rule on abort_latency_ms p50 (the time from the fault to the job's
//                end, for aborted or crashed trials)
//   new_failure  a scenario only in NEW that does not pass (fail or error): a new scenario that
//                fails would otherwise enter the suite red without the gate noticing
//   restart_latency  [job] restarts: the resume latency (report.json `restarts[].resume_ms`, every
//                restart of every trial) p50 or p95 ratio new/base > max_slowdown and grown by more
//                than min_delta_ms, when both sides have at least min_trials restarts; per
//                scenario, and for the suite (scenario "(suite)": the shared scenarios' restarts
//                pooled)
//   missing      in BASE, absent from NEW (a dropped scenario would hide a regression), unless
//                `common_only` (`--common`: compare a `--tag` subset with a full baseline)
// Not regressions (shown, never gated): another first detector with the same attribution and
// step, a scenario only in NEW that passes or is skipped, a scenario skipped in NEW, a fix
// (fail -> pass). Each kind of one scenario is one finding; the summary counts findings and the
// scenarios they are in.
//
// Every rendering says how many scenarios the two reports share; run_compare refuses (exit 2)
// two reports that share none (their names never overlap: nothing was compared).
//
// Reports from before `--trials` (no `stats`) count as one trial described by their top level.
// Nothing here includes torch; compare_reports() is a pure function.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "results/report.h"

namespace nanchaos::results {

/// A report that cannot be read or is not a nanchaos report.json; what() names the file.
class CompareInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CompareOptions {
  double max_slowdown = 2.0;  ///< latency_ms p50 ratio new/base above which it is a regression
  int min_trials = 3;         ///< both sides need this many trials before ms are gated
  double min_delta_ms = 1.0;  ///< and the p50 must have grown by more than this (ms)
  /// Only the scenarios in both reports: none is `missing`, none listed as only in NEW.
  bool common_only = false;
};

/// One side of one scenario, as read from a report.
struct ScenarioSide {
  Verdict verdict = Verdict::kError;
  std::string reason;
  int trials = 1;
  int passed = 0;
  std::string detector;             ///< first detection's detector ("" when none)
  nlohmann::json attribution;       ///< {"rank", "layer", "cause"} of the first detection, or null
  std::optional<double> steps_max;  ///< latency_steps, max over trials
  std::optional<double> ms_p50, ms_p95;   ///< latency_ms over trials
  std::optional<double> decision_us_p50;  ///< decision_us over trials (us)
  std::optional<double> abort_ms_p50;     ///< abort_latency_ms over the aborted/crashed trials
  std::vector<double> resume_ms;          ///< every restart's resume_ms over the trials
};

struct Regression {
  std::string scenario;
  std::string kind;  ///< verdict, attribution, detection, latency, decision, abort_latency,
                     ///< restart_latency, missing, new_failure
  std::string detail;
};

struct ScenarioDiff {
  std::string name;
  std::optional<ScenarioSide> base, fresh;  ///< nullopt: absent from that report
  std::optional<bool> attribution_match;    ///< nullopt: not detected on one side
  std::optional<double> ratio;              ///< ms p50 new/base (nullopt: not measurable)
  std::vector<std::string> kinds;           ///< regression kinds of this scenario
  std::vector<std::string> notes;           ///< informational (detector changed, new, skipped)
};

struct Comparison {
  std::string base_label, fresh_label;  ///< file names as given
  CompareOptions options;
  std::vector<ScenarioDiff> scenarios;  ///< BASE order, then scenarios only in NEW
  std::vector<Regression> regressions;
  int shared = 0;      ///< scenarios (by name) in both reports
  int only_base = 0;   ///< in BASE only
  int only_fresh = 0;  ///< in NEW only
  /// The sides whose report says the run had not finished (report.json "complete": false: still
  /// running, killed, or interrupted), each as "NEW is incomplete (...)"; an older report
  /// without the key is complete.
  std::vector<std::string> incomplete;
};

/// Scenarios with at least one finding (Comparison::regressions names each once or more).
int scenarios_with_findings(const Comparison& c);

/// "3 shared scenario(s); 2 only in BASE (not compared: --common); 1 only in NEW": the overlap
/// line every rendering carries.
std::string overlap_text(const Comparison& c);

/// Reads and checks a report.json (an object with a "scenarios" array of objects with unique
/// "name" strings and a known "verdict": pass, fail, error, skipped). Throws CompareInputError
/// naming `path` (missing file, parse error with its byte offset, wrong shape, and for an unknown
/// verdict the scenario too).
nlohmann::json load_report(const std::string& path);

/// One side of a scenario from its report.json object (stats when present, else the top level).
/// Throws CompareInputError naming the scenario when its verdict is not one of Verdict's.
ScenarioSide scenario_side(const nlohmann::json& scenario);

/// Compares two loaded reports (see the header comment for the rules). Throws
/// CompareInputError naming the label and the scenario for an unknown verdict.
Comparison compare_reports(const nlohmann::json& base, const nlohmann::json& fresh,
                           const CompareOptions& o = {}, const std::string& base_label = "BASE",
                           const std::string& fresh_label = "NEW");

/// Renderings: Markdown (paste into a pull request), a console table, or JSON.
std::string format_markdown(const Comparison& c);
std::string format_text(const Comparison& c);
nlohmann::json format_json(const Comparison& c);

/// The whole command: loads both files, compares, writes `format` (md, text, json) to `out`.
/// Returns 0 (no regression), 1 (a regression) or 2 (unreadable input, bad format, or no scenario
/// in common: "nanchaos compare: error: BASE and NEW share no scenario (2 in BASE, 1 in NEW):
/// nothing to compare"; the error goes to `err`, naming the files).
int run_compare(const std::string& base_path, const std::string& fresh_path,
                const CompareOptions& o, const std::string& format, std::ostream& out,
                std::ostream& err);

}  // namespace nanchaos::results
