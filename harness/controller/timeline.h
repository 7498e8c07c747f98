// report.html's timeline of a job (results::Timeline), built by the judge from the evidence it
// already read (rank_evidence.h: each rank's lane, its times on the controller's clock with a
// remote rank's clock offset applied), so the report writers open no event log.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "harness/controller/rank_evidence.h"
#include "results/report.h"

namespace nanchaos::harness {

/// Every rank's lane: collectives (coll_enter..coll_leave) and point-to-point sends/receives
/// (p2p_enter..p2p_leave) as bars, inject/detect/decision/abort/exit as marks, in ms since
/// `t0_us` (the first launch's start). A bar never left ends at the rank's last event; when that
/// event is the enter itself (the rank was killed while waiting) it ends at `job_end_ms` (ms
/// since t0; nullopt: the latest event of any rank). A rank with no events is an empty lane.
/// Pure.
results::Timeline job_timeline(const std::vector<RankEvidence>& ranks, int64_t t0_us,
                               std::optional<double> job_end_ms);

/// Adds `launch` (another launch's job_timeline on the same t0, [job] restarts) to `into`: its
/// bars and marks, and the span of both. Pure.
void add_launch_timeline(results::Timeline& into, const results::Timeline& launch);

}  // namespace nanchaos::harness
