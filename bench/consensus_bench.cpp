// Cost of the consensus round against a bare non-blocking all-reduce of the same size.
//
// BM_ConsensusRound/ranks:N launches one real job, `mpirun -np N` of this same binary in worker
// mode (2 to 64 ranks, oversubscribed on a small host exactly as `nanchaos run` launches
// scenarios). Every worker runs, interleaved and in alternating order, `rounds` pairs of:
//   bare       MPI_Iallreduce(MPI_IN_PLACE, summary_width() int64, MPI_SUM) polled with MPI_Test on
//              the same spin-then-sleep schedule as the Open MPI engine
//              (harness/comm/mpi_communicator.cpp), so the pair differs only in what the harness
//              adds;
//   consensus  the runner's clean-step round (harness/job/runner.cpp run_step, consensus.h): this
//              rank's summary counts, the fixed-size SUM through the Communicator with its
//              coll_enter / coll_leave events written and flushed to a per-rank event log
//              (harness/comm/collective.cpp logged_allreduce, the code the runner calls), and
//              summary_flagged() on the result. The [N x kRowWidth] detail round runs only on
//              flagged steps, never on a clean one.
// Warm-up pairs are dropped. Each rank times its own rounds (CLOCK_MONOTONIC) and writes them to
// a file the parent reads; statistics pool every rank's rounds.
//
// Reported per rank count: manual time = mean consensus round; counters consensus_p50_us,
// consensus_mean_us, bare_p50_us, bare_mean_us, ratio_vs_bare (= consensus p50 / bare p50),
// ratio_mean_vs_bare (= consensus mean / bare mean), payload_bytes (what one rank contributes to
// a clean step's round: the same at every N), detail_bytes (the flagged-step matrix, N x 72),
// ranks, rounds (20000 up to 8 ranks, 160000 / N above: 64 processes share the host's cores).
// NANCHAOS_BENCH_QUICK=1: 500 rounds (a smoke run).
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "detectors/core/consensus.h"
#include "harness/comm/collective.h"
#include "harness/comm/communicator.h"
#include "harness/evidence/events.h"

namespace fs = std::filesystem;
using namespace nanchaos::harness;
namespace nb = nanchaos::bench;

namespace {

constexpr int kWarmup = 100;

// CLOCK_MONOTONIC in microseconds with nanosecond resolution (rounds take a few us).
double now_precise_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) * 1e-3;
}

// The bare side: the MPI calls alone, polled as MpiWork::wait polls (spin, then 50 us sleeps).
void bare_allreduce(SummaryCounts& buf) {
  MPI_Request req;
  MPI_Iallreduce(MPI_IN_PLACE, buf.data(), int(buf.size()), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD,
                 &req);
  for (int spins = 0;; ++spins) {
    int flag = 0;
    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    if (flag) return;
    if (spins > 64) {
      timespec ts{0, 50000};
      nanosleep(&ts, nullptr);
    }
  }
}

int worker(int rounds, const std::string& prefix) {
  auto comm = make_mpi_communicator();
  const int rank = comm->rank();
  EventLog log(prefix + ".events.rank-" + std::to_string(rank) + ".jsonl");
  SummaryCounts bare(summary_width(), 0);
  std::vector<double> t_bare, t_cons;
  int64_t seq = 0;
  size_t flagged = 0;
  auto consensus_round = [&](int64_t step) {
    // As run_step does on a clean step: this rank's counts (no detector flagged), the summary
    // all-reduce, the branch test; the detail round would follow only when flagged.
    SummaryCounts counts = summary_counts(0);
    if (logged_allreduce(*comm, log, seq++, "consensus", counts.data(), counts.size(),
                         DType::kInt64, step, 10000) != CollStatus::kOk) {
      std::fprintf(stderr, "consensus all-reduce failed\n");
      comm->abort_job(1);
    }
    flagged += summary_flagged(counts) ? 1 : 0;
  };
  for (int r = 0; r < kWarmup + rounds; ++r) {
    double tb = 0, tc = 0;
    for (int k = 0; k < 2; ++k) {
      const bool do_bare = (k == 0) == (r % 2 == 0);  // alternate which goes first
      const double t0 = now_precise_us();
      if (do_bare) {
        bare_allreduce(bare);
      } else {
        consensus_round(r);
      }
      (do_bare ? tb : tc) = now_precise_us() - t0;
    }
    if (r >= kWarmup) {
      t_bare.push_back(tb);
      t_cons.push_back(tc);
    }
  }
  std::ofstream out(prefix + ".rank-" + std::to_string(rank) + ".txt");
  for (size_t i = 0; i < t_bare.size(); ++i) out << t_bare[i] << ' ' << t_cons[i] << '\n';
  finalize_mpi();
  return flagged == 0 ? 0 : 1;  // a clean summary must never say "flagged"
}

void BM_ConsensusRound(benchmark::State& state) {
  const int ranks = int(state.range(0));
  const int rounds = nb::quick_mode() ? 500 : ranks <= 8 ? 20000 : 160000 / ranks;
  const fs::path dir =
      fs::temp_directory_path() / ("nanchaos-consensus-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string prefix = (dir / ("np" + std::to_string(ranks))).string();
  std::vector<double> bare, cons;
  for (auto _ : state) {
    try {
      nb::run_or_throw(nb::mpirun_prefix(ranks) + " " + nb::self_exe() + " --worker " +
                           std::to_string(rounds) + " " + prefix,
                       600, prefix + ".log");
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      return;
    }
    for (int r = 0; r < ranks; ++r) {
      std::ifstream in(prefix + ".rank-" + std::to_string(r) + ".txt");
      for (double b, c; in >> b >> c;) {
        bare.push_back(b);
        cons.push_back(c);
      }
    }
    if (cons.size() != size_t(ranks) * size_t(rounds)) {
      state.SkipWithError("missing worker timings (see the log under /tmp)");
      return;
    }
    state.SetIterationTime(nb::mean(cons) * 1e-6);
  }
  fs::remove_all(dir);
  const double cp50 = nb::quantile(cons, 0.5), bp50 = nb::quantile(bare, 0.5);
  state.counters["ranks"] = ranks;
  state.counters["rounds"] = rounds;
  state.counters["consensus_p50_us"] = cp50;
  state.counters["consensus_mean_us"] = nb::mean(cons);
  state.counters["bare_p50_us"] = bp50;
  state.counters["bare_mean_us"] = nb::mean(bare);
  state.counters["ratio_vs_bare"] = bp50 > 0 ? cp50 / bp50 : 0;
  state.counters["ratio_mean_vs_bare"] = nb::mean(bare) > 0 ? nb::mean(cons) / nb::mean(bare) : 0;
  state.counters["payload_bytes"] = double(summary_width() * sizeof(int64_t));
  state.counters["detail_bytes"] = double(size_t(ranks) * kRowWidth * sizeof(double));
}

BENCHMARK(BM_ConsensusRound)
    ->ArgName("ranks")
    ->Arg(2)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Arg(32)
    ->Arg(64)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--worker") {
    try {
      return worker(std::stoi(argv[2]), argv[3]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "consensus bench worker: error: %s\n", e.what());
      abort_world(2);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
