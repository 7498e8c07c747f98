// Scenario loader: [[fault]], [detectors], [recovery] and [expect], and what an external job
// refuses. See loader.h.
#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <functional>
#include <regex>
#include <set>
#include <utility>

#include "harness/scenario/loader.h"
#include "harness/scenario/model_spec.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario_schema.h"

namespace nanchaos::harness::loader {

void Loader::load_faults(const toml::table& root, Scenario& s) const {
  const toml::node* node = root.get("fault");
  if (node == nullptr) return;
  const toml::array* arr = node->as_array();
  if (arr == nullptr) {
    scenario_error(at(*node),
                   "[[fault]]: expected an array of tables (write each as [[fault]]), got " +
                       toml_type(*node));
  }
  const auto& kinds = fault_kinds();
  const std::vector<std::string> kind_names = names_of(kinds);
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::node& e = *arr->get(i);
    FaultSpec f;
    f.index = static_cast<int>(i);
    f.pos = at(e);
    const std::string label = fault_label(f);
    const toml::table* t = e.as_table();
    if (t == nullptr) scenario_error(at(e), label + ": expected table, got " + toml_type(e));

    const toml::node* kind_node = t->get("kind");
    if (kind_node == nullptr) {
      scenario_error(f.pos, label + ": missing required key \"kind\"; kinds: " + join(kind_names));
    }
    if (!kind_node->is_string()) {
      scenario_error(at(*kind_node),
                     label + ".kind: expected string, got " + toml_type(*kind_node));
    }
    f.kind = kind_node->as_string()->get();
    auto kit = kinds.find(f.kind);
    if (kit == kinds.end()) {
      scenario_error(at(*kind_node), label + " kind " + quote(f.kind) + " is unknown" +
                                         suggestion(f.kind, kind_names, "kinds"));
    }
    const FaultKindInfo& info = kit->second;

    // A kind may redeclare a common key (`checkpoint`'s step is optional: it has `save` too).
    std::vector<KeySpec> specs;
    for (const auto& common : fault_common_keys()) {
      if (std::none_of(info.keys.begin(), info.keys.end(),
                       [&](const KeySpec& k) { return k.name == common.name; })) {
        specs.push_back(common);
      }
    }
    specs.insert(specs.end(), info.keys.begin(), info.keys.end());
    // An unknown key that another kind declares is a common mix-up; say whose key it is.
    auto other_kinds = [&](const std::string& key) -> std::string {
      std::vector<std::string> owners;
      for (const auto& [name, other] : kinds) {
        for (const auto& spec : other.keys) {
          if (spec.name == key) owners.push_back(name);
        }
      }
      if (owners.empty()) return "";
      return " for kind " + quote(f.kind) + " (it belongs to kind " + join(owners, ", ") +
             "; keys of " + quote(f.kind) + ": " + join([&] {
               std::vector<std::string> own;
               for (const auto& spec : info.keys) own.push_back(spec.name);
               return own;
             }()) +
             ")";
    };
    Params all = check_table(*t, specs, label, f.pos, other_kinds);
    if (s.job.external()) check_external_fault(f, all);

    f.ranks = all.get_ranks("ranks");
    f.step = all.get_int("step");
    if (f.step >= s.job.steps) {
      scenario_error(all.pos("step"),
                     fmt::format("{}.step: {} is past the end of the job ([job].steps = {}, steps "
                                 "are 0-based); the fault could never fire",
                                 label, f.step, s.job.steps));
    }
    f.repeat = all.get_int("repeat");
    f.probability = all.get_float("probability");
    f.persistent = all.get_bool("persistent");
    f.params.set_table_pos(f.pos);
    for (const auto& spec : info.keys) {
      if (!all.has(spec.name)) continue;
      f.params.set(spec.name, all.get(spec.name),
                   all.given(spec.name) ? all.pos(spec.name) : SourcePos{});
    }
    if (const toml::node* r = t->get("ranks")) check_ranks_exist(*r, label + ".ranks", s.job.ranks);
    if (!info.target_wheres.empty() && f.params.has("target")) {
      const std::string& text = f.params.get_string("target");
      f.target = parse_target(text, info.target_wheres);
      if (!f.target) {
        scenario_error(f.params.pos("target"),
                       label + ".target: " + target_error(text, info.target_wheres));
      }
    }
    if (info.check) info.check(f);
    if (info.check_job) info.check_job(f, s);
    if (info.fault_step) f.step = info.fault_step(f, s);
    s.faults.push_back(std::move(f));
  }
}

