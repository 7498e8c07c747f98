// Reading report.json back into the report model (report.h scenario_from_json/suite_from_json),
// for `nanchaos merge`: the inverse of report.cpp's writers, so that to_json(scenario_from_json(j))
// == j for every scenario a run wrote (tests/results/report_read_test.cpp checks it on a real
// report). Non-finite numbers come back from the strings "nan", "inf", "-inf" (report.cpp's
// convention); a null optional field stays unset.
#include <limits>
#include <stdexcept>

#include "results/report.h"

namespace nanchaos::results {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw std::runtime_error(where + ": " + what);
}

const json& need(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) bad(where, std::string("missing key \"") + key + "\"");
  return *it;
}

// A number report.cpp wrote with number<J>(): a JSON number or "nan"/"inf"/"-inf".
double number_from(const json& v, const std::string& where) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  bad(where, "not a number: " + v.dump());
}

std::optional<double> opt_number(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return number_from(*it, where + "." + key);
}

template <class T>
std::optional<T> opt_value(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return it->get<T>();
}

// A string field written with str_or_null(): null reads as "".
std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? std::string() : it->get<std::string>();
}

// report.cpp's rank_json(): null, one rank, or a list.
std::vector<int64_t> ranks_from(const json& v) {
  if (v.is_null()) return {};
  if (v.is_array()) return v.get<std::vector<int64_t>>();
  return {v.get<int64_t>()};
}

template <class E>
E enum_from(const std::string& s, std::initializer_list<E> all, const std::string& where) {
  for (E e : all) {
    if (s == to_string(e)) return e;
  }
  bad(where, "unknown value \"" + s + "\"");
}

Detection detection_from(const json& j, const std::string& where) {
  Detection d;
  d.detector = need(j, "detector", where).get<std::string>();
  d.ranks = ranks_from(j.value("rank", json()));
  d.step = opt_value<int64_t>(j, "step").value_or(-1);
  d.layer = str(j, "layer");
  d.cause = str(j, "cause");
  d.transient = opt_value<bool>(j, "transient");
  d.latency_steps = opt_value<int64_t>(j, "latency_steps");
  d.latency_ms = opt_number(j, "latency_ms", where);
  d.decision_us = opt_number(j, "decision_us", where);
  d.action = str(j, "action");
  return d;
}

JobLogs logs_from(const json& j) {
  JobLogs logs;
  if (j.is_null()) return logs;
  logs.merged = str(j, "merged");
  logs.launcher = str(j, "launcher");
  for (const auto& r : j.value("ranks", json::array())) {
    logs.ranks.push_back({r.at("rank").get<int64_t>(), str(r, "stdout"), str(r, "stderr")});
  }
  return logs;
}

}  // namespace

ScenarioResult scenario_from_json(const json& j) {
  const std::string where = "scenario " + j.value("name", std::string("?"));
  ScenarioResult r;
  try {
    r.name = need(j, "name", where).get<std::string>();
    r.file = str(j, "file");
    const auto verdict = parse_verdict(need(j, "verdict", where).get<std::string>());
    if (!verdict) bad(where + ".verdict", "unknown verdict " + j.at("verdict").dump());
    r.verdict = *verdict;
    r.reason = str(j, "reason");
    r.outcome = enum_from(
        str(j, "outcome"),
        {Outcome::kNone, Outcome::kCompleted, Outcome::kAborted, Outcome::kHung, Outcome::kCrashed},
        where + ".outcome");
    r.wall_ms = number_from(j.value("wall_ms", json(0.0)), where + ".wall_ms");
    r.seed = j.value("seed", uint64_t(0));
    r.ranks = j.value("ranks", int64_t(0));
    for (const auto& c : j.value("checks", json::array())) {
      r.checks.push_back({c.at("key").get<std::string>(), c.value("expected", json()),
                          c.value("actual", json()), c.value("pass", false)});
    }
    r.fault_outcome = enum_from(
        str(j, "fault_outcome"),
        {FaultOutcome::kNone, FaultOutcome::kMasked, FaultOutcome::kDetectedRecovered,
         FaultOutcome::kDetectedUnrecovered, FaultOutcome::kSilentCorruption, FaultOutcome::kHang},
        where + ".fault_outcome");
    if (auto it = j.find("first_detection"); it != j.end() && !it->is_null()) {
      r.first_detection = detection_from(*it, where + ".first_detection");
    }
    for (const auto& d : j.value("detections", json::array())) {
      r.detections.push_back(detection_from(d, where + ".detections"));
    }
    for (const auto& in : j.value("injections", json::array())) {
      Injection x;
      x.fault = in.value("fault", 0);
      x.kind = in.value("kind", std::string());
      x.rank = in.value("rank", int64_t(0));
      x.step = in.value("step", int64_t(0));
      x.target = str(in, "target");
      x.t_ms = number_from(in.value("t_ms", json(0.0)), where + ".injections.t_ms");
      x.replay = in.value("replay", false);
      r.injections.push_back(std::move(x));
    }
    r.steps_completed = j.value("steps_completed", int64_t(0));
    r.dropped_events = j.value("dropped_events", int64_t(0));
    r.final_loss = opt_number(j, "final_loss", where);
    r.run_dir = str(j, "run_dir");
    r.logs = logs_from(j.value("logs", json()));
    r.trial = j.value("trial", 0);
    r.trial_count = j.value("trial_count", 1);
    if (auto it = j.find("stats"); it != j.end()) r.stats = *it;
    for (const auto& t : j.value("trials", json::array()))
      r.trials.push_back(scenario_from_json(t));
    r.judged = read_job_facts(j);
    r.controller = read_controller_facts(j);
    r.interpreter = read_interpreter(j);
    r.interrupted_by = str(j, "interrupted_by");
    r.in_launch = str(j, "in_launch");
  } catch (const nlohmann::json::exception& e) {
    bad(where, e.what());
  }
  return r;
}

