// Named scalar formats: one encode/decode per element for every format Atoll uses.
//
//   format  bits  layout      max finite  min subnormal  specials
//   bf16    16    S.E8.M7     3.39e38     2^-133         IEEE inf/NaN
//   fp16    16    S.E5.M10    65504       2^-24          IEEE inf/NaN
//   E4M3    8     S.E4.M3     448         2^-9           NaN = S.1111.111 only, no inf (OCP)
//   E5M2    8     S.E5.M2     57344       2^-16          IEEE inf/NaN (OCP)
//   E2M1    4     S.E2.M1     6           0.5            none: +-{0,.5,1,1.5,2,3,4,6}
//   E8M0    8     E8          2^127       2^-127         0xFF = NaN; unsigned powers of two
//
// Defaults: round to nearest, ties to even. Overflow: E4M3 and E2M1 saturate to +-max (E4M3 can
// be asked for NaN instead, OCP's non-saturating mode); bf16, fp16 and E5M2 follow IEEE (+-inf)
// unless asked to saturate.
//
// NaN canonicalization: encode(NaN) keeps the sign and the top mantissa bits of the payload and
// sets the quiet bit, so decode∘encode is the identity on every code except the signalling NaNs
// of bf16/fp16/E5M2, which come back quiet (same sign, same remaining payload).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/formats/minifloat.h"

namespace atl::kernels::formats {

// ---- bf16 ------------------------------------------------------------------------------------
// RNE on the raw bits: add 0x7FFF plus the lowest kept bit, then truncate. Carries propagate into
// the exponent (and to inf for values >= max + half ulp), exactly IEEE round-to-nearest-even.
constexpr uint16_t bf16_from_f32(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
constexpr float f32_from_bf16(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}
// Stochastic: add 16 random bits below the kept bits and truncate; P(up) = dropped/2^16 exactly.
constexpr uint16_t bf16_from_f32_sr(float x, uint32_t random) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) >= 0x7f800000u) return bf16_from_f32(x);  // inf stays inf, NaN quiet
  return static_cast<uint16_t>((u + (random >> 16)) >> 16);
}

// ---- fp16 ------------------------------------------------------------------------------------
constexpr uint16_t fp16_from_f32(float x, Overflow ov = Overflow::kInfinity) {
  return static_cast<uint16_t>(minifloat_encode<kFp16Spec>(x, ov));
}
constexpr uint16_t fp16_from_f32_sr(float x, uint32_t random, Overflow ov = Overflow::kInfinity) {
  return static_cast<uint16_t>(minifloat_encode<kFp16Spec, Rounding::kStochastic>(x, ov, random));
}
constexpr float f32_from_fp16(uint16_t h) { return minifloat_decode<kFp16Spec>(h); }

// ---- FP8 E4M3 (OCP) --------------------------------------------------------------------------
// Saturating by default: |x| >= 448 (after rounding) and +-inf give +-448; kInfinity gives NaN.
constexpr uint8_t e4m3_from_f32(float x, Overflow ov = Overflow::kSaturate) {
  return static_cast<uint8_t>(minifloat_encode<kE4M3Spec>(x, ov));
}
constexpr uint8_t e4m3_from_f32_sr(float x, uint32_t random, Overflow ov = Overflow::kSaturate) {
  return static_cast<uint8_t>(minifloat_encode<kE4M3Spec, Rounding::kStochastic>(x, ov, random));
}
constexpr float f32_from_e4m3(uint8_t c) { return minifloat_decode<kE4M3Spec>(c); }
inline constexpr float kE4M3Max = 448.0f;

// minifloat_encode<kE4M3Spec, kAwayFromZero>(x) for x >= +0 or NaN (NVFP4 block scales), written
// without branches or variable shifts so that a loop over block scales vectorizes (the generic
// encoder stayed scalar, one block at a time). Normal targets (x >= 2^-6): keep 3 of the 23 mantissa bits,
// rounding up when any dropped bit is set: ceil(bits / 2^20), rebiased (127 - 7 = 120, << 3).
// Subnormal targets: ceil(x / 2^-9) (exact; 8 is the smallest normal, so the two meet).
// Overflow saturates at 448 (0x7e), as the generic encoder does, and NaN gives the NaN code.
// Equal to the generic encoder for all 2^31 non-negative bit patterns (checked exhaustively when
// written); tests/kernels/formats_scalar_test.cc compares the two on a sweep of every exponent.
inline uint32_t e4m3_from_f32_up_nonneg(float x) {
  const uint32_t a = std::bit_cast<uint32_t>(x) & 0x7fffffffu;
  constexpr uint32_t kMinNormal = 0x3c800000u;  // 2^-6
  const uint32_t normal = ((a + 0xfffffu) >> 20) - (120u << 3);
  const float below = std::bit_cast<float>(a < kMinNormal ? a : kMinNormal);
  const auto sub = static_cast<uint32_t>(std::ceil(below * 512.0f));  // <= 8
  uint32_t code = a >= kMinNormal ? normal : sub;
  code = code > 0x7eu ? 0x7eu : code;
  return a > 0x7f800000u ? uint32_t{0x7f} : code;
}

