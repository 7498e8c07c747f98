// CUDA device utilities that the controller (how many GPUs), the NCCL engine (device choice, the
// abort path) and the `hang` fault's device stall need, kept apart from the fused scan so that
// none of them depends on the stack. Torch-free; implemented in cuda_device.cu, or by
// cuda_device_fallback.cpp in a build without CUDA/NCCL (where each call says so).
#pragma once

#include <cstdint>
#include <string>

namespace nanchaos::harness {

/// Number of CUDA devices the runtime sees; 0 when the build has no CUDA, the driver is missing
/// or cudaGetDeviceCount fails (a host without a GPU). Never throws. `why` (optional) receives
/// the runtime's reason when the answer is 0.
int cuda_device_count(std::string* why = nullptr);

/// Makes `device` current for this thread (cudaSetDevice). Throws std::runtime_error.
void cuda_set_device(int device);

/// Enqueues a kernel on `stream` that spins on the device for `duration_ms` milliseconds, or
/// until cuda_release_spins() when duration_ms < 0: everything enqueued after it on that stream
/// (a collective) waits. The `hang` fault's device stall. Throws std::runtime_error.
void cuda_enqueue_spin(void* stream, int64_t duration_ms);

/// Ends every spin kernel of this process (a flag in mapped pinned host memory that the kernel
/// polls, as NCCL's kernels poll their abort flag). The NCCL engine calls it from abort_job before
/// ncclCommAbort, so the abort path never waits on the injected stall. Never throws.
void cuda_release_spins();

/// Throws std::runtime_error("<what>: not implemented in this build (nanchaos was built without
/// CUDA/NCCL)"): the GPU entry points of a CPU-only build (the *_fallback.cpp files).
[[noreturn]] void gpu_not_built(const char* what);

}  // namespace nanchaos::harness
