// Report model serialisation: report.json and the to_json() overloads, and the suite's counts.
// The other writers have a file each (console.cpp, markdown.cpp, junit.cpp; html.cpp), over the
// shared column table (columns.h) and text helpers (text.h).
//
// Conventions shared by every writer, so the formats never disagree:
// - An empty string in an "optional" string field (reason, outcome, fault_outcome, layer, cause,
//   action, target, run_dir) means "no value" and is written as JSON null / "-".
// - A detection step < 0 means unknown (null).
// - Non-finite numbers matter here (a NaN final loss is the point of many scenarios), and JSON
//   has no literal for them: nlohmann would silently write null, which reads as "absent". They are
//   written as the strings "nan", "inf", "-inf" instead, also inside checks and the job facts.
// report.json keeps the spec's key order (ordered_json) so a person can read it top-down; the
// to_json() overloads return the same content as plain nlohmann::json.
#include "results/report.h"

#include <ostream>
#include <type_traits>

#include "results/text.h"

namespace nanchaos::results {
namespace {

using ojson = nlohmann::ordered_json;

template <class J>
J str_or_null(const std::string& s) {
  return s.empty() ? J(nullptr) : J(s);
}

template <class J, class T>
J opt(const std::optional<T>& v) {
  if (!v) return J(nullptr);
  if constexpr (std::is_floating_point_v<T>) {
    return number<J>(*v);
  } else {
    return J(*v);
  }
}

template <class J>
J rank_json(const std::vector<int64_t>& ranks) {
  if (ranks.empty()) return J(nullptr);
  if (ranks.size() == 1) return J(ranks.front());
  return J(ranks);
}

template <class J>
J detection_json(const Detection& d) {
  J j = J::object();
  j["detector"] = d.detector;
  j["rank"] = rank_json<J>(d.ranks);
  j["step"] = d.step < 0 ? J(nullptr) : J(d.step);
  j["layer"] = str_or_null<J>(d.layer);
  j["cause"] = str_or_null<J>(d.cause);
  j["transient"] = opt<J>(d.transient);
  j["latency_steps"] = opt<J>(d.latency_steps);
  j["latency_ms"] = opt<J>(d.latency_ms);
  j["decision_us"] = opt<J>(d.decision_us);
  j["action"] = str_or_null<J>(d.action);
  return j;
}

// Everything of job_facts.h the scenario has, as one object (nlohmann::json: keys sorted).
nlohmann::json facts_json(const ScenarioResult& r) {
  nlohmann::json f = nlohmann::json::object();
  if (r.judged) write_facts(*r.judged, f);
  if (r.controller) write_facts(*r.controller, f);
  if (r.interpreter) write_facts(*r.interpreter, f);
  if (!r.interrupted_by.empty()) f["interrupted_by"] = r.interrupted_by;
  if (!r.in_launch.empty()) f["in_launch"] = r.in_launch;
  return f;
}

template <class J>
J scenario_json(const ScenarioResult& r) {
  J j = J::object();
  j["name"] = r.name;
  j["file"] = r.file;
  j["verdict"] = to_string(r.verdict);
  j["reason"] = str_or_null<J>(r.reason);
  j["outcome"] = str_or_null<J>(to_string(r.outcome));
  j["wall_ms"] = number<J>(r.wall_ms);
  j["seed"] = r.seed;
  j["ranks"] = r.ranks;
  J checks = J::array();
  for (const auto& c : r.checks) {
    J cj = J::object();
    cj["key"] = c.key;
    cj["expected"] = sanitized<J>(c.expected);
    cj["actual"] = sanitized<J>(c.actual);
    cj["pass"] = c.pass;
    checks.push_back(std::move(cj));
  }
  j["checks"] = std::move(checks);
  j["fault_outcome"] = str_or_null<J>(to_string(r.fault_outcome));
  j["first_detection"] = r.first_detection ? detection_json<J>(*r.first_detection) : J(nullptr);
  J detections = J::array();
  for (const auto& d : r.detections) detections.push_back(detection_json<J>(d));
  j["detections"] = std::move(detections);
  J injections = J::array();
  for (const auto& in : r.injections) {
    J ij = J::object();
    ij["fault"] = in.fault;
    ij["kind"] = in.kind;
    ij["rank"] = in.rank;
    ij["step"] = in.step;
    ij["target"] = str_or_null<J>(in.target);
    ij["t_ms"] = number<J>(in.t_ms);
    ij["replay"] = in.replay;
    injections.push_back(std::move(ij));
  }
  j["injections"] = std::move(injections);
  j["steps_completed"] = r.steps_completed;
  j["dropped_events"] = r.dropped_events;
  j["final_loss"] = opt<J>(r.final_loss);
  j["run_dir"] = str_or_null<J>(r.run_dir);
  if (r.logs.empty()) {
    j["logs"] = nullptr;
  } else {
    J logs = J::object();
    logs["merged"] = str_or_null<J>(r.logs.merged);
    logs["launcher"] = str_or_null<J>(r.logs.launcher);
    J ranks = J::array();
    for (const auto& k : r.logs.ranks) {
      J rj = J::object();
      rj["rank"] = k.rank;
      rj["stdout"] = str_or_null<J>(k.stdout_path);
      rj["stderr"] = str_or_null<J>(k.stderr_path);
      ranks.push_back(std::move(rj));
    }
    logs["ranks"] = std::move(ranks);
    j["logs"] = std::move(logs);
  }
  j["trial"] = r.trial;
  j["trial_count"] = r.trial_count;
  if (!r.stats.is_null()) j["stats"] = sanitized<J>(r.stats);
  if (!r.trials.empty()) {
    J trials = J::array();
    for (const auto& t : r.trials) trials.push_back(scenario_json<J>(t));
    j["trials"] = std::move(trials);
  }
  // The job facts follow the contract fields, keys in name order (report.json's layout since
  // they were a JSON bag); a fact never rewrites a contract field.
  const nlohmann::json facts = facts_json(r);
  for (const auto& [k, v] : facts.items()) {
    if (!j.contains(k)) j[k] = sanitized<J>(v);
  }
  return j;
}

template <class J>
J suite_json(const SuiteReport& r) {
  J j = J::object();
  j["suite"] = r.suite;
  j["started"] = r.started;
  j["nanchaos_version"] = r.nanchaos_version;
  j["host"] = r.host;
  J scenarios = J::array();
  for (const auto& s : r.scenarios) scenarios.push_back(scenario_json<J>(s));
  j["scenarios"] = std::move(scenarios);
  j["trials"] = r.trials;
  if (!r.detector_stats.is_null()) j["detectors"] = sanitized<J>(r.detector_stats);
  J summary = J::object();
  summary["passed"] = r.passed();
  summary["failed"] = r.failed();
  summary["errors"] = r.errors();
  summary["skipped"] = r.skipped();
  // Scenarios without a verdict, counted where junit.xml counts them (its skipped and errors
  // totals are these plus the verdicts'): present when the lists below are.
  if (!r.pending.empty()) summary["pending"] = r.pending.size();
  if (r.interrupted) summary["not_run"] = r.not_run.size();
  j["summary"] = std::move(summary);
  j["complete"] = r.complete;
  if (!r.pending.empty()) {
    J pending = J::array();
    for (const auto& n : r.pending) pending.push_back(n);
    j["pending"] = std::move(pending);
  }
  j["interrupted"] = r.interrupted;
  if (r.interrupted) {
    j["interrupt_signal"] = r.interrupt_signal;
    J not_run = J::array();
    for (const auto& n : r.not_run) not_run.push_back(n);
    j["not_run"] = std::move(not_run);
  }
  if (r.shard) {
    J shard = J::object();
    shard["index"] = r.shard->index;
    shard["count"] = r.shard->count;
    J suite = J::array();
    for (const auto& n : r.shard->suite) suite.push_back(n);
    shard["suite"] = std::move(suite);
    j["shard"] = std::move(shard);
  }
  return j;
}

}  // namespace

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kFail:
      return "fail";
    case Verdict::kError:
      return "error";
    case Verdict::kSkipped:
      return "skipped";
  }
  return "error";
}

