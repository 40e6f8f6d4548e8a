#include "kernels/formats/mx.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "kernels/core/check.h"
#include "kernels/formats/avx512.h"
#include "kernels/formats/pack.h"
#include "kernels/formats/portable.h"
#include "kernels/formats/decode_tables.h"
#include "kernels/formats/scalar.h"
#include "kernels/formats/stochastic.h"

namespace atl::kernels::formats {
namespace {

constexpr int kE4M3Emax = 8;
constexpr uint32_t kE4M3MaxMant = 0x600000;  // 448 = 1.75 * 2^8
constexpr int kE2M1Emax = 2;
constexpr uint32_t kE2M1MaxMant = 0x400000;  // 6 = 1.5 * 2^2

// Exact 2^e for e in [-127, 127] (2^-127 is an fp32 subnormal).
inline float pow2(int e) {
  return e >= -126 ? std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23)
                   : std::bit_cast<float>(0x00400000u >> (-127 - e));
}

// Points v at the 32 values of block b (in place for a full block, else a zero-padded copy in
// pad: copying every block and reloading it as vectors stalls on store forwarding) and returns
// its scale code; sets inv to 1/X (exact, a power of two) or 0 for a NaN block.
inline uint8_t load_block(std::span<const float> in, size_t b, float (&pad)[kMxBlockSize],
                          const float*& v, int emax, uint32_t max_mant, float& inv) {
  const size_t begin = b * kMxBlockSize;
  const size_t n = std::min<size_t>(kMxBlockSize, in.size() - begin);
  v = in.data() + begin;
  if (n < kMxBlockSize) {
    std::memset(pad, 0, sizeof(pad));
    std::memcpy(pad, v, n * sizeof(float));
    v = pad;
  }
  uint32_t amax_bits = 0;
  for (int j = 0; j < kMxBlockSize; ++j) {
    const uint32_t a = std::bit_cast<uint32_t>(v[j]) & 0x7fffffffu;
    amax_bits = std::max(amax_bits, a);
  }
  if (amax_bits >= 0x7f800000u) {  // inf or NaN somewhere in the block
    inv = 0.0f;
    return kE8M0Nan;
  }
  const int s = mx_shared_exponent(std::bit_cast<float>(amax_bits), emax, max_mant);
  // 1/X = 2^-s; for s = -127, 2^127 is representable, so always exact.
  inv = pow2(-s);
  return e8m0_from_exponent(s);
}

#if ATOLL_FORMATS_AVX512
// Blocks encoded together by the vector kernels: one lane a block for the scale arithmetic.
constexpr size_t kGroup = 16;
constexpr size_t kGroupValues = kGroup * kMxBlockSize;

// Scale codes and element multipliers of a full group (512 values at v), as load_block computes
// them one block at a time: code[b] the E8M0 code, inv[b] = 2^-s (0 for a NaN block).
void mx_group_scales_avx512(const float* v, int emax, uint32_t max_mant, uint32_t (&code)[kGroup],
                            float (&inv)[kGroup]) {
  using namespace avx512;
  __m512i a[kGroup];
  for (size_t b = 0; b < kGroup; ++b) {
    a[b] = _mm512_max_epu32(abs_bits(_mm512_loadu_ps(v + b * kMxBlockSize)),
                            abs_bits(_mm512_loadu_ps(v + b * kMxBlockSize + 16)));
  }
  const __m512i amax = max_of_each_u32(a);
  // mx_shared_exponent for normal amaxes: floor(log2 amax) - emax, plus one when the mantissa
  // exceeds the element max's; 0 for a zero block; clamped to [-127, 127].
  const __m512i floor_log2 = _mm512_sub_epi32(_mm512_srli_epi32(amax, 23), _mm512_set1_epi32(127));
  const __mmask16 carry =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(amax, _mm512_set1_epi32(0x7fffff)),
                              _mm512_set1_epi32(static_cast<int>(max_mant)));
  __m512i s = _mm512_sub_epi32(floor_log2, _mm512_set1_epi32(emax));
  s = _mm512_mask_add_epi32(s, carry, s, _mm512_set1_epi32(1));
  s = _mm512_max_epi32(_mm512_min_epi32(s, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
  s = _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(amax, amax), s);
  alignas(64) int32_t shared[kGroup];
  _mm512_store_si512(shared, s);
  // fp32 subnormal amaxes (rare) take the scalar rule, which normalizes them first.
  const __mmask16 subnormal = _mm512_test_epi32_mask(amax, amax) &
                              _mm512_cmplt_epu32_mask(amax, _mm512_set1_epi32(0x800000));
  if (subnormal != 0) {
    alignas(64) uint32_t bits[kGroup];
    _mm512_store_si512(bits, amax);
    for (size_t b = 0; b < kGroup; ++b) {
      if ((subnormal >> b) & 1u)
        shared[b] = mx_shared_exponent(std::bit_cast<float>(bits[b]), emax, max_mant);
    }
    s = _mm512_load_si512(shared);
  }
  // 2^-s: a normal float for -s >= -126, else (-s = -127) the subnormal 2^-127.
  const __m512i neg = _mm512_sub_epi32(_mm512_setzero_si512(), s);
  __m512i inv_bits = _mm512_slli_epi32(_mm512_add_epi32(neg, _mm512_set1_epi32(127)), 23);
  inv_bits = _mm512_mask_mov_epi32(inv_bits, _mm512_cmplt_epi32_mask(neg, _mm512_set1_epi32(-126)),
                                   _mm512_set1_epi32(0x00400000));
  const __mmask16 nan_block = _mm512_cmpge_epu32_mask(amax, _mm512_set1_epi32(0x7f800000));
  _mm512_store_ps(inv, _mm512_castsi512_ps(
                           _mm512_maskz_mov_epi32(static_cast<__mmask16>(~nan_block), inv_bits)));
  _mm512_store_si512(code, _mm512_mask_mov_epi32(_mm512_add_epi32(s, _mm512_set1_epi32(127)),
                                                 nan_block, _mm512_set1_epi32(kE8M0Nan)));
}

// A full group -> 16 MXFP8 blocks (elements x * 2^-s to nearest even, as e4m3_from_f32).
void mxfp8_group_avx512(const float* v, BlockMxfp8* out) {
  using namespace avx512;
  alignas(64) uint32_t code[kGroup];
  alignas(64) float inv[kGroup];
  mx_group_scales_avx512(v, kE4M3Emax, kE4M3MaxMant, code, inv);
  for (size_t b = 0; b < kGroup; ++b) {
    const __m512 m = _mm512_set1_ps(inv[b]);
    const float* x = v + b * kMxBlockSize;
    out[b].scale = static_cast<uint8_t>(code[b]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q),
                     _mm512_cvtepi32_epi8(e4m3_codes(_mm512_mul_ps(_mm512_loadu_ps(x), m))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q + 16),
                     _mm512_cvtepi32_epi8(e4m3_codes(_mm512_mul_ps(_mm512_loadu_ps(x + 16), m))));
  }
}

