// Names and sizes of DType; see dtype.h.
#include "harness/common/dtype.h"

namespace nanchaos::harness {
namespace {

struct DTypeRow {
  DType d;
  const char* name;
  const char* torch;
  size_t bytes;
};

// One row per DType, in enum order.
constexpr DTypeRow kRows[] = {
    {DType::kFp32, "fp32", "float32", 4},  {DType::kFp16, "fp16", "float16", 2},
    {DType::kBf16, "bf16", "bfloat16", 2}, {DType::kFp64, "fp64", "float64", 8},
    {DType::kInt64, "int64", "int64", 8},
};

const DTypeRow& row(DType d) { return kRows[static_cast<size_t>(d)]; }

}  // namespace

const char* to_string(DType d) { return row(d).name; }

const char* torch_name(DType d) { return row(d).torch; }

size_t dtype_bytes(DType d) { return row(d).bytes; }

std::optional<DType> dtype_from_string(const std::string& text) {
  for (const auto& r : kRows) {
    if (text == r.name) return r.d;
  }
  return std::nullopt;
}

}  // namespace nanchaos::harness
