// GPU cost of the always-on gradient check: the fused multi-tensor CUDA scan (cuda_scan.h).
//
// Gradient set: a GPT-style model with d_model 1024, 24 blocks, vocab 50304, context 1024, untied
// head, one allocation per tensor at bucket-view offsets of one flat fp32 buffer (as the runner's
// gradients are): 293 tensors, 405,049,344 floats, 1.62 GB, far beyond the H200's 60 MB L2, so
// every pass streams from HBM.
//
// BM_CudaFusedScan      CudaScanner::scan: one memset + one kernel + one 1.2 KB async copy to
//                       pinned memory + one stream sync per pass (the step's only host sync);
//                       reads every gradient byte once. Timed interleaved, best of 20 rounds, with
//                       a cudaMemcpyAsync device-to-device copy of the same bytes + stream sync.
//                       Counters: scan_bytes_per_s (bytes read), copy_bytes_per_s (bytes read +
//                       written: the HBM traffic a copy moves), ratio_vs_copy = scan over copy
//                       (goal >= 0.85: the scan runs at copy bandwidth).
// BM_CudaPerTensorCheck the usual pattern, `isfinite(g).all().item()` per tensor, emulated with
//                       this scan on one tensor at a time (a launch and a host sync per tensor;
//                       torch's version adds a second kernel and an allocation, so this is a lower
//                       bound). Counter ratio_vs_per_tensor = fused bytes/s over per-tensor
//                       bytes/s (how many times faster the fused pass is), same run.
// BM_CudaPostReduceScaleScan  CudaScanner::scale_and_scan (x *= 1/world in place plus the
//                       checks: read + write); counter ratio_vs_copy as above (bytes read +
//                       written over the copy's).
//
// On a host without a GPU the program prints the CUDA runtime's reason and exits 0.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "detectors/core/cuda_scan.h"
#include "harness/common/cuda_device.h"

