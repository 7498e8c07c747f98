// The judge's timeline (timeline.h): the ranks' lanes paired into bars and marks.
#include "harness/controller/timeline.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

namespace nanchaos::harness {

results::Timeline job_timeline(const std::vector<RankEvidence>& ranks, int64_t t0_us,
                               std::optional<double> job_end_ms) {
  results::Timeline t;
  t.ranks = int(ranks.size());
  auto ms = [t0_us](int64_t t_us) { return double(t_us - t0_us) / 1000.0; };
  bool any = false;
  for (int r = 0; r < t.ranks; ++r) {
    const RankEvidence& rank = ranks[size_t(r)];
    if (!rank.first_t) continue;
    t.begin_ms = any ? std::min(t.begin_ms, ms(*rank.first_t)) : ms(*rank.first_t);
    any = true;
    const double last = std::max(0.0, ms(rank.last_t));
    // (p2p, seq) -> (enter ms, name): collectives and sends/receives are numbered apart.
    std::map<std::pair<bool, int64_t>, std::pair<double, std::string>> open;
    for (const LaneEvent& e : rank.lane) {
      const double at = ms(e.t_us);
      switch (e.what) {
        case LaneEvent::What::kEnter:
          open[{e.p2p, e.seq}] = {at, e.name};
          break;
        case LaneEvent::What::kLeave:
          if (auto it = open.find({e.p2p, e.seq}); it != open.end()) {
            t.bars.push_back({r, it->second.first, at, it->second.second, false, e.p2p});
            open.erase(it);
          }
          break;
        case LaneEvent::What::kMark:
          t.marks.push_back({r, at, e.name, e.label});
          break;
      }
    }
    // Entered and never left: the rank was still waiting at its last sign of life.
    for (const auto& [key, v] : open)
      t.bars.push_back({r, v.first, last, v.second, true, key.first});
    t.end_ms = std::max(t.end_ms, last);
  }
  // A rank whose last sign of life IS entering the collective (killed while waiting) waited
  // until the job ended: a zero-length bar would hide the very thing to see.
  const double waited_until = job_end_ms ? std::max(*job_end_ms, t.end_ms) : t.end_ms;
  for (auto& b : t.bars) {
    if (b.open && b.t1_ms <= b.t0_ms) {
      b.t1_ms = waited_until;
      t.end_ms = waited_until;
    }
  }
  return t;
}

void add_launch_timeline(results::Timeline& into, const results::Timeline& launch) {
  if (launch.bars.empty() && launch.marks.empty() && launch.end_ms == 0) return;
  into.begin_ms = std::min(into.begin_ms, launch.begin_ms);
  into.end_ms = std::max(into.end_ms, launch.end_ms);
  into.ranks = std::max(into.ranks, launch.ranks);
  into.bars.insert(into.bars.end(), launch.bars.begin(), launch.bars.end());
  into.marks.insert(into.marks.end(), launch.marks.begin(), launch.marks.end());
}

}  // namespace nanchaos::harness