void Loader::load_detectors(const toml::table& root, Scenario& s) const {
  const toml::table* t = table_of(root, "detectors", false);
  if (s.job.external()) refuse_for_external(t, "[detectors]", {"collective_timeout_ms"});
  const toml::table empty;
  const auto& registered = detectors();
  const std::vector<std::string> detector_names = names_of(registered);

  // Common keys, then every registered detector's keys (the first declaration of a name wins).
  std::vector<KeySpec> specs = detector_common_keys();
  for (const auto& [name, info] : registered) {
    for (const auto& key : info.keys) {
      bool seen = std::any_of(specs.begin(), specs.end(),
                              [&](const KeySpec& k) { return k.name == key.name; });
      if (!seen) specs.push_back(key);
    }
  }
  Params p = check_table(t ? *t : empty, specs, "[detectors]", t ? at(*t) : nowhere());
  DetectorConfig& d = s.detectors;
  d.preset = pick<Preset>(p.get_string("preset"), {{"default", Preset::kDefault},
                                                   {"full", Preset::kFull},
                                                   {"naive", Preset::kNaive},
                                                   {"none", Preset::kNone}});
  if (p.has("enabled")) {
    d.enabled_given = true;
    const toml::array& arr = *t->get("enabled")->as_array();
    for (size_t i = 0; i < arr.size(); ++i) {
      const toml::node& e = *arr.get(i);
      const std::string name = e.as_string()->get();
      if (registered.count(name) == 0) {
        scenario_error(at(e), "[detectors].enabled: " + quote(name) + " is not a detector" +
                                  suggestion(name, detector_names, "detectors"));
      }
      if (std::find(d.enabled.begin(), d.enabled.end(), name) != d.enabled.end()) {
        scenario_error(at(e), "[detectors].enabled: " + quote(name) + " is listed twice");
      }
      d.enabled.push_back(name);
    }
  } else {
    for (const auto& name : preset_detectors(d.preset, s.job.precision)) d.enabled.push_back(name);
    p.set("enabled", d.enabled);
  }
  const bool naive = d.preset == Preset::kNaive;
  if (!p.has("consensus")) p.set("consensus", !naive);
  d.consensus = p.get_bool("consensus");
  d.replay_given = p.given("replay");
  if (!p.has("replay")) p.set("replay", !naive);
  d.replay = p.get_bool("replay");
  d.params = std::move(p);
  // The job's own stack detects; nothing of the built-in one runs.
  if (s.job.external()) d.enabled.clear();
}

void Loader::load_recovery(const toml::table& root, Scenario& s) const {
  const toml::table* t = table_of(root, "recovery", false);
  if (s.job.external()) {
    refuse_for_external(t, "[recovery]", {});
    return;
  }
  const toml::table empty;
  Params p = check_table(t ? *t : empty, recovery_keys(), "[recovery]", t ? at(*t) : nowhere());
  RecoveryConfig& r = s.recovery;
  r.policy.clear();
  for (const auto& name : p.get_strings("policy")) {
    Policy pol = policy_of(name);
    if (!r.has(pol)) r.policy.push_back(pol);
  }
  if (r.has(Policy::kNone) && r.policy.size() > 1) {
    scenario_error(p.pos("policy"), "[recovery].policy: \"none\" cannot be combined with others");
  }
  r.snapshot_every = p.get_int("snapshot_every");
  r.lr_backoff_factor = p.get_float("lr_backoff_factor");
  r.max_consecutive = p.get_int("max_consecutive");
  r.scaler.init_scale = p.get_float("init_scale");
  r.scaler.growth_factor = p.get_float("growth_factor");
  r.scaler.backoff_factor = p.get_float("backoff_factor");
  r.scaler.growth_interval = p.get_int("growth_interval");
  r.scaler.max_scale = p.get_float("max_scale");
  r.scaler.min_scale = p.get_float("min_scale");
  if (!(r.scaler.min_scale <= r.scaler.init_scale && r.scaler.init_scale <= r.scaler.max_scale)) {
    std::string key = p.given("init_scale")  ? "init_scale"
                      : p.given("max_scale") ? "max_scale"
                                             : "min_scale";
    scenario_error(p.pos(key), fmt::format("[recovery].{}: need min_scale <= init_scale <= "
                                           "max_scale, got {} <= {} <= {}",
                                           key, format_number(r.scaler.min_scale),
                                           format_number(r.scaler.init_scale),
                                           format_number(r.scaler.max_scale)));
  }
}

