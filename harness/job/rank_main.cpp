// `nanchaos rank`: one launcher-started rank process. The job guard, the scenario, the rank's
// engine (MPI, or NCCL with MPI carrying the unique id), then the loop of runner.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "harness/comm/nccl_communicator.h"
#include "harness/common/cuda_device.h"
#include "harness/common/job_guard.h"
#include "harness/common/rank_output.h"
#include "harness/evidence/event_paths.h"
#include "harness/evidence/proc_watch.h"
#include "harness/job/runner.h"
#include "harness/scenario/plan.h"
#include "harness/scenario/scenario.h"
#include "harness/tensor/torch_compat.h"

namespace nanchaos::harness {
namespace {

// The rank's engine. NCCL: world size 1 needs no MPI at all (no launcher, no MPI_Init); otherwise
// MPI gives rank and size and carries the unique id. Local rank -> device.
std::unique_ptr<Communicator> make_communicator(const Scenario& s) {
  if (s.job.backend != Backend::kNccl) return make_mpi_communicator();
  if (!compat::cuda_available()) {
    throw std::runtime_error("device cuda: this LibTorch has no CUDA or sees no GPU");
  }
  NcclOptions o;
  o.world = int(s.job.ranks);
  if (o.world > 1) {
    mpi_world(&o.rank, &o.world);
    o.broadcast_id = [](void* data, size_t bytes) { mpi_broadcast_bytes(data, bytes, 0); };
    o.take_down = [](int code) { abort_world(code); };
  }
  int local = o.rank;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"}) {
    if (const char* v = std::getenv(var)) {
      local = std::atoi(v);
      break;
    }
  }
  const int devices = cuda_device_count();
  if (devices <= 0) throw std::runtime_error("device cuda: no CUDA device visible to this rank");
  o.device = local % devices;
  o.init_timeout_ms = std::max<int64_t>(60000, collective_timeout_ms(s.detectors));
  return make_nccl_communicator(o);
}

// The campaign file's faults; `seed` (a repeated trial) replaces each one's seed as well.
std::vector<InLaunchFault> campaign_faults(const std::string& file, std::optional<uint64_t> seed) {
  std::vector<InLaunchFault> faults = load_inlaunch_faults(file);
  if (seed) {
    for (auto& f : faults) f.s.seed = *seed;
  }
  return faults;
}

}  // namespace

int run_rank(const std::string& scenario_path, const std::string& run_dir,
             std::optional<uint64_t> seed, const std::string& campaign_file,
             const std::vector<int>& skip_faults) {
  // Before anything can hang (MPI_Init included): this rank ends itself if the controller or
  // the launcher dies, or the job outlives its deadline (job_guard.h).
  const char* launcher_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!launcher_rank) launcher_rank = std::getenv("SLURM_PROCID");
  // First, while this process has one thread: the watch that records when it ended, for the
  // judge's crash blame where the controller cannot see it (another host; proc_watch.h).
  const int rank = launcher_rank ? std::atoi(launcher_rank) : 0;
  // This rank's own stdout and stderr files (rank_output.h), before anything prints.
  if (const std::string why = redirect_rank_output(rank); !why.empty()) {
    std::fprintf(stderr, "nanchaos rank: warning: %s; output stays with the launcher\n",
                 why.c_str());
  }
  start_exit_watch(gone_record_path(events_dir(run_dir), rank), rank);
  start_job_guard(fmt::format("nanchaos rank {}", launcher_rank ? launcher_rank : "0"));
  std::unique_ptr<Communicator> comm;
  try {
    // The scenario picks the engine, so it loads first (every rank reads the same file, so a bad
    // file fails every rank alike).
    Scenario s = load_scenario(scenario_path);
    if (seed) s.seed = *seed;
    drop_fired_faults(s, skip_faults);  // a relaunch: one-shot faults that fired stay fired
    comm = make_communicator(s);
    const int code = campaign_file.empty()
                         ? run_rank_on(std::move(s), std::move(comm), run_dir)
                         : run_campaign_on(std::move(s), campaign_faults(campaign_file, seed),
                                           std::move(comm), run_dir);
    finalize_mpi();
    return code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nanchaos rank: error: %s\n", e.what());
    // Peers may already wait in a collective: take the whole job down rather than hang it.
    abort_world(kRankExitSetup);
  }
}

}  // namespace nanchaos::harness
