// Typed events (event_types.h). The strict readers (int_field, str, flag) are the ones the judge
// used field by field before the events were typed, so a log reads as it did; the lenient ones
// (opt_*) are for fields no reader checks, which must never make a log unreadable.
#include "harness/evidence/event_types.h"

#include <fmt/compile.h>

#include <cctype>
#include <cmath>
#include <initializer_list>
#include <iterator>

namespace nanchaos::harness {
namespace {

using nlohmann::json;

// value(key, def): absent gives def; null or another type throws type_error.
std::string str(const json& e, const char* key, const char* def = "") {
  return e.value(key, std::string(def));
}
bool flag(const json& e, const char* key, bool def) { return e.value(key, def); }

// Lenient: a field of the expected type, else unset.
std::optional<std::string> opt_str(const json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}
std::optional<bool> opt_bool(const json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end() || !it->is_boolean()) return std::nullopt;
  return it->get<bool>();
}
std::optional<int64_t> opt_int(const json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end() || !it->is_number()) return std::nullopt;
  if (it->is_number_float()) {
    const double d = it->get<double>();
    if (!(std::isfinite(d) && d >= -9.2e18 && d <= 9.2e18)) return std::nullopt;
    return int64_t(d);
  }
  return it->get<int64_t>();
}
// Absent: unset; null: kNoValue (written back as null); a number: itself (a bool: 0 or 1, as
// nlohmann reads it); a string, array or object ("loss": "abc") throws json::type_error, which the
// judge reports with the log's file, line and field (rank_evidence.cpp) - read as absent, a loss
// written as text would have been a step without a loss, silently.
std::optional<double> opt_num(const json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end()) return std::nullopt;
  if (it->is_null()) return kNoValue;
  return it->get<double>();  // type_error 302 unless a number
}
// A number, else kNoValue (as the judge read eval_loss before the events were typed).
double num(const json& e, const char* key) {
  auto it = e.find(key);
  return it != e.end() && it->is_number() ? it->get<double>() : kNoValue;
}

template <class T>
void put(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}
void put_time(json& j, int64_t t_us) {
  if (t_us != 0) j["t_us"] = t_us;
}

}  // namespace

int64_t int_field(const json& e, const char* key, int64_t def) {
  auto it = e.find(key);
  if (it == e.end() || it->is_null()) return def;
  if (it->is_number_float()) {
    const double d = it->get<double>();
    return std::isfinite(d) && d >= -9.2e18 && d <= 9.2e18 ? int64_t(d) : def;
  }
  return e.value(key, def);
}

// --- inject ------------------------------------------------------------------------------------

json to_json(const InjectEvent& e) {
  json j = {{"fault", e.fault},   {"kind", e.kind},     {"step", e.step},
            {"target", e.target}, {"detail", e.detail}, {"replay", e.replay}};
  put_time(j, e.t_us);
  return j;
}

InjectEvent parse_inject(const json& e) {
  InjectEvent x;
  x.t_us = int_field(e, "t_us", 0);
  x.fault = int(int_field(e, "fault", 0));
  x.kind = str(e, "kind");
  x.step = int_field(e, "step", 0);
  x.target = str(e, "target");
  x.detail = e.value("detail", json());
  x.replay = flag(e, "replay", false);
  return x;
}

// --- detect ------------------------------------------------------------------------------------

json to_json(const DetectEvent& e) {
  json j = {{"detector", e.detector}, {"step", e.step}, {"layer", e.layer}, {"cause", e.cause}};
  put(j, "source", e.source);
  put(j, "seq", e.seq);
  put(j, "status", e.status);
  put(j, "message", e.message);
  put_time(j, e.t_us);
  return j;
}

DetectEvent parse_detect(const json& e) {
  DetectEvent x;
  x.t_us = int_field(e, "t_us", 0);
  x.step = int_field(e, "step", -1);
  x.detector = str(e, "detector");
  x.layer = str(e, "layer");
  x.cause = str(e, "cause");
  if (e.contains("source")) x.source = str(e, "source");
  x.seq = opt_int(e, "seq");
  x.status = opt_str(e, "status");
  x.message = opt_str(e, "message");
  return x;
}