void Loader::load_expect(const toml::table& root, Scenario& s) const {
  const toml::table* t = table_of(root, "expect", false);
  const toml::table empty;
  Params p = check_table(t ? *t : empty, expect_keys(), "[expect]", t ? at(*t) : nowhere());
  ExpectConfig& x = s.expect;
  if (p.has("first_detector")) {
    const std::string& name = p.get_string("first_detector");
    std::vector<std::string> names = names_of(detectors());
    // A built-in job's checkpoint loader reports a rejected checkpoint as detector "checkpoint"
    // ([checkpoint] validate, harness/job/checkpoint_rank.cpp): not a step detector.
    names.push_back("checkpoint");
    // An external job's stack names its own detectors (report_detection, observed:*).
    if (!s.job.external() && std::find(names.begin(), names.end(), name) == names.end()) {
      scenario_error(p.pos("first_detector"), "[expect].first_detector: " + quote(name) +
                                                  " is not a detector" +
                                                  suggestion(name, names, "detectors"));
    }
    x.first_detector = name;
  }
  if (p.has("rank")) {
    check_ranks_exist(*t->get("rank"), "[expect].rank", s.job.ranks);
    x.rank = p.get_ints("rank");
  }
  if (p.has("detected")) x.detected = p.get_bool("detected");
  if (p.has("within_steps")) x.within_steps = p.get_int("within_steps");
  if (p.has("within_ms")) x.within_ms = p.get_float("within_ms");
  if (p.has("layer")) {
    x.layer = p.get_string("layer");
    check_layer_exists(*x.layer, p.pos("layer"), s);
  }
  if (p.has("cause")) x.cause = p.get_string("cause");
  if (p.has("transient")) x.transient = p.get_bool("transient");
  if (p.has("outcome")) x.outcome = p.get_string("outcome");
  x.deadlock = p.get_bool("deadlock");
  if (p.has("abort_within_ms")) x.abort_within_ms = p.get_float("abort_within_ms");
  if (p.has("recovered")) x.recovered = p.get_bool("recovered");
  if (p.has("final_loss_max")) x.final_loss_max = p.get_float("final_loss_max");
  if (p.has("consistent")) x.consistent = p.get_bool("consistent");
  if (p.has("fault_outcome")) x.fault_outcome = p.get_string("fault_outcome");
  x.max_false_positives = p.get_int("max_false_positives");
  // Restart expectations the job can never meet fail here, not after the run.
  if (p.has("restarts")) {
    x.restarts = p.get_int("restarts");
    if (*x.restarts > s.job.restarts) {
      scenario_error(p.pos("restarts"),
                     fmt::format("[expect].restarts = {} can never hold: [job] restarts = {} "
                                 "allows at most {} relaunch(es)",
                                 *x.restarts, s.job.restarts, s.job.restarts));
    }
  }
  if (p.has("resumed_from_step")) {
    x.resumed_from_step = p.get_int("resumed_from_step");
    if (*x.resumed_from_step >= s.job.steps) {
      scenario_error(p.pos("resumed_from_step"),
                     fmt::format("[expect].resumed_from_step = {} is not a step of the job "
                                 "([job].steps = {}: steps 0 to {})",
                                 *x.resumed_from_step, s.job.steps, s.job.steps - 1));
    }
  }
  if (p.has("steps_lost_max")) x.steps_lost_max = p.get_int("steps_lost_max");
  if (p.has("resume_ms_max")) x.resume_ms_max = p.get_float("resume_ms_max");
  if (p.has("final_matches_clean")) x.final_matches_clean = p.get_bool("final_matches_clean");
  x.params = std::move(p);
  // A fault nobody judges passes whatever the stack does: a forgotten assertion would be green.
  if (!s.faults.empty() && (t == nullptr || t->empty())) {
    const std::string what = s.faults.size() == 1
                                 ? std::string("the scenario's fault")
                                 : fmt::format("the scenario's {} faults", s.faults.size());
    const std::string fix =
        "say what the stack must do (e.g. detected = true, outcome = \"completed\"), even if only "
        "deadlock = false";
    if (t == nullptr) {
      scenario_error(s.faults.front().pos,
                     fmt::format("{} has no [expect] to judge it; add an [expect] table and {}",
                                 fault_label(s.faults.front()), fix));
    }
    scenario_error(at(*t), fmt::format("[expect] is empty, so nothing judges {}; {}", what, fix));
  }
}

