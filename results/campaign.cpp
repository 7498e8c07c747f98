// Campaign scoring and campaign.json (see campaign.h for the rules).
#include "results/campaign.h"

#include <fmt/format.h>

#include <algorithm>

#include "harness/common/cause.h"
#include "results/text.h"

namespace nanchaos::results {

using harness::Cause;

using ojson = nlohmann::ordered_json;

const char* to_string(CampaignOutcome o) {
  switch (o) {
    case CampaignOutcome::kMasked:
      return "masked";
    case CampaignOutcome::kDetectedRecovered:
      return "detected_recovered";
    case CampaignOutcome::kDetectedUnrecovered:
      return "detected_unrecovered";
    case CampaignOutcome::kSilentCorruption:
      return "silent_corruption";
    case CampaignOutcome::kHang:
      return "hang";
    case CampaignOutcome::kCrash:
      return "crash";
  }
  return "?";
}

const std::vector<CampaignOutcome>& campaign_outcomes() {
  static const std::vector<CampaignOutcome> all = {CampaignOutcome::kMasked,
                                                   CampaignOutcome::kDetectedRecovered,
                                                   CampaignOutcome::kDetectedUnrecovered,
                                                   CampaignOutcome::kSilentCorruption,
                                                   CampaignOutcome::kHang,
                                                   CampaignOutcome::kCrash};
  return all;
}

std::optional<CampaignOutcome> parse_campaign_outcome(const std::string& s) {
  for (CampaignOutcome o : campaign_outcomes()) {
    if (s == to_string(o)) return o;
  }
  return std::nullopt;
}

int severity(CampaignOutcome o) {
  switch (o) {
    case CampaignOutcome::kMasked:
    case CampaignOutcome::kDetectedRecovered:
      return 0;
    case CampaignOutcome::kDetectedUnrecovered:
      return 1;
    case CampaignOutcome::kCrash:
      return 2;
    case CampaignOutcome::kHang:
      return 3;
    case CampaignOutcome::kSilentCorruption:
      return 4;
  }
  return 4;
}

Rate make_rate(int64_t k, int64_t n) {
  Rate r;
  r.k = k;
  r.n = n;
  if (n > 0) {
    r.rate = double(k) / double(n);
    r.ci95 = wilson95(k, n);
  }
  return r;
}

const char* to_string(NamedBy b) {
  switch (b) {
    case NamedBy::kStack:
      return "stack";
    case NamedBy::kHarness:
      return "harness";
    case NamedBy::kNone:
      return nullptr;
  }
  return nullptr;
}

bool layer_matches(const std::string& truth_layer, const std::string& named_layer) {
  return !truth_layer.empty() && truth_layer == named_layer;
}

namespace {

// A crash the stack never reported (the launcher tears the survivors down before their watchdog
// fires) but the harness's post-mortem explains: the dead ranks, cause rank_failure, detector
// "post-mortem", as torchrun's elastic agent reports the rank that exited. Its step is the last
// step a survivor entered a collective of; its latency, the fault to the job's end. This is the
// harness's knowledge, kept in `harness_named`: it never counts as the stack's detection.
void explain_dead_rank(const ScenarioResult& judged, const Truth& truth, CampaignFault* row) {
  if (!judged.judged) return;
  const PostMortem& pm = judged.judged->postmortem;
  if (!pm.blame || pm.blame->cause != to_string(Cause::kRankFailure)) return;
  Named n;
  n.detector = "post-mortem";
  n.ranks = pm.blame->ranks;
  std::sort(n.ranks.begin(), n.ranks.end());
  n.cause = to_string(Cause::kRankFailure);
  n.step = truth.step;
  for (const auto& [rank, c] : pm.last_collective) {
    if (!c) continue;
    if (std::binary_search(n.ranks.begin(), n.ranks.end(), rank)) continue;
    n.step = std::max(n.step, c->step);
  }
  row->harness_latency_steps = n.step - truth.step;
  if (judged.judged->abort_latency_ms) row->harness_latency_ms = *judged.judged->abort_latency_ms;
  row->harness_rank_ok = n.ranks == truth.ranks;
  row->harness_cause_ok = n.cause == truth.cause;
  row->harness_named = std::move(n);
}

}  // namespace

CampaignFault score_fault(int index, const ojson& fault, const std::string& fault_class,
                          const Truth& truth, const ScenarioResult& judged,
                          const ScoringRules& rules) {
  CampaignFault row;
  row.index = index;
  row.fault = fault;
  row.fault_class = fault_class;
  row.truth = truth;
  row.wall_ms = judged.wall_ms;
  if (judged.judged) row.false_positives = judged.judged->false_positives;
  for (const auto& d : judged.detections) {
    if (d.detector != "collective_mismatch") row.detectors.push_back(d.detector);
  }
  std::sort(row.detectors.begin(), row.detectors.end());
  row.detectors.erase(std::unique(row.detectors.begin(), row.detectors.end()), row.detectors.end());
  // A fault that never fired measured nothing: its row is an error, out of every rate.
  if (judged.injections.empty() || judged.outcome == Outcome::kNone) {
    row.error = judged.reason.empty() ? "the fault never fired" : judged.reason;
    return row;
  }
  // The judge may put the flight recorder's `collective_mismatch` first (the earliest
  // evidence); it is the harness's reading, so the stack is scored on its own first detection
  // after it, and the mismatch is kept beside, in harness_named.
  const Detection* first = judged.first_detection ? &*judged.first_detection : nullptr;
  std::optional<Detection> own;
  if (first && first->detector == "collective_mismatch") {
    Named m;
    m.detector = first->detector;
    m.ranks = first->ranks;
    std::sort(m.ranks.begin(), m.ranks.end());
    m.step = first->step;
    row.harness_latency_steps = m.step - truth.step;
    row.harness_latency_ms = first->latency_ms;
    row.harness_rank_ok = m.ranks == truth.ranks;
    row.harness_cause_ok = m.cause == truth.cause;
    row.harness_named = std::move(m);
    first = nullptr;
    for (const auto& d : judged.detections) {
      if (d.detector == "collective_mismatch" || d.step < judged.first_detection->step) continue;
      own = d;
      own->latency_steps = d.step - truth.step;
      own->latency_ms.reset();  // the judge times only its first detection
      first = &*own;
      break;
    }
  }
  if (first) {
    const Detection& d = *first;
    Named n;
    n.detector = d.detector;
    n.ranks = d.ranks;
    std::sort(n.ranks.begin(), n.ranks.end());
    n.step = d.step;
    n.layer = d.layer;
    n.cause = d.cause;
    if (d.step - truth.step > rules.within_steps) {
      row.late = std::move(n);  // too late to be this fault's detection
    } else {
      row.latency_steps = d.latency_steps;
      row.latency_ms = d.latency_ms;
      row.rank_ok = !truth.ranks.empty() && n.ranks == truth.ranks;
      if (truth.layer) row.layer_ok = layer_matches(*truth.layer, n.layer);
      row.cause_ok = n.cause == truth.cause;
      row.named = std::move(n);
    }
  }
  if (!row.named && !row.late && !row.harness_named) explain_dead_rank(judged, truth, &row);
  const bool detected = row.named.has_value();
  // [job] restarts: the relaunch is the recovery of a crash or a hang; it worked when the job
  // finished and (built-in jobs) ended as the clean run did.
  const bool stops_job =
      truth.cause == to_string(Cause::kRankFailure) || truth.cause == to_string(Cause::kHang);
  if (rules.restarts > 0 && stops_job && judged.outcome == Outcome::kCompleted) {
    const auto clean = std::find_if(judged.checks.begin(), judged.checks.end(),
                                    [](const Check& c) { return c.key == "final_matches_clean"; });
    row.outcome = clean == judged.checks.end() || clean->pass
                      ? CampaignOutcome::kDetectedRecovered
                      : CampaignOutcome::kDetectedUnrecovered;
  } else if (judged.outcome == Outcome::kHung || judged.fault_outcome == FaultOutcome::kHang) {
    row.outcome = CampaignOutcome::kHang;
  } else if (judged.outcome == Outcome::kCrashed && !detected) {
    row.outcome = CampaignOutcome::kCrash;
  } else {
    switch (judged.fault_outcome) {
      case FaultOutcome::kMasked:
        row.outcome = CampaignOutcome::kMasked;
        break;
      case FaultOutcome::kDetectedRecovered:
        row.outcome = CampaignOutcome::kDetectedRecovered;
        break;
      case FaultOutcome::kDetectedUnrecovered:
        row.outcome = CampaignOutcome::kDetectedUnrecovered;
        break;
      case FaultOutcome::kSilentCorruption:
        row.outcome = CampaignOutcome::kSilentCorruption;
        break;
      case FaultOutcome::kHang:
        row.outcome = CampaignOutcome::kHang;
        break;
      case FaultOutcome::kNone:
        row.error = judged.reason.empty() ? "the judge gave no fault outcome" : judged.reason;
        break;
    }
  }
  return row;
}

namespace {

// Adds one measured row to a class summary (rates are finished by finish()).
struct Tally {
  ClassSummary s;
  int64_t covered_k = 0, covered_n = 0;
  int64_t rank_k = 0, rank_n = 0, layer_k = 0, layer_n = 0, cause_k = 0, cause_n = 0;
  int64_t explained_k = 0, explained_n = 0;
  int64_t h_rank_k = 0, h_rank_n = 0, h_cause_k = 0, h_cause_n = 0;

