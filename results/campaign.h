// The campaign model (`nanchaos campaign`, docs/scenario-format.md "Campaigns"): many drawn
// faults, each run once and scored against its ground truth, and the summary campaign.json,
// campaign.md, campaign.xml (JUnit) and campaign.html are written from.
//
// The controller (harness/controller/campaign.cpp) draws the faults, runs each as a scenario and
// hands the judge's ScenarioResult to score_fault() with the fault's Truth; everything here is a
// pure function of those (no clocks, no launches), so tests score hand-made evidence.
//
//   CampaignFault row = score_fault(index, fault_json, truth, judged);
//   Campaign c;  c.faults.push_back(row);  c.summary = summarize_campaign(c.faults);
//   write_campaign_json(c, dir + "/campaign.json");
//
// Scoring rules (documented for users in docs/scenario-format.md "Campaigns"):
//   detected    the stack's first detection exists (the judge's first_detection); a rank the
//               launcher tore down before any detector fired is not a detection of the stack
//   outcome     hang: the job hung or deadlocked; crash: the job died with no detection and no
//               clean abort; else the judge's fault_outcome (masked, detected_recovered,
//               detected_unrecovered, silent_corruption)
//   coverage    detected / faults whose outcome is not masked (errors excluded)
//   attribution over detected faults whose truth has that field: rank = the named rank set equals
//               the hit rank set; layer = equal, or one a dot-boundary prefix of the other
//               ("layers.1.linear" names "layers.1.linear.weight"); cause = equal strings
// Intervals: Wilson score 95% (wilson95 in results/stats.h).
// Nothing here includes torch.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "results/report.h"
#include "results/stats.h"

