// The multi-tensor CUDA scan: chunk planning (pure, on CPU) and, on a GPU host, the kernel's
// results against the CPU fused scan; the NCCL engine on one rank. GPU tests skip with the CUDA
// runtime's reason on hosts without a GPU.
#include "detectors/core/cuda_scan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "detectors/core/fused_scan.h"
#include "harness/comm/communicator.h"
#include "harness/comm/nccl_communicator.h"
#include "harness/common/cuda_device.h"
#include "harness/evidence/events.h"
#include "nanchaos/config.h"

#if NANCHAOS_WITH_CUDA && NANCHAOS_WITH_NCCL
#include <cuda_runtime.h>
#endif

namespace nanchaos::harness {
namespace {

// --- planning (CPU) -----------------------------------------------------------------------------

// Every element of every tensor covered exactly once, in tensor order, no chunk above the limit.
void ExpectExactCover(const std::vector<size_t>& sizes, size_t chunk) {
  const auto plan = plan_scan_chunks(sizes, chunk);
  std::vector<std::vector<int>> hits(sizes.size());
  for (size_t t = 0; t < sizes.size(); ++t) hits[t].assign(sizes[t], 0);
  uint32_t last_tensor = 0;
  for (const auto& c : plan) {
    ASSERT_LT(c.tensor, sizes.size());
    ASSERT_GE(c.tensor, last_tensor);
    last_tensor = c.tensor;
    ASSERT_GE(c.n, 1u);
    ASSERT_LE(c.n, chunk);
    ASSERT_LE(c.begin + c.n, sizes[c.tensor]);
    for (uint64_t i = c.begin; i < c.begin + c.n; ++i) ++hits[c.tensor][i];
  }
  for (size_t t = 0; t < sizes.size(); ++t) {
    for (size_t i = 0; i < sizes[t]; ++i)
      ASSERT_EQ(hits[t][i], 1) << "tensor " << t << " elem " << i;
  }
}

TEST(CudaScanPlan, CoversEveryElementOnce) {
  ExpectExactCover({0, 1, 4, 5, 8, 9, 17, 0, 3}, 4);
  ExpectExactCover({1000, 1, 999, 1024}, 128);
  ExpectExactCover({}, 16);
  ExpectExactCover({7}, 1);
}

TEST(CudaScanPlan, ChunkBoundaries) {
  const auto plan = plan_scan_chunks({10, 0, 4}, 4);
  const std::vector<ScanChunk> want = {{0, 0, 4}, {0, 4, 4}, {0, 8, 2}, {2, 0, 4}};
  EXPECT_EQ(plan, want);
}

TEST(CudaScanPlan, ChunkCountIsCeilPerTensor) {
  // The GPT gradient set of bench/ (77 tensors, 9,065,984 floats) at the scanner's chunk size.
  std::vector<size_t> sizes = {8192 * 256, 512 * 256};
  for (int b = 0; b < 6; ++b) {
    for (size_t n :
         {256, 256, 768 * 256, 768, 256 * 256, 256, 256, 256, 1024 * 256, 1024, 256 * 1024, 256}) {
      sizes.push_back(n);
    }
  }
  for (size_t n : {256, 256, 8192 * 256}) sizes.push_back(n);
  ASSERT_EQ(sizes.size(), 77u);
  size_t want = 0;
  for (size_t n : sizes) want += (n + kCudaScanChunk - 1) / kCudaScanChunk;
  EXPECT_EQ(plan_scan_chunks(sizes, kCudaScanChunk).size(), want);
  ExpectExactCover(sizes, kCudaScanChunk);
}

TEST(CudaScanPlan, RejectsBadChunkSize) {
  EXPECT_THROW(plan_scan_chunks({1}, 0), std::invalid_argument);
  EXPECT_THROW(plan_scan_chunks({1}, (size_t(1) << 31) + 1), std::invalid_argument);
}

TEST(CudaHost, DeviceCountGivesAReasonWhenZero) {
  std::string why;
  const int n = cuda_device_count(&why);
  EXPECT_GE(n, 0);
  if (n == 0) EXPECT_FALSE(why.empty());
}

// --- on the GPU
// -----------------------------------------------------------------------------------

#if NANCHAOS_WITH_CUDA && NANCHAOS_WITH_NCCL

#define SKIP_WITHOUT_GPU()                        \
  do {                                            \
    std::string why_;                             \
    if (cuda_device_count(&why_) == 0) {          \
      GTEST_SKIP() << "no CUDA device: " << why_; \
    }                                             \
  } while (0)

// Device copy of a host vector (freed at scope exit).
struct DevBuf {
  float* p = nullptr;
  explicit DevBuf(const std::vector<float>& h) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, h.size()) * sizeof(float)), cudaSuccess);
    if (!h.empty()) cudaMemcpy(p, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
  }
  ~DevBuf() { cudaFree(p); }
  std::vector<float> read(size_t n) const {
    std::vector<float> h(n);
    if (n) cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost);
    return h;
  }
};

