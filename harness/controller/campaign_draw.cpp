// Drawing a campaign's faults (see campaign_draw.h). Every choice below comes from one
// SplitMix64 stream per (seed, fault index, attempt): no std::*_distribution, no other state, so
// the same seed draws the same faults on any compiler (docs/generator.md "Campaign draws").
// Only the generic part is drawn here (kind, ranks, step); what is particular to a kind (its
// keys, refusal, class and ground truth) is its FaultKindInfo's, in inject/<kind>.cpp.
#include "harness/controller/campaign_draw.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include "harness/common/rng.h"
#include "harness/controller/stop_signal.h"
#include "harness/scenario/fault_draw.h"
#include "harness/scenario/keys.h"
#include "harness/scenario/model_spec.h"
#include "harness/scenario/registry.h"

namespace fs = std::filesystem;

namespace nanchaos::harness {
namespace {

using ojson = nlohmann::ordered_json;
using inject::mix;
using inject::SplitMix64;

constexpr uint64_t kCampaignSalt = 0xCA4A;
constexpr int kMaxAttempts = 20;

// Why `info`'s kind cannot be drawn for this job ("" when it can): the generic rule (an
// external job runs the Python agent), then the kind's own.
std::string kind_refusal(const FaultKindInfo& info, const Scenario& s, const CampaignTargets& t,
                         bool requested, DrawValues values) {
  if (s.job.external() && !info.python_agent) return "not applied by the agent of external jobs";
  const std::string why = info.refusal ? info.refusal(s, t, requested) : "";
  if (!why.empty() || !info.values_refusal) return why;
  const std::string by_values = info.values_refusal(values);
  return by_values.empty() ? "" : fmt::format("--values {}: {}", to_string(values), by_values);
}

const FaultKindInfo& kind_of(const ojson& f) {
  const std::string kind = f.at("kind").get<std::string>();
  const FaultKindInfo* info = find_fault_kind(kind);
  if (info == nullptr) throw CampaignError("a drawn fault of unknown kind \"" + kind + "\"");
  return *info;
}

template <class T>
const T& pick(SplitMix64& g, const std::vector<T>& items) {
  return items.at(size_t(g.below(items.size())));
}

DrawnFault draw_one(const Scenario& s, const CampaignTargets& t,
                    const std::vector<std::string>& kinds, uint64_t seed, int index, int attempt,
                    DrawValues values) {
  SplitMix64 g(mix(mix(mix(seed, kCampaignSalt), uint64_t(index)), uint64_t(attempt)));
  const auto [first, last] = fault_step_window(s.job.steps);
  DrawnFault d;
  d.index = index;
  d.redraws = attempt;
  ojson& f = d.fault;
  const std::string kind = pick(g, kinds);
  f["kind"] = kind;
  const FaultKindInfo& info = kind_of(f);
  const uint64_t world = uint64_t(s.job.ranks);
  // A hang or a crash of every rank leaves nobody to notice: those hit one rank.
  const bool one_rank = info.stops_job || world < 2;
  if (!one_rank && g.below(4) == 0) {
    f["ranks"] = "all";
  } else {
    f["ranks"] = ojson::array({int64_t(g.below(world))});
  }
  f["step"] = first + int64_t(g.below(uint64_t(last - first + 1)));
  FaultDraw draw(g, s, t, values);
  info.draw(draw, f);
  d.fault_class = fault_class_of(f);
  d.finite = info.finite && info.finite(f, s);
  d.slows = info.slows_rank;
  d.truth = truth_of(f, s.job.ranks);
  if (info.companions) d.companions = info.companions(f, s);
  return d;
}

// A JSON scalar or array as the TOML value the loader reads.
void put(toml::table& t, const std::string& key, const ojson& v) {
  if (v.is_string()) {
    t.insert_or_assign(key, v.get<std::string>());
  } else if (v.is_boolean()) {
    t.insert_or_assign(key, v.get<bool>());
  } else if (v.is_number_integer()) {
    t.insert_or_assign(key, v.get<int64_t>());
  } else if (v.is_number()) {
    t.insert_or_assign(key, v.get<double>());
  } else if (v.is_array()) {
    toml::array a;
    for (const auto& e : v) a.push_back(e.get<int64_t>());
    t.insert_or_assign(key, std::move(a));
  }
}

}  // namespace

CampaignTargets builtin_targets(const Scenario& s) {
  const std::optional<ModelSpec> model = listed_model(s);
  if (!model) {
    throw CampaignError(
        fmt::format("{}: a campaign over this job needs its module names: {}", s.file,
                    s.job.external() ? "an external job's come from its dry run"
                                     : "the model has more layers than the loader lists"));
  }
  CampaignTargets t;
  t.modules = model->modules;
  for (const auto& p : model->parameters) t.parameters.push_back(p.name);
  t.optimizer_state = s.workload.optimizer != Optimizer::kSgd;
  return t;
}

std::pair<int64_t, int64_t> fault_step_window(int64_t steps) {
  const int64_t first = std::max<int64_t>(1, steps / 5);
  const int64_t last = steps - 1 - std::max<int64_t>(2, steps / 5);
  if (last < first) {
    throw CampaignError(fmt::format(
        "[job].steps = {} is too short for a campaign: faults are drawn from step max(1, "
        "steps/5) to steps - 1 - max(2, steps/5), which leaves no step; use at least 4 steps",
        steps));
  }
  return {first, last};
}

std::vector<std::string> split_kinds_option(const std::string& text) {
  std::vector<std::string> out;
  for (size_t b = 0; b <= text.size();) {
    const size_t e = std::min(text.find(',', b), text.size());
    const size_t first = text.find_first_not_of(" \t", b);
    const size_t last = text.find_last_not_of(" \t", e == 0 ? 0 : e - 1);
    if (first >= e || last == std::string::npos || last < first) {
      throw CampaignError(fmt::format(
          "--kinds \"{}\": {}; give comma-separated kinds, e.g. --kinds tensor,lr", text,
          text.find_first_not_of(" \t,") == std::string::npos ? "names no kind"
                                                              : "has an empty item"));
    }
    out.push_back(text.substr(first, last - first + 1));
    b = e + 1;
  }
  return out;
}

DrawValues parse_values_option(const std::string& text) {
  if (const auto v = parse_draw_values(text)) return *v;
  throw CampaignError(fmt::format(
      "--values \"{}\": expected finite (a factor in [1.01, 100], a mantissa or low exponent "
      "bit), nonfinite (NaN and Inf only) or any (the default)",
      text));
}

std::vector<std::string> campaign_kinds(const Scenario& s, const CampaignTargets& t,
                                        const std::vector<std::string>& wanted, DrawValues values) {
  std::vector<std::string> out;
  if (!wanted.empty()) {
    std::vector<std::string> known;
    for (const auto& [name, info] : fault_kinds()) known.push_back(name);
    for (const auto& k : wanted) {
      auto it = fault_kinds().find(k);
      if (it == fault_kinds().end()) {
        const std::string near = nearest(k, known);
        throw CampaignError(fmt::format("--kinds: \"{}\" is not a fault kind{} kinds: {}", k,
                                        near.empty() ? ";" : "; did you mean \"" + near + "\"?",
                                        fmt::join(known, ", ")));
      }
      const std::string why = kind_refusal(it->second, s, t, true, values);
      if (!why.empty()) throw CampaignError(fmt::format("--kinds: {}: {}", k, why));
      if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
    }
  } else {
    for (const auto& [name, info] : fault_kinds()) {
      if (kind_refusal(info, s, t, false, values).empty()) out.push_back(name);
    }
  }
  std::sort(out.begin(), out.end());
  if (out.empty()) {
    throw CampaignError(
        values == DrawValues::kAny
            ? "no fault kind can be drawn for this job"
            : fmt::format("no fault kind can be drawn for this job with --values {}",
                          to_string(values)));
  }
  return out;
}

std::string fault_class_of(const ojson& f) {
  const FaultKindInfo& info = kind_of(f);
  const std::string variant = info.fault_class ? info.fault_class(f) : "";
  return variant.empty() ? info.name : info.name + ":" + variant;
}

results::Truth truth_of(const ojson& f, int64_t world) {
  results::Truth t;
  const ojson& ranks = f.at("ranks");
  if (ranks.is_string()) {
    for (int64_t r = 0; r < world; ++r) t.ranks.push_back(r);
  } else {
    for (const auto& r : ranks) t.ranks.push_back(r.get<int64_t>());
    std::sort(t.ranks.begin(), t.ranks.end());
  }
  t.step = f.at("step").get<int64_t>();
  const KindTruth k = kind_of(f).truth(f);
  t.cause = to_string(k.cause);
  t.layer = k.layer;
  return t;
}

namespace {

// The drawn fault, then its companions.
std::vector<const ojson*> with_companions(const DrawnFault& f) {
  std::vector<const ojson*> all = {&f.fault};
  for (const auto& c : f.companions) all.push_back(&c);
  return all;
}

}  // namespace

std::string fault_scenario_toml(const Scenario& base, const std::string& base_text,
                                const DrawnFault& f, const std::string& header) {
  toml::table root = toml::parse(base_text, std::string_view(base.file));
  for (const char* t : {"fault", "expect", "campaign"}) root.erase(t);
  if (auto* sc = root["scenario"].as_table()) {
    sc->insert_or_assign("name", fmt::format("{}-f{:03}", base.name, f.index));
  }
  if (base.job.external()) {
    // The fault's scenario lives in the campaign folder: what the command names next to the
    // base scenario (the script, a relative program) is given by its absolute path.
    const fs::path folder = fs::absolute(base.file).parent_path();
    if (auto* cmd = root["job"]["command"].as_array()) {
      for (auto& e : *cmd) {
        auto* s = e.as_string();
        if (s == nullptr || s->get().empty() || fs::path(s->get()).is_absolute()) continue;
        std::error_code ec;
        if (fs::exists(folder / s->get(), ec)) {
          *s = (folder / s->get()).lexically_normal().string();
        }
      }
    }
  }
  toml::array faults;
  bool stops_job = false;
  for (const ojson* one : with_companions(f)) {
    toml::table fault;
    for (const auto& [key, value] : one->items()) put(fault, key, value);
    faults.push_back(std::move(fault));
    stops_job |= kind_of(*one).stops_job;
  }
  root.insert_or_assign("fault", std::move(faults));
  toml::table expect;
  expect.insert_or_assign("deadlock", false);
  // A built-in job that relaunches after a crash or hang ([job] restarts) recovered only when it
  // ends as a run that never failed (results/campaign.h score_fault): the clean run says.
  if (stops_job && base.job.restarts > 0 && !base.job.external()) {
    expect.insert_or_assign("final_matches_clean", true);
  }
  root.insert_or_assign("expect", std::move(expect));
  std::ostringstream out;
  if (!header.empty()) out << header << "\n";
  out << toml::toml_formatter(root) << "\n";
  return out.str();
}

std::vector<DrawnFault> draw_faults(const Scenario& base, const std::string& base_text,
                                    const CampaignTargets& t, const std::vector<std::string>& kinds,
                                    uint64_t seed, int count, DrawValues values) {
  std::vector<DrawnFault> out;
  // Ctrl-C while drawing a large campaign: stop now (the caller sees stop_signal() and exits).
  for (int i = 0; i < count && stop_signal() == 0; ++i) {
    std::string last_error;
    bool kept = false;
    for (int attempt = 0; attempt < kMaxAttempts && !kept; ++attempt) {
      DrawnFault d = draw_one(base, t, kinds, seed, i, attempt, values);
      try {
        load_scenario_string(fault_scenario_toml(base, base_text, d),
                             fmt::format("{} (fault {})", base.file, i));
        out.push_back(std::move(d));
        kept = true;
      } catch (const ScenarioError& e) {
        last_error = e.what();
      }
    }
    if (!kept) {
      throw CampaignError(fmt::format(
          "fault {}: the scenario loader refused {} draws in a row (a bug in the campaign's "
          "draw); last: {}",
          i, kMaxAttempts, last_error));
    }
  }
  return out;
}

}  // namespace nanchaos::harness
