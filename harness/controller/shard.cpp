#include "harness/controller/shard.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>

namespace nanchaos::harness {

ShardSpec parse_shard(const std::string& text) {
  ShardSpec s;
  size_t used_i = 0, used_n = 0;
  const size_t slash = text.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    s.index = std::stoi(text.substr(0, slash), &used_i);
    s.count = std::stoi(text.substr(slash + 1), &used_n);
  } catch (const std::exception&) {
    used_i = 0;
  }
  if (used_i == 0 || used_i != slash || slash + 1 + used_n != text.size() || s.count < 1 ||
      s.count > 100000 || s.index < 1 || s.index > s.count) {
    throw std::invalid_argument(fmt::format(
        "--shard {}: expected I/N with 1 <= I <= N <= 100000 (e.g. 2/4: the second of four "
        "parts)",
        text));
  }
  return s;
}

std::vector<bool> shard_members(const std::vector<std::string>& names,
                                const std::map<std::string, double>& weights, ShardSpec s) {
  std::vector<bool> mine(names.size(), false);
  if (!s.on()) return std::vector<bool>(names.size(), true);
  if (weights.empty()) {
    for (size_t k = 0; k < names.size(); ++k) mine[k] = int(k % size_t(s.count)) + 1 == s.index;
    return mine;
  }
  std::vector<double> known;
  for (const auto& n : names) {
    if (auto it = weights.find(n); it != weights.end()) known.push_back(it->second);
  }
  double fill = 1.0;
  if (!known.empty()) {
    std::sort(known.begin(), known.end());
    fill = known[(known.size() - 1) / 2];
  }
  std::vector<double> w(names.size());
  for (size_t k = 0; k < names.size(); ++k) {
    auto it = weights.find(names[k]);
    w[k] = it == weights.end() ? fill : std::max(0.0, it->second);
  }
  std::vector<size_t> order(names.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return w[a] > w[b]; });
  std::vector<double> load(size_t(s.count), 0.0);
  for (size_t k : order) {
    const size_t to = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    load[to] += w[k];
    mine[k] = int(to) + 1 == s.index;
  }
  return mine;
}

std::map<std::string, double> shard_weights_from_report(const std::string& report_json) {
  std::ifstream in(report_json);
  if (!in) throw std::runtime_error("--shard-balance " + report_json + ": cannot read the file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("--shard-balance " + report_json + ": not JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("scenarios") || !j["scenarios"].is_array()) {
    throw std::runtime_error("--shard-balance " + report_json +
                             ": not a nanchaos report.json (no \"scenarios\" list)");
  }
  std::map<std::string, double> w;
  for (const auto& s : j["scenarios"]) {
    if (!s.is_object() || !s.contains("name") || !s["name"].is_string()) continue;
    double ms = 0;
    if (s.contains("trials") && s["trials"].is_array() && !s["trials"].empty()) {
      for (const auto& t : s["trials"]) {
        if (t.contains("wall_ms") && t["wall_ms"].is_number()) ms += t["wall_ms"].get<double>();
      }
    } else if (s.contains("wall_ms") && s["wall_ms"].is_number()) {
      ms = s["wall_ms"].get<double>();
    }
    w[s["name"].get<std::string>()] = ms;
  }
  return w;
}

}  // namespace nanchaos::harness