std::optional<Verdict> parse_verdict(std::string_view s) {
  for (Verdict v : {Verdict::kPass, Verdict::kFail, Verdict::kError, Verdict::kSkipped}) {
    if (s == to_string(v)) return v;
  }
  return std::nullopt;
}

std::ostream& operator<<(std::ostream& os, Verdict v) { return os << to_string(v); }

const char* to_string(Outcome o) {
  switch (o) {
    case Outcome::kNone:
      return "";
    case Outcome::kCompleted:
      return "completed";
    case Outcome::kAborted:
      return "aborted";
    case Outcome::kHung:
      return "hung";
    case Outcome::kCrashed:
      return "crashed";
  }
  return "";
}

std::ostream& operator<<(std::ostream& os, Outcome o) { return os << to_string(o); }

const char* to_string(FaultOutcome f) {
  switch (f) {
    case FaultOutcome::kNone:
      return "";
    case FaultOutcome::kMasked:
      return "masked";
    case FaultOutcome::kDetectedRecovered:
      return "detected_recovered";
    case FaultOutcome::kDetectedUnrecovered:
      return "detected_unrecovered";
    case FaultOutcome::kSilentCorruption:
      return "silent_corruption";
    case FaultOutcome::kHang:
      return "hang";
  }
  return "";
}

std::ostream& operator<<(std::ostream& os, FaultOutcome f) { return os << to_string(f); }

int SuiteReport::passed() const {
  int n = 0;
  for (const auto& s : scenarios) n += is_pass(s);
  return n;
}
int SuiteReport::failed() const {
  int n = 0;
  for (const auto& s : scenarios) n += is_fail(s);
  return n;
}
int SuiteReport::errors() const {
  int n = 0;
  for (const auto& s : scenarios) n += is_error(s);
  return n;
}
int SuiteReport::skipped() const {
  int n = 0;
  for (const auto& s : scenarios) n += is_skipped(s);
  return n;
}

nlohmann::json to_json(const Detection& d) { return detection_json<nlohmann::json>(d); }
nlohmann::json to_json(const ScenarioResult& r) { return scenario_json<nlohmann::json>(r); }
nlohmann::json to_json(const SuiteReport& r) { return suite_json<nlohmann::json>(r); }

void write_report_json(const SuiteReport& r, const std::string& path) {
  const std::string text = suite_json<ojson>(r).dump(2) + "\n";
  write_file(path, [&](std::ofstream& out) { out << text; });
}

}  // namespace nanchaos::results