// minifloat_decode<kE4M3Spec>(code) for a non-negative code (sign bit clear), branch-free.
inline float f32_from_e4m3_nonneg(uint32_t code) {
  const float normal = std::bit_cast<float>((code << 20) + (120u << 23));
  const float sub = static_cast<float>(code) * (1.0f / 512.0f);
  const float v = code >= 8 ? normal : sub;
  return code == 0x7fu ? std::bit_cast<float>(0x7fc00000u) : v;
}

// ---- FP8 E5M2 (OCP, IEEE-like) ---------------------------------------------------------------
constexpr uint8_t e5m2_from_f32(float x, Overflow ov = Overflow::kInfinity) {
  return static_cast<uint8_t>(minifloat_encode<kE5M2Spec>(x, ov));
}
constexpr uint8_t e5m2_from_f32_sr(float x, uint32_t random, Overflow ov = Overflow::kInfinity) {
  return static_cast<uint8_t>(minifloat_encode<kE5M2Spec, Rounding::kStochastic>(x, ov, random));
}
constexpr float f32_from_e5m2(uint8_t c) { return minifloat_decode<kE5M2Spec>(c); }
inline constexpr float kE5M2Max = 57344.0f;

// ---- FP4 E2M1 (4-bit code in the low nibble) --------------------------------------------------
// Round to nearest even by counting the decision thresholds below |x|: the magnitude codes 0..7
// are {0, .5, 1, 1.5, 2, 3, 4, 6}, and each midpoint goes to the even code (0.25 -> 0, 0.75 -> 1,
// 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4). Same result as minifloat_encode<kE2M1Spec>
// (tested on every fp32 midpoint and a sweep of all exponents), but branch-free compares that
// vectorize: the block formats (NVFP4, MXFP4) spend their time here. NaN compares false
// everywhere and encodes to zero with its sign, +-inf saturates to +-6, as documented above.
constexpr uint8_t e2m1_from_f32(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const float a = std::bit_cast<float>(u & 0x7fffffffu);
  const uint32_t mag = static_cast<uint32_t>(a > 0.25f) + static_cast<uint32_t>(a >= 0.75f) +
                       static_cast<uint32_t>(a > 1.25f) + static_cast<uint32_t>(a >= 1.75f) +
                       static_cast<uint32_t>(a > 2.5f) + static_cast<uint32_t>(a >= 3.5f) +
                       static_cast<uint32_t>(a > 5.0f);
  return static_cast<uint8_t>(((u >> 28) & 8u) | mag);
}
constexpr uint8_t e2m1_from_f32_sr(float x, uint32_t random) {
  return static_cast<uint8_t>(minifloat_encode<kE2M1Spec, Rounding::kStochastic>(x,
      Overflow::kSaturate, random));
}
constexpr float f32_from_e2m1(uint8_t c) { return minifloat_decode<kE2M1Spec>(c & 0xfu); }
inline constexpr float kE2M1Max = 6.0f;

// ---- E8M0 (OCP MX shared scale) ----------------------------------------------------------------
// Code c in [0, 254] is 2^(c - 127); 0xFF is NaN. No sign, no zero.
inline constexpr uint8_t kE8M0Nan = 0xff;
constexpr float f32_from_e8m0(uint8_t c) {
  if (c == kE8M0Nan) return std::bit_cast<float>(0x7fc00000u);
  if (c == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127 is an fp32 subnormal
  return std::bit_cast<float>(static_cast<uint32_t>(c) << 23);
}
// Code for 2^e, clamped to the representable range [-127, 127].
constexpr uint8_t e8m0_from_exponent(int e) {
  return static_cast<uint8_t>((e < -127 ? -127 : e > 127 ? 127 : e) + 127);
}
// Nearest power of two (ties, x = 1.5 * 2^k, go to the even code). Not representable: NaN,
// negative values and +inf give NaN; +-0 and values below 2^-127 clamp to 2^-127; values at or
// above 1.5 * 2^127 clamp to 2^127.
constexpr uint8_t e8m0_from_f32(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if (u == 0x80000000u) return 0;         // -0 is zero
  if (u >= 0x7f800000u) return kE8M0Nan;  // +inf, +NaN, and every negative (sign bit set)
  const uint32_t ef = u >> 23;
  const uint32_t mf = u & 0x7fffffu;
  if (ef == 0) {  // fp32 subnormal or zero: the candidates are 2^-127 (code 0) and 2^-126 (1)
    return u > 0x00600000u ? 1 : 0;
  }
  uint32_t c = ef;
  if (mf > 0x400000u || (mf == 0x400000u && (c & 1u))) c += 1;
  return static_cast<uint8_t>(c > 254 ? 254 : c);
}

}  // namespace atl::kernels::formats
