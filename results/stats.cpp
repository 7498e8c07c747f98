// Trial statistics (see stats.h for the percentile method and the JSON shape).
#include "results/stats.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace nanchaos::results {

Interval wilson95(int64_t k, int64_t n) {
  if (n < 1 || k < 0 || k > n) {
    throw std::invalid_argument("wilson95: need 0 <= k <= n and n >= 1, got k = " +
                                std::to_string(k) + ", n = " + std::to_string(n));
  }
  constexpr double z = 1.959963984540054;  // the 97.5th percentile of the standard normal
  const double nn = double(n), p = double(k) / nn, z2 = z * z;
  const double d = 1.0 + z2 / nn;
  const double center = (p + z2 / (2.0 * nn)) / d;
  const double half = z * std::sqrt(p * (1.0 - p) / nn + z2 / (4.0 * nn * nn)) / d;
  return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

namespace {

using json = nlohmann::json;

// Samples of one quantity, collected trial by trial.
// abort_latency_ms as the judge found it (nullopt when the job did not abort).
std::optional<double> abort_latency(const ScenarioResult& r) {
  return r.judged ? r.judged->abort_latency_ms : std::nullopt;
}

// Latency samples of the trials one detector caught first.
struct Samples {
  std::vector<double> latency_steps, latency_ms, decision_us, abort_ms;
  size_t n = 0;
  void add(const ScenarioResult& t) {
    const Detection& d = *t.first_detection;
    ++n;
    if (d.latency_steps) latency_steps.push_back(double(*d.latency_steps));
    if (d.latency_ms) latency_ms.push_back(*d.latency_ms);
    if (d.decision_us) decision_us.push_back(*d.decision_us);
    if (auto a = abort_latency(t)) abort_ms.push_back(*a);
  }
  void write(json& j) const {
    j["n"] = n;
    j["latency_steps"] = to_json(summarize(latency_steps));
    j["latency_ms"] = to_json(summarize(latency_ms));
    j["decision_us"] = to_json(summarize(decision_us));
    j["abort_latency_ms"] = to_json(summarize(abort_ms));
  }
};

// Higher is worse.
int severity(Verdict verdict) {
  switch (verdict) {
    case Verdict::kSkipped:
      return 0;
    case Verdict::kPass:
      return 1;
    case Verdict::kFail:
      return 2;
    case Verdict::kError:
      return 3;
  }
  return 3;
}

}  // namespace

ScenarioResult representative_trial(const std::vector<ScenarioResult>& trials) {
  if (trials.empty()) throw std::invalid_argument("representative_trial needs at least one trial");
  size_t pick = 0;
  for (size_t i = 1; i < trials.size(); ++i) {
    if (severity(trials[i].verdict) > severity(trials[pick].verdict)) pick = i;
  }
  ScenarioResult r = trials[pick];
  r.trials.clear();
  r.stats = nullptr;
  return r;
}

std::optional<Summary> summarize(const std::vector<double>& samples) {
  std::vector<double> finite;
  for (double v : samples) {
    if (std::isfinite(v)) finite.push_back(v);
  }
  if (finite.empty()) return std::nullopt;
  Summary s;
  s.n = finite.size();
  s.p50 = percentile(finite, 50);
  s.p95 = percentile(finite, 95);
  s.max = *std::max_element(finite.begin(), finite.end());
  return s;
}

json to_json(const std::optional<Summary>& s) {
  if (!s) return nullptr;
  // Whole numbers (steps, us) stay integers in the JSON: "0", not "0.0".
  auto num = [](double v) {
    return (std::abs(v) < 9.0e15 && v == std::floor(v)) ? json(static_cast<int64_t>(v)) : json(v);
  };
  return {{"n", s->n}, {"p50", num(s->p50)}, {"p95", num(s->p95)}, {"max", num(s->max)}};
}

json scenario_stats(const std::vector<ScenarioResult>& trials) {
  if (trials.empty()) throw std::invalid_argument("scenario_stats needs at least one trial");
  json j = json::object();
  j["trials"] = trials.size();
  size_t passed = 0, detected = 0;
  json verdicts = json::object();
  json first_detectors = json::object();
  Samples all;
  std::map<std::string, Samples> by_detector;
  std::vector<double> abort_ms, wall_ms;
  for (const auto& t : trials) {
    passed += t.verdict == Verdict::kPass;
    const std::string v = to_string(t.verdict);
    verdicts[v] = verdicts.value(v, 0) + 1;
    wall_ms.push_back(t.wall_ms);
    if (auto a = abort_latency(t)) abort_ms.push_back(*a);
    if (!t.first_detection) continue;
    ++detected;
    const Detection& d = *t.first_detection;
    first_detectors[d.detector] = first_detectors.value(d.detector, 0) + 1;
    all.add(t);
    by_detector[d.detector].add(t);
  }
  j["passed"] = passed;
  j["pass_rate"] = double(passed) / double(trials.size());
  j["verdicts"] = std::move(verdicts);
  j["detected"] = detected;
  j["first_detectors"] = std::move(first_detectors);
  j["latency_steps"] = to_json(summarize(all.latency_steps));
  j["latency_ms"] = to_json(summarize(all.latency_ms));
  j["decision_us"] = to_json(summarize(all.decision_us));
  // Every aborted or crashed trial, detected or not (a crash has no detection).
  j["abort_latency_ms"] = to_json(summarize(abort_ms));
  j["wall_ms"] = to_json(summarize(wall_ms));
  json per = json::object();
  for (const auto& [name, samples] : by_detector) {
    json dj = json::object();
    samples.write(dj);
    per[name] = std::move(dj);
  }
  j["by_detector"] = std::move(per);
  return j;
}

json suite_detector_stats(const SuiteReport& r) {
  std::map<std::string, Samples> pooled;
  std::map<std::string, std::vector<std::string>> names;
  for (const auto& s : r.scenarios) {
    const auto one = std::vector<ScenarioResult>{s};
    const auto& trials = s.trials.empty() ? one : s.trials;
    for (const auto& t : trials) {
      if (!t.first_detection) continue;
      const std::string& det = t.first_detection->detector;
      pooled[det].add(t);
      auto& v = names[det];
      if (std::find(v.begin(), v.end(), s.name) == v.end()) v.push_back(s.name);
    }
  }
  json out = json::object();
  for (const auto& [det, samples] : pooled) {
    json dj = json::object();
    dj["scenarios"] = names[det];
    samples.write(dj);
    out[det] = std::move(dj);
  }
  return out;
}

double mcnemar_exact_p(int64_t worse, int64_t better) {
  if (worse < 0 || better < 0) {
    throw std::invalid_argument("mcnemar_exact_p: counts must be >= 0");
  }
  const int64_t n = worse + better;
  if (n == 0) return 1.0;
  // Sum of C(n, i) / 2^n for i >= worse, in logs (n may be thousands).
  const double log_half_n = double(n) * std::log(0.5);
  double p = 0;
  for (int64_t i = worse; i <= n; ++i) {
    const double log_c =
        std::lgamma(double(n) + 1) - std::lgamma(double(i) + 1) - std::lgamma(double(n - i) + 1);
    p += std::exp(log_c + log_half_n);
  }
  return std::min(1.0, p);
}

}  // namespace nanchaos::results