// --- decision ----------------------------------------------------------------------------------

json to_json(const DecisionEvent& e) {
  json j = {{"step", e.step}, {"action", e.action}};
  if (e.source) {
    j["source"] = *e.source;
  } else {
    j["detector"] = e.detector;
    j["ranks"] = e.ranks;
    j["layer"] = e.layer;
    j["cause"] = e.cause;
    j["first_local_us"] = e.first_local_us;
    if (e.local) {
      j["local"] = true;
    } else {
      j["transient"] = e.transient ? json(*e.transient) : json();
      j["flagged"] = e.flagged;
    }
  }
  put_time(j, e.t_us);
  return j;
}

DecisionEvent parse_decision(const json& e) {
  DecisionEvent x;
  x.t_us = int_field(e, "t_us", 0);
  x.step = int_field(e, "step", -1);
  if (e.contains("source")) x.source = str(e, "source");
  x.action = str(e, "action");
  x.detector = str(e, "detector");
  x.layer = str(e, "layer");
  x.cause = str(e, "cause");
  x.local = flag(e, "local", false);
  if (auto it = e.find("transient"); it != e.end() && it->is_boolean())
    x.transient = it->get<bool>();
  if (auto it = e.find("ranks"); it != e.end() && it->is_array()) {
    for (const auto& r : *it) x.ranks.push_back(r.get<int64_t>());
  }
  if (auto it = e.find("flagged"); it != e.end()) x.flagged = *it;
  x.first_local_us = opt_int(e, "first_local_us").value_or(0);
  return x;
}

// --- abort -------------------------------------------------------------------------------------

json to_json(const AbortEvent& e) {
  json j = {{"step", e.step}, {"reason", e.reason}, {"cause", e.cause}};
  put(j, "source", e.source);
  put(j, "t_us", e.t_us);
  return j;
}

AbortEvent parse_abort(const json& e) {
  AbortEvent x;
  if (auto it = e.find("t_us"); it != e.end() && !it->is_null()) {
    if (!it->is_number()) (void)int_field(e, "t_us", 0);  // throws type_error, as for any event
    x.t_us = opt_int(e, "t_us");                          // a float int64 cannot hold: unknown
  }
  x.step = opt_int(e, "step").value_or(-1);
  x.reason = opt_str(e, "reason").value_or("");
  x.cause = opt_str(e, "cause").value_or("");
  x.source = opt_str(e, "source");
  return x;
}

// --- final -------------------------------------------------------------------------------------

json to_json(const FinalEvent& e) {
  json j = {{"steps_completed", e.steps_completed},
            {"eval_loss", e.eval_loss},
            {"initial_eval_loss", e.initial_eval_loss},
            {"params_hash", e.params_hash},
            {"optim_hash", e.optim_hash},
            {"params_finite", e.params_finite}};
  put(j, "eval_loss_str", e.eval_loss_str);
  put(j, "loss_scale", e.loss_scale);
  if (!e.has_loss) j["has_loss"] = false;
  put_time(j, e.t_us);
  return j;
}

FinalEvent parse_final(const json& e) {
  FinalEvent x;
  x.t_us = int_field(e, "t_us", 0);
  x.steps_completed = opt_int(e, "steps_completed").value_or(0);
  x.eval_loss = num(e, "eval_loss");
  x.eval_loss_str = opt_str(e, "eval_loss_str");
  x.initial_eval_loss = num(e, "initial_eval_loss");
  x.params_hash = str(e, "params_hash");
  x.optim_hash = str(e, "optim_hash");
  x.params_finite = flag(e, "params_finite", false);
  x.loss_scale = opt_num(e, "loss_scale");
  x.has_loss = flag(e, "has_loss", true);
  return x;
}

// --- exit --------------------------------------------------------------------------------------

