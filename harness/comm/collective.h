// One rank collective the way the runner issues every one of them (consensus, gradient
// all-reduce, buffer broadcast, replay): a `coll_enter` event, the non-blocking SUM all-reduce
// through the Communicator polled until the watchdog deadline, and a `coll_leave` event when it
// completed. The events are the flight recorder the controller's hang post-mortem reads.
// Torch-free, so the consensus benchmark (bench/consensus_bench.cpp) times exactly this code.
//
// Example: logged_allreduce(comm, log, seq++, "consensus", rows.data(), rows.size(),
//                           DType::kFp64, step, /*timeout_ms=*/10000);
// Blocks at most until timeout_ms has passed (one poll interval more, communicator.h); never
// throws on the hot path. On kTimeout/kError no coll_leave is written: the caller (the runner's
// watchdog) logs the detection and takes the job down.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/comm/communicator.h"
#include "harness/evidence/events.h"

namespace nanchaos::harness {

/// In-place SUM all-reduce of `count` elements of `type` at `buf`, logged as collective #`seq`
/// named `name` at `step`. `timeout_ms` <= 0 waits without a deadline (no watchdog: a stock job).
CollStatus logged_allreduce(Communicator& comm, EventLog& log, int64_t seq, const std::string& name,
                            void* buf, size_t count, DType type, int64_t step, int64_t timeout_ms);

}  // namespace nanchaos::harness
