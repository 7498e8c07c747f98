// The judge's post-mortem: what the collectives each rank entered and left, and how the
// processes ended, say about absent, dead and deadlocked ranks (the flight-recorder evidence).
#include <algorithm>
#include <limits>
#include <set>

#include "harness/controller/judge_internal.h"

namespace nanchaos::harness {
namespace {

using nlohmann::json;

// The first collective some ranks entered and others never did, and those others. Only sequence
// numbers some rank entered can be a gap (one no rank entered is not): walking 0..max seq instead
// hung on a corrupted `"seq": 1e15` (found by nanchaos_fuzz_report).
void find_first_gap(const std::vector<RankEvidence>& logs, Postmortem& pm) {
  const int world = int(logs.size());
  std::set<int64_t> seqs;
  for (const auto& l : logs) {
    for (const auto& entry : l.coll_enter) {
      if (entry.first >= 0) seqs.insert(entry.first);
    }
  }
  for (int64_t k : seqs) {
    std::vector<int64_t> missing;
    for (int r = 0; r < world; ++r) {
      if (!logs[r].coll_enter.count(k)) missing.push_back(r);
    }
    if (!missing.empty() && int(missing.size()) < world) {
      pm.first_gap_seq = k;
      pm.absent = missing;
      break;
    }
  }
  for (int r = 0; r < world; ++r) {
    const auto& l = logs[r];
    if (l.coll_enter.empty()) {
      pm.last_collective[std::to_string(r)] = nullptr;
      continue;
    }
    const auto& [seq, c] = *l.coll_enter.rbegin();
    pm.last_collective[std::to_string(r)] = {
        {"seq", seq}, {"name", c.name}, {"step", c.step}, {"left", l.coll_left.count(seq) > 0}};
  }
}

// Sequence mismatch: the same collective number entered at different steps or names.
json find_mismatch(const std::vector<RankEvidence>& logs) {
  json mismatch = nullptr;
  for (int64_t k = 0; mismatch.is_null(); ++k) {
    std::set<std::pair<int64_t, std::string>> seen;
    bool any = false;
    for (const auto& l : logs) {
      auto it = l.coll_enter.find(k);
      if (it == l.coll_enter.end()) continue;
      any = true;
      seen.insert({it->second.step, it->second.name});
    }
    if (!any) break;
    if (seen.size() > 1) {
      json ranks = json::array();
      for (size_t r = 0; r < logs.size(); ++r) {
        auto it = logs[r].coll_enter.find(k);
        if (it != logs[r].coll_enter.end()) {
          ranks.push_back({{"rank", int(r)}, {"step", it->second.step}, {"name", it->second.name}});
        }
      }
      mismatch = {{"seq", k}, {"ranks", ranks}};
    }
  }
  return mismatch;
}

// Dead ranks of a crashed job: the ones that left no exit or abort record and whose process was
// seen to disappear first (`job.rank_gone_us`: the controller's pid watch, and the ranks' own
// watch for ranks on other hosts, ranks_gone_us). When every process vanished within one poll (the
// launcher tore the job down at once), the flight-recorder evidence decides: the dead are those
// absent from collective #k.
std::vector<int64_t> dead_of_crash(const std::vector<RankEvidence>& logs, const JobResult& job,
                                   const std::vector<int64_t>& absent) {
  const int world = int(logs.size());
  std::vector<int64_t> dead;
  std::vector<int64_t> silent;
  for (int r = 0; r < world; ++r) {
    if (logs[r].started && !logs[r].exit_code && !logs[r].abort) silent.push_back(r);
  }
  int64_t earliest = std::numeric_limits<int64_t>::max();
  for (int64_t r : silent) {
    auto it = job.rank_gone_us.find(int(r));
    if (it != job.rank_gone_us.end()) earliest = std::min(earliest, it->second);
  }
  constexpr int64_t kPollSlackUs = 5000;
  // A rank no watch saw end (a remote rank whose watcher left no record) counts as gone with the
  // first; the collective record below narrows it down.
  for (int64_t r : silent) {
    auto it = job.rank_gone_us.find(int(r));
    if (it == job.rank_gone_us.end() || it->second <= earliest + kPollSlackUs) dead.push_back(r);
  }
  if (dead.size() > 1 && !absent.empty()) {
    std::vector<int64_t> both;
    for (int64_t r : dead) {
      if (std::find(absent.begin(), absent.end(), r) != absent.end()) both.push_back(r);
    }
    if (!both.empty()) dead = both;
  }
  return dead;
}

// Dead ranks of an aborted job. The watchdog can beat the launcher's teardown of a dead rank (a
// short collective_timeout_ms): the survivors abort, and the dead are the silent ranks (no exit
// or abort record) whose process was gone before the first rank logged its abort (a remote
// rank's end is its own watch's record).
std::vector<int64_t> dead_of_abort(const std::vector<RankEvidence>& logs, const JobResult& job) {
  const int world = int(logs.size());
  std::vector<int64_t> dead;
  int64_t first_abort = std::numeric_limits<int64_t>::max();
  for (int r = 0; r < world; ++r) {
    if (logs[r].abort)
      first_abort = std::min(first_abort, logs[r].abort->t_us.value_or(first_abort));
  }
  constexpr int64_t kPollUs = 10000;  // the controller's pid watch polls every 10 ms
  for (int r = 0; r < world; ++r) {
    if (!logs[r].started || logs[r].exit_code || logs[r].abort) continue;
    auto it = job.rank_gone_us.find(r);
    if (it != job.rank_gone_us.end() && it->second + kPollUs < first_abort) dead.push_back(r);
  }
  return dead;
}

}  // namespace

Postmortem postmortem(const Scenario& s, const std::vector<RankEvidence>& logs,
                      const JobResult& job, results::Outcome outcome) {
  Postmortem pm;
  find_first_gap(logs, pm);
  pm.mismatch = find_mismatch(logs);
  if (outcome == results::Outcome::kCrashed) {
    pm.dead = dead_of_crash(logs, job, pm.absent);
  } else if (outcome == results::Outcome::kAborted) {
    pm.dead = dead_of_abort(logs, job);
  }
  // Deadlock: some rank waited in a collective past collective_timeout_ms + 1 s.
  for (const auto& l : logs) {
    for (const auto& [seq, c] : l.coll_enter) {
      // An external job's collective that ended in an error (its process-group timeout fired,
      // the peer's connection closed) was a wait as long as it lasted.
      const auto failed = l.coll_failed_t.find(seq);
      if (l.coll_left.count(seq) && (!s.job.external() || failed == l.coll_failed_t.end()))
        continue;
      const int64_t end = l.coll_left.count(seq) ? failed->second
                          : l.exit_code          ? l.last_t
                                                 : job.t_end_us;
      const double waited = double(end - c.t_us) / 1000.0;
      pm.longest_wait_ms = std::max(pm.longest_wait_ms, waited);
      if (waited > double(s.detectors.collective_timeout_ms) + 1000.0) pm.deadlock = true;
    }
  }
  return pm;
}

}  // namespace nanchaos::harness
