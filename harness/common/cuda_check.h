// CUDA runtime error checks shared by the .cu files (the fused scan, the device utilities).
// Include only from CUDA translation units.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "harness/common/check.h"

/// Throws std::runtime_error("[host pid rank R] file:line: <call> failed: <cudaGetErrorString>")
/// when `call` fails (the check family of harness/common/check.h).
#define NANCHAOS_CUDA_CHECK(call)                                           \
  do {                                                                      \
    const cudaError_t nanchaos_err_ = (call);                               \
    if (nanchaos_err_ != cudaSuccess) {                                     \
      ::nanchaos::harness::check_failed(__FILE__, __LINE__, #call,          \
                                        cudaGetErrorString(nanchaos_err_)); \
    }                                                                       \
  } while (0)

namespace nanchaos::harness {

/// The opaque stream handles of the torch-free headers, as the runtime's type.
inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace nanchaos::harness
