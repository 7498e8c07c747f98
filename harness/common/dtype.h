// The one element-type enum of nanchaos: the scenario's precisions ([job] precision,
// grad_allreduce_dtype: fp32, fp16, bf16) and the element types the communicators carry (those,
// plus fp64 for the consensus rows on MPI and int64 for them on NCCL). The all-reduce buffer's
// wire format has its own small enum beside it (wire.h: WireType, the three float types the fused
// scan packs). Low-level: kept out of the communicators, the scans and the scenario model, which
// all include it (../shared/ARCHITECTURE_TARGET.md).
//
// Torch-free; pure functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace nanchaos::harness {

enum class DType { kFp32, kFp16, kBf16, kFp64, kInt64 };

/// The scenario spelling: "fp32", "fp16", "bf16", "fp64", "int64".
const char* to_string(DType d);
/// The inverse of to_string; nullopt for any other text.
std::optional<DType> dtype_from_string(const std::string& text);
/// PyTorch's spelling, as the event logs' `dtype` field writes it: "float32", "float16",
/// "bfloat16", "float64", "int64".
const char* torch_name(DType d);
/// Bytes per element: 4, 2, 2, 8, 8.
size_t dtype_bytes(DType d);

}  // namespace nanchaos::harness
