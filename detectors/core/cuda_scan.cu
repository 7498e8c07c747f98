// CUDA side of cuda_scan.h: the multi-tensor scan kernel, the device stall, device queries.
#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "detectors/core/cuda_scan.h"
#include "harness/common/cuda_check.h"

namespace nanchaos::harness {
namespace {

constexpr int kThreads = 256;

// One chunk as the kernel reads it (16 bytes).
struct DevChunk {
  float* ptr;
  uint32_t n;
  uint32_t tensor;
};

// Result block: this header, one double sum of squares per tensor, then one uint32 flag per
// tensor (the doubles first keep them 8-byte aligned).
struct ResultHead {
  double sq_norm;
  unsigned int max_bits;  // bits of a non-negative float: unsigned order == float order
  unsigned int pad;
};

struct Acc {
  double sq = 0;
  float mx = 0;
  bool bad = false;
};

__device__ __forceinline__ void visit(float x, Acc& a) {
  if (isfinite(x)) {
    a.sq += double(x) * double(x);
    a.mx = fmaxf(a.mx, fabsf(x));
  } else {
    a.bad = true;
  }
}

template <bool kScale>
__device__ __forceinline__ float load_one(float* p, float scale) {
  float x = *p;
  if (kScale) {
    x *= scale;
    *p = x;
  }
  return x;
}

// One block per chunk: scalar head up to 16-byte alignment, float4 body, scalar tail; then a
// block reduction and one atomic per block into the result block.
template <bool kScale>
__global__ void __launch_bounds__(kThreads)
    scan_kernel(const DevChunk* __restrict__ chunks, float scale, ResultHead* head, double* sqs,
                unsigned int* flags) {
  const DevChunk c = chunks[blockIdx.x];
  float* p = c.ptr;
  const uint32_t n = c.n;
  const uint32_t mis = uint32_t((16u - (reinterpret_cast<uintptr_t>(p) & 15u)) & 15u) / 4u;
  const uint32_t lead = mis < n ? mis : n;
  Acc a;
  for (uint32_t i = threadIdx.x; i < lead; i += kThreads) visit(load_one<kScale>(p + i, scale), a);
  const uint32_t body = (n - lead) / 4u;
  float4* q = reinterpret_cast<float4*>(p + lead);
  for (uint32_t i = threadIdx.x; i < body; i += kThreads) {
    float4 v = q[i];
    if (kScale) {
      v.x *= scale;
      v.y *= scale;
      v.z *= scale;
      v.w *= scale;
      q[i] = v;
    }
    visit(v.x, a);
    visit(v.y, a);
    visit(v.z, a);
    visit(v.w, a);
  }
  for (uint32_t i = lead + body * 4u + threadIdx.x; i < n; i += kThreads) {
    visit(load_one<kScale>(p + i, scale), a);
  }
  // Warp reduction, then one value per warp through shared memory.
  for (int off = 16; off > 0; off >>= 1) {
    a.sq += __shfl_down_sync(0xffffffffu, a.sq, off);
    a.mx = fmaxf(a.mx, __shfl_down_sync(0xffffffffu, a.mx, off));
  }
  __shared__ double s_sq[kThreads / 32];
  __shared__ float s_mx[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    s_sq[warp] = a.sq;
    s_mx[warp] = a.mx;
  }
  const int any_bad = __syncthreads_or(a.bad ? 1 : 0);
  if (threadIdx.x == 0) {
    double sq = 0;
    float mx = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      sq += s_sq[w];
      mx = fmaxf(mx, s_mx[w]);
    }
    if (any_bad) flags[c.tensor] = 1u;
    if (sq != 0) {
      atomicAdd(&head->sq_norm, sq);
      atomicAdd(&sqs[c.tensor], sq);
    }
    if (mx != 0) atomicMax(&head->max_bits, __float_as_uint(mx));
  }
}

}  // namespace

struct CudaScanner::Impl {
  std::vector<std::pair<const void*, size_t>> key;  // the (pointer, size) list the table is for
  size_t tensors = 0, chunks = 0;
  DevChunk* d_chunks = nullptr;
  size_t chunk_cap = 0;
  unsigned char* d_res = nullptr;
  unsigned char* h_res = nullptr;  // pinned
  size_t res_cap = 0;

  ~Impl() {
    cudaFree(d_chunks);
    cudaFree(d_res);
    cudaFreeHost(h_res);
  }

