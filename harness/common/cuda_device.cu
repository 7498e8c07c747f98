// CUDA side of cuda_device.h: device queries and the `hang` fault's device stall.
#include <cuda_runtime.h>

#include <string>

#include "harness/common/cuda_check.h"
#include "harness/common/cuda_device.h"

namespace nanchaos::harness {
namespace {

// The release flag: pinned, mapped host memory the spin kernel polls.
volatile int* g_release_host = nullptr;
int* g_release_dev = nullptr;

__global__ void spin_kernel(const volatile int* release, long long duration_ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    if (*release != 0) return;
    if (duration_ns >= 0) {
      unsigned long long now;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      if (now - start >= (unsigned long long)duration_ns) return;
    }
    __nanosleep(1000);
  }
}

}  // namespace

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount: 0 devices";
  return n;
}

void cuda_set_device(int device) { NANCHAOS_CUDA_CHECK(cudaSetDevice(device)); }

void cuda_enqueue_spin(void* stream, int64_t duration_ms) {
  if (!g_release_host) {
    void* h = nullptr;
    NANCHAOS_CUDA_CHECK(cudaHostAlloc(&h, sizeof(int), cudaHostAllocMapped));
    *static_cast<volatile int*>(h) = 0;
    void* d = nullptr;
    NANCHAOS_CUDA_CHECK(cudaHostGetDevicePointer(&d, h, 0));
    g_release_host = static_cast<volatile int*>(h);
    g_release_dev = static_cast<int*>(d);
  }
  const long long ns = duration_ms < 0 ? -1 : (long long)duration_ms * 1000000LL;
  spin_kernel<<<1, 1, 0, as_stream(stream)>>>(g_release_dev, ns);
  NANCHAOS_CUDA_CHECK(cudaGetLastError());
}

void cuda_release_spins() {
  if (g_release_host) *g_release_host = 1;
}

}  // namespace nanchaos::harness
