// Registry <-> JSON; see registry_json.h.
#include "harness/scenario/registry_json.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include "harness/scenario/registry.h"

namespace nanchaos::harness {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

const std::pair<KeyType, const char*> kTypeNames[] = {
    {KeyType::kBool, "bool"},
    {KeyType::kInt, "int"},
    {KeyType::kFloat, "float"},
    {KeyType::kString, "string"},
    {KeyType::kStringArray, "string_array"},
    {KeyType::kStringOrArray, "string_or_array"},
    {KeyType::kFloatOrSpecial, "float_or_special"},
    {KeyType::kIntOrForever, "int_or_forever"},
    {KeyType::kRankSet, "rank_set"},
    {KeyType::kIntOrIntArray, "int_or_int_array"},
    {KeyType::kStringTable, "string_table"},
};

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw std::runtime_error(fmt::format("registry snapshot: {}: {}", where, what));
}

ordered_json float_json(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  return d;
}

double float_of(const json& j, const std::string& where) {
  if (j.is_number()) return j.get<double>();
  if (j == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (j == "inf") return std::numeric_limits<double>::infinity();
  if (j == "-inf") return -std::numeric_limits<double>::infinity();
  bad(where, "not a number, \"nan\", \"inf\" or \"-inf\"");
}

ordered_json value_json(const Value& v) {
  struct Visitor {
    ordered_json operator()(bool b) const { return {{"bool", b}}; }
    ordered_json operator()(int64_t i) const { return {{"int", i}}; }
    ordered_json operator()(double d) const { return {{"float", float_json(d)}}; }
    ordered_json operator()(const std::string& s) const { return {{"string", s}}; }
    ordered_json operator()(const std::vector<std::string>& v) const { return {{"strings", v}}; }
    ordered_json operator()(const std::vector<int64_t>& v) const { return {{"ints", v}}; }
    ordered_json operator()(const RankSet& r) const {
      return {{"ranks", r.all ? ordered_json("all") : ordered_json(r.ranks)}};
    }
  };
  return std::visit(Visitor{}, v);
}

Value value_of(const json& j, const std::string& where) {
  if (!j.is_object() || j.size() != 1) bad(where, "a default is an object with one tag");
  const std::string tag = j.begin().key();
  const json& v = j.begin().value();
  try {
    if (tag == "bool") return v.get<bool>();
    if (tag == "int") return v.get<int64_t>();
    if (tag == "float") return float_of(v, where);
    if (tag == "string") return v.get<std::string>();
    if (tag == "strings") return v.get<std::vector<std::string>>();
    if (tag == "ints") return v.get<std::vector<int64_t>>();
    if (tag == "ranks") {
      RankSet r;
      if (v == "all")
        r.all = true;
      else
        r.ranks = v.get<std::vector<int64_t>>();
      return r;
    }
  } catch (const json::exception& e) {
    bad(where, e.what());
  }
  bad(where, "unknown default tag " + tag);
}

ordered_json key_json(const KeySpec& k) {
  ordered_json j;
  j["name"] = k.name;
  const char* type = "string";
  for (const auto& [t, n] : kTypeNames) {
    if (t == k.type) type = n;
  }
  j["type"] = type;
  j["required"] = k.required;
  j["doc"] = k.doc;
  if (k.default_value) j["default"] = value_json(*k.default_value);
  if (!k.choices.empty()) j["choices"] = k.choices;
  j["min"] = float_json(k.min);
  j["max"] = float_json(k.max);
  j["min_exclusive"] = k.min_exclusive;
  if (!k.pattern.empty()) j["pattern"] = k.pattern;
  return j;
}

KeySpec key_of(const json& j, const std::string& owner) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) {
    bad(owner, "a key needs a \"name\" string");
  }
  KeySpec k;
  k.name = j["name"].get<std::string>();
  const std::string where = owner + "." + k.name;
  try {
    const std::string type = j.at("type").get<std::string>();
    bool known = false;
    for (const auto& [t, n] : kTypeNames) {
      if (type == n) {
        k.type = t;
        known = true;
      }
    }
    if (!known) bad(where, "unknown type " + type);
    k.required = j.value("required", false);
    k.doc = j.value("doc", std::string());
    if (j.contains("default")) k.default_value = value_of(j["default"], where);
    if (j.contains("choices")) k.choices = j["choices"].get<std::vector<std::string>>();
    if (j.contains("min")) k.min = float_of(j["min"], where);
    if (j.contains("max")) k.max = float_of(j["max"], where);
    k.min_exclusive = j.value("min_exclusive", false);
    k.pattern = j.value("pattern", std::string());
  } catch (const json::exception& e) {
    bad(where, e.what());
  }
  return k;
}

