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
// Scoring rules (documented for users in docs/scenario-format.md "Campaigns"). A campaign scores
// what the stack under test said, never what the harness knows:
//   named       the stack's first detection (the judge's first_detection), when it came within
//               `within_steps` of the fault's first firing step; a later one is kept as `late`
//               and is not a detection. A rank the launcher tore down before any detector fired
//               is not a detection of the stack either: when the harness's post-mortem explains
//               it (dead ranks, cause rank_failure) the row keeps that as `harness_named`,
//               reported beside the stack's figures and never inside them.
//   named_by    "stack" (named), "harness" (only harness_named), null (neither)
//   outcome     hang: the job hung or deadlocked; crash: the job died and the stack named
//               nothing; else the judge's fault_outcome (masked, detected_recovered,
//               detected_unrecovered, silent_corruption)
//   coverage    faults the stack named / faults whose outcome is not masked (errors excluded)
//   attribution over faults the stack named whose truth has that field: rank = the named rank
//               set equals the hit rank set; layer = equal strings (the contract's rule); cause =
//               equal strings
//   harness     beside them: of the not-masked faults the stack did not name, how many the
//               harness explained, and how often its rank and cause were right
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

/// What named a fault: the stack's first detection, or the harness's post-mortem.
struct Named {
  std::string detector;
  std::vector<int64_t> ranks;  ///< ascending
  int64_t step = 0;
  std::string layer;  ///< "" when the stack named none
  std::string cause;  ///< "" when the stack named none
};

/// Who named a fault (campaign.json `named_by`).
enum class NamedBy { kNone, kStack, kHarness };
/// "stack", "harness"; nullptr for kNone (JSON null).
const char* to_string(NamedBy b);

/// One fault of a campaign, scored.
struct CampaignFault {
  int index = 0;                 ///< 0-based draw index (the folder is faults/<index, 3 digits>)
  nlohmann::ordered_json fault;  ///< the [[fault]] table as drawn (kind, ranks, step, target, ...)
  std::string fault_class;       ///< kind, or kind:where (tensor:activation, batch:inputs, ...)
  Truth truth;
  /// Finite by construction (campaign.json `finite`): every number the fault writes is finite
  /// and bounded (its kind's rule, harness FaultKindInfo::finite: a factor, a finite value, a
  /// mantissa, low exponent or sign bit flip). Set by the controller from the draw.
  bool finite = false;
  /// The fault slows a rank (kind slow; campaign.json `slows`). Set by the controller.
  bool slows = false;
  /// Every detector the stack raised a detection with during the fault's run, at any step,
  /// sorted, each once (campaign.json `detectors`; the harness's collective_mismatch left out).
  std::vector<std::string> detectors;
  /// The stack's first detection within the window; nullopt: the stack named nothing (in time).
  /// The only thing coverage and attribution count.
  std::optional<Named> named;
  /// The stack's first detection when it came after the window (not a detection).
  std::optional<Named> late;
  /// What the harness's post-mortem explains when the stack named nothing: the dead ranks,
  /// detector "post-mortem", cause rank_failure. Reported beside the stack's figures.
  std::optional<Named> harness_named;
  std::optional<CampaignOutcome> outcome;  ///< nullopt: the fault could not be measured (error)
  std::string error;                       ///< why outcome is null ("" otherwise)
  std::optional<int64_t> latency_steps;    ///< of `named` (steps)
  std::optional<double> latency_ms;        ///< of `named` (ms)
  int64_t false_positives = 0;             ///< detections before the fault fired
  // Attribution of `named` against the truth; nullopt when not scored (the stack named nothing,
  // or the truth has no such field).
  std::optional<bool> rank_ok, layer_ok, cause_ok;
  // The same for `harness_named` (reported beside, never in the stack's rates).
  std::optional<bool> harness_rank_ok, harness_cause_ok;
  std::optional<int64_t> harness_latency_steps;  ///< the survivors' last step - the fault's step
  std::optional<double> harness_latency_ms;      ///< the fault to the launcher's exit (ms)
  std::string scenario;  ///< faults/NNN/scenario.toml (relative to the campaign folder)
  std::string rerun;     ///< the command that re-runs this fault alone
  double wall_ms = 0;

  NamedBy named_by() const {
    return named ? NamedBy::kStack : harness_named ? NamedBy::kHarness : NamedBy::kNone;
  }
};

/// How faults are scored. within_steps: the stack's first detection counts when its step is at
/// most this many steps after the fault's first firing step (`[campaign] detect_within_steps`,
/// steps; the controller's default is max(10, [detectors].replica_every): the longest a
/// detector of the reference stack takes by design).
struct ScoringRules {
  int64_t within_steps = 10;
  /// The job's [job] restarts: with >= 1 a crash or hang fault (truth cause rank_failure or
  /// hang) is detected_recovered only when the job completed and, where the judge checked
  /// final_matches_clean (built-in jobs), its final digests matched the clean run's; a job that
  /// completed otherwise is detected_unrecovered.
  int64_t restarts = 0;
};

/// A rate with its Wilson 95% interval; rate and interval null (nullopt) when n == 0.
struct Rate {
  int64_t k = 0, n = 0;
  std::optional<double> rate;
  std::optional<Interval> ci95;
};
Rate make_rate(int64_t k, int64_t n);