json to_json(const ExitEvent& e) {
  json j = {{"code", e.code}};
  put(j, "vm_hwm_kib", e.vm_hwm_kib);
  put_time(j, e.t_us);
  return j;
}

ExitEvent parse_exit(const json& e) {
  ExitEvent x;
  x.t_us = int_field(e, "t_us", 0);
  x.code = int(int_field(e, "code", -1));
  if (e.contains("vm_hwm_kib")) x.vm_hwm_kib = int_field(e, "vm_hwm_kib", 0);
  return x;
}

// --- step_begin, step_end (their writers: append_step_begin, append_step_end below) -----------

StepBeginEvent parse_step_begin(const json& e) {
  StepBeginEvent x;
  x.t_us = int_field(e, "t_us", 0);
  x.step = int_field(e, "step", 0);
  x.cpu_us = opt_int(e, "cpu_us");
  return x;
}

StepEndEvent parse_step_end(const json& e) {
  StepEndEvent x;
  x.t_us = int_field(e, "t_us", 0);
  x.step = int_field(e, "step", 0);
  x.action = str(e, "action");
  x.loss = opt_num(e, "loss");
  x.lr = opt_num(e, "lr");
  x.loss_scale = opt_num(e, "loss_scale");
  x.localize_us = opt_int(e, "localize_us");
  x.cpu_us = opt_int(e, "cpu_us");
  if (const auto own = e.find("own_us"); own != e.end() && own->is_object()) {
    StepEndEvent::Phases p;
    for (size_t k = 0; k < p.own_us.size(); ++k) p.own_us[k] = int_field(*own, kPhaseKeys[k], 0);
    p.wait_us = int_field(e, "wait_us", 0);
    p.run_delay_us = opt_int(e, "run_delay_us");
    x.phases = p;
  }
  return x;
}

// --- collectives -------------------------------------------------------------------------------

json to_json(const CollEnterEvent& e) {
  json j = {{"seq", e.seq}, {"name", e.name}, {"step", e.step}};
  put(j, "count", e.count);
  put(j, "dtype", e.dtype);
  put_time(j, e.t_us);
  return j;
}

CollEnterEvent parse_coll_enter(const json& e) {
  CollEnterEvent x;
  x.t_us = int_field(e, "t_us", 0);
  x.seq = int_field(e, "seq", 0);
  x.name = str(e, "name");
  x.step = int_field(e, "step", 0);
  x.count = opt_int(e, "count");
  x.dtype = opt_str(e, "dtype");
  return x;
}

json to_json(const CollLeaveEvent& e) {
  json j = {{"seq", e.seq}, {"status", e.status}};
  put(j, "name", e.name);
  put(j, "step", e.step);
  put_time(j, e.t_us);
  return j;
}

CollLeaveEvent parse_coll_leave(const json& e) {
  CollLeaveEvent x;
  x.t_us = int_field(e, "t_us", 0);
  x.seq = int_field(e, "seq", 0);
  x.status = str(e, "status", "ok");
  x.name = opt_str(e, "name");
  x.step = opt_int(e, "step");
  return x;
}

// --- any ---------------------------------------------------------------------------------------

std::string event_type(const json& e) {
  if (!e.is_object()) return "";
  const auto it = e.find("ev");
  return it != e.end() && it->is_string() ? it->get<std::string>() : "";
}

