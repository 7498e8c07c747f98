// `nanchaos compare A/campaign.json B/campaign.json`: is B's stack worse than A's?
//
// Regressions (any one makes the exit status 1):
//   rate     coverage, or the rank, layer or cause attribution rate, counted over what the stack
//            itself named (campaign.json `named_by` = "stack"; the harness's post-mortem is never
//            a detection). How depends on the draws:
//            - same draws (same seed, and fault i is the same table on both sides): paired, the
//              exact one-sided McNemar test on the faults where the metric is defined on both
//              sides (coverage: not masked on either; attribution.X: the stack named X on both):
//              of the discordant faults, `worse` were right in A and wrong in B; a regression
//              when P(X >= worse | Binomial(worse + better, 1/2)) <= 0.05 (results/stats.h
//              mcnemar_exact_p). Power at small sizes: 5 faults lost and none gained is
//              p = 1/32 = 0.031, flagged at any campaign size. The false-alarm rate of two runs
//              of the same stack is at most 5% per metric by construction (tested by
//              simulation in tests/results/campaign_test.cpp), lower in practice since the
//              built-in jobs are deterministic: a fault flips only where timing decides.
//            - different draws: B's Wilson 95% upper bound is below A's Wilson 95% lower bound
//              (the intervals do not overlap; conservative, since two seeds of the same stack
//              differ by chance). A rate with no sample on either side is not compared.
//            The same two rules gate the finite faults (rows with `finite`: a factor, a finite
//            value, a mantissa or low exponent bit): `finite_coverage` (the stack named it / not
//            masked) and, per detector that named some finite fault first on either side,
//            `finite_coverage.DETECTOR` (that detector named it first / not masked), counted
//            from the rows (a file without `finite` rows has no sample: not compared). Paired,
//            a fault one detector named first on one side and another detector on the other
//            moved between detectors (a new detector that fires earlier shadows an old one): it
//            is counted in `moved`, not as worse or better; only faults the other side's stack
//            did not name at all count. Different draws compare shares, shadowing included.
//   straggler false positives  the share of measured faults that slow no rank (`slows` false)
//            on which the `straggler` detector fired (row `detectors`, or the first named
//            detection for a row without the list) rose: any rise is a regression.
//   outcome  a fault class moved to a worse outcome (severity in results/campaign.h: masked =
//            detected_recovered < detected_unrecovered < crash < hang < silent_corruption).
//            Same draws, per fault: fault i's outcome is worse in B. Otherwise per class: the
//            worst outcome of the class is worse in B than in A (classes in both).
// A fault not measured (error) on either side is not compared. Campaign files are recognised by
// content (a "faults" array and a "summary" with "coverage_counts"), not by name.
// Nothing here includes torch; compare_campaigns() is a pure function.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace nanchaos::results {

/// True when `doc` has the shape of a campaign.json.
bool is_campaign_json(const nlohmann::json& doc);

/// The one-sided level of the paired test (a regression when p <= this).
inline constexpr double kPairedAlpha = 0.05;

struct CampaignRateDiff {
  /// coverage, attribution.rank, attribution.layer, attribution.cause, finite_coverage,
  /// finite_coverage.DETECTOR
  std::string metric;
  int64_t base_k = 0, base_n = 0, fresh_k = 0, fresh_n = 0;  ///< the summaries' counts
  bool compared = false;  ///< both sides have samples (paired: some fault defined on both)
  bool paired = false;    ///< same draws: the McNemar test decided
  int64_t pairs = 0;      ///< paired: faults where the metric is defined on both sides
  int64_t worse = 0;      ///< paired: right in A, wrong in B
  int64_t better = 0;     ///< paired: wrong in A, right in B
  int64_t moved = 0;      ///< paired, finite_coverage.DETECTOR: named first by another detector
  double p_value = 1;     ///< paired: one-sided exact McNemar p
  bool regressed = false;
  std::string detail;  ///< why it regressed, in words
};

struct CampaignComparison {
  std::string base_label, fresh_label;
  bool same_draws = false;  ///< per-fault outcome comparison (see the header comment)
  int faults_compared = 0;  ///< faults (same_draws) or classes compared for outcomes
  std::vector<CampaignRateDiff> rates;
  std::vector<std::string>
      outcome_regressions;  ///< "f007 tensor:activation: detected_recovered -> silent_corruption"
  /// What makes the comparison mean less than it seems, printed, not a regression: different
  /// scenario names or seeds, an interrupted side.
  std::vector<std::string> notes;
  /// Faults only the harness explained (named_by = "harness"), each side: never in the rates.
  int64_t base_harness = 0, fresh_harness = 0;
  /// Straggler false positives (k of n measured faults that slow no rank), each side.
  int64_t base_straggler_fp = 0, base_no_slowness = 0;
  int64_t fresh_straggler_fp = 0, fresh_no_slowness = 0;
  /// B's share k/n is above A's (a side with n = 0 is not compared).
  bool straggler_fp_rose = false;
  bool regressed() const;
};

/// Compares two loaded campaign files (is_campaign_json both). Throws std::runtime_error naming
/// the side when a needed field is missing or has the wrong type, or a row's outcome is not an
/// outcome class (null, an error row, is fine).
CampaignComparison compare_campaigns(const nlohmann::json& base, const nlohmann::json& fresh,
                                     const std::string& base_label = "A",
                                     const std::string& fresh_label = "B");

std::string format_markdown(const CampaignComparison& c);
std::string format_text(const CampaignComparison& c);
nlohmann::json format_json(const CampaignComparison& c);

/// The whole command on two campaign files: 0 no regression, 1 a regression, 2 unreadable input
/// or not both campaign files (the error names the file).
int run_campaign_compare(const std::string& base_path, const std::string& fresh_path,
                         const std::string& format, std::ostream& out, std::ostream& err);

}  // namespace nanchaos::results