SuiteReport suite_from_json(const json& j) {
  SuiteReport r;
  try {
    r.suite = j.value("suite", std::string());
    r.started = j.value("started", std::string());
    r.nanchaos_version = j.value("nanchaos_version", std::string());
    r.host = j.value("host", std::string());
    for (const auto& s : need(j, "scenarios", "report").get_ref<const json::array_t&>()) {
      r.scenarios.push_back(scenario_from_json(s));
    }
    r.trials = j.value("trials", 1);
    if (auto it = j.find("detectors"); it != j.end()) r.detector_stats = *it;
    r.interrupted = j.value("interrupted", false);
    r.interrupt_signal = j.value("interrupt_signal", std::string());
    r.not_run = j.value("not_run", std::vector<std::string>());
    r.complete = j.value("complete", true);
    r.pending = j.value("pending", std::vector<std::string>());
    if (auto it = j.find("shard"); it != j.end() && it->is_object()) {
      r.shard = ShardInfo{it->value("index", 0), it->value("count", 0),
                          it->value("suite", std::vector<std::string>())};
    }
  } catch (const nlohmann::json::exception& e) {
    bad("report", e.what());
  }
  return r;
}

json to_json(const Timeline& t) {
  json bars = json::array();
  for (const auto& b : t.bars) {
    bars.push_back({{"rank", b.rank},
                    {"t0_ms", b.t0_ms},
                    {"t1_ms", b.t1_ms},
                    {"name", b.name},
                    {"open", b.open},
                    {"p2p", b.p2p}});
  }
  json marks = json::array();
  for (const auto& m : t.marks) {
    marks.push_back({{"rank", m.rank}, {"t_ms", m.t_ms}, {"kind", m.kind}, {"label", m.label}});
  }
  return {{"ranks", t.ranks},
          {"begin_ms", t.begin_ms},
          {"end_ms", t.end_ms},
          {"bars", std::move(bars)},
          {"marks", std::move(marks)}};
}

Timeline timeline_from_json(const json& j) {
  Timeline t;
  t.ranks = j.value("ranks", 0);
  t.begin_ms = j.value("begin_ms", 0.0);
  t.end_ms = j.value("end_ms", 0.0);
  for (const auto& b : j.value("bars", json::array())) {
    t.bars.push_back({b.at("rank").get<int>(), b.at("t0_ms").get<double>(),
                      b.at("t1_ms").get<double>(), b.value("name", std::string()),
                      b.value("open", false), b.value("p2p", false)});
  }
  for (const auto& m : j.value("marks", json::array())) {
    t.marks.push_back({m.at("rank").get<int>(), m.at("t_ms").get<double>(),
                       m.value("kind", std::string()), m.value("label", std::string())});
  }
  return t;
}

}  // namespace nanchaos::results
