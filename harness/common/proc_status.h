// Process memory figures from Linux's /proc/<pid>/status, for the per-rank memory in report.json.
//
// VmHWM is the peak resident set size of the process since it started, in KiB. It counts every
// resident page the process maps, shared ones included (LibTorch's and Open MPI's code, mapped by
// every rank of a host), so summing it over the ranks of one host over-counts those pages: the sum
// is an upper bound of the job's memory, the per-rank value an exact peak for that rank.
// Torch-free; never throws.
#pragma once

#include <cstdint>
#include <optional>

namespace nanchaos::harness {

/// Peak resident set size (VmHWM) of process `pid` in KiB; `pid` 0 means this process.
/// nullopt when the process is gone (or a zombie, which has no memory left), or the field is
/// absent (not Linux).
std::optional<int64_t> vm_hwm_kib(int pid = 0);
/// Resident set size now (VmRSS) in KiB; as vm_hwm_kib otherwise.
std::optional<int64_t> vm_rss_kib(int pid = 0);

}  // namespace nanchaos::harness
