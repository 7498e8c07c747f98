// campaign.json read back (campaign.h campaign_from_json), for `nanchaos merge` of a campaign
// run in shards (`nanchaos campaign --shard I/N`): the inverse of campaign.cpp's fault rows, so
// that a row written and read back is written the same (tests/results/campaign_test.cpp). The
// summary is not read: the merge computes it again from the rows (summarize_campaign).
#include <stdexcept>

#include "results/campaign.h"

namespace nanchaos::results {
namespace {

using ojson = nlohmann::ordered_json;

std::string str(const ojson& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? std::string() : it->get<std::string>();
}

template <class T>
std::optional<T> opt(const ojson& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return it->get<T>();
}

Named named_from(const ojson& j) {
  return {j.at("detector").get<std::string>(), j.at("rank").get<std::vector<int64_t>>(),
          j.at("step").get<int64_t>(), str(j, "layer"), str(j, "cause")};
}

CampaignFault fault_from(const ojson& j) {
  CampaignFault f;
  f.index = j.at("index").get<int>();
  f.fault_class = j.at("class").get<std::string>();
  f.fault = j.at("fault");
  f.finite = j.value("finite", false);  // absent from files older than --values: not finite
  // Files older than the key: a slow fault was the one kind that slows a rank.
  f.slows = j.value("slows", f.fault.value("kind", std::string()) == "slow");
  f.detectors = j.value("detectors", std::vector<std::string>());
  const ojson& t = j.at("truth");
  f.truth.ranks = t.at("rank").get<std::vector<int64_t>>();
  f.truth.step = t.at("step").get<int64_t>();
  f.truth.layer = opt<std::string>(t, "layer");
  f.truth.cause = t.at("cause").get<std::string>();
  if (auto it = j.find("named"); it != j.end() && !it->is_null()) f.named = named_from(*it);
  if (auto it = j.find("harness_named"); it != j.end() && !it->is_null()) {
    f.harness_named = named_from(*it);
    f.harness_latency_steps = opt<int64_t>(*it, "latency_steps");
    f.harness_latency_ms = opt<double>(*it, "latency_ms");
    const ojson& c = it->at("correct");
    f.harness_rank_ok = opt<bool>(c, "rank");
    f.harness_cause_ok = opt<bool>(c, "cause");
  }
  if (auto it = j.find("late_detection"); it != j.end() && !it->is_null()) {
    f.late = named_from(*it);
  }
  if (const std::string o = str(j, "outcome"); !o.empty()) {
    f.outcome = parse_campaign_outcome(o);
    if (!f.outcome) throw std::runtime_error("unknown outcome \"" + o + "\"");
  }
  f.latency_steps = opt<int64_t>(j, "latency_steps");
  f.latency_ms = opt<double>(j, "latency_ms");
  const ojson& c = j.at("correct");
  f.rank_ok = opt<bool>(c, "rank");
  f.layer_ok = opt<bool>(c, "layer");
  f.cause_ok = opt<bool>(c, "cause");
  f.false_positives = j.value("false_positives", int64_t(0));
  f.error = str(j, "error");
  f.wall_ms = j.value("wall_ms", 0.0);
  f.scenario = str(j, "scenario");
  f.rerun = str(j, "rerun");
  return f;
}

}  // namespace

Campaign campaign_from_json(const ojson& j) {
  Campaign c;
  try {
    c.scenario = j.value("scenario", std::string());
    c.name = j.value("name", std::string());
    c.seed = j.at("seed").get<uint64_t>();
    c.requested = j.at("faults_requested").get<int64_t>();
    c.kinds = j.value("kinds", std::vector<std::string>());
    c.values = j.value("values", std::string("any"));
    c.jobs = j.value("jobs", 1);
    c.started = j.value("started", std::string());
    c.nanchaos_version = j.value("nanchaos_version", std::string());
    c.wall_s = j.value("wall_s", 0.0);
    c.interrupted = j.value("interrupted", false);
    c.complete = j.value("complete", true);
    for (const auto& row : j.at("faults")) {
      try {
        c.faults.push_back(fault_from(row));
      } catch (const std::exception& e) {
        throw std::runtime_error("faults[index " + row.value("index", ojson(-1)).dump() +
                                 "]: " + e.what());
      }
    }
    if (auto it = j.find("thresholds"); it != j.end()) {
      c.thresholds = nlohmann::json::parse(it->dump());
    }
    if (auto it = j.find("shard"); it != j.end() && it->is_object()) {
      c.shard = ShardInfo{it->value("index", 0), it->value("count", 0), {}};
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("campaign.json: ") + e.what());
  }
  c.summary = summarize_campaign(c.faults);
  return c;
}

nlohmann::json recheck_thresholds(const nlohmann::json& thresholds, const CampaignSummary& sum) {
  const std::pair<const char*, const Rate*> rates[] = {{"min_coverage", &sum.all.coverage},
                                                       {"min_attribution_rank", &sum.all.rank},
                                                       {"min_attribution_layer", &sum.all.layer},
                                                       {"min_attribution_cause", &sum.all.cause}};
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, rate] : rates) {
    auto it = thresholds.find(key);
    if (it == thresholds.end() || !it->contains("min")) continue;
    const double min = it->at("min").get<double>();
    out[key] = {{"min", min},
                {"actual", rate->rate ? nlohmann::json(*rate->rate) : nlohmann::json(nullptr)},
                {"pass", rate->rate && *rate->rate >= min}};
  }
  return out;
}

}  // namespace nanchaos::results