  static void count(const std::optional<bool>& ok, int64_t& k, int64_t& n) {
    if (!ok) return;
    ++n;
    k += *ok ? 1 : 0;
  }
  void add(const CampaignFault& f) {
    ++s.faults;
    if (!f.outcome) {
      ++s.errors;
      return;
    }
    ++s.outcomes[to_string(*f.outcome)];
    s.worst = std::max(s.worst, severity(*f.outcome));
    if (f.named) ++s.detected;
    if (f.late) ++s.late;
    if (*f.outcome != CampaignOutcome::kMasked) {
      ++covered_n;
      covered_k += f.named ? 1 : 0;
      if (!f.named) {
        ++explained_n;
        explained_k += f.harness_named ? 1 : 0;
      }
    }
    count(f.rank_ok, rank_k, rank_n);
    count(f.layer_ok, layer_k, layer_n);
    count(f.cause_ok, cause_k, cause_n);
    count(f.harness_rank_ok, h_rank_k, h_rank_n);
    count(f.harness_cause_ok, h_cause_k, h_cause_n);
  }
  ClassSummary finish() {
    for (CampaignOutcome o : campaign_outcomes()) s.outcomes.emplace(to_string(o), 0);
    s.coverage = make_rate(covered_k, covered_n);
    s.rank = make_rate(rank_k, rank_n);
    s.layer = make_rate(layer_k, layer_n);
    s.cause = make_rate(cause_k, cause_n);
    s.harness_explained = make_rate(explained_k, explained_n);
    s.harness_rank = make_rate(h_rank_k, h_rank_n);
    s.harness_cause = make_rate(h_cause_k, h_cause_n);
    return s;
  }
};

ojson opt_json(const std::optional<double>& v) { return v ? ojson(*v) : ojson(nullptr); }

// What the harness explained, beside the stack's figures (never inside them).
ojson harness_json(const ClassSummary& s) {
  return {{"explained", to_json(s.harness_explained)},
          {"rank", to_json(s.harness_rank)},
          {"cause", to_json(s.harness_cause)}};
}

ojson named_json(const Named& n) {
  return {{"detector", n.detector},
          {"rank", n.ranks},
          {"step", n.step},
          {"layer", n.layer.empty() ? ojson(nullptr) : ojson(n.layer)},
          {"cause", n.cause.empty() ? ojson(nullptr) : ojson(n.cause)}};
}

ojson class_json(const ClassSummary& s) {
  ojson j;
  j["faults"] = s.faults;
  j["errors"] = s.errors;
  j["detected"] = s.detected;
  j["coverage"] = to_json(s.coverage);
  j["attribution"] = {
      {"rank", to_json(s.rank)}, {"layer", to_json(s.layer)}, {"cause", to_json(s.cause)}};
  ojson outcomes = ojson::object();
  for (CampaignOutcome o : campaign_outcomes())
    outcomes[to_string(o)] = s.outcomes.at(to_string(o));
  j["outcomes"] = outcomes;
  j["worst_outcome"] = s.worst < 0 ? ojson(nullptr) : ojson(s.worst);
  j["late"] = s.late;
  j["harness"] = harness_json(s);
  return j;
}

ojson summary_json(const std::optional<Summary>& s) {
  if (!s) return {{"p50", nullptr}, {"p95", nullptr}, {"max", nullptr}, {"n", 0}};
  return {{"p50", s->p50}, {"p95", s->p95}, {"max", s->max}, {"n", s->n}};
}

ojson fault_json(const CampaignFault& f) {
  ojson j;
  j["index"] = f.index;
  j["class"] = f.fault_class;
  j["fault"] = f.fault;
  j["finite"] = f.finite;
  j["slows"] = f.slows;
  j["truth"] = {{"rank", f.truth.ranks},
                {"step", f.truth.step},
                {"layer", f.truth.layer ? ojson(*f.truth.layer) : ojson(nullptr)},
                {"cause", f.truth.cause}};
  j["named"] = f.named ? named_json(*f.named) : ojson(nullptr);
  const char* by = to_string(f.named_by());
  j["named_by"] = by ? ojson(by) : ojson(nullptr);
  if (f.harness_named) {
    ojson h = named_json(*f.harness_named);
    h["latency_steps"] = f.harness_latency_steps ? ojson(*f.harness_latency_steps) : ojson(nullptr);
    h["latency_ms"] = opt_json(f.harness_latency_ms);
    h["correct"] = {{"rank", *f.harness_rank_ok}, {"cause", *f.harness_cause_ok}};
    j["harness_named"] = h;
  }
  if (f.late) j["late_detection"] = named_json(*f.late);
  j["outcome"] = f.outcome ? ojson(to_string(*f.outcome)) : ojson(nullptr);
  j["latency_steps"] = f.latency_steps ? ojson(*f.latency_steps) : ojson(nullptr);
  j["latency_ms"] = opt_json(f.latency_ms);
  auto ok = [](const std::optional<bool>& b) { return b ? ojson(*b) : ojson(nullptr); };
  j["correct"] = {{"rank", ok(f.rank_ok)}, {"layer", ok(f.layer_ok)}, {"cause", ok(f.cause_ok)}};
  // What a reader of a wrong attribution needs: what was expected and what was named.
  if ((f.rank_ok && !*f.rank_ok) || (f.layer_ok && !*f.layer_ok) || (f.cause_ok && !*f.cause_ok)) {
    ojson expected, named;
    if (f.rank_ok && !*f.rank_ok) {
      expected["rank"] = f.truth.ranks;
      named["rank"] = f.named->ranks;
    }
    if (f.layer_ok && !*f.layer_ok) {
      expected["layer"] = *f.truth.layer;
      named["layer"] = f.named->layer;
    }
    if (f.cause_ok && !*f.cause_ok) {
      expected["cause"] = f.truth.cause;
      named["cause"] = f.named->cause;
    }
    j["attribution_error"] = {{"expected", expected}, {"named", named}};
  }
  j["false_positives"] = f.false_positives;
  j["detectors"] = f.detectors;
  if (!f.error.empty()) j["error"] = f.error;
  j["wall_ms"] = f.wall_ms;
  j["scenario"] = f.scenario;
  j["rerun"] = f.rerun;
  return j;
}

}  // namespace

bool straggler_fired(const CampaignFault& f) {
  if (f.detectors.empty()) return f.named && f.named->detector == kStragglerDetector;
  return std::binary_search(f.detectors.begin(), f.detectors.end(),
                            std::string(kStragglerDetector));
}

CampaignSummary summarize_campaign(const std::vector<CampaignFault>& faults) {
  CampaignSummary out;
  Tally all;
  std::map<std::string, Tally> by_class;
  std::vector<double> steps, ms;
  int64_t finite_k = 0, finite_n = 0, quiet_k = 0, quiet_n = 0;
  std::map<std::string, int64_t> finite_first;  // detector -> finite faults it named first
  for (const auto& f : faults) {
    all.add(f);
    by_class[f.fault_class].add(f);
    out.false_positives += f.false_positives;
    if (!f.outcome) continue;
    if (!f.slows) {
      ++quiet_n;
      quiet_k += straggler_fired(f) ? 1 : 0;
    }
    out.finite_faults += f.finite ? 1 : 0;
    if (f.finite && *f.outcome != CampaignOutcome::kMasked) {
      ++finite_n;
      if (f.named) {
        ++finite_k;
        ++finite_first[f.named->detector];
      }
    }
    // A masked fault the stack did not name had nothing to name: it is not a miss (coverage leaves
    // it out too), so it stays out of the confusion matrix instead of counting under "-".
    if (*f.outcome == CampaignOutcome::kMasked && !f.named) continue;
    const std::string named_cause = f.named && !f.named->cause.empty() ? f.named->cause : "-";
    ++out.confusion[f.truth.cause][named_cause];
    if (!f.named) continue;
    ++out.detector_by_class[f.named->detector][f.fault_class];
    if (f.latency_steps) steps.push_back(double(*f.latency_steps));
    if (f.latency_ms) ms.push_back(*f.latency_ms);
  }
  out.all = all.finish();
  for (auto& [name, t] : by_class) out.by_class[name] = t.finish();
  out.latency_steps = summarize(steps);
  out.latency_ms = summarize(ms);
  out.finite_coverage = make_rate(finite_k, finite_n);
  for (const auto& [detector, k] : finite_first) {
    out.finite_by_detector[detector] = make_rate(k, finite_n);
  }
  out.straggler_false_positives = make_rate(quiet_k, quiet_n);
  return out;
}

ojson to_json(const Rate& r) {
  ojson j;
  j["k"] = r.k;
  j["n"] = r.n;
  j["rate"] = opt_json(r.rate);
  j["ci95"] = r.ci95 ? ojson::array({r.ci95->lo, r.ci95->hi}) : ojson(nullptr);
  return j;
}

ojson to_json(const Campaign& c) {
  const CampaignSummary& s = c.summary;
  ojson j;
  j["scenario"] = c.scenario;
  j["name"] = c.name;
  j["seed"] = c.seed;
  j["faults_requested"] = c.requested;
  j["kinds"] = c.kinds;
  j["values"] = c.values;
  j["jobs"] = c.jobs;
  j["started"] = c.started;
  j["nanchaos_version"] = c.nanchaos_version;
  j["wall_s"] = c.wall_s;
  j["complete"] = c.complete;
  j["interrupted"] = c.interrupted;
  ojson rows = ojson::array();
  for (const auto& f : c.faults) rows.push_back(fault_json(f));
  j["faults"] = rows;
  ojson sum;
  // The contract's fields first (SCENARIO_FORMAT.md "Campaigns"), then the extras.
  sum["faults"] = s.all.faults;
  sum["coverage"] = opt_json(s.all.coverage.rate);
  sum["coverage_ci95"] = s.all.coverage.ci95
                             ? ojson::array({s.all.coverage.ci95->lo, s.all.coverage.ci95->hi})
                             : ojson(nullptr);
  sum["attribution"] = {{"rank", opt_json(s.all.rank.rate)},
                        {"layer", opt_json(s.all.layer.rate)},
                        {"cause", opt_json(s.all.cause.rate)}};
  ojson outcomes = ojson::object();
  for (CampaignOutcome o : campaign_outcomes()) {
    outcomes[to_string(o)] = s.all.outcomes.at(to_string(o));
  }
  sum["outcomes"] = outcomes;
  ojson steps = summary_json(s.latency_steps);
  steps.erase("n");
  sum["latency_steps"] = steps;
  sum["false_positives"] = s.false_positives;
  sum["errors"] = s.all.errors;
  sum["detected"] = s.all.detected;
  sum["coverage_counts"] = to_json(s.all.coverage);
  sum["attribution_counts"] = class_json(s.all)["attribution"];
  sum["latency_ms"] = summary_json(s.latency_ms);
  // Beside the stack's figures: what the harness itself explained (crashes its post-mortem named)
  // among the faults the stack missed, and the stack's detections too late to count.
  sum["harness"] = harness_json(s.all);
  sum["late_detections"] = s.all.late;
  ojson classes = ojson::object();
  for (const auto& [name, cs] : s.by_class) classes[name] = class_json(cs);
  sum["by_class"] = classes;
  sum["detector_by_class"] = s.detector_by_class;
  sum["confusion"] = s.confusion;
  // Finite faults apart (rows with `finite`), and the straggler detector on rows that slow no
  // rank: campaign_compare.h gates on both.
  ojson by_detector = ojson::object();
  for (const auto& [detector, r] : s.finite_by_detector) by_detector[detector] = to_json(r);
  sum["finite"] = {
      {"faults", s.finite_faults},
      {"coverage", opt_json(s.finite_coverage.rate)},
      {"coverage_ci95", s.finite_coverage.ci95
                            ? ojson::array({s.finite_coverage.ci95->lo, s.finite_coverage.ci95->hi})
                            : ojson(nullptr)},
      {"coverage_counts", to_json(s.finite_coverage)},
      {"by_detector", by_detector}};
  sum["straggler_false_positives"] = s.straggler_false_positives.k;
  sum["no_slowness_faults"] = s.straggler_false_positives.n;
  j["summary"] = sum;
  j["thresholds"] = c.thresholds;
  if (c.shard) j["shard"] = {{"index", c.shard->index}, {"count", c.shard->count}};
  return j;
}

void write_campaign_json(const Campaign& c, const std::string& path) {
  // Every number in it is finite (values a fault writes are the strings "nan", "inf", "-inf").
  const std::string text = to_json(c).dump(2) + "\n";
  write_file(path, [&](std::ofstream& out) { out << text; });
}

}  // namespace nanchaos::results
