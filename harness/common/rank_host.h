// Where a rank runs, as far as the controller is concerned: on its own host, where its pid means
// something in the controller's /proc, or elsewhere (docs/multi-node.md).
//
// Ranks say where they are in their first event (`start`, or an external rank's `launch`):
// {host: gethostname(), pidns: readlink("/proc/self/ns/pid"), pid}. A rank is local when both
// match the controller's; only local ranks are pid-watched and memory-sampled through /proc. For
// a remote rank, a pid of 5 belongs to its own PID namespace: read in the controller's /proc it
// would name an unrelated process.
#pragma once

#include <string>
#include <string_view>

namespace nanchaos::harness {

/// This process's host name (gethostname; "" on error).
std::string this_host();
/// This process's PID namespace, e.g. "pid:[4026531836]" ("" where /proc does not say).
std::string this_pid_namespace();

/// True when a rank whose first event says `rank_host` and `rank_pidns` runs on `host` in PID
/// namespace `pidns`. An empty rank_host (an older rank's event without it) counts as local, as
/// before; an empty rank_pidns is judged by the host alone. Pure function of its arguments.
bool rank_is_local(std::string_view rank_host, std::string_view rank_pidns, std::string_view host,
                   std::string_view pidns);
/// rank_is_local(rank_host, rank_pidns, this_host(), this_pid_namespace()).
bool rank_is_local(std::string_view rank_host, std::string_view rank_pidns);

}  // namespace nanchaos::harness