namespace {

using nanchaos::harness::ConstSpan;
using nanchaos::harness::CudaScanner;
using nanchaos::harness::MutSpan;
using nanchaos::harness::ScanStats;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct DeviceGrads {
  float* flat = nullptr;
  float* copy_dst = nullptr;
  size_t floats = 0;
  std::vector<ConstSpan> spans;
  std::vector<MutSpan> mut;
  double bytes() const { return double(floats) * sizeof(float); }
};

DeviceGrads& grads() {
  static DeviceGrads g = [] {
    const std::vector<size_t> sizes = nanchaos::bench::gpt_gradient_sizes(1024, 24, 50304, 1024);
    DeviceGrads d;
    for (size_t n : sizes) d.floats += n;
    check(cudaMalloc(&d.flat, d.floats * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&d.copy_dst, d.floats * sizeof(float)), "cudaMalloc");
    // Small normal values, uploaded in 16 Mi-float pieces.
    std::vector<float> piece(size_t(1) << 24);
    std::mt19937 rng(42);
    std::normal_distribution<float> dist(0.0f, 1e-3f);
    for (auto& x : piece) x = dist(rng);
    for (size_t off = 0; off < d.floats; off += piece.size()) {
      const size_t n = std::min(piece.size(), d.floats - off);
      check(cudaMemcpy(d.flat + off, piece.data(), n * sizeof(float), cudaMemcpyHostToDevice),
            "cudaMemcpy");
    }
    size_t off = 0;
    for (size_t n : sizes) {
      d.spans.push_back({d.flat + off, n});
      d.mut.push_back({d.flat + off, n});
      off += n;
    }
    return d;
  }();
  return g;
}

template <typename F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void copy_pass(DeviceGrads& g) {
  check(cudaMemcpyAsync(g.copy_dst, g.flat, g.floats * sizeof(float), cudaMemcpyDeviceToDevice,
                        nullptr),
        "cudaMemcpyAsync");
  check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
}

void BM_CudaFusedScan(benchmark::State& state) {
  auto& g = grads();
  CudaScanner scanner;
  ScanStats st;
  scanner.scan(g.spans, nullptr, &st);  // warm-up (builds the chunk table)
  copy_pass(g);
  double best_scan = 1e30, best_copy = 1e30;
  for (auto _ : state) {
    for (int round = 0; round < 20; ++round) {
      best_copy = std::min(best_copy, seconds([&] { copy_pass(g); }));
      const double t = seconds([&] { scanner.scan(g.spans, nullptr, &st); });
      best_scan = std::min(best_scan, t);
    }
    state.SetIterationTime(best_scan);
  }
  if (st.any_nonfinite()) state.SkipWithError("clean gradients flagged");
  state.counters["scan_bytes_per_s"] = g.bytes() / best_scan;
  state.counters["copy_bytes_per_s"] = 2 * g.bytes() / best_copy;
  state.counters["ratio_vs_copy"] = (g.bytes() / best_scan) / (2 * g.bytes() / best_copy);
  state.counters["tensors"] = double(g.spans.size());
  state.counters["scan_us"] = best_scan * 1e6;
  state.counters["copy_us"] = best_copy * 1e6;
}
BENCHMARK(BM_CudaFusedScan)->UseManualTime()->Iterations(3)->Unit(benchmark::kMicrosecond);

void BM_CudaPerTensorCheck(benchmark::State& state) {
  auto& g = grads();
  CudaScanner fused;
  std::vector<std::unique_ptr<CudaScanner>> per;  // one per tensor: each keeps its own table
  for (size_t i = 0; i < g.spans.size(); ++i) per.push_back(std::make_unique<CudaScanner>());
  ScanStats st;
  fused.scan(g.spans, nullptr, &st);
  for (size_t i = 0; i < g.spans.size(); ++i) per[i]->scan({g.spans[i]}, nullptr, &st);
  double best_fused = 1e30, best_per = 1e30;
  bool bad = false;
  for (auto _ : state) {
    for (int round = 0; round < 10; ++round) {
      best_fused = std::min(best_fused, seconds([&] { fused.scan(g.spans, nullptr, &st); }));
      best_per = std::min(best_per, seconds([&] {
                            for (size_t i = 0; i < g.spans.size(); ++i) {
                              per[i]->scan({g.spans[i]}, nullptr, &st);  // launch + sync
                              bad |= st.any_nonfinite();
                            }
                          }));
    }
    state.SetIterationTime(best_per);
  }
  if (bad) state.SkipWithError("clean gradients flagged");
  state.counters["per_tensor_bytes_per_s"] = g.bytes() / best_per;
  state.counters["fused_bytes_per_s"] = g.bytes() / best_fused;
  state.counters["ratio_vs_per_tensor"] = best_per / best_fused;
  state.counters["per_tensor_us"] = best_per * 1e6;
  state.counters["fused_us"] = best_fused * 1e6;
}
BENCHMARK(BM_CudaPerTensorCheck)->UseManualTime()->Iterations(2)->Unit(benchmark::kMicrosecond);

void BM_CudaPostReduceScaleScan(benchmark::State& state) {
  auto& g = grads();
  CudaScanner scanner;
  ScanStats st;
  scanner.scale_and_scan(g.mut, 0.25f, nullptr, &st);
  scanner.scale_and_scan(g.mut, 4.0f, nullptr, &st);  // powers of two: values come back exact
  copy_pass(g);
  double best = 1e30, best_copy = 1e30;
  for (auto _ : state) {
    for (int round = 0; round < 10; ++round) {
      best_copy = std::min(best_copy, seconds([&] { copy_pass(g); }));
      best = std::min(best, seconds([&] { scanner.scale_and_scan(g.mut, 0.25f, nullptr, &st); }));
      best = std::min(best, seconds([&] { scanner.scale_and_scan(g.mut, 4.0f, nullptr, &st); }));
    }
    state.SetIterationTime(best);
  }
  state.counters["scale_scan_bytes_per_s"] = 2 * g.bytes() / best;
  state.counters["copy_bytes_per_s"] = 2 * g.bytes() / best_copy;
  state.counters["ratio_vs_copy"] = best_copy / best;
}
BENCHMARK(BM_CudaPostReduceScaleScan)
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (nanchaos::harness::cuda_device_count(&why) == 0) {
    std::printf("nanchaos_bench_cuda_scan: skipped, no CUDA device (%s)\n", why.c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
