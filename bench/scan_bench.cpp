// Cost of the always-on gradient checks, on the gradient set of a small GPT.
//
// Model (fp32 gradients, one allocation per parameter as in a real model): d_model 256, 6 blocks,
// vocab 8192, context 512, untied head.
//   wte [8192, 256], wpe [512, 256],
//   per block: ln1.w/b [256], attn.qkv.w [768, 256] b [768], attn.proj.w [256, 256] b [256],
//              ln2.w/b [256], mlp.fc1.w [1024, 256] b [1024], mlp.fc2.w [256, 1024] b [256],
//   ln_f.w/b [256], head.w [8192, 256]
// = 77 tensors, 9,065,984 floats, 36.3 MB.
//
// BM_ReadBandwidth          plain read: sum of every float (the floor for any pass over the bytes)
// BM_FusedGradScan          the stack's fp32 path (gradients are views of the fp32 all-reduce
//                           bucket, no pre-division, so nothing is packed): `scan`, one read pass
//                           computing non-finite flags + sq norm + max |x|. Counter
//                           ratio_vs_read = its bandwidth over the plain read's, both timed
//                           interleaved (best of 30 rounds) within this benchmark.
// BM_PostReduceScaleScan    `scale_and_scan` in place after the fp32 all-reduce: x *= 1/world
//                           plus the same checks (reads and writes every byte). Scales alternate
//                           0.25 and 4 so the data comes back bit-exact. ratio_vs_read as above.
// BM_PackCopy               the pack alone: memcpy of each tensor into the fp32 all-reduce buffer,
//                           no checks (reads and writes every byte: the floor for any pack)
// BM_PackAndScan            pack_and_scan into an fp32 all-reduce buffer: the path that needs a
//                           pack (fp16/bf16 wire or pre-division; measured here at fp32, scale
//                           1). Counter ratio_vs_copy = its bandwidth over the plain pack's,
//                           timed interleaved (best of 30 rounds) within this benchmark.
// BM_PerTensorIsfiniteItem  the usual per-tensor pattern, `torch.isfinite(g).all().item()` and
//                           `g.norm()` per tensor plus the pack copy, emulated without torch as
//                           the same passes over memory: isfinite writes a bool mask, all() reads
//                           it, item() is a per-tensor sync point, norm() reads g again, pack
//                           copies g; every pass vectorized. It has none of torch's dispatch /
//                           kernel-launch / host-sync cost, so it is a lower bound of the real
//                           pattern.
// Bytes processed = gradient bytes (36.3 MB) per iteration for every benchmark.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "bench/bench_util.h"
#include "detectors/core/fused_scan.h"

namespace {

using nanchaos::harness::ConstSpan;
using nanchaos::harness::MutSpan;
using nanchaos::harness::pack_and_scan;
using nanchaos::harness::scale_and_scan;
using nanchaos::harness::scan;
using nanchaos::harness::ScanStats;
using nanchaos::harness::WireType;

struct GradSet {
  std::vector<std::vector<float>> tensors;
  std::vector<ConstSpan> spans;
  std::vector<MutSpan> mut_spans;  // the same tensors, for the in-place post-reduce pass
  std::vector<float> wire;         // the all-reduce buffer
  size_t floats = 0;
  int64_t bytes() const { return static_cast<int64_t>(floats * sizeof(float)); }
};

const GradSet& grads() {
  static const GradSet set = [] {
    const std::vector<size_t> sizes = nanchaos::bench::gpt_gradient_sizes(256, 6, 8192, 512);
    GradSet s;
    std::mt19937 rng(42);
    std::normal_distribution<float> dist(0.0f, 1e-3f);
    for (size_t n : sizes) {
      std::vector<float> t(n);
      for (float& x : t) x = dist(rng);
      s.tensors.push_back(std::move(t));
      s.floats += n;
    }
    for (auto& t : s.tensors) {
      s.spans.push_back({t.data(), t.size()});
      s.mut_spans.push_back({t.data(), t.size()});
    }
    s.wire.assign(s.floats, 0.0f);
    return s;
  }();
  return set;
}

// Plain read: sum of all floats with independent accumulators so it vectorizes and runs at the
// memory system's speed rather than at the FP-add latency.
float read_pass(const GradSet& s) {
  constexpr size_t kLanes = 32;
  float total = 0;
  for (const ConstSpan& t : s.spans) {
    float acc[kLanes] = {};
    size_t i = 0;
    for (; i + kLanes <= t.n; i += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) acc[j] += t.data[i + j];
    }
    for (; i < t.n; ++i) acc[0] += t.data[i];
    for (float a : acc) total += a;
  }
  return total;
}

// The pack alone, no checks: what any all-reduce path pays anyway.
void copy_pass(GradSet& s) {
  float* wire = s.wire.data();
  for (const ConstSpan& t : s.spans) {
    std::memcpy(wire, t.data, t.n * sizeof(float));
    wire += t.n;
  }
}

// The stack's fp32 path: the gradients are the all-reduce bucket, so the check only reads them.
void scan_pass(const GradSet& s, ScanStats* stats) { scan(s.spans, stats); }

// The post-reduce pass, in place. Successive calls alternate x *= 0.25 and x *= 4 (both exact for
// these values), so every pair of calls restores the gradients bit for bit and the data never
// drifts into denormals.
void post_reduce_pass(GradSet& s, ScanStats* stats, int* parity) {
  scale_and_scan(s.mut_spans, *parity ? 4.0f : 0.25f, stats);
  *parity ^= 1;
}

