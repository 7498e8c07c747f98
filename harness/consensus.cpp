#include "harness/consensus.h"

#include <algorithm>

namespace nanchaos::harness {

int detector_bit(const std::string& name) {
  for (size_t i = 0; i < kDetectorOrder.size(); ++i) {
    if (name == kDetectorOrder[i]) return int(i);
  }
  return -1;
}

SummaryCounts summary_counts(uint64_t bits) {
  SummaryCounts c{};
  for (size_t b = 0; b < kSummaryWidth; ++b) c[b] = (bits >> b) & 1u;
  return c;
}

bool summary_flagged(const SummaryCounts& counts) {
  return std::any_of(counts.begin(), counts.end(), [](int64_t n) { return n != 0; });
}

double global_max_abs(const std::vector<double>& rows, int world) {
  double m = 0;
  for (int r = 0; r < world; ++r) m = std::max(m, rows[size_t(r) * kRowWidth + kMaxAbs]);
  return m;
}

Decision decide(const std::vector<double>& rows, int world,
                const std::vector<std::string>& bwd_names,
                const std::vector<std::string>& module_names,
                const std::vector<std::string>& replica_names) {
  Decision d;
  auto bits_of = [&](int r) { return uint64_t(rows[size_t(r) * kRowWidth + kBits]); };
  uint64_t any = 0;
  for (int r = 0; r < world; ++r) any |= bits_of(r);
  if (!any) return d;
  d.flagged = true;
  int first_bit = 0;
  while (!(any & (uint64_t(1) << first_bit))) ++first_bit;
  d.detector = kDetectorOrder[size_t(first_bit)];
  for (int r = 0; r < world; ++r) {
    const uint64_t bits = bits_of(r);
    if (!bits) continue;
    nlohmann::json dets = nlohmann::json::array();
    for (size_t b = 0; b < kDetectorOrder.size(); ++b) {
      if (bits & (uint64_t(1) << b)) dets.push_back(kDetectorOrder[b]);
    }
    d.flagged_detail.push_back({{"rank", r}, {"detectors", dets}});
    if (bits & (uint64_t(1) << first_bit)) d.ranks.push_back(r);
  }
  // Attribution (DESIGN.md) from the first blamed rank's row.
  const double* row = &rows[size_t(d.ranks.front()) * kRowWidth];
  if (d.detector == "batch") {
    d.cause = "data";
    d.layer = row[kBatchField] > 0.5 ? "labels" : "inputs";
  } else if (d.detector == "param") {
    d.cause = "parameter";
    d.layer = bwd_names.at(size_t(row[kParamIdx]));
  } else if (d.detector == "loss") {
    const bool logits_finite = row[kLogitsFinite] > 0.5;
    d.cause = logits_finite ? "loss_math" : "activation";
    d.layer = logits_finite ? "loss" : "";
    // Non-finite logits: the first module whose output went non-finite (the runner's always-on
    // localization), and whether the half rounding made it so (DESIGN.md fp16_overflow).
    const double idx = row[kModuleIdx];
    if (!logits_finite && idx >= 0 && size_t(idx) < module_names.size()) {
      d.layer = module_names[size_t(idx)];
      if (row[kModuleOverflow] > 0.5) d.cause = "fp16_overflow";
    }
  } else if (d.detector == "grad") {
    d.cause = "gradient";
    d.layer = bwd_names.at(size_t(row[kGradIdx]));
  } else if (d.detector == "activation") {
    d.cause = row[kModuleOverflow] > 0.5 ? "fp16_overflow" : "activation";
    const double idx = row[kModuleIdx];
    if (idx >= 0 && size_t(idx) < module_names.size()) d.layer = module_names[size_t(idx)];
  } else if (d.detector == "replica") {
    // A replica whose digest differs from the majority's (replica.h): finite silent corruption
    // or drifted training state.
    d.cause = "replica_divergence";
    const double idx = row[kReplicaIdx];
    if (idx >= 0 && size_t(idx) < replica_names.size()) d.layer = replica_names[size_t(idx)];
  } else if (d.detector == "loss_spike") {
    // A blow-up seen before any non-finite value (DESIGN.md: gradient_explosion).
    d.cause = "gradient_explosion";
  } else if (d.detector == "grad_norm_spike") {
    // The same, with the parameter whose norm rose the most on that rank (-1: none known).
    d.cause = "gradient_explosion";
    const double idx = row[kGradIdx];
    if (idx >= 0 && size_t(idx) < bwd_names.size()) d.layer = bwd_names[size_t(idx)];
  } else if (d.detector == "loss_scale") {
    // found_inf (DESIGN.md): with every activation finite, an fp16 overflow in backward.
    d.cause = "fp16_overflow";
    d.layer = bwd_names.at(size_t(row[kGradIdx]));
  } else if (d.detector == "anomaly") {
    d.cause = "gradient";  // the op name is in the blamed rank's own detect event
  }
  return d;
}

}  // namespace nanchaos::harness
