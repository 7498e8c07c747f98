// Campaign compare (see campaign_compare.h for the rules).
#include "results/campaign_compare.h"

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include "results/campaign.h"
#include "results/stats.h"

namespace nanchaos::results {
namespace {

using json = nlohmann::json;

std::string rate_text(int64_t k, int64_t n) {
  if (n == 0) return "-";
  const Interval ci = wilson95(k, n);
  return fmt::format("{:.1f}% [{:.1f}-{:.1f}] ({}/{})", 100.0 * double(k) / double(n), 100 * ci.lo,
                     100 * ci.hi, k, n);
}

// "3 / 0, p 0.125" for a paired rate, "-" otherwise.
std::string paired_text(const CampaignRateDiff& r) {
  if (!r.paired || !r.compared) return "-";
  return fmt::format("{} / {}, p {:.3g}{}", r.worse, r.better, r.p_value,
                     r.moved > 0 ? fmt::format(", {} moved", r.moved) : "");
}

// {k, n} of one rate, from summary.coverage_counts or summary.attribution_counts.X.
std::pair<int64_t, int64_t> counts(const json& doc, const std::string& metric,
                                   const std::string& side) {
  const json& sum = doc.at("summary");
  const json& r = metric == "coverage" ? sum.at("coverage_counts")
                                       : sum.at("attribution_counts").at(metric.substr(12));
  const int64_t k = r.at("k").get<int64_t>(), n = r.at("n").get<int64_t>();
  if (n < 0 || k < 0 || k > n) {
    throw std::runtime_error(
        fmt::format("{}: {}: k = {}, n = {} is not a rate", side, metric, k, n));
  }
  return {k, n};
}

// Whether the stack itself named the fault of `row`. A file written before `named_by` existed
// put the harness's post-mortem in `named`: that is not the stack's.
bool stack_named(const json& row) {
  const auto n = row.find("named");
  if (n == row.end() || !n->is_object()) return false;
  if (const auto by = row.find("named_by"); by != row.end()) return *by == "stack";
  return n->value("detector", "") != "post-mortem";
}

bool harness_named(const json& row) {
  if (const auto by = row.find("named_by"); by != row.end()) return *by == "harness";
  const auto n = row.find("named");
  return n != row.end() && n->is_object() && n->value("detector", "") == "post-mortem";
}

constexpr const char* kFinitePrefix = "finite_coverage";

bool finite_row(const json& row) { return row.value("finite", false); }

// The detector the stack named first ("" when the stack named nothing).
std::string first_detector(const json& row) {
  return stack_named(row) ? row.at("named").value("detector", "") : "";
}

// The straggler detector fired on a measured fault that slows no rank (results/campaign.h
// straggler_fired; a file older than `slows` and `detectors`: kind slow, the first detection).
std::optional<bool> straggler_false_positive(const json& row) {
  const auto o = row.find("outcome");
  if (o == row.end() || !o->is_string()) return std::nullopt;
  const bool slows = row.contains("slows") ? row["slows"].get<bool>()
                                           : row.at("fault").value("kind", "") == "slow";
  if (slows) return std::nullopt;
  const auto d = row.find("detectors");
  if (d == row.end() || d->empty()) return first_detector(row) == kStragglerDetector;
  for (const auto& name : *d) {
    if (name == kStragglerDetector) return true;
  }
  return false;
}

// Per fault, the metric's value when it is defined: coverage (not masked: did the stack name
// it), attribution.X (the stack named X: was it right), finite_coverage[.DETECTOR] (a finite
// fault not masked: did the stack (that detector, first) name it).
std::optional<bool> metric_of(const json& row, const std::string& metric) {
  const auto o = row.find("outcome");
  if (o == row.end() || !o->is_string()) return std::nullopt;
  if (metric.rfind(kFinitePrefix, 0) == 0) {
    if (*o == "masked" || !finite_row(row)) return std::nullopt;
    if (metric == kFinitePrefix) return stack_named(row);
    return first_detector(row) == metric.substr(std::string(kFinitePrefix).size() + 1);
  }
  if (metric == "coverage") {
    if (*o == "masked") return std::nullopt;
    return stack_named(row);
  }
  if (!stack_named(row)) return std::nullopt;
  const auto c = row.find("correct");
  if (c == row.end() || !c->is_object()) return std::nullopt;
  const auto v = c->find(metric.substr(12));
  if (v == c->end() || !v->is_boolean()) return std::nullopt;
  return v->get<bool>();
}

std::optional<CampaignOutcome> outcome_of(const json& row) {
  const auto it = row.find("outcome");
  if (it == row.end() || !it->is_string()) return std::nullopt;
  return parse_campaign_outcome(it->get<std::string>());
}

// Every field compare reads, checked up front, so a damaged file is an error naming the file and
// the field, never a JSON library message or a row silently left out.
void check_fields(const json& doc, const std::string& side) {
  auto fail = [&](const std::string& what) {
    throw std::runtime_error(fmt::format("{}: {}", side, what));
  };
  auto check_counts = [&](const json& r, const std::string& where) {
    if (!r.is_object() || !r.contains("k") || !r["k"].is_number_integer() || !r.contains("n") ||
        !r["n"].is_number_integer()) {
      fail(where + " is not {\"k\": integer, \"n\": integer, ...}");
    }
  };
  const json& sum = doc.at("summary");
  check_counts(sum.at("coverage_counts"), "summary.coverage_counts");
  const auto attr = sum.find("attribution_counts");
  if (attr == sum.end() || !attr->is_object()) fail("summary.attribution_counts is missing");
  for (const char* m : {"rank", "layer", "cause"}) {
    if (!attr->contains(m)) fail(fmt::format("summary.attribution_counts.{} is missing", m));
    check_counts((*attr)[m], fmt::format("summary.attribution_counts.{}", m));
  }
  if (doc.contains("seed") && !doc["seed"].is_number_integer()) fail("seed is not an integer");
  for (size_t i = 0; i < doc.at("faults").size(); ++i) {
    const json& row = doc["faults"][i];
    if (!row.is_object() || !row.contains("index") || !row["index"].is_number_integer()) {
      fail(fmt::format("faults[{}]: no integer \"index\"", i));
    }
    if (!row.contains("fault")) fail(fmt::format("faults[{}]: no \"fault\" table", i));
    if (row.contains("class") && !row["class"].is_string()) {
      fail(fmt::format("faults[{}].class is not a string", i));
    }
    for (const char* key : {"finite", "slows"}) {
      if (row.contains(key) && !row[key].is_boolean()) {
        fail(fmt::format("faults[{}].{} is not a boolean", i, key));
      }
    }
    if (row.contains("detectors")) {
      bool ok = row["detectors"].is_array();
      for (const auto& d : ok ? row["detectors"] : json::array()) ok = ok && d.is_string();
      if (!ok) fail(fmt::format("faults[{}].detectors is not an array of strings", i));
    }
    const auto o = row.find("outcome");
    if (o == row.end()) fail(fmt::format("faults[{}]: no \"outcome\" (null for an error row)", i));
    if (!o->is_null() && !(o->is_string() && parse_campaign_outcome(o->get<std::string>()))) {
      fail(fmt::format("faults[{}].outcome {} is not an outcome class", i, o->dump()));
    }
  }
}

}  // namespace

bool is_campaign_json(const json& doc) {
  return doc.is_object() && doc.contains("faults") && doc["faults"].is_array() &&
         doc.contains("summary") && doc["summary"].is_object() &&
         doc["summary"].contains("coverage_counts");
}

bool CampaignComparison::regressed() const {
  for (const auto& r : rates) {
    if (r.regressed) return true;
  }
  return straggler_fp_rose || !outcome_regressions.empty();
}

CampaignComparison compare_campaigns(const json& base, const json& fresh,
                                     const std::string& base_label,
                                     const std::string& fresh_label) {
  CampaignComparison c;
  c.base_label = base_label;
  c.fresh_label = fresh_label;
  check_fields(base, base_label);
  check_fields(fresh, fresh_label);
  // What makes the comparison mean less than it seems: said, not refused (a weakened stack is
  // a different file of the same job).
  const std::string name_a = base.value("name", ""), name_b = fresh.value("name", "");
  if (name_a != name_b) {
    c.notes.push_back(fmt::format("A and B are campaigns of different scenarios ({} and {})",
                                  name_a.empty() ? "?" : name_a, name_b.empty() ? "?" : name_b));
  }
  if (base.value("seed", json()) != fresh.value("seed", json())) {
    c.notes.push_back(fmt::format("A and B have different seeds ({} and {}): different draws",
                                  base.value("seed", json()).dump(),
                                  fresh.value("seed", json()).dump()));
  }
  for (const auto& [doc, label] : {std::pair{&base, "A"}, std::pair{&fresh, "B"}}) {
    if (doc->value("interrupted", false)) {
      c.notes.push_back(fmt::format("{} was interrupted: {} of {} faults measured", label,
                                    (*doc)["faults"].size(),
                                    doc->value("faults_requested", json()).dump()));
    } else if (!doc->value("complete", true)) {
      c.notes.push_back(fmt::format(
          "{} is incomplete (its controller had not finished: still running, or it died): {} of "
          "{} faults measured",
          label, (*doc)["faults"].size(), doc->value("faults_requested", json()).dump()));
    }
  }
  const json& fa = base.at("faults");
  const json& fb = fresh.at("faults");
  // Same draws: same seed, and every fault index of both sides is the same table.
  std::map<int64_t, const json*> by_index;
  for (const auto& row : fa) by_index[row.at("index").get<int64_t>()] = &row;
  c.same_draws = base.value("seed", json()) == fresh.value("seed", json()) && !fb.empty();
  for (const auto& row : fb) {
    auto it = by_index.find(row.at("index").get<int64_t>());
    c.same_draws =
        c.same_draws && it != by_index.end() && it->second->at("fault") == row.at("fault");
  }
  for (const auto& row : fa) c.base_harness += harness_named(row) ? 1 : 0;
  for (const auto& row : fb) c.fresh_harness += harness_named(row) ? 1 : 0;
  std::vector<std::string> metrics = {"coverage", "attribution.rank", "attribution.layer",
                                      "attribution.cause", kFinitePrefix};
  std::set<std::string> finite_detectors;
  for (const json* rows : {&fa, &fb}) {
    for (const auto& row : *rows) {
      if (metric_of(row, kFinitePrefix).value_or(false)) {
        finite_detectors.insert(first_detector(row));
      }
    }
  }
  for (const auto& det : finite_detectors)
    metrics.push_back(std::string(kFinitePrefix) + "." + det);
  // The finite rates are counted from the rows (older summaries do not hold them).
  auto row_counts = [](const json& rows, const std::string& metric) {
    std::pair<int64_t, int64_t> kn{0, 0};
    for (const auto& row : rows) {
      if (const auto m = metric_of(row, metric)) {
        ++kn.second;
        kn.first += *m ? 1 : 0;
      }
    }
    return kn;
  };
  for (const std::string& metric : metrics) {
    CampaignRateDiff d;
    d.metric = metric;
    if (metric.rfind(kFinitePrefix, 0) == 0) {
      std::tie(d.base_k, d.base_n) = row_counts(fa, metric);
      std::tie(d.fresh_k, d.fresh_n) = row_counts(fb, metric);
    } else {
      std::tie(d.base_k, d.base_n) = counts(base, metric, base_label);
      std::tie(d.fresh_k, d.fresh_n) = counts(fresh, metric, fresh_label);
    }
    if (c.same_draws) {
      d.paired = true;
      for (const auto& row : fb) {
        const json& a = *by_index.at(row.at("index").get<int64_t>());
        const auto ma = metric_of(a, metric);
        const auto mb = metric_of(row, metric);
        if (!ma || !mb) continue;
        ++d.pairs;
        // A finite fault another detector named first on the side this one lost it: moved.
        if (metric.rfind(std::string(kFinitePrefix) + ".", 0) == 0 && *ma != *mb &&
            stack_named(*ma ? row : a)) {
          ++d.moved;
          continue;
        }
        d.worse += *ma && !*mb ? 1 : 0;
        d.better += !*ma && *mb ? 1 : 0;
      }
      d.compared = d.pairs > 0;
      d.p_value = mcnemar_exact_p(d.worse, d.better);
      d.regressed = d.compared && d.p_value <= kPairedAlpha;
      if (d.regressed) {
        d.detail = fmt::format(
            "of {} faults scored on both sides, {} right in {} are wrong in {} and {} the other "
            "way: one-sided exact McNemar p = {:.3g} <= {}",
            d.pairs, d.worse, base_label, fresh_label, d.better, d.p_value, kPairedAlpha);
      }
    } else {
      d.compared = d.base_n > 0 && d.fresh_n > 0;
      if (d.compared) {
        const Interval a = wilson95(d.base_k, d.base_n), b = wilson95(d.fresh_k, d.fresh_n);
        d.regressed = b.hi < a.lo;
        if (d.regressed) {
          d.detail = fmt::format("{}'s upper bound {:.1f}% is below {}'s lower bound {:.1f}%",
                                 fresh_label, 100 * b.hi, base_label, 100 * a.lo);
        }
      }
    }
    c.rates.push_back(d);
  }
  auto straggler_counts = [](const json& rows, int64_t& k, int64_t& n) {
    for (const auto& row : rows) {
      if (const auto fp = straggler_false_positive(row)) {
        ++n;
        k += *fp ? 1 : 0;
      }
    }
  };
  straggler_counts(fa, c.base_straggler_fp, c.base_no_slowness);
  straggler_counts(fb, c.fresh_straggler_fp, c.fresh_no_slowness);
  // k_b / n_b > k_a / n_a, in integers.
  c.straggler_fp_rose =
      c.base_no_slowness > 0 && c.fresh_no_slowness > 0 &&
      c.fresh_straggler_fp * c.base_no_slowness > c.base_straggler_fp * c.fresh_no_slowness;
  if (c.same_draws) {
    for (const auto& row : fb) {
      const json& a = *by_index.at(row.at("index").get<int64_t>());
      const auto oa = outcome_of(a), ob = outcome_of(row);
      if (!oa || !ob) continue;
      ++c.faults_compared;
      if (severity(*ob) > severity(*oa)) {
        c.outcome_regressions.push_back(
            fmt::format("f{:03} {}: {} -> {}", row.at("index").get<int64_t>(),
                        row.value("class", "?"), to_string(*oa), to_string(*ob)));
      }
    }
    return c;
  }
  std::map<std::string, int> worst_a, worst_b;
  auto worst = [](const json& rows, std::map<std::string, int>& out) {
    for (const auto& row : rows) {
      if (auto o = outcome_of(row)) {
        int& w = out.emplace(row.value("class", "?"), -1).first->second;
        w = std::max(w, severity(*o));
      }
    }
  };
  worst(fa, worst_a);
  worst(fb, worst_b);
  static const char* names[] = {"masked or detected_recovered", "detected_unrecovered", "crash",
                                "hang", "silent_corruption"};
  for (const auto& [cls, wb] : worst_b) {
    auto it = worst_a.find(cls);
    if (it == worst_a.end()) continue;
    ++c.faults_compared;
    if (wb > it->second) {
      c.outcome_regressions.push_back(
          fmt::format("{}: worst outcome {} -> {}", cls, names[it->second], names[wb]));
    }
  }
  return c;
}

std::string format_markdown(const CampaignComparison& c) {
  std::string m =
      fmt::format("### nanchaos campaign compare: {} → {}\n\n", c.base_label, c.fresh_label);
  m += c.regressed() ? "**Regression.**\n\n" : "No regression.\n\n";
  for (const auto& n : c.notes) m += fmt::format("Note: {}.\n\n", n);
  m += "| metric | A | B | paired (A right, B wrong / the other way, p) | |\n"
       "|---|---|---|---|---|\n";
  for (const auto& r : c.rates) {
    m += fmt::format("| {} | {} | {} | {} | {} |\n", r.metric, rate_text(r.base_k, r.base_n),
                     rate_text(r.fresh_k, r.fresh_n), paired_text(r),
                     !r.compared   ? "not compared"
                     : r.regressed ? "**fell**"
                                   : "ok");
  }
  m += fmt::format(
      "\nRates count what the stack named (the harness's post-mortem explained {} fault(s) in A, "
      "{} in B: not in the rates). {} Outcomes compared {}: {}.\n",
      c.base_harness, c.fresh_harness,
      c.same_draws ? "Same draws: a rate regressed when the one-sided exact McNemar test on the "
                     "faults scored on both sides gives p <= 0.05."
                   : "Different draws: 95% Wilson intervals; a rate regressed when B's upper "
                     "bound is below A's lower bound.",
      c.same_draws ? "fault by fault (same draws)" : "per fault class (worst outcome)",
      c.faults_compared);
  for (const auto& r : c.rates) {
    if (r.regressed) m += fmt::format("- **{}**: {}\n", r.metric, r.detail);
  }
  m += fmt::format(
      "\nStraggler false positives (the `straggler` detector on faults that slow no "
      "rank): A {}/{}, B {}/{}{}.\n",
      c.base_straggler_fp, c.base_no_slowness, c.fresh_straggler_fp, c.fresh_no_slowness,
      c.straggler_fp_rose ? " — **rose**" : "");
  for (const auto& o : c.outcome_regressions) m += fmt::format("- **outcome**: {}\n", o);
  return m;
}

std::string format_text(const CampaignComparison& c) {
  std::string t = fmt::format("campaign compare: A = {}, B = {}\n", c.base_label, c.fresh_label);
  for (const auto& n : c.notes) t += "  note: " + n + "\n";
  for (const auto& r : c.rates) {
    t += fmt::format("  {:<26} A {:<30} B {:<30} {:<22} {}\n", r.metric,
                     rate_text(r.base_k, r.base_n), rate_text(r.fresh_k, r.fresh_n), paired_text(r),
                     !r.compared   ? "not compared"
                     : r.regressed ? "FELL"
                                   : "ok");
  }
  t += fmt::format("  outcomes compared {}: {}\n", c.same_draws ? "fault by fault" : "per class",
                   c.faults_compared);
  t += fmt::format("  straggler false positives: A {}/{}, B {}/{}{}\n", c.base_straggler_fp,
                   c.base_no_slowness, c.fresh_straggler_fp, c.fresh_no_slowness,
                   c.straggler_fp_rose ? "  ROSE" : "");
  for (const auto& o : c.outcome_regressions) t += "  worse outcome: " + o + "\n";
  t += c.regressed() ? "REGRESSION\n" : "no regression\n";
  return t;
}

json format_json(const CampaignComparison& c) {
  json rates = json::array();
  for (const auto& r : c.rates) {
    rates.push_back({{"metric", r.metric},
                     {"base", {{"k", r.base_k}, {"n", r.base_n}}},
                     {"new", {{"k", r.fresh_k}, {"n", r.fresh_n}}},
                     {"compared", r.compared},
                     {"paired", r.paired ? json({{"pairs", r.pairs},
                                                 {"worse", r.worse},
                                                 {"better", r.better},
                                                 {"moved", r.moved},
                                                 {"p_value", r.p_value}})
                                         : json(nullptr)},
                     {"regressed", r.regressed},
                     {"detail", r.detail}});
  }
  return {{"base", c.base_label},
          {"new", c.fresh_label},
          {"same_draws", c.same_draws},
          {"compared", c.faults_compared},
          {"notes", c.notes},
          {"rates", rates},
          {"outcome_regressions", c.outcome_regressions},
          {"harness_explained", {{"base", c.base_harness}, {"new", c.fresh_harness}}},
          {"straggler_false_positives",
           {{"base", {{"k", c.base_straggler_fp}, {"n", c.base_no_slowness}}},
            {"new", {{"k", c.fresh_straggler_fp}, {"n", c.fresh_no_slowness}}},
            {"rose", c.straggler_fp_rose}}},
          {"regressed", c.regressed()}};
}

int run_campaign_compare(const std::string& base_path, const std::string& fresh_path,
                         const std::string& format, std::ostream& out, std::ostream& err) {
  auto load = [](const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error(path + ": cannot open");
    json doc = json::parse(in, nullptr, false);
    if (doc.is_discarded()) throw std::runtime_error(path + ": not JSON");
    if (!is_campaign_json(doc)) throw std::runtime_error(path + ": not a campaign.json");
    return doc;
  };
  CampaignComparison c;
  try {
    c = compare_campaigns(load(base_path), load(fresh_path), base_path, fresh_path);
  } catch (const std::exception& e) {
    err << "nanchaos compare: error: " << e.what() << "\n";
    return 2;
  }
  if (format == "md") {
    out << format_markdown(c);
  } else if (format == "json") {
    out << format_json(c).dump(2) << "\n";
  } else {
    out << format_text(c);
  }
  return c.regressed() ? 1 : 0;
}

}  // namespace nanchaos::results
