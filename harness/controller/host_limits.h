// Absurd values refused before any job starts: an estimate of one rank's
// memory for the built-in workloads and of the job's total, checked against this host's memory,
// and [job].ranks checked against how many processes this host can run. `nanchaos validate`,
// `nanchaos run` and `nanchaos campaign` call check_host_limits() on every scenario after loading
// it (Preflight::load, preflight.h); the rank subcommands never do (a rank may run on another
// host). Torch-free.
//
// The estimate (bytes of one rank, P = parameter elements, Bf = buffer elements (BatchNorm
// running statistics), A = activation elements of one step, all closed forms of the configured
// sizes, see estimate_rank_memory()):
//   parameters      4 (P + Bf)                 fp32 master weights (the workloads keep them fp32;
//                                              fp16/bf16 only round activations and gradients)
//   gradients       4 P  (+ w P)               the flat fp32 gradient bucket, plus the wire copy
//                                              (w = 2 for fp16/bf16, 4 for fp32) when
//                                              grad_allreduce_dtype != fp32 or grad_predivide
//   optimizer state 8 P for adam/adamw         two moments (exp_avg, exp_avg_sq), fp32;
//                   0 for sgd                  the harness's SGD has no momentum (momentum = 0;
//                                              with momentum it would be 4 P)
//   rollback        4 (P + Bf) + optimizer     the in-memory snapshot, when policy has rollback
//   activations     a A                        every module output kept for backward (backward
//                                              frees them as it makes their gradients);
//                                              a = 2 for fp16/bf16 on cuda (autocast), else 4
// with (B = batch_size, H = hidden, L = layers, F = features, C = classes, T = seq_len, V = vocab,
// D = hidden, h = heads, n = 1 when norm != none):
//   mlp:          P = F H + H + (L - 1)(H^2 + H) + 2 n L H + H C + C;  Bf = (2 H + 1) L if
//   batchnorm
//                 A = B F + B H L (2 + n) + 2 B C
//   transformer:  P = V D + T D + L (12 D^2 + 13 D) + 2 D + D V + V;  Bf = 0
//                 A = 3 B T D + T D + L (19 B T D + 3 B h T^2) + 2 B T V
// The process's own footprint (LibTorch, MPI, the event log: a few hundred MiB) is not counted:
// the check refuses what surely cannot fit, it is no tight bound.
// Caveats: measured on the 2-core test host (VmHWM of 2 ranks against a tiny model of the same
// workload): an mlp with hidden = 2048, batch 256 peaked 226 MiB above one with hidden = 128
// where the estimate says 152 MiB (the optimizer step's temporaries and allocator slack are not
// counted: about 1.5x low for parameter-heavy models); a transformer with hidden = 256, 2 layers,
// seq_len 128, batch 8 peaked 81.8 MiB above a tiny one, estimate 82 MiB. For device = "cuda" the
// model is built on the host and then moved, so the host must hold the parameters; the rest lives
// on the GPU, whose memory the torch-free controller does not query (the estimate is still shown).
//
// Host memory: MemAvailable from /proc/meminfo (the kernel's estimate of what new allocations can
// get without swapping, page cache included), because that is what a job started now can use;
// MemTotal would also count memory other processes hold. Kernels before 3.14 lack MemAvailable:
// then MemTotal. The message names which one it used.
//
// Ranks: at most max(64, 8 x cores) processes on this host by default (cores from the process's
// CPU affinity). mpirun runs oversubscribed on CPU (the controller passes --oversubscribe), so
// more ranks than cores is normal, and the shipped 64-rank scenarios run on a 2-core host; 100000
// is not. A job whose ranks run on other hosts (a launcher with a real hostfile, Slurm) lifts the
// limit and the memory checks with --no-host-limits; a bigger host raises the rank limit with
// --max-ranks N. External jobs: only the ranks check applies (their model is unknown before the
// job attaches).
//
// Errors (ScenarioError, at the key to change):
//   "x.toml:8:10: error: [workload] hidden = 2000000000: one rank needs ~111.0 EiB (parameters
//    27.8 EiB, gradients 27.8 EiB, optimizer state 55.5 EiB (adam: 2 moments), activations
//    1.4 TiB), this host has 23.1 GiB available (MemAvailable); --no-host-limits skips this check"
//   "x.toml:6:9: error: [job] ranks = 100000: more ranks than this host can run (limit 64 =
//    max(64, 8 x 2 cores); mpirun oversubscribes the cores); the job needs ~73.7 GiB (100000
//    ranks x 772.7 KiB per rank), this host has 23.1 GiB available (MemAvailable); with a real
//    hostfile, raise the limit with --max-ranks N or lift the host checks with --no-host-limits"
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "harness/scenario/scenario.h"

namespace nanchaos::harness {

/// Bytes of one rank of a built-in job, by part (see the header comment for the formula).
struct MemoryEstimate {
  double parameters = 0;  ///< parameters and buffers
  double gradients = 0;   ///< the gradient bucket and the wire copy
  double optimizer = 0;   ///< optimizer state
  double snapshot = 0;    ///< rollback snapshot (0 without rollback)
  double activations = 0;
  bool on_gpu = false;  ///< device = "cuda": only `parameters` is host memory
  double total() const { return parameters + gradients + optimizer + snapshot + activations; }
  /// What the rank needs of this host's memory: total(), or `parameters` for a cuda job.
  double host() const { return on_gpu ? parameters : total(); }
};

/// Parameter and buffer elements, as doubles (no overflow for absurd sizes).
struct ParamCount {
  double parameters = 0;
  double buffers = 0;
};
ParamCount count_parameters(WorkloadKind workload, const WorkloadConfig& w);
/// Activation elements of one step (the A of the header comment).
double count_activations(WorkloadKind workload, const WorkloadConfig& w);

/// The estimate for a built-in job. Throws std::logic_error for an external job.
MemoryEstimate estimate_rank_memory(const Scenario& s);

/// "59.6 GiB", "126.0 KiB", "512 B": binary units up to EiB.
std::string format_bytes(double bytes);

/// What this host offers.
struct HostResources {
  double memory_bytes = 0;    ///< usable memory (see memory_source)
  std::string memory_source;  ///< "MemAvailable" or "MemTotal" (/proc/meminfo), "" if unknown
  int cores = 1;              ///< CPUs this process may run on
};
/// Reads /proc/meminfo and the CPU affinity. memory_bytes = 0 when /proc/meminfo is unreadable
/// (the memory checks are then skipped).
HostResources probe_host();

/// The command-line switches (`--no-host-limits`, `--max-ranks N`).
struct HostLimitOptions {
  bool enabled = true;               ///< false: --no-host-limits, nothing is checked
  std::optional<int64_t> max_ranks;  ///< replaces the default max(64, 8 x cores)
};

/// max(64, 8 x cores).
int64_t default_max_ranks(int cores);

/// Throws ScenarioError when one rank does not fit in the host's memory, when [job].ranks is past
/// the rank limit, or when the job's total (every rank on this host) does not fit, in that order.
void check_host_limits(const Scenario& s, const HostResources& host, const HostLimitOptions& opts);

}  // namespace nanchaos::harness