  template <typename Span>
  void prepare(const std::vector<Span>& spans) {
    bool same = key.size() == spans.size();
    for (size_t i = 0; same && i < spans.size(); ++i) {
      same = key[i].first == spans[i].data && key[i].second == spans[i].n;
    }
    if (same) return;
    std::vector<size_t> sizes;
    key.clear();
    for (const auto& s : spans) {
      sizes.push_back(s.n);
      key.emplace_back(s.data, s.n);
    }
    const auto plan = plan_scan_chunks(sizes, kCudaScanChunk);
    std::vector<DevChunk> table;
    table.reserve(plan.size());
    for (const auto& c : plan) {
      table.push_back({const_cast<float*>(spans[c.tensor].data) + c.begin, c.n, c.tensor});
    }
    if (table.size() > chunk_cap) {
      cudaFree(d_chunks);
      d_chunks = nullptr;
      NANCHAOS_CUDA_CHECK(cudaMalloc(&d_chunks, table.size() * sizeof(DevChunk)));
      chunk_cap = table.size();
    }
    if (!table.empty()) {
      NANCHAOS_CUDA_CHECK(cudaMemcpy(d_chunks, table.data(), table.size() * sizeof(DevChunk),
                                     cudaMemcpyHostToDevice));
    }
    const size_t res = sizeof(ResultHead) + spans.size() * (sizeof(double) + sizeof(unsigned int));
    if (res > res_cap) {
      cudaFree(d_res);
      cudaFreeHost(h_res);
      d_res = h_res = nullptr;
      NANCHAOS_CUDA_CHECK(cudaMalloc(&d_res, res));
      NANCHAOS_CUDA_CHECK(cudaMallocHost(&h_res, res));
      res_cap = res;
    }
    tensors = spans.size();
    chunks = table.size();
  }

  void run(float scale, bool scaled, void* stream, ScanStats* stats) {
    stats->nonfinite.assign(tensors, 0);
    stats->first_nonfinite = -1;
    stats->sq_norm = 0;
    stats->sq_norms.assign(tensors, 0.0);
    stats->max_abs = 0;
    if (chunks == 0) return;
    const size_t res = sizeof(ResultHead) + tensors * (sizeof(double) + sizeof(unsigned int));
    cudaStream_t s = as_stream(stream);
    NANCHAOS_CUDA_CHECK(cudaMemsetAsync(d_res, 0, res, s));
    auto* head = reinterpret_cast<ResultHead*>(d_res);
    auto* sqs = reinterpret_cast<double*>(d_res + sizeof(ResultHead));
    auto* flags =
        reinterpret_cast<unsigned int*>(d_res + sizeof(ResultHead) + tensors * sizeof(double));
    if (scaled) {
      scan_kernel<true><<<unsigned(chunks), kThreads, 0, s>>>(d_chunks, scale, head, sqs, flags);
    } else {
      scan_kernel<false><<<unsigned(chunks), kThreads, 0, s>>>(d_chunks, 1.0f, head, sqs, flags);
    }
    NANCHAOS_CUDA_CHECK(cudaGetLastError());
    NANCHAOS_CUDA_CHECK(cudaMemcpyAsync(h_res, d_res, res, cudaMemcpyDeviceToHost, s));
    NANCHAOS_CUDA_CHECK(cudaStreamSynchronize(s));  // the step's one host sync
    ResultHead h;
    std::memcpy(&h, h_res, sizeof(h));
    stats->sq_norm = h.sq_norm;
    std::memcpy(&stats->max_abs, &h.max_bits, sizeof(float));
    std::memcpy(stats->sq_norms.data(), h_res + sizeof(ResultHead), tensors * sizeof(double));
    const auto* hf = reinterpret_cast<const unsigned int*>(h_res + sizeof(ResultHead) +
                                                           tensors * sizeof(double));
    for (size_t t = 0; t < tensors; ++t) {
      stats->nonfinite[t] = hf[t] ? 1 : 0;
      if (hf[t] && stats->first_nonfinite < 0) stats->first_nonfinite = int(t);
    }
  }
};

CudaScanner::CudaScanner() : impl_(std::make_unique<Impl>()) {}
CudaScanner::~CudaScanner() = default;

void CudaScanner::scan(const std::vector<ConstSpan>& grads, void* stream, ScanStats* stats) {
  impl_->prepare(grads);
  impl_->run(1.0f, false, stream, stats);
}

void CudaScanner::scale_and_scan(const std::vector<MutSpan>& grads, float scale, void* stream,
                                 ScanStats* stats) {
  impl_->prepare(grads);
  impl_->run(scale, scale != 1.0f, stream, stats);
}

}  // namespace nanchaos::harness
