// Where a rank runs, as far as the controller is concerned: on its own host, where its pid means
// something in the controller's /proc, or elsewhere (docs/multi-node.md).
//
// Ranks say where they are in their first event (`start`, or an external rank's `launch`):
// {host: gethostname(), pidns: readlink("/proc/self/ns/pid"), pid}. A rank is local when both
// match the controller's; only local ranks are pid-watched and memory-sampled through /proc. For
// a remote rank, a pid of 5 belongs to its own PID namespace: read in the controller's /proc it
// would name an unrelated process.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace nanchaos::harness {

/// This process's host name (gethostname; "" on error).
std::string this_host();
/// This process's PID namespace, e.g. "pid:[4026531836]" ("" where /proc does not say).
std::string this_pid_namespace();

/// True when the rank that wrote `first_event` runs on this host in this PID namespace. An event
/// without `host` (written by an older rank) counts as local, as before; one without `pidns` is
/// judged by its host alone. Pure function of its arguments.
bool rank_is_local(const nlohmann::json& first_event, const std::string& host,
                   const std::string& pidns);
/// rank_is_local(first_event, this_host(), this_pid_namespace()).
bool rank_is_local(const nlohmann::json& first_event);

}  // namespace nanchaos::harness
