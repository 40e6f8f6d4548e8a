// Generic conversion between IEEE-754 binary32 and small binary floating-point formats
// (fp16, bf16, FP8 E4M3/E5M2, FP4 E2M1). One implementation, instantiated per format, so that
// every format shares the same (exhaustively tested) rounding code.
//
// A format with E exponent bits and M mantissa bits stores a code as
//   bit (E+M)          : sign
//   bits [M, E+M)      : biased exponent (bias = Spec::bias)
//   bits [0, M)        : mantissa
// Exponent field 0 is subnormal: value = mantissa * 2^(1 - bias - M).
// What the all-ones exponent field means depends on Spec::special (see Special).
//
// Rounding happens on integers: the fp32 significand (24 bits with the implicit one) is shifted
// right by the number of bits the target cannot hold, and the dropped bits decide the rounding.
// The shifted significand carries naturally into the exponent field, so rounding up from the
// largest mantissa of a binade yields the smallest mantissa of the next binade, and rounding up
// from the largest subnormal yields the smallest normal.
#pragma once

#include <bit>
#include <cstdint>

namespace atl::kernels::formats {

// Meaning of the all-ones exponent field.
enum class Special : uint8_t {
  kIeee,  // IEEE-754: mantissa 0 is infinity, anything else NaN (fp16, bf16, E5M2)
  kE4M3,  // OCP FP8 E4M3: only S.1111.111 is NaN, no infinities, S.1111.000-110 are finite
  kNone,  // no specials at all, every code is finite (E2M1)
};

// What happens to finite values whose rounded magnitude exceeds the largest finite code.
enum class Overflow : uint8_t {
  kSaturate,  // clamp to +-max finite; +-inf inputs also clamp to +-max finite
  kInfinity,  // IEEE behaviour: +-inf (formats without infinities, E4M3: NaN; E2M1: saturate)
};

enum class Rounding : uint8_t {
  kNearestEven,   // round to nearest, ties to the code with an even mantissa
  kStochastic,    // round up in magnitude with probability (dropped fraction); needs 32 random bits
  kAwayFromZero,  // round up in magnitude whenever anything is dropped (no-underestimate scales)
  kTowardZero,    // truncate the magnitude
};

struct MinifloatSpec {
  int exp_bits;
  int man_bits;
  int bias;
  Special special;