TypedEvent parse_event(const json& e) {
  const std::string ev = e.value("ev", "");
  if (ev == InjectEvent::kEv) return parse_inject(e);
  if (ev == DetectEvent::kEv) return parse_detect(e);
  if (ev == DecisionEvent::kEv) return parse_decision(e);
  if (ev == AbortEvent::kEv) return parse_abort(e);
  if (ev == FinalEvent::kEv) return parse_final(e);
  if (ev == ExitEvent::kEv) return parse_exit(e);
  if (ev == StepBeginEvent::kEv) return parse_step_begin(e);
  if (ev == StepEndEvent::kEv) return parse_step_end(e);
  if (ev == CollEnterEvent::kEv) return parse_coll_enter(e);
  if (ev == CollLeaveEvent::kEv) return parse_coll_leave(e);
  if (ev == LaunchEvent::kEv) return parse_launch(e);
  if (ev == StartEvent::kEv) return parse_start(e);
  if (ev == P2pEnterEvent::kEv) return parse_p2p_enter(e);
  if (ev == P2pLeaveEvent::kEv) return parse_p2p_leave(e);
  if (ev == CkptSaveEvent::kEv) return CkptSaveEvent{parse_checkpoint(e)};
  if (ev == CkptLoadEvent::kEv) return CkptLoadEvent{parse_checkpoint(e)};
  if (ev == CkptRejectEvent::kEv) return CkptRejectEvent{parse_checkpoint(e)};
  if (ev == CkptRenameEvent::kEv) return parse_ckpt_rename(e);
  return OtherEvent{ev, int_field(e, "t_us", 0)};
}

int64_t event_time_us(const TypedEvent& e) {
  return std::visit(
      [](const auto& x) -> int64_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, AbortEvent>) {
          return x.t_us.value_or(0);
        } else {
          return x.t_us;
        }
      },
      e);
}

// --- launch, start --------------------------------------------------------------------------

namespace {

void put_identity(json& j, const RankIdentity& e) {
  j["rank"] = e.rank;
  j["world"] = e.world;
  j["pid"] = e.pid;
  j["host"] = e.host;
  put(j, "pidns", e.pidns);
}

void read_identity(const json& e, RankIdentity& x) {
  x.rank = int_field(e, "rank", -1);
  x.world = int_field(e, "world", 0);
  x.pid = int_field(e, "pid", 0);
  x.host = str(e, "host");
  if (e.contains("pidns")) x.pidns = str(e, "pidns");
}

// The strings of an array field; absent or not an array: none; entries not strings skipped.
std::vector<std::string> strings(const json& e, const char* key) {
  std::vector<std::string> out;
  if (auto it = e.find(key); it != e.end() && it->is_array()) {
    for (const auto& v : *it) {
      if (v.is_string()) out.push_back(v.get<std::string>());
    }
  }
  return out;
}

// The fields of `e` other than "ev", "t_us" and `typed`: a struct's `more`.
json rest(const json& e, std::initializer_list<const char*> typed) {
  json out = json::object();
  for (auto it = e.begin(); it != e.end(); ++it) {
    const std::string& k = it.key();
    if (k == "ev" || k == "t_us") continue;
    bool known = false;
    for (const char* t : typed) known = known || k == t;
    if (!known) out[k] = it.value();
  }
  return out;
}

// `more`'s fields into j (an object; a typed field of the same name wins).
void merge(json& j, const json& more) {
  if (!more.is_object()) return;
  for (auto it = more.begin(); it != more.end(); ++it) {
    if (!j.contains(it.key())) j[it.key()] = it.value();
  }
}

}  // namespace

json to_json(const LaunchEvent& e) {
  json j = json::object();
  put_identity(j, e);
  j["command"] = e.command;
  put_time(j, e.t_us);
  return j;
}

LaunchEvent parse_launch(const json& e) {
  LaunchEvent x;
  x.t_us = int_field(e, "t_us", 0);
  read_identity(e, x);
  x.command = strings(e, "command");
  return x;
}

json to_json(const StartEvent& e) {
  json j = json::object();
  put_identity(j, e);
  put(j, "seed", e.seed);
  if (e.external) {
    j["external"] = true;
    j["modules"] = e.modules;
    j["parameters"] = e.parameters;
  }
  put(j, "agent", e.agent);
  merge(j, e.more);
  put_time(j, e.t_us);
  return j;
}

StartEvent parse_start(const json& e) {
  StartEvent x;
  x.t_us = int_field(e, "t_us", 0);
  read_identity(e, x);
  x.seed = opt_int(e, "seed");
  x.external = opt_bool(e, "external").value_or(false);
  x.agent = opt_str(e, "agent");
  x.modules = strings(e, "modules");
  x.parameters = strings(e, "parameters");
  x.more = rest(e, {"rank", "world", "pid", "host", "pidns", "seed", "external", "agent", "modules",
                    "parameters"});
  return x;
}