void pack_pass(GradSet& s, ScanStats* stats) {
  pack_and_scan(s.spans, s.wire.data(), WireType::kFp32, 1.0f, stats);
}

using Clock = std::chrono::steady_clock;

// Same-run ratio of two passes over the same bytes: alternate them `rounds` times, time each, keep
// the best of each so that a neighbour's burst on a shared host hits both sides alike. Returns
// best time of `base` / best time of `pass` = bandwidth of `pass` / bandwidth of `base`.
template <typename Base, typename Pass>
double interleaved_ratio(Base&& base, Pass&& pass, int rounds = 30) {
  auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  double best_base = 1e30, best_pass = 1e30;
  for (int round = 0; round < rounds; ++round) {
    const auto t0 = Clock::now();
    base();
    benchmark::ClobberMemory();
    const auto t1 = Clock::now();
    pass();
    benchmark::ClobberMemory();
    const auto t2 = Clock::now();
    best_base = std::min(best_base, seconds(t0, t1));
    best_pass = std::min(best_pass, seconds(t1, t2));
  }
  return best_base / best_pass;
}

void BM_ReadBandwidth(benchmark::State& state) {
  const GradSet& s = grads();
  for (auto _ : state) {
    float sum = read_pass(s);
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(state.iterations() * s.bytes());
}

void BM_FusedGradScan(benchmark::State& state) {
  const GradSet& s = grads();
  ScanStats stats;
  for (auto _ : state) {
    scan_pass(s, &stats);
    benchmark::DoNotOptimize(stats.sq_norm);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * s.bytes());
  state.counters["ratio_vs_read"] = interleaved_ratio(
      [&] {
        float sum = read_pass(s);
        benchmark::DoNotOptimize(sum);
      },
      [&] {
        scan_pass(s, &stats);
        benchmark::DoNotOptimize(stats.sq_norm);
      });
}

void BM_PostReduceScaleScan(benchmark::State& state) {
  GradSet& s = const_cast<GradSet&>(grads());
  ScanStats stats;
  int parity = 0;
  for (auto _ : state) {
    post_reduce_pass(s, &stats, &parity);
    benchmark::DoNotOptimize(stats.sq_norm);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * s.bytes());
  state.counters["ratio_vs_read"] = interleaved_ratio(
      [&] {
        float sum = read_pass(s);
        benchmark::DoNotOptimize(sum);
      },
      [&] {
        post_reduce_pass(s, &stats, &parity);
        benchmark::DoNotOptimize(stats.sq_norm);
      });
  if (parity) post_reduce_pass(s, &stats, &parity);  // back to the original gradients
}

void BM_PackCopy(benchmark::State& state) {
  GradSet& s = const_cast<GradSet&>(grads());
  for (auto _ : state) {
    copy_pass(s);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * s.bytes());
}

void BM_PackAndScan(benchmark::State& state) {
  GradSet& s = const_cast<GradSet&>(grads());
  ScanStats stats;
  for (auto _ : state) {
    pack_pass(s, &stats);
    benchmark::DoNotOptimize(stats.sq_norm);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * s.bytes());
  state.counters["ratio_vs_copy"] = interleaved_ratio([&] { copy_pass(s); },
                                                      [&] {
                                                        pack_pass(s, &stats);
                                                        benchmark::DoNotOptimize(stats.sq_norm);
                                                      });
}

// The per-tensor passes, each written to vectorize (as torch's CPU kernels are), so that the
// baseline is limited by its memory traffic and not by a scalar loop.
void isfinite_pass(const float* x, size_t n, uint8_t* mask) {  // torch.isfinite(g)
  for (size_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, &x[i], sizeof b);
    mask[i] = (b & 0x7f800000u) != 0x7f800000u;
  }
}

bool all_pass(const uint8_t* mask, size_t n) {  // .all(), no early exit
  uint8_t all = 1;
  for (size_t i = 0; i < n; ++i) all &= mask[i];
  return all != 0;
}

double norm2_pass(const float* x, size_t n) {  // g.norm() (squared), in double
  constexpr size_t kLanes = 32;
  double acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) acc[j] += static_cast<double>(x[i + j]) * x[i + j];
  }
  for (; i < n; ++i) acc[0] += static_cast<double>(x[i]) * x[i];
  double total = 0;
  for (double a : acc) total += a;
  return total;
}

void BM_PerTensorIsfiniteItem(benchmark::State& state) {
  GradSet& s = const_cast<GradSet&>(grads());
  size_t max_n = 0;
  for (const ConstSpan& t : s.spans) max_n = std::max(max_n, t.n);
  std::vector<uint8_t> mask(max_n);  // torch.isfinite(g) materializes a bool tensor
  std::atomic<int> sink{0};
  for (auto _ : state) {
    float* wire = s.wire.data();
    int bad = 0;
    double sq = 0;
    for (const ConstSpan& t : s.spans) {
      isfinite_pass(t.data, t.n, mask.data());
      const bool all = all_pass(mask.data(), t.n);
      sink.store(all ? 0 : 1, std::memory_order_seq_cst);  // .item(): per-tensor sync point
      bad += sink.load(std::memory_order_seq_cst);
      sq += norm2_pass(t.data, t.n);                   // a second read of g
      std::memcpy(wire, t.data, t.n * sizeof(float));  // pack into the all-reduce buffer
      wire += t.n;
    }
    benchmark::DoNotOptimize(bad);
    benchmark::DoNotOptimize(sq);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * s.bytes());
}

BENCHMARK(BM_ReadBandwidth)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FusedGradScan)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PostReduceScaleScan)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PackCopy)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PackAndScan)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PerTensorIsfiniteItem)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