namespace nanchaos::results {

/// The outcome class of one campaign fault (NVBitFI's classes, split by recovery).
enum class CampaignOutcome {
  kMasked,
  kDetectedRecovered,
  kDetectedUnrecovered,
  kSilentCorruption,
  kHang,
  kCrash,
};
/// "masked", "detected_recovered", "detected_unrecovered", "silent_corruption", "hang", "crash".
const char* to_string(CampaignOutcome o);
std::optional<CampaignOutcome> parse_campaign_outcome(const std::string& s);
/// Worse is larger: masked = detected_recovered (0) < detected_unrecovered (1) < crash (2) <
/// hang (3) < silent_corruption (4). `compare` flags a fault class whose outcome rose.
int severity(CampaignOutcome o);
/// Every class, in the order reports list them.
const std::vector<CampaignOutcome>& campaign_outcomes();

/// What was injected, as the contract's table derives it from the fault (harness side:
/// campaign_draw.h truth_of).
struct Truth {
  std::vector<int64_t> ranks;  ///< the hit ranks, ascending
  int64_t step = 0;            ///< the first firing step
  std::optional<std::string>
      layer;          ///< module / parameter / inputs / labels / loss; none: not scored
  std::string cause;  ///< data, activation, ... (SCENARIO_FORMAT.md cause list)
};

/// What the stack named: its first detection.
struct Named {
  std::string detector;
  std::vector<int64_t> ranks;  ///< ascending
  int64_t step = 0;
  std::string layer;  ///< "" when the stack named none
  std::string cause;  ///< "" when the stack named none
};

/// One fault of a campaign, scored.
struct CampaignFault {
  int index = 0;                 ///< 0-based draw index (the folder is faults/<index, 3 digits>)
  nlohmann::ordered_json fault;  ///< the [[fault]] table as drawn (kind, ranks, step, target, ...)
  std::string fault_class;       ///< kind, or kind:where (tensor:activation, batch:inputs, ...)
  Truth truth;
  std::optional<Named> named;              ///< nullopt: not detected
  std::optional<CampaignOutcome> outcome;  ///< nullopt: the fault could not be measured (error)
  std::string error;                       ///< why outcome is null ("" otherwise)
  std::optional<int64_t> latency_steps;
  std::optional<double> latency_ms;
  int64_t false_positives = 0;  ///< detections before the fault fired
  // Attribution against the truth; nullopt when not scored (not detected, or no truth field).
  std::optional<bool> rank_ok, layer_ok, cause_ok;
  std::string scenario;  ///< faults/NNN/scenario.toml (relative to the campaign folder)
  std::string rerun;     ///< the command that re-runs this fault alone
  double wall_ms = 0;
};

/// A rate with its Wilson 95% interval; rate and interval null (nullopt) when n == 0.
struct Rate {
  int64_t k = 0, n = 0;
  std::optional<double> rate;
  std::optional<Interval> ci95;
};
Rate make_rate(int64_t k, int64_t n);

/// Per fault class (and the whole campaign): counts, coverage and attribution rates.
struct ClassSummary {
  int64_t faults = 0, errors = 0, detected = 0;
  std::map<std::string, int64_t> outcomes;  ///< every class name, 0 when none
  Rate coverage, rank, layer, cause;
  int worst = -1;  ///< max severity over the class's measured faults (-1: none measured)
};

struct CampaignSummary {
  ClassSummary all;
  std::map<std::string, ClassSummary> by_class;  ///< fault class -> summary
  std::optional<Summary> latency_steps;          ///< over detected faults
  std::optional<Summary> latency_ms;
  int64_t false_positives = 0;
  /// detector -> fault class -> faults it detected first (the heatmap).
  std::map<std::string, std::map<std::string, int64_t>> detector_by_class;
  /// true cause -> named cause ("-" when none was named) -> count (the confusion matrix), over
  /// measured faults but the masked ones no detection named.
  std::map<std::string, std::map<std::string, int64_t>> confusion;
};

struct Campaign {
  std::string scenario;  ///< the base scenario file as given
  std::string name;      ///< its [scenario].name
  uint64_t seed = 0;
  int64_t requested = 0;           ///< --faults N
  std::vector<std::string> kinds;  ///< the kinds drawn from
  int jobs = 1;
  std::string started;  ///< ISO-8601 UTC
  std::string nanchaos_version;
  double wall_s = 0;
  bool interrupted = false;
  std::vector<CampaignFault> faults;  ///< by index
  CampaignSummary summary;
  nlohmann::json thresholds = nlohmann::json::object();  ///< [campaign] minima and their checks
};

/// True when `named_layer` names `truth_layer`: equal, or one is a prefix of the other ending at a
/// '.' ("layers.1.linear" and "layers.1.linear.weight"; not "layers.1" and "layers.10").
bool layer_matches(const std::string& truth_layer, const std::string& named_layer);

/// Scores one fault from the judge's result. `judged.injections` empty (the fault never fired) or
/// a launch error in `judged.reason` with no outcome makes an error row.
CampaignFault score_fault(int index, const nlohmann::ordered_json& fault,
                          const std::string& fault_class, const Truth& truth,
                          const ScenarioResult& judged);

/// The summary over `faults` (errors excluded from every rate).
CampaignSummary summarize_campaign(const std::vector<CampaignFault>& faults);

/// campaign.json (the contract's fields plus extras; docs/scenario-format.md "Campaigns").
nlohmann::ordered_json to_json(const Campaign& c);
/// {"k", "n", "rate", "ci95": [lo, hi]} (rate and ci95 null when n == 0).
nlohmann::ordered_json to_json(const Rate& r);
void write_campaign_json(const Campaign& c, const std::string& path);
/// campaign.md: summary table, outcomes, per class, attribution errors with their re-run command.
std::string campaign_markdown(const Campaign& c);
void write_campaign_markdown(const Campaign& c, const std::string& path);
/// JUnit: one test case per fault class; it fails when a non-masked fault of the class went
/// undetected or a detected one was given the wrong cause (the body lists them).
void write_campaign_junit(const Campaign& c, const std::string& path);
/// campaign.html: heatmap (fault class x detector), confusion matrix (true x named cause), the
/// latency distribution (gnuplot SVG inlined when gnuplot is there). Returns "" or a note of what
/// is missing (as write_html does); throws std::runtime_error when the file cannot be written.
std::string write_campaign_html(const Campaign& c, const std::string& path);

}  // namespace nanchaos::results