// A full group -> 16 MXFP4 blocks (elements as e2m1_from_f32; a NaN block's elements are
// computed from x * 0 exactly as the portable loop does).
void mxfp4_group_avx512(const float* v, BlockMxfp4* out) {
  using namespace avx512;
  alignas(64) uint32_t code[kGroup];
  alignas(64) float inv[kGroup];
  mx_group_scales_avx512(v, kE2M1Emax, kE2M1MaxMant, code, inv);
  for (size_t b = 0; b < kGroup; ++b) {
    const __m512 m = _mm512_set1_ps(inv[b]);
    const float* x = v + b * kMxBlockSize;
    out[b].scale = static_cast<uint8_t>(code[b]);
    store_nibbles16(e2m1_codes(_mm512_mul_ps(_mm512_loadu_ps(x), m)), out[b].q);
    store_nibbles16(e2m1_codes(_mm512_mul_ps(_mm512_loadu_ps(x + 16), m)), out[b].q + 8);
  }
}
#endif

// kVector: full groups of 16 blocks go through the AVX-512 kernels where they are built
// (round-to-nearest elements); the per-block code below does the rest, with the same bytes.
template <bool kStochastic, bool kVector = true>
void mxfp8_impl(std::span<const float> in, std::span<BlockMxfp8> out, const Philox* rng,
                uint64_t first) {
  ATOLL_CHECK(out.size() == mx_num_blocks(in.size()), "the block span does not fit the values");
  size_t b = 0;
#if ATOLL_FORMATS_AVX512
  if constexpr (kVector && !kStochastic) {
    for (; (b + kGroup) * kMxBlockSize <= in.size(); b += kGroup)
      mxfp8_group_avx512(in.data() + b * kMxBlockSize, out.data() + b);
  }
#endif
  for (; b < out.size(); ++b) {
    float pad[kMxBlockSize];
    const float* v;
    float inv;
    BlockMxfp8& blk = out[b];
    blk.scale = load_block(in, b, pad, v, kE4M3Emax, kE4M3MaxMant, inv);
    if constexpr (kStochastic) {
      uint32_t r[kMxBlockSize];
      philox_fill(*rng, first + b * kMxBlockSize, r, kMxBlockSize);
      for (int j = 0; j < kMxBlockSize; ++j) blk.q[j] = e4m3_from_f32_sr(v[j] * inv, r[j]);
    } else {
      for (int j = 0; j < kMxBlockSize; ++j) blk.q[j] = e4m3_from_f32(v[j] * inv);
    }
  }
}