// --- point-to-point ----------------------------------------------------------------------------

json to_json(const P2pEnterEvent& e) {
  json j = {{"seq", e.seq}, {"op", e.op}, {"step", e.step}};
  j["peer"] = e.peer >= 0 ? json(e.peer) : json();
  put(j, "numel", e.numel);
  put(j, "dtype", e.dtype);
  put_time(j, e.t_us);
  return j;
}

P2pEnterEvent parse_p2p_enter(const json& e) {
  P2pEnterEvent x;
  x.t_us = int_field(e, "t_us", 0);
  x.seq = int_field(e, "seq", 0);
  x.op = str(e, "op");
  x.peer = int_field(e, "peer", -1);
  x.numel = opt_int(e, "numel");
  x.dtype = opt_str(e, "dtype");
  x.step = int_field(e, "step", 0);
  return x;
}

json to_json(const P2pLeaveEvent& e) {
  json j = {{"seq", e.seq}, {"status", e.status}};
  put_time(j, e.t_us);
  return j;
}

P2pLeaveEvent parse_p2p_leave(const json& e) {
  P2pLeaveEvent x;
  x.t_us = int_field(e, "t_us", 0);
  x.seq = int_field(e, "seq", 0);
  x.status = str(e, "status", "ok");
  return x;
}

// --- checkpoints -------------------------------------------------------------------------------

json to_json(const CheckpointEvent& e) {
  json j = {{"path", e.path}};
  put(j, "step", e.step);
  put(j, "agent_step", e.agent_step);
  if (!e.why.empty()) j["why"] = e.why;
  merge(j, e.more);
  put_time(j, e.t_us);
  return j;
}

CheckpointEvent parse_checkpoint(const json& e) {
  CheckpointEvent x;
  x.t_us = int_field(e, "t_us", 0);
  x.path = str(e, "path");
  auto integer = [&](const char* key) -> std::optional<int64_t> {
    auto it = e.find(key);
    if (it == e.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<int64_t>();
  };
  x.step = integer("step");
  x.agent_step = integer("agent_step");
  x.why = str(e, "why");
  x.more = rest(e, {"path", "step", "agent_step", "why"});
  return x;
}

json to_json(const CkptRenameEvent& e) {
  json j = {{"from", e.from}, {"path", e.path}};
  put_time(j, e.t_us);
  return j;
}

CkptRenameEvent parse_ckpt_rename(const json& e) {
  CkptRenameEvent x;
  x.t_us = int_field(e, "t_us", 0);
  x.from = str(e, "from");
  x.path = str(e, "path");
  return x;
}

namespace {

// True when `s` needs no JSON escaping (collective names are plain identifiers).
bool plain(std::string_view s) {
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) {
      return false;
    }
  }
  return true;
}

// `s` as a JSON string, quotes included: plain names as they are, others through nlohmann.
void append_json_string(fmt::memory_buffer& out, std::string_view s) {
  if (plain(s)) {
    fmt::format_to(std::back_inserter(out), FMT_COMPILE("\"{}\""), s);
  } else {
    const std::string quoted = json(std::string(s)).dump();
    out.append(quoted.data(), quoted.data() + quoted.size());
  }
}

}  // namespace

void append_coll_enter(fmt::memory_buffer& out, int64_t t_us, int64_t seq, std::string_view name,
                       int64_t count, std::string_view dtype, int64_t step) {
  fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"({{"count":{},"dtype":)"), count);
  append_json_string(out, dtype);
  fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"(,"ev":"coll_enter","name":)"));
  append_json_string(out, name);
  fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"(,"seq":{},"step":{},"t_us":{}}})"), seq,
                 step, t_us);
}

void append_coll_leave(fmt::memory_buffer& out, int64_t t_us, int64_t seq, std::string_view name,
                       int64_t step, std::string_view status) {
  fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"({{"ev":"coll_leave","name":)"));
  append_json_string(out, name);
  fmt::format_to(std::back_inserter(out),
                 FMT_COMPILE(R"(,"seq":{},"status":"{}","step":{},"t_us":{}}})"), seq, status, step,
                 t_us);
}

