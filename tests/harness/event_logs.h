// Hand-written run folders for the judge's tests: per-rank JSON-lines event logs in the format
// the ranks write (harness/evidence/events.h for built-in jobs, docs/external-jobs.md for the
// agent).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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
  /// Writes the launcher's output file of the run folder.
  void ranks_log(const std::string& text) const { std::ofstream(dir_ / "ranks.log") << text; }
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
};

}  // namespace nanchaos::test_util
