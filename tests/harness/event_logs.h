// Hand-written evidence for the judge's tests: per-rank JSON-lines event logs in the format the
// ranks write (harness/evidence/events.h for built-in jobs, docs/external-jobs.md for the agent),
// judged from memory (evidence(): what judge() takes, no file read) or written to a run folder
// (flush(): for the readers, read_job_evidence and the controller's paths).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "harness/controller/judge.h"
#include "harness/controller/rank_evidence.h"
#include "harness/evidence/events.h"

namespace nanchaos::test_util {

/// Job launch time of the hand-written logs (CLOCK_MONOTONIC us); event times are offsets.
constexpr int64_t kT0 = 1'000'000'000;

/// A run folder under the test temp dir (removed at the end) whose events/rank-N.jsonl files are
/// written by flush() from what ev() and raw() collected.
class EventLogDir {
 public:
  EventLogDir(const std::string& prefix, const std::string& name) {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           (prefix + "_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "events");
  }
  ~EventLogDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  EventLogDir(const EventLogDir&) = delete;
  EventLogDir& operator=(const EventLogDir&) = delete;

  std::string path() const { return dir_.string(); }
  /// Appends one event; `t` is microseconds after kT0.
  void ev(int rank, const std::string& type, int64_t t,
          nlohmann::json fields = nlohmann::json::object()) {
    fields["ev"] = type;
    fields["t_us"] = kT0 + t;
    lines_[rank].push_back(fields.dump());
  }
  /// Appends raw text after a rank's lines (no newline is added).
  void raw(int rank, const std::string& text) { tails_[rank] += text; }
  /// The launcher's output (RUN/ranks.log), kept for evidence() and written to the run folder.
  void ranks_log(const std::string& text) {
    ranks_log_ = text;
    std::ofstream(dir_ / "ranks.log") << text;
  }
  /// A rank's own process watch record (RUN/events/rank-R.gone.json): gone at `t` us after kT0,
  /// on the rank's clock.
  void gone(int rank, int64_t t) {
    gone_[rank] = kT0 + t;
    std::ofstream(dir_ / "events" / ("rank-" + std::to_string(rank) + ".gone.json"))
        << nlohmann::json{{"ev", "gone"}, {"rank", rank}, {"t_us", kT0 + t}}.dump() << "\n";
  }
  /// Free bytes of the run folder's filesystem as the evidence says (nullopt: not sampled).
  void free_bytes(std::optional<uint64_t> bytes) { free_bytes_ = bytes; }

  /// The job's evidence built from what ev(), raw(), ranks_log() and gone() collected, as
  /// read_job_evidence would read it after flush(), with no file read: ranks 0..world-1 (a rank
  /// with no line has an empty log).
  harness::JobEvidence evidence(int world, const harness::JobResult& job) const {
    harness::JobEvidence e;
    e.run_dir = path();
    e.free_bytes = free_bytes_;
    try {
      for (int r = 0; r < world; ++r) {
        std::string text;
        if (auto it = lines_.find(r); it != lines_.end()) {
          for (const auto& l : it->second) text += l + "\n";
        }
        if (auto it = tails_.find(r); it != tails_.end()) text += it->second;
        std::optional<int64_t> gone;
        if (auto it = gone_.find(r); it != gone_.end()) gone = it->second;
        e.ranks.push_back(
            harness::rank_evidence_from_events(harness::parse_events(text), job, gone));
      }
    } catch (const nlohmann::json::exception& ex) {
      e.unreadable = std::string("an event has a field of the wrong type: ") + ex.what();
    }
    std::istringstream log(ranks_log_);
    harness::read_ranks_log(log, e);
    return e;
  }
  /// Writes every rank's file (overwriting).
  void flush() const {
    for (const auto& [rank, lines] : lines_) {
      std::ofstream out(dir_ / "events" / ("rank-" + std::to_string(rank) + ".jsonl"));
      for (const auto& l : lines) out << l << "\n";
      auto it = tails_.find(rank);
      if (it != tails_.end()) out << it->second;
    }
  }

 private:
  std::filesystem::path dir_;
  std::map<int, std::vector<std::string>> lines_;
  std::map<int, std::string> tails_;
  std::map<int, int64_t> gone_;
  std::string ranks_log_;
  std::optional<uint64_t> free_bytes_;
};

/// judge() on the evidence `d` holds, built in memory (EventLogDir::evidence): no file is read.
inline results::ScenarioResult judge_logs(const harness::Scenario& s, const EventLogDir& d,
                                          const harness::JobResult& job) {
  return harness::judge(s, d.evidence(int(s.job.ranks), job), job);
}

}  // namespace nanchaos::test_util