template <typename Info>
ordered_json entry_json(const Info& info) {
  ordered_json j;
  j["name"] = info.name;
  j["doc"] = info.doc;
  j["keys"] = ordered_json::array();
  for (const auto& k : info.keys) j["keys"].push_back(key_json(k));
  return j;
}

template <typename Info>
Info entry_of(const json& j, const char* list) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) {
    bad(list, "an entry needs a \"name\" string");
  }
  Info info;
  info.name = j["name"].get<std::string>();
  const std::string where = fmt::format("{} {}", list, info.name);
  info.doc = j.value("doc", std::string());
  if (!j.contains("keys") || !j["keys"].is_array()) bad(where, "no \"keys\" array");
  for (const auto& k : j["keys"]) info.keys.push_back(key_of(k, where));
  return info;
}

}  // namespace

ordered_json registry_json(const RegistrySnapshot& snap) {
  ordered_json doc;
  doc["version"] = 1;
  doc["fault_kinds"] = ordered_json::array();
  for (const auto& info : snap.fault_kinds) {
    ordered_json j = entry_json(info);
    j["python_agent"] = info.python_agent;  // the loader's external-job rule reads it
    doc["fault_kinds"].push_back(std::move(j));
  }
  doc["detectors"] = ordered_json::array();
  for (const auto& info : snap.detectors) {
    ordered_json j = entry_json(info);
    j["order"] = info.order;
    j["presets"] = ordered_json::array();
    if (info.presets & kPresetDefault) j["presets"].push_back("default");
    if (info.presets & kPresetNaive) j["presets"].push_back("naive");
    j["preset_fp16_only"] = info.preset_fp16_only;
    doc["detectors"].push_back(std::move(j));
  }
  return doc;
}

ordered_json registry_json() {
  RegistrySnapshot live;
  for (const auto& [name, info] : fault_kinds()) live.fault_kinds.push_back(info);
  for (const auto& name : detector_order()) live.detectors.push_back(detectors().at(name));
  return registry_json(live);
}

RegistrySnapshot parse_registry_json(const json& doc) {
  if (!doc.is_object() || doc.value("version", 0) != 1) bad("document", "not version 1");
  for (const char* list : {"fault_kinds", "detectors"}) {
    if (!doc.contains(list) || !doc[list].is_array())
      bad("document", fmt::format("no \"{}\" array", list));
  }
  RegistrySnapshot snap;
  for (const auto& j : doc["fault_kinds"]) {
    auto info = entry_of<FaultKindInfo>(j, "fault kind");
    const auto flag = j.find("python_agent");
    if (flag != j.end() && !flag->is_boolean()) {
      bad("fault kind " + info.name, "\"python_agent\" is not a boolean");
    }
    info.python_agent = flag != j.end() && flag->get<bool>();
    snap.fault_kinds.push_back(std::move(info));
  }
  for (const auto& j : doc["detectors"]) {
    auto info = entry_of<DetectorInfo>(j, "detector");
    const std::string where = "detector " + info.name;
    try {
      info.order = j.at("order").get<int>();
      for (const auto& p : j.at("presets")) {
        const auto name = p.get<std::string>();
        if (name == "default") {
          info.presets |= kPresetDefault;
        } else if (name == "naive") {
          info.presets |= kPresetNaive;
        } else {
          bad(where, "unknown preset " + name);
        }
      }
      info.preset_fp16_only = j.at("preset_fp16_only").get<bool>();
    } catch (const json::exception& e) {
      bad(where, e.what());
    }
    snap.detectors.push_back(std::move(info));
  }
  return snap;
}

void register_from_json(const json& doc) {
  RegistrySnapshot snap = parse_registry_json(doc);
  for (auto& info : snap.fault_kinds) {
    if (!fault_kinds().count(info.name)) register_fault_kind(std::move(info), /*keys_only=*/true);
  }
  for (auto& info : snap.detectors) {
    if (!detectors().count(info.name)) register_detector(std::move(info));
  }
}

}  // namespace nanchaos::harness