// Tensors at odd offsets of one flat buffer (as bucket views are), some with NaN / inf.
struct Fixture {
  std::vector<float> flat;
  std::vector<size_t> off, len;
  Fixture() {
    std::mt19937 gen(7);
    std::normal_distribution<float> nd(0.f, 3.f);
    const std::vector<size_t> sizes = {1, 3, 5, 100000, 0, 16384, 16385, 7, 70001};
    size_t o = 0;
    for (size_t n : sizes) {
      off.push_back(o);
      len.push_back(n);
      o += n;
    }
    flat.resize(o);
    for (auto& x : flat) x = nd(gen);
    flat[off[1] + 2] = std::numeric_limits<float>::quiet_NaN();
    flat[off[3] + 99999] = std::numeric_limits<float>::infinity();
    flat[off[6] + 16384] = -std::numeric_limits<float>::infinity();
    flat[off[8] + 123] = 3e38f;  // finite; its square needs double
  }
};

TEST(CudaScanner, MatchesTheCpuScan) {
  SKIP_WITHOUT_GPU();
  Fixture f;
  DevBuf d(f.flat);
  std::vector<ConstSpan> host, dev;
  for (size_t t = 0; t < f.len.size(); ++t) {
    host.push_back({f.flat.data() + f.off[t], f.len[t]});
    dev.push_back({d.p + f.off[t], f.len[t]});
  }
  ScanStats want, got;
  scan(host, &want);
  CudaScanner scanner;
  scanner.scan(dev, nullptr, &got);
  EXPECT_EQ(got.nonfinite, want.nonfinite);
  EXPECT_EQ(got.first_nonfinite, 1);
  EXPECT_EQ(got.first_nonfinite, want.first_nonfinite);
  EXPECT_EQ(got.max_abs, want.max_abs);
  EXPECT_NEAR(got.sq_norm, want.sq_norm, std::abs(want.sq_norm) * 1e-12);
  ASSERT_EQ(got.sq_norms.size(), want.sq_norms.size());
  for (size_t t = 0; t < want.sq_norms.size(); ++t) {
    EXPECT_NEAR(got.sq_norms[t], want.sq_norms[t], std::abs(want.sq_norms[t]) * 1e-12) << t;
  }
  // Same pointers again: the cached chunk table; a clean buffer clears the flags.
  scanner.scan(dev, nullptr, &got);
  EXPECT_EQ(got.nonfinite, want.nonfinite);
}

TEST(CudaScanner, ScaleAndScanMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  Fixture f;
  DevBuf d(f.flat);
  std::vector<float> cpu = f.flat;
  std::vector<MutSpan> host, dev;
  for (size_t t = 0; t < f.len.size(); ++t) {
    host.push_back({cpu.data() + f.off[t], f.len[t]});
    dev.push_back({d.p + f.off[t], f.len[t]});
  }
  ScanStats want, got;
  scale_and_scan(host, 0.25f, &want);
  CudaScanner scanner;
  scanner.scale_and_scan(dev, 0.25f, nullptr, &got);
  const auto out = d.read(cpu.size());
  ASSERT_EQ(std::memcmp(out.data(), cpu.data(), cpu.size() * sizeof(float)), 0);
  EXPECT_EQ(got.nonfinite, want.nonfinite);
  EXPECT_EQ(got.max_abs, want.max_abs);
  EXPECT_NEAR(got.sq_norm, want.sq_norm, std::abs(want.sq_norm) * 1e-12);
  ASSERT_EQ(got.sq_norms.size(), want.sq_norms.size());
  for (size_t t = 0; t < want.sq_norms.size(); ++t) {
    EXPECT_NEAR(got.sq_norms[t], want.sq_norms[t], std::abs(want.sq_norms[t]) * 1e-12) << t;
  }
}

TEST(NcclCommunicator, OneRankAllReduceAndStallTimesOut) {
  SKIP_WITHOUT_GPU();
  NcclOptions o;
  auto comm = make_nccl_communicator(o);
  ASSERT_EQ(comm->world_size(), 1);
  // int64 bit patterns of doubles survive the SUM exactly (a NaN row stays that NaN).
  std::vector<double> row = {std::numeric_limits<double>::quiet_NaN(), -0.5, 3.0};
  std::vector<int64_t> bits(row.size());
  std::memcpy(bits.data(), row.data(), row.size() * sizeof(double));
  int64_t* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, bits.size() * sizeof(int64_t)), cudaSuccess);
  cudaMemcpy(d, bits.data(), bits.size() * sizeof(int64_t), cudaMemcpyHostToDevice);
  auto w = comm->iallreduce_sum(d, bits.size(), DType::kInt64);
  ASSERT_EQ(w->wait(now_us() + 30'000'000), CollStatus::kOk);
  std::vector<int64_t> back(bits.size());
  cudaMemcpy(back.data(), d, back.size() * sizeof(int64_t), cudaMemcpyDeviceToHost);
  EXPECT_EQ(back, bits);
  // A finite device stall: the collective times out against a short deadline, then completes.
  ASSERT_TRUE(comm->enqueue_stall(1500));
  auto w2 = comm->iallreduce_sum(d, bits.size(), DType::kInt64);
  EXPECT_EQ(w2->wait(now_us() + 200'000), CollStatus::kTimeout);
  EXPECT_EQ(w2->wait(now_us() + 30'000'000), CollStatus::kOk);
  cudaFree(d);
}

#else

TEST(CudaScanner, NotBuilt) {
  GTEST_SKIP() << "no CUDA device: nanchaos was built without CUDA/NCCL";
}

#endif

}  // namespace
}  // namespace nanchaos::harness