void Loader::load_campaign(const toml::table& root, Scenario& s) const {
  const toml::table* t = table_of(root, "campaign", false);
  const toml::table empty;
  Params p = check_table(t ? *t : empty, campaign_keys(), "[campaign]", t ? at(*t) : nowhere());
  CampaignConfig& c = s.campaign;
  auto read = [&](const char* key, std::optional<double>& v) {
    if (p.has(key)) v = p.get_float(key);
  };
  read("min_coverage", c.min_coverage);
  read("min_attribution_rank", c.min_attribution_rank);
  read("min_attribution_layer", c.min_attribution_layer);
  read("min_attribution_cause", c.min_attribution_cause);
  c.params = std::move(p);
}

void Loader::check_layer_exists(const std::string& layer, const SourcePos& pos,
                                const Scenario& s) const {
  const std::optional<ModelSpec> model = listed_model(s);
  if (!model) return;  // an external job's stack names its own layers
  // What a detection can blame: a module, a parameter, the loss or the batch (detectors/*.cpp),
  // or, for the anomaly detector, the autograd op that produced the NaN ("MulBackward0"); the
  // replica detector also names buffers and "training_state" (detectors/core/replica.h); the
  // straggler detector names the phase of a step that grew (the `slow` kind's `where` words).
  static const std::regex backward_op("[A-Za-z0-9_]+Backward[0-9]*");
  if (std::regex_match(layer, backward_op)) return;
  for (const char* phase : {"data", "compute", "backward", "comm"}) {
    if (layer == phase) return;
  }
  std::vector<std::string> names = {"loss", "inputs", "labels", "training_state"};
  names.insert(names.end(), model->modules.begin(), model->modules.end());
  for (const auto& p : model->parameters) names.push_back(p.name);
  for (const auto& b : model->buffers) names.push_back(b.name);
  for (const auto& n : names) {
    if (n.rfind(layer, 0) == 0) return;  // the judge's prefix match
  }
  names.erase(names.begin(), names.begin() + 4);
  scenario_error(pos, fmt::format("[expect].layer: \"{}\" is no module, parameter or buffer of "
                                  "the {} workload (nor loss, inputs, labels, training_state, "
                                  "nor a step phase: data, compute, backward, comm){}",
                                  layer, workload_name(s.job.workload),
                                  name_hint(layer, names, "", "names", s)));
}

void Loader::refuse_for_external(const toml::table* t, const std::string& label,
                                 const std::set<std::string>& allowed) const {
  if (t == nullptr) return;
  for (const auto& [k, n] : in_file_order(*t)) {
    const std::string name(k->str());
    if (allowed.count(name)) continue;
    std::string why = external_refusal();
    if (!allowed.empty()) why += " (only " + join({allowed.begin(), allowed.end()}) + " applies)";
    scenario_error(at(*k), label + "." + name + ": " + why);
  }
}

void Loader::check_external_fault(const FaultSpec& f, const Params& all) const {
  const std::string label = fault_label(f);
  const std::set<std::string> applied = external_fault_kinds();
  if (!applied.count(f.kind)) {
    scenario_error(all.pos("kind"),
                   label + " kind " + quote(f.kind) +
                       " is not implemented for workload = \"external\"; the agent applies: " +
                       join({applied.begin(), applied.end()}));
  }
  if (all.has("mode") && all.get_string("mode") == "empty_mask") {
    scenario_error(all.pos("mode"), label +
                                        ": mode = \"empty_mask\" is not available for workload = "
                                        "\"external\" (it needs the built-in transformer's "
                                        "token mask)");
  }
  if (all.has("stall") && all.get_string("stall") == "device") {
    scenario_error(all.pos("stall"), label +
                                         ".stall: \"device\" is not available for workload = "
                                         "\"external\" (a CUDA stall of the built-in stack's "
                                         "gradient all-reduce); use \"host\"");
  }
}

}  // namespace nanchaos::harness::loader