  constexpr int code_bits() const { return 1 + exp_bits + man_bits; }
  constexpr uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
  constexpr uint32_t mag_mask() const { return sign_bit() - 1u; }
  constexpr uint32_t man_mask() const { return (1u << man_bits) - 1u; }
  // Unbiased exponent of the smallest normal number.
  constexpr int emin() const { return 1 - bias; }
  // Magnitude code of the largest finite value.
  constexpr uint32_t max_finite() const {
    switch (special) {
      case Special::kIeee: return (((1u << exp_bits) - 1u) << man_bits) - 1u;
      case Special::kE4M3: return mag_mask() - 1u;
      case Special::kNone: return mag_mask();
    }
    return 0;
  }
  // Magnitude code of infinity (kIeee only).
  constexpr uint32_t inf_code() const { return ((1u << exp_bits) - 1u) << man_bits; }
  // Magnitude code of the canonical quiet NaN (kIeee, kE4M3).
  constexpr uint32_t qnan_code() const {
    return special == Special::kE4M3 ? mag_mask() : inf_code() | (1u << (man_bits - 1));
  }
};

inline constexpr MinifloatSpec kBf16Spec{8, 7, 127, Special::kIeee};
inline constexpr MinifloatSpec kFp16Spec{5, 10, 15, Special::kIeee};
inline constexpr MinifloatSpec kE4M3Spec{4, 3, 7, Special::kE4M3};
inline constexpr MinifloatSpec kE5M2Spec{5, 2, 15, Special::kIeee};
inline constexpr MinifloatSpec kE2M1Spec{2, 1, 1, Special::kNone};

// fp32 -> code. `random` is used only by Rounding::kStochastic: the value rounds up in magnitude
// iff random < dropped_fraction * 2^32, so P(up) = dropped_fraction (exact whenever 32 or fewer
// bits are dropped, within 2^-32 otherwise) and E[decode(code)] = x away from overflow.
// NaN keeps its sign and the top mantissa bits of its payload, with the quiet bit set (IEEE
// formats); E4M3 NaN is S.1111.111; E2M1 has no NaN and encodes NaN as zero (sign kept) — block
// formats built on E2M1 flag NaN in their scale instead.
template <MinifloatSpec S, Rounding R = Rounding::kNearestEven>
constexpr uint32_t minifloat_encode(float x, Overflow overflow = Overflow::kSaturate,
                                    uint32_t random = 0) {
  constexpr int M = S.man_bits;
  constexpr int emin = S.emin();
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (u >> 31) ? S.sign_bit() : 0u;
  const uint32_t a = u & 0x7fffffffu;
  const int32_t ef = static_cast<int32_t>(a >> 23);
  // Significand with the implicit one (fp32 subnormals have none), value = m * 2^(e - 23).
  const uint32_t m = (a & 0x7fffffu) | (ef != 0 ? 0x800000u : 0u);
  const int32_t e = (ef != 0 ? ef : 1) - 127;
  // Bits to drop: 23 - M for targets that are normal, more for target subnormals.
  const int32_t below = emin - e > 0 ? emin - e : 0;
  uint32_t q;
  if constexpr (R == Rounding::kStochastic) {
    int32_t shift = 23 - M + below;
    if (shift > 63) shift = 63;
    const uint64_t m64 = m;
    q = static_cast<uint32_t>(m64 >> shift);
    const uint64_t rem = m64 & ((uint64_t{1} << shift) - 1u);
    const uint64_t threshold = shift <= 32 ? rem << (32 - shift) : rem >> (shift - 32);
    q += static_cast<uint64_t>(random) < threshold ? 1u : 0u;
  } else {
    // m < 2^24, so any shift >= 25 gives q = 0 with no round-up; 31 keeps shifts defined.
    int32_t shift = 23 - M + below;
    if (shift > 31) shift = 31;
    q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    if constexpr (R == Rounding::kNearestEven) {
      const uint32_t half = 1u << (shift - 1);
      q += (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
    } else if constexpr (R == Rounding::kAwayFromZero) {
      q += rem != 0 ? 1u : 0u;
    }
  }
  // Normal: q in [2^M, 2^(M+1)], code = ((e - emin + 1) << M) + (q - 2^M) = ((e - emin) << M) + q.
  // Subnormal: code = q (q == 2^M is the smallest normal).
  uint32_t code = q + (static_cast<uint32_t>(e - emin > 0 ? e - emin : 0) << M);
  if (code > S.max_finite()) {  // finite overflow and +-inf (e = 128) both land here
    if constexpr (S.special == Special::kIeee) {
      code = overflow == Overflow::kSaturate ? S.max_finite() : S.inf_code();
    } else if constexpr (S.special == Special::kE4M3) {
      code = overflow == Overflow::kSaturate ? S.max_finite() : S.qnan_code();
    } else {
      code = S.max_finite();
    }
  }
  if (a > 0x7f800000u) {  // NaN
    if constexpr (S.special == Special::kIeee) {
      code = S.qnan_code() | ((a >> (23 - M)) & S.man_mask());
    } else if constexpr (S.special == Special::kE4M3) {
      code = S.qnan_code();
    } else {
      code = 0;
    }
  }
  return sign | code;
}

// code -> fp32 (exact: every format here is a subset of binary32). NaN codes of IEEE formats
// keep their payload (shifted into the top fp32 mantissa bits); E4M3 NaN decodes to the
// canonical quiet NaN with the code's sign.
template <MinifloatSpec S>
constexpr float minifloat_decode(uint32_t code) {
  constexpr int M = S.man_bits;
  const uint32_t sign = (code & S.sign_bit()) ? 0x80000000u : 0u;
  const uint32_t mag = code & S.mag_mask();
  const uint32_t ef = mag >> M;
  const uint32_t mf = mag & S.man_mask();
  // Normal: rebias the exponent; the mantissa moves to the top of the fp32 mantissa.
  uint32_t bits = sign | ((mag << (23 - M)) + (static_cast<uint32_t>(127 - S.bias) << 23));
  if (ef == 0) {
    // Subnormal: mf * 2^(emin - M), exact in fp32 (fp32 holds these as normals, or for bf16 as
    // fp32 subnormals with the same bits).
    if constexpr (S.exp_bits == 8) {
      bits = sign | (mf << (23 - M));
    } else {
      constexpr float kUnit = std::bit_cast<float>(static_cast<uint32_t>(S.emin() - M + 127) << 23);
      bits = sign | std::bit_cast<uint32_t>(static_cast<float>(mf) * kUnit);
    }
  }
  if constexpr (S.special == Special::kIeee) {
    if (ef == (1u << S.exp_bits) - 1u) bits = sign | 0x7f800000u | (mf << (23 - M));
  } else if constexpr (S.special == Special::kE4M3) {
    if (mag == S.mag_mask()) bits = sign | 0x7fc00000u;
  }
  return std::bit_cast<float>(bits);
}

}  // namespace atl::kernels::formats