namespace {

// `"key":` (the key a plain word), after a comma unless it opens the object.
void append_key(fmt::memory_buffer& out, std::string_view key, bool first = false) {
  fmt::format_to(std::back_inserter(out), FMT_COMPILE("{}\"{}\":"), first ? "" : ",", key);
}

// A double as EventLog::write writes it: null when not finite; else the shortest text that reads
// back the same, with ".0" when that is an integer (nlohmann writes 1.0, not 1).
void append_double(fmt::memory_buffer& out, double v) {
  if (!std::isfinite(v)) {
    fmt::format_to(std::back_inserter(out), FMT_COMPILE("null"));
    return;
  }
  const size_t start = out.size();
  fmt::format_to(std::back_inserter(out), FMT_COMPILE("{}"), v);
  for (size_t i = start; i < out.size(); ++i) {
    if (out[i] == '.' || out[i] == 'e') return;
  }
  fmt::format_to(std::back_inserter(out), FMT_COMPILE(".0"));
}

void put_double(fmt::memory_buffer& out, std::string_view key, const std::optional<double>& v) {
  if (!v) return;
  append_key(out, key);
  append_double(out, *v);
}

void put_int(fmt::memory_buffer& out, std::string_view key, const std::optional<int64_t>& v) {
  if (!v) return;
  append_key(out, key);
  fmt::format_to(std::back_inserter(out), FMT_COMPILE("{}"), *v);
}

}  // namespace

void append_step_begin(fmt::memory_buffer& out, int64_t t_us, const StepBeginEvent& e) {
  out.push_back('{');
  if (e.cpu_us) {
    fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"("cpu_us":{},)"), *e.cpu_us);
  }
  fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"("ev":"step_begin","step":{},"t_us":{}}})"),
                 e.step, t_us);
}

void append_step_end(fmt::memory_buffer& out, int64_t t_us, const StepEndEvent& e) {
  // Keys in sorted order, as EventLog::write sorts them; own_us's too.
  out.push_back('{');
  append_key(out, "action", true);
  append_json_string(out, e.action);
  put_int(out, "cpu_us", e.cpu_us);
  fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"(,"ev":"step_end")"));
  put_int(out, "localize_us", e.localize_us);
  put_double(out, "loss", e.loss);
  put_double(out, "loss_scale", e.loss_scale);
  put_double(out, "lr", e.lr);
  if (e.phases) {
    static_assert(std::string_view(kPhaseKeys[0]) == "data" &&
                      std::string_view(kPhaseKeys[1]) == "compute" &&
                      std::string_view(kPhaseKeys[2]) == "backward" &&
                      std::string_view(kPhaseKeys[3]) == "comm",
                  "own_us is written in sorted key order from kPhaseKeys' indices");
    const auto& own = e.phases->own_us;
    fmt::format_to(std::back_inserter(out),
                   FMT_COMPILE(R"(,"own_us":{{"backward":{},"comm":{},"compute":{},"data":{}}})"),
                   own[2], own[3], own[1], own[0]);
    put_int(out, "run_delay_us", e.phases->run_delay_us);
  }
  fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"(,"step":{},"t_us":{})"), e.step, t_us);
  if (e.phases) put_int(out, "wait_us", e.phases->wait_us);
  out.push_back('}');
}

void write_event(EventLog& log, const StepBeginEvent& e) {
  fmt::memory_buffer line;
  append_step_begin(line, e.t_us ? e.t_us : now_us(), e);
  log.write_line(std::string_view(line.data(), line.size()));
}

void write_event(EventLog& log, const StepEndEvent& e) {
  fmt::memory_buffer line;
  append_step_end(line, e.t_us ? e.t_us : now_us(), e);
  log.write_line(std::string_view(line.data(), line.size()));
}

}  // namespace nanchaos::harness