template <bool kStochastic, bool kVector = true>
void mxfp4_impl(std::span<const float> in, std::span<BlockMxfp4> out, const Philox* rng,
                uint64_t first) {
  ATOLL_CHECK(out.size() == mx_num_blocks(in.size()), "the block span does not fit the values");
  size_t b = 0;
#if ATOLL_FORMATS_AVX512
  if constexpr (kVector && !kStochastic) {
    for (; (b + kGroup) * kMxBlockSize <= in.size(); b += kGroup)
      mxfp4_group_avx512(in.data() + b * kMxBlockSize, out.data() + b);
  }
#endif
  for (; b < out.size(); ++b) {
    float pad[kMxBlockSize];
    const float* v;
    float inv;
    BlockMxfp4& blk = out[b];
    blk.scale = load_block(in, b, pad, v, kE2M1Emax, kE2M1MaxMant, inv);
    uint8_t c[kMxBlockSize];
    if constexpr (kStochastic) {
      uint32_t r[kMxBlockSize];
      philox_fill(*rng, first + b * kMxBlockSize, r, kMxBlockSize);
      for (int j = 0; j < kMxBlockSize; ++j) c[j] = e2m1_from_f32_sr(v[j] * inv, r[j]);
    } else {
      for (int j = 0; j < kMxBlockSize; ++j) c[j] = e2m1_from_f32(v[j] * inv);
    }
    for (int j = 0; j < kMxBlockSize; j += 8) pack_nibbles8(c + j, blk.q + j / 2);
  }
}

}  // namespace

int mx_shared_exponent(float amax, int elem_emax, uint32_t elem_max_mant) {
  const uint32_t a = std::bit_cast<uint32_t>(amax) & 0x7fffffffu;
  if (a == 0) return 0;
  int fl;           // floor(log2(amax))
  uint32_t mant;    // amax's mantissa normalized to 23 bits after the leading one
  if ((a >> 23) != 0) {
    fl = static_cast<int>(a >> 23) - 127;
    mant = a & 0x7fffffu;
  } else {  // fp32 subnormal: normalize
    const int lead = 31 - std::countl_zero(a);  // bit index of the leading one, < 23
    fl = lead - 149;
    mant = (a << (23 - lead)) & 0x7fffffu;
  }
  int s = fl - elem_emax;
  if (mant > elem_max_mant) s += 1;  // amax / 2^s would exceed the element max
  return std::clamp(s, -127, 127);
}

void quantize_mxfp8(std::span<const float> in, std::span<BlockMxfp8> out) {
  mxfp8_impl<false>(in, out, nullptr, 0);
}
void quantize_mxfp4(std::span<const float> in, std::span<BlockMxfp4> out) {
  mxfp4_impl<false>(in, out, nullptr, 0);
}
void quantize_mxfp8_portable(std::span<const float> in, std::span<BlockMxfp8> out) {
  mxfp8_impl<false, false>(in, out, nullptr, 0);
}
void quantize_mxfp4_portable(std::span<const float> in, std::span<BlockMxfp4> out) {
  mxfp4_impl<false, false>(in, out, nullptr, 0);
}
void quantize_mxfp8_sr(std::span<const float> in, std::span<BlockMxfp8> out, const Philox& rng,
                       uint64_t first_index) {
  mxfp8_impl<true>(in, out, &rng, first_index);
}
void quantize_mxfp4_sr(std::span<const float> in, std::span<BlockMxfp4> out, const Philox& rng,
                       uint64_t first_index) {
  mxfp4_impl<true>(in, out, &rng, first_index);
}

void dequantize_mxfp8(std::span<const BlockMxfp8> in, std::span<float> out) {
  ATOLL_CHECK(out.size() <= in.size() * kMxBlockSize, "more outputs than the blocks hold");
  for (size_t b = 0; b < in.size(); ++b) {
    const float x = f32_from_e8m0(in[b].scale);
    float v[kMxBlockSize];
    for (int j = 0; j < kMxBlockSize; ++j) v[j] = kE4M3Table[in[b].q[j]] * x;
    const size_t begin = b * kMxBlockSize;
    if (begin >= out.size()) break;
    std::memcpy(out.data() + begin, v,
                std::min<size_t>(kMxBlockSize, out.size() - begin) * sizeof(float));
  }
}
void dequantize_mxfp4(std::span<const BlockMxfp4> in, std::span<float> out) {
  ATOLL_CHECK(out.size() <= in.size() * kMxBlockSize, "more outputs than the blocks hold");
  for (size_t b = 0; b < in.size(); ++b) {
    const float x = f32_from_e8m0(in[b].scale);
    float v[kMxBlockSize];
    for (int j = 0; j < kMxBlockSize / 2; ++j) {
      v[2 * j] = kE2M1Table[in[b].q[j] & 0xf] * x;
      v[2 * j + 1] = kE2M1Table[in[b].q[j] >> 4] * x;
    }
    const size_t begin = b * kMxBlockSize;
    if (begin >= out.size()) break;
    std::memcpy(out.data() + begin, v,
                std::min<size_t>(kMxBlockSize, out.size() - begin) * sizeof(float));
  }
}

}  // namespace atl::kernels::formats
