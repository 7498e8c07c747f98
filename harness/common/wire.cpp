// Wire types: see wire.h.
#include "harness/common/wire.h"

namespace nanchaos::harness {

using namespace wire_detail;  // NOLINT(google-build-using-namespace)

size_t wire_bytes(WireType t) {
  switch (t) {
    case WireType::kFp32:
      return 4;
    case WireType::kFp16:
    case WireType::kBf16:
      return 2;
  }
  return 4;
}

// The fp16/bf16 sums add in fp32 and round once to the wire type. That double rounding is
// harmless: fp32 carries 24 >= 2 * 11 + 2 significand bits, and for a sum of two binary16 (or
// bfloat16) values rounding to fp32 first and then to the narrow type gives the correctly rounded
// narrow sum (Figueroa's p' >= 2p + 2 condition). Overflow rounds to inf in the final conversion.
void wire_sum(const void* in, void* inout, size_t n, WireType wire) {
  switch (wire) {
    case WireType::kFp32: {
      const auto* a = static_cast<const float*>(in);
      auto* b = static_cast<float*>(inout);
      for (size_t i = 0; i < n; ++i) b[i] = a[i] + b[i];
      return;
    }
    case WireType::kFp16: {
      const auto* a = static_cast<const uint16_t*>(in);
      auto* b = static_cast<uint16_t*>(inout);
      for (size_t i = 0; i < n; ++i) b[i] = to_half(from_half(a[i]) + from_half(b[i]));
      return;
    }
    case WireType::kBf16: {
      const auto* a = static_cast<const uint16_t*>(in);
      auto* b = static_cast<uint16_t*>(inout);
      for (size_t i = 0; i < n; ++i) b[i] = to_bf16(from_bf16(a[i]) + from_bf16(b[i]));
      return;
    }
  }
}

uint16_t float_to_half_bits(float f) { return to_half(f); }
float half_bits_to_float(uint16_t h) { return from_half(h); }
uint16_t float_to_bf16_bits(float f) { return to_bf16(f); }
float bf16_bits_to_float(uint16_t h) { return from_bf16(h); }

}  // namespace nanchaos::harness
