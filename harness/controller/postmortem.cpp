// The judge's post-mortem: what the collectives each rank entered and left, and how the
// processes ended, say about absent, dead and deadlocked ranks (the flight-recorder evidence).
#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "harness/controller/judge_internal.h"

namespace nanchaos::harness {
namespace {

using nlohmann::json;

// A rank's entry of collective #k that came after a peer had already left #k with an error
// (its process-group timeout fired, its connection closed) took no part in it: the peer gave
// up waiting for this rank. The flight recorder counts it absent from #k (a stalled rank that
// a framework's SIGTERM handler revives for one last collective, Lightning's, is still the one
// the others waited for), and its entry is no disagreement on #k.
bool late_entry(const std::vector<RankEvidence>& logs, size_t r, int64_t k) {
  const auto it = logs[r].coll_enter.find(k);
  if (it == logs[r].coll_enter.end()) return false;
  for (size_t q = 0; q < logs.size(); ++q) {
    if (q == r || !logs[q].coll_enter.count(k)) continue;
    const auto failed = logs[q].coll_failed_t.find(k);
    if (failed != logs[q].coll_failed_t.end() && it->second.t_us > failed->second) return true;
  }
  return false;
}

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
      if (!logs[r].coll_enter.count(k) || late_entry(logs, size_t(r), k)) missing.push_back(r);
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
      pm.last_collective[r] = std::nullopt;
      continue;
    }
    const auto& [seq, c] = *l.coll_enter.rbegin();
    pm.last_collective[r] =
        results::LastCollective{seq, c.name, c.step, l.coll_left.count(seq) > 0};
  }
}

// Point-to-point (pipeline stages): no collective number is shared by every rank, so the
// question is who the others wait on. The n-th send from a to b pairs with b's n-th receive from
// a (torch matches them in order per pair); an entry whose other end never came is a wait of
// its rank on that peer. A rank that others wait on and that waits on no one is the stopped
// one: with 4 stages and stage 2 stopped, stage 1 waits on 2 (its send and its receive), stage
// 0 on 1 (stage 1 never sent its gradient back), stage 3 on 2, and only 2 waits on no one.
// Caveats: a receive from any source (peer -1) is left out; a stopped rank that comes back
// later (a finite hang past its peers' timeout) and enters its half of the pair is counted
// present, so the blame may move to a rank it kept waiting.
std::vector<int64_t> find_p2p_stall(const std::vector<RankEvidence>& logs) {
  const int64_t world = int64_t(logs.size());
  // sends[a][b]: a's sends to b; recvs[b][a]: b's receives from a.
  std::vector<std::map<int64_t, int64_t>> sends(logs.size()), recvs(logs.size());
  for (int64_t r = 0; r < world; ++r) {
    for (const auto& p : logs[size_t(r)].p2p) {
      if (p.peer < 0 || p.peer >= world || p.peer == r) continue;
      ++(p.send() ? sends : recvs)[size_t(r)][p.peer];
    }
  }
  std::set<int64_t> waiting, waited_on;
  for (int64_t r = 0; r < world; ++r) {
    std::map<int64_t, int64_t> sent, received;  // entries so far, per peer
    for (const auto& p : logs[size_t(r)].p2p) {
      if (p.peer < 0 || p.peer >= world || p.peer == r) continue;
      const int64_t n = (p.send() ? sent : received)[p.peer]++;
      const auto& other = p.send() ? recvs[size_t(p.peer)] : sends[size_t(p.peer)];
      const auto it = other.find(r);
      if (it == other.end() || it->second <= n) {
        waiting.insert(r);
        waited_on.insert(p.peer);
      }
    }
  }
  std::vector<int64_t> stopped;
  for (int64_t r : waited_on) {
    if (!waiting.count(r)) stopped.push_back(r);
  }
  return stopped;
}

// Sequence mismatch: the same collective number entered at different steps, ops or sizes (late
// entries left out). Fills pm.mismatch and, from the first one, the evidence fields.
void find_mismatch(const std::vector<RankEvidence>& logs, Postmortem& pm) {
  struct Entry {
    int64_t rank, step, t_us, count;
    std::string name;
    auto key() const { return std::make_tuple(step, name, count); }
  };
  for (int64_t k = 0;; ++k) {
    std::vector<Entry> entries;
    bool any = false;
    for (size_t r = 0; r < logs.size(); ++r) {
      auto it = logs[r].coll_enter.find(k);
      if (it == logs[r].coll_enter.end()) continue;
      any = true;
      if (late_entry(logs, r, k)) continue;
      entries.push_back({int64_t(r), it->second.step, it->second.t_us,
                         it->second.count.value_or(-1), it->second.name});
    }
    if (!any) return;
    std::map<std::tuple<int64_t, std::string, int64_t>, std::vector<int64_t>> groups;
    for (const auto& e : entries) groups[e.key()].push_back(e.rank);
    if (groups.size() < 2) continue;
    std::vector<results::MismatchEntry> ranks;
    for (const auto& e : entries) {
      ranks.push_back(
          {e.rank, e.step, e.name, e.count >= 0 ? std::optional<int64_t>(e.count) : std::nullopt});
    }
    // Diverged: the smallest group; on a tie the one furthest ahead (a rank that skipped a
    // collective meets its peers' earlier one), else every rank outside the lowest rank's group.
    auto rank_of = [](const auto& g) {  // smaller first: fewer members, then further ahead
      return std::make_pair(g.second.size(), -std::get<0>(g.first));
    };
    const auto best =
        std::min_element(groups.begin(), groups.end(),
                         [&](const auto& a, const auto& b) { return rank_of(a) < rank_of(b); });
    const bool tie = std::count_if(groups.begin(), groups.end(),
                                   [&](const auto& g) { return rank_of(g) == rank_of(*best); }) > 1;
    pm.mismatch_ranks.clear();
    if (tie) {
      const auto& lowest =
          *std::min_element(entries.begin(), entries.end(),
                            [](const Entry& a, const Entry& b) { return a.rank < b.rank; });
      for (const auto& e : entries) {
        if (e.key() != lowest.key()) pm.mismatch_ranks.push_back(e.rank);
      }
    } else {
      pm.mismatch_ranks = best->second;
    }
    std::sort(pm.mismatch_ranks.begin(), pm.mismatch_ranks.end());
    pm.mismatch_step = std::numeric_limits<int64_t>::max();
    for (const auto& e : entries) pm.mismatch_step = std::min(pm.mismatch_step, e.step);
    // Visible once an entry differs from one already made.
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.t_us < b.t_us; });
    for (const auto& e : entries) {
      if (e.key() != entries.front().key()) {
        pm.mismatch_t_us = e.t_us;
        break;
      }
    }
    pm.mismatch =
        results::CollectiveMismatch{k, std::move(ranks), pm.mismatch_ranks, pm.mismatch_step};
    return;
  }
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
  if (pm.absent.empty()) pm.absent = find_p2p_stall(logs);
  find_mismatch(logs, pm);
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
      if (waited > double(collective_timeout_ms(s.detectors)) + 1000.0) pm.deadlock = true;
    }
  }
  return pm;
}

}  // namespace nanchaos::harness
