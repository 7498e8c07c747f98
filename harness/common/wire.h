// The all-reduce buffer's element types ("wire" types) and their conversions: the low-level types
// that the fused scan (detectors/core/fused_scan.h), the communicators (the MPI engine's fp16/bf16
// SUM operator) and the agent (a send-buffer fault) share, kept out of all three.
//
// Torch-free, header-light; every function is pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace nanchaos::harness {

/// Element type of the all-reduce buffer.
enum class WireType { kFp32, kFp16, kBf16 };

/// Bytes per wire element: 4, 2, 2.
size_t wire_bytes(WireType t);

/// inout[i] = in[i] + inout[i] for n wire elements, each sum rounded to the wire type (RNE,
/// overflow -> inf) as an fp16/bf16 all-reduce does. Fits MPI_User_function.
void wire_sum(const void* in, void* inout, size_t n, WireType wire);

/// IEEE binary16 conversions (RNE, overflow -> inf, NaN -> quiet NaN with sign kept).
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
/// bfloat16 conversions (RNE, overflow -> inf, NaN -> quiet NaN with sign and top payload kept).
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t h);

/// The inline forms, for loops that convert per element (the fused scan's store and load).
namespace wire_detail {

constexpr uint32_t kExpMask = 0x7f800000u;
constexpr uint32_t kAbsMask = 0x7fffffffu;

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// binary16 from binary32, round to nearest even (Marat Dukhan's FP16 library construction).
// Multiplying |f| by 2^112 then 2^-110 pushes overflow to inf and leaves the value rounded to fp16
// precision by the FPU's own RNE when it is added to a power of two aligned with the fp16 ulp.
inline uint16_t to_half(float f) {
  const float kScaleToInf = 0x1.0p+112f;
  const float kScaleToZero = 0x1.0p-110f;
  float base = (__builtin_fabsf(f) * kScaleToInf) * kScaleToZero;
  const uint32_t w = bits_of(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = float_of((bias >> 1) + 0x07800000u) + base;
  const uint32_t b = bits_of(base);
  const uint32_t exp_bits = (b >> 13) & 0x00007c00u;
  const uint32_t mantissa_bits = b & 0x00000fffu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}

// binary32 from binary16 (exact). Normal and inf/NaN inputs: shift the exponent/mantissa into
// place and rescale by 2^-112; subnormals: build 0.5 + m * 2^-24 ... via the magic-bias trick.
inline float from_half(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t kExpOffset = 0xe0u << 23;
  const float kExpScale = 0x1.0p-112f;
  const float normalized = float_of((two_w >> 4) + kExpOffset) * kExpScale;
  const uint32_t kMagicMask = 126u << 23;
  const float kMagicBias = 0.5f;
  const float denormalized = float_of((two_w >> 17) | kMagicMask) - kMagicBias;
  const uint32_t kDenormCutoff = 1u << 27;
  return float_of(sign | (two_w < kDenormCutoff ? bits_of(denormalized) : bits_of(normalized)));
}

// bfloat16 from binary32: RNE on the dropped 16 bits; the carry out of the mantissa rounds
// FLT_MAX up to inf as IEEE says. NaN keeps sign and top payload, with the quiet bit set (a payload
// living only in the low 16 bits would otherwise truncate to inf).
inline uint16_t to_bf16(float f) {
  const uint32_t b = bits_of(f);
  const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
  const uint32_t nan = (b >> 16) | 0x0040u;
  return static_cast<uint16_t>((b & kAbsMask) > kExpMask ? nan : rounded);
}

inline float from_bf16(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

}  // namespace wire_detail
}  // namespace nanchaos::harness