/// Per fault class (and the whole campaign): counts, coverage and attribution rates, all of the
/// stack's own detections; `harness_*` beside them.
struct ClassSummary {
  int64_t faults = 0, errors = 0, detected = 0;  ///< detected: named by the stack
  std::map<std::string, int64_t> outcomes;       ///< every class name, 0 when none
  Rate coverage, rank, layer, cause;
  /// Of the not-masked faults the stack did not name: how many the harness explained (k of n).
  Rate harness_explained;
  Rate harness_rank, harness_cause;  ///< over the harness-explained faults
  int64_t late = 0;                  ///< faults the stack named only after the window
  int worst = -1;  ///< max severity over the class's measured faults (-1: none measured)
};

struct CampaignSummary {
  ClassSummary all;
  std::map<std::string, ClassSummary> by_class;  ///< fault class -> summary
  std::optional<Summary> latency_steps;          ///< over detected faults
  std::optional<Summary> latency_ms;
  int64_t false_positives = 0;
  /// detector -> fault class -> faults it detected first (the heatmap; the stack's detectors).
  std::map<std::string, std::map<std::string, int64_t>> detector_by_class;
  /// Finite faults (CampaignFault::finite), measured and not masked: k = the stack named it, n =
  /// all of them (the coverage rule restricted to finite faults).
  Rate finite_coverage;
  int64_t finite_faults = 0;  ///< measured finite faults, the masked ones included
  /// detector -> the finite, not-masked faults it named first (k) of all of them (n, the same
  /// for every detector): a detector's share of the finite coverage. Detectors that named none
  /// are absent.
  std::map<std::string, Rate> finite_by_detector;
  /// Measured faults that slow no rank (CampaignFault::slows false): n, and k = those on which
  /// the `straggler` detector raised a detection (CampaignFault::detectors, or the first named
  /// detection for a row that has no list): its false positives.
  Rate straggler_false_positives;
  /// true cause -> cause the stack named ("-" when it named none, the harness's explanation
  /// notwithstanding) -> count (the confusion matrix), over measured faults but the masked ones
  /// the stack did not name.
  std::map<std::string, std::map<std::string, int64_t>> confusion;
};

struct Campaign {
  std::string scenario;  ///< the base scenario file as given
  std::string name;      ///< its [scenario].name
  uint64_t seed = 0;
  int64_t requested = 0;           ///< --faults N
  std::vector<std::string> kinds;  ///< the kinds drawn from
  std::string values = "any";      ///< --values: any, finite, nonfinite
  int jobs = 1;
  std::string started;  ///< ISO-8601 UTC
  std::string nanchaos_version;
  double wall_s = 0;
  bool interrupted = false;
  /// The controller finished the campaign (campaign.json "complete", always written): false in
  /// the campaign.json rewritten after each fault while it runs, so also in one a controller
  /// killed with SIGKILL leaves, and after an interruption. Absent (older files): true.
  bool complete = true;
  std::vector<CampaignFault> faults;  ///< by index
  CampaignSummary summary;
  nlohmann::json thresholds = nlohmann::json::object();  ///< [campaign] minima and their checks
  /// `campaign --shard I/N` (campaign.json "shard": {index, count}): this run measured the faults
  /// whose index mod N is I - 1 of the `requested` drawn (ShardInfo::suite stays empty).
  std::optional<ShardInfo> shard;
};

/// True when `named_layer` names `truth_layer`: equal strings, neither empty (the contract's rule
/// for campaigns: "whose named X equals the truth"; `[expect] layer`'s prefix match is the
/// scenario judge's, not this).
bool layer_matches(const std::string& truth_layer, const std::string& named_layer);

/// Scores one fault from the judge's result. `judged.injections` empty (the fault never fired) or
/// a launch error in `judged.reason` with no outcome makes an error row.
CampaignFault score_fault(int index, const nlohmann::ordered_json& fault,
                          const std::string& fault_class, const Truth& truth,
                          const ScenarioResult& judged, const ScoringRules& rules = {});

/// The detector name of the reference stack's straggler check (detectors/straggler.cpp).
inline constexpr const char* kStragglerDetector = "straggler";
/// True when the `straggler` detector raised a detection on `f` (its `detectors` list, or the
/// first named detection when the list is empty: a row read from an older campaign.json).
bool straggler_fired(const CampaignFault& f);

/// The summary over `faults` (errors excluded from every rate).
CampaignSummary summarize_campaign(const std::vector<CampaignFault>& faults);

/// campaign.json (the contract's fields plus extras; docs/scenario-format.md "Campaigns").
nlohmann::ordered_json to_json(const Campaign& c);
/// {"k", "n", "rate", "ci95": [lo, hi]} (rate and ci95 null when n == 0).
nlohmann::ordered_json to_json(const Rate& r);
void write_campaign_json(const Campaign& c, const std::string& path);
/// campaign.json read back (results/campaign_read.cpp): the run's fields and fault rows as
/// written, the summary computed again from the rows. Throws std::runtime_error naming the key
/// or the fault index for a malformed file.
Campaign campaign_from_json(const nlohmann::ordered_json& j);
/// `thresholds` as campaign.json holds them ({key: {min, actual, pass}}) checked again against
/// `sum`: the same minima, new actuals (check_thresholds of the controller makes the first).
nlohmann::json recheck_thresholds(const nlohmann::json& thresholds, const CampaignSummary& sum);
/// campaign.md's section "Finite faults per detector": per detector, the finite, not-masked
/// faults it named first (with the Wilson interval), the finite coverage, and the straggler
/// false positives.
std::string finite_markdown(const CampaignSummary& s);
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
