// `nanchaos compare A/campaign.json B/campaign.json`: is B's stack worse than A's?
//
// Regressions (any one makes the exit status 1):
//   rate     coverage, or the rank, layer or cause attribution rate: B's Wilson 95% upper bound
//            is below A's Wilson 95% lower bound (the two intervals do not overlap and B is the
//            lower). Conservative on purpose: two runs of the same stack on different seeds
//            differ by chance, and non-overlapping 95% intervals mean a difference at roughly
//            the 0.5% level. A rate with no sample on either side is not compared.
//   outcome  a fault class moved to a worse outcome (severity in results/campaign.h: masked =
//            detected_recovered < detected_unrecovered < crash < hang < silent_corruption).
//            When A and B drew the same faults (same seed, and fault i is the same table on both
//            sides), per fault: fault i's outcome is worse in B. Otherwise per class: the worst
//            outcome of the class is worse in B than in A (classes in both).
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

struct CampaignRateDiff {
  std::string metric;  ///< coverage, attribution.rank, attribution.layer, attribution.cause
  int64_t base_k = 0, base_n = 0, fresh_k = 0, fresh_n = 0;
  bool compared = false;  ///< both sides have samples
  bool regressed = false;
  std::string detail;  ///< "B 62.5% [38.6-81.5] below A 100.0% [83.2-100.0]"
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
