#include "kernels/formats/lowbit.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/core/check.h"
#include "kernels/formats/avx512.h"
#include "kernels/formats/portable.h"
#include "kernels/formats/scalar.h"

namespace atl::kernels::formats {
namespace {

constexpr uint16_t kBf16Nan = 0x7fc0;

// Number of real values in block b of an array of n values.
template <int B>
inline size_t block_len(size_t n, size_t b) {
  return std::min<size_t>(B, n - b * B);
}

inline void put_scale(uint8_t (&dst)[2], uint16_t h) {
  std::memcpy(dst, &h, 2);
}
inline uint16_t get_scale(const uint8_t (&src)[2]) {
  uint16_t h;
  std::memcpy(&h, src, 2);
  return h;
}

// Blocks are encoded in groups of kGroup full blocks (then one at a time): each block's sums
// are serial double additions in index order, a chain bound by the add latency, so the group's
// kGroup chains run side by side (one vector of doubles) with the same result per block.
constexpr size_t kGroup = 8;

// sum[g] = sum |v| over block g of G consecutive blocks of len values each (stride B), in double,
// in index order; bad[g] when block g holds a non-finite value.
template <int B, size_t G>
inline void abs_sums(const float* v, size_t len, double (&sum)[G], bool (&bad)[G]) {
  uint32_t nf[G] = {};
  for (size_t g = 0; g < G; ++g) sum[g] = 0;
  for (size_t j = 0; j < len; ++j) {
    for (size_t g = 0; g < G; ++g) {
      const float x = v[g * B + j];
      nf[g] |= (std::bit_cast<uint32_t>(x) & 0x7f800000u) == 0x7f800000u;
      sum[g] += std::fabs(static_cast<double>(x));
    }
  }
  for (size_t g = 0; g < G; ++g) bad[g] = nf[g] != 0;
}

// Calls fn.template operator()<G>(first_block, len) over in (n values): groups of kGroup full
// blocks, then single blocks (the last may be short).
template <int B, typename Fn>
inline void for_block_groups(size_t n, Fn&& fn) {
  const size_t full = n / B, blocks = (n + B - 1) / B;
  size_t b = 0;
  for (; b + kGroup <= full; b += kGroup) fn.template operator()<kGroup>(b, size_t{B});
  for (; b < blocks; ++b) fn.template operator()<1>(b, block_len<B>(n, b));
}

// One past the largest valid value of a ternary block's last code byte, which holds the block's
// last B - 5 (kBytes - 1) trits (the trits beyond B must be 0): 3^(B - 5 (kBytes - 1)).
template <int B>
constexpr uint32_t last_byte_limit() {
  uint32_t lim = 1;
  for (int i = 0; i < B - 5 * (BlockTernary<B>::kBytes - 1); ++i) lim *= 3;
  return lim;
}

}  // namespace

template <int B>
void quantize_sign(std::span<const float> in, std::span<BlockSign<B>> out) {
  ATOLL_CHECK(out.size() == lowbit_num_blocks<B>(in.size()),
              "the block span does not fit the values");
  for_block_groups<B>(in.size(), [&]<size_t G>(size_t b0, size_t len) {
    double sum[G];
    bool bad[G];
    abs_sums<B, G>(in.data() + b0 * B, len, sum, bad);
    for (size_t g = 0; g < G; ++g) {
      const float* v = in.data() + (b0 + g) * B;
      BlockSign<B>& o = out[b0 + g];
      std::memset(o.bits, 0, sizeof(o.bits));
      if (bad[g]) {
        put_scale(o.scale, kBf16Nan);
        continue;
      }
      const double mean = sum[g] / static_cast<double>(len);
      put_scale(o.scale, bf16_from_f32(static_cast<float>(mean)));
      // One byte per 8 values from compares (x < 0, so -0 sends +s), which vectorize.
      for (size_t i = 0; i < (len + 7) / 8; ++i) {
        uint32_t byte = 0;
        for (size_t k = 0; k < 8; ++k) {
          const size_t j = 8 * i + k;
          byte |= (j < len && v[j] < 0.0f ? 1u : 0u) << k;
        }
        o.bits[i] = static_cast<uint8_t>(byte);
      }
    }
  });
}

namespace {

// G consecutive blocks of len values each (G > 1: full blocks) at v -> o[0, G).
template <int B, size_t G>
void ternary_blocks_portable(const float* v, size_t len, BlockTernary<B>* o_blocks) {
  constexpr int kBytes = BlockTernary<B>::kBytes;
  double sum[G];
  bool bad[G];
  abs_sums<B, G>(v, len, sum, bad);
  // The threshold is taken in double so that a block of ±s and zeros (mean = s * c / len,
  // c <= len) never puts an s at or below it: 0.7 * s * c / len < s. For float |x|,
  // |x| > t exactly when |x| > tf, tf = t rounded down to float; the loop compares floats.
  float tf[G];
  for (size_t g = 0; g < G; ++g) {
    const double t = static_cast<double>(kTernaryThreshold) * (sum[g] / static_cast<double>(len));
    tf[g] = static_cast<float>(t);
    if (static_cast<double>(tf[g]) > t) tf[g] = std::nextafter(tf[g], 0.0f);
    if (bad[g]) tf[g] = 0.0f;  // any value; the block is written as NaN below
  }
  // Sums of the kept |x| in index order (adding +0 for the others changes nothing), then the
  // codes block by block: separate loops, each of which vectorizes.
  double kept[G] = {};
  uint32_t count[G] = {};
  for (size_t j = 0; j < len; ++j) {
    for (size_t g = 0; g < G; ++g) {
      // Masks instead of selects: a branch per value mispredicts on half of them.
      const float a = std::fabs(v[g * B + j]);
      const uint32_t keep = a > tf[g] ? 1u : 0u;
      const uint64_t mask = 0 - static_cast<uint64_t>(keep);
      kept[g] += std::bit_cast<double>(std::bit_cast<uint64_t>(static_cast<double>(a)) & mask);
      count[g] += keep;
    }
  }
  uint8_t trit[G][5 * kBytes];
  for (size_t g = 0; g < G; ++g) {
    for (size_t j = 0; j < len; ++j) {
      const float x = v[g * B + j];
      const uint32_t keep = std::fabs(x) > tf[g] ? 1u : 0u;
      trit[g][j] = static_cast<uint8_t>(keep + (keep & (x < 0.0f ? 1u : 0u)));
    }
    for (size_t j = len; j < 5 * kBytes; ++j) trit[g][j] = 0;
  }
  for (size_t g = 0; g < G; ++g) {
    BlockTernary<B>& o = o_blocks[g];
    const float s =
        count[g] > 0 ? static_cast<float>(kept[g] / static_cast<double>(count[g])) : 0.0f;
    put_scale(o.scale, bad[g] ? kBf16Nan : bf16_from_f32(s));
    if (bad[g] || s == 0.0f) {  // NaN or all zero: zero codes
      std::fill(o.trits, o.trits + kBytes, uint8_t{0});
      continue;
    }
    for (int i = 0; i < kBytes; ++i) {
      const uint8_t* c = trit[g] + 5 * i;
      o.trits[i] = static_cast<uint8_t>(c[0] + 3 * c[1] + 9 * c[2] + 27 * c[3] + 81 * c[4]);
    }
  }
}

#if ATOLL_FORMATS_AVX512
// Largest exponent spread (binades between the largest and the smallest nonzero |x|) at which
// every sum of a block's |x| in double is exact, in any order: the values are multiples of
// u = 2^(emin - 23) and a sum stays below B * 2^(emax + 1), so it needs at most
// emax - emin + 24 + log2(B) bits, and double holds 53. Exact sums do not depend on their
// order, so a block within this spread may be summed in vector lanes and still give the bits
// of the serial sum of ternary_blocks_portable.
template <int B>
constexpr uint32_t exact_exponent_spread() {
  return static_cast<uint32_t>(29 - std::bit_width(static_cast<unsigned>(B)) + 1);
}

// 5 trits (bytes, each < 3) at c -> their byte c0 + 3 c1 + 9 c2 + 27 c3 + 81 c4: one multiply.
// Byte 4 of w * K collects c_k * 3^k; the bytes below it hold sums under 256, so no carry
// reaches it, and bytes 5-7 of w only reach bits above it. Reads 8 bytes at c.
inline uint8_t pack_trits5(const uint8_t* c) {
  uint64_t w;
  std::memcpy(&w, c, 8);
  constexpr uint64_t K = 81ull | 27ull << 8 | 9ull << 16 | 3ull << 24 | 1ull << 32;
  return static_cast<uint8_t>((w * K) >> 32);
}

#if defined(__AVX512VBMI__)
// Byte gathers of the ternary packing: index[k][i] = 5i + k (trit k of code byte i, taken from
// two 64-byte vectors), inside[k] bit i set where 5i + k < B (the rest are zero trits).
template <int B>
struct TritGather {
  alignas(64) uint8_t index[5][64] = {};
  uint64_t inside[5] = {};
  constexpr TritGather() {
    for (int k = 0; k < 5; ++k) {
      for (int i = 0; i < BlockTernary<B>::kBytes; ++i) {
        index[k][i] = static_cast<uint8_t>((5 * i + k) & 127);
        if (5 * i + k < B) inside[k] |= uint64_t{1} << i;
      }
    }
  }
};
#endif

// One full block (B values at v) -> o, or false (nothing written) when its sums might round:
// a subnormal value or a spread beyond exact_exponent_spread (rare for gradients; the portable
// code takes the block).
template <int B>
bool ternary_block_avx512(const float* v, BlockTernary<B>& o) {
  using namespace avx512;
  constexpr int kVecs = B / 16;
  constexpr int kBytes = BlockTernary<B>::kBytes;
  __m512i hi = _mm512_setzero_si512(), lo = _mm512_set1_epi32(-1);
  __m512d sum0 = _mm512_setzero_pd(), sum1 = _mm512_setzero_pd();
  for (int k = 0; k < kVecs; ++k) {
    const __m512i a = abs_bits(_mm512_loadu_ps(v + 16 * k));
    hi = _mm512_max_epu32(hi, a);
    lo = _mm512_mask_min_epu32(lo, _mm512_test_epi32_mask(a, a), lo, a);
    sum0 = _mm512_add_pd(sum0, _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_castsi512_si256(a))));
    sum1 =
        _mm512_add_pd(sum1, _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_extracti64x4_epi64(a, 1))));
  }
  const uint32_t amax = _mm512_reduce_max_epu32(hi), amin = _mm512_reduce_min_epu32(lo);
  if (amax >= 0x7f800000u) {  // inf or NaN: NaN scale, zero codes
    put_scale(o.scale, kBf16Nan);
    std::fill(o.trits, o.trits + kBytes, uint8_t{0});
    return true;
  }
  if (amax != 0 && (amin < 0x00800000u || (amax >> 23) - (amin >> 23) > exact_exponent_spread<B>()))
    return false;
  const double sum = _mm512_reduce_add_pd(_mm512_add_pd(sum0, sum1));
  const double t = static_cast<double>(kTernaryThreshold) * (sum / static_cast<double>(B));
  float tf = static_cast<float>(t);
  // nextafter(tf, 0) for tf > 0 (tf = 0 never exceeds t >= 0).
  if (static_cast<double>(tf) > t) tf = std::bit_cast<float>(std::bit_cast<uint32_t>(tf) - 1u);
  const __m512 threshold = _mm512_set1_ps(tf);
  __m512d kept0 = _mm512_setzero_pd(), kept1 = _mm512_setzero_pd();
  uint32_t count = 0;
  alignas(64) uint8_t trit[5 * kBytes + 8] = {};  // zero past B: the last pack reads there
#if defined(__AVX512VBMI__)
  // Blocks of up to 128 values keep their trits in two byte vectors (values 0-63, 64-127).
  __m512i trit_bytes[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#endif
  for (int k = 0; k < kVecs; ++k) {
    const __m512 x = _mm512_loadu_ps(v + 16 * k);
    const __m512 a = _mm512_castsi512_ps(abs_bits(x));
    const __mmask16 keep = _mm512_cmp_ps_mask(a, threshold, _CMP_GT_OQ);
    const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512i ai = _mm512_castps_si512(a);
    kept0 = _mm512_mask_add_pd(kept0, static_cast<__mmask8>(keep), kept0,
                               _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_castsi512_si256(ai))));
    kept1 =
        _mm512_mask_add_pd(kept1, static_cast<__mmask8>(keep >> 8), kept1,
                           _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_extracti64x4_epi64(ai, 1))));
    count += static_cast<uint32_t>(std::popcount(static_cast<uint32_t>(keep)));
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i code = _mm512_add_epi32(_mm512_maskz_mov_epi32(keep, one),
                                          _mm512_maskz_mov_epi32(keep & neg, one));
#if defined(__AVX512VBMI__)
    if constexpr (B <= 128) {
      trit_bytes[k / 4] = _mm512_inserti32x4(trit_bytes[k / 4], _mm512_cvtepi32_epi8(code), k % 4);
      continue;
    }
#endif
    _mm_storeu_si128(reinterpret_cast<__m128i*>(trit + 16 * k), _mm512_cvtepi32_epi8(code));
  }
  const double kept = _mm512_reduce_add_pd(_mm512_add_pd(kept0, kept1));
  const float s = count > 0 ? static_cast<float>(kept / static_cast<double>(count)) : 0.0f;
  put_scale(o.scale, bf16_from_f32(s));
  if (s == 0.0f) {
    std::fill(o.trits, o.trits + kBytes, uint8_t{0});
    return true;
  }
#if defined(__AVX512VBMI__)
  if constexpr (B <= 128) {
    // Byte i = sum_k 3^k trit[5i + k] by Horner over five byte gathers (trit[j] for j >= B is
    // 0: those lanes are zeroed). Every partial sum stays below 243, so bytes never carry.
    static_assert(kBytes <= 64);
    __m512i acc = _mm512_setzero_si512();
    static constexpr TritGather<B> kGather{};
    for (int k = 4; k >= 0; --k) {
      const __m512i gathered = _mm512_maskz_permutex2var_epi8(
          kGather.inside[k], trit_bytes[0], _mm512_load_si512(kGather.index[k]), trit_bytes[1]);
      acc = _mm512_add_epi8(_mm512_add_epi8(acc, _mm512_add_epi8(acc, acc)), gathered);
    }
    _mm512_mask_storeu_epi8(o.trits, (kBytes == 64 ? ~0ull : (1ull << kBytes) - 1), acc);
    return true;
  }
#endif
  for (int i = 0; i < kBytes; ++i) o.trits[i] = pack_trits5(trit + 5 * i);
  return true;
}
#endif

}  // namespace

template <int B>
void quantize_ternary_portable(std::span<const float> in, std::span<BlockTernary<B>> out) {
  ATOLL_CHECK(out.size() == lowbit_num_blocks<B>(in.size()),
              "the block span does not fit the values");
  for_block_groups<B>(in.size(), [&]<size_t G>(size_t b0, size_t len) {
    ternary_blocks_portable<B, G>(in.data() + b0 * B, len, out.data() + b0);
  });
}

template <int B>
void quantize_ternary(std::span<const float> in, std::span<BlockTernary<B>> out) {
#if ATOLL_FORMATS_AVX512
  ATOLL_CHECK(out.size() == lowbit_num_blocks<B>(in.size()),
              "the block span does not fit the values");
  const size_t full = in.size() / B;
  for (size_t b = 0; b < full; ++b) {
    if (!ternary_block_avx512<B>(in.data() + b * B, out[b]))
      ternary_blocks_portable<B, 1>(in.data() + b * B, B, out.data() + b);
  }
  if (full < out.size())
    ternary_blocks_portable<B, 1>(in.data() + full * B, in.size() - full * B, out.data() + full);
#else
  quantize_ternary_portable<B>(in, out);
#endif
}

template <int B>
bool dequantize_sign(std::span<const BlockSign<B>> in, std::span<float> out) {
  ATOLL_CHECK(out.size() <= in.size() * B, "more outputs than the blocks hold");
  bool ok = true;
  for (size_t b = 0; b < in.size() && b * B < out.size(); ++b) {
    const size_t len = block_len<B>(out.size(), b);
    const uint16_t h = get_scale(in[b].scale);
    float* y = out.data() + b * B;
    if (h & 0x8000u) {
      ok = false;
      std::fill(y, y + len, 0.0f);
      continue;
    }
    const float s = f32_from_bf16(h);
    // Flip the sign bit of s where the code is 1 (-s for s = 0 is -0, as written).
    const uint32_t sb = std::bit_cast<uint32_t>(s);
    for (size_t j = 0; j < len; ++j) {
      const uint32_t bit = (in[b].bits[j / 8] >> (j % 8)) & 1u;
      y[j] = std::bit_cast<float>(sb ^ (bit << 31));
    }
  }
  return ok;
}

template <int B>
bool dequantize_ternary(std::span<const BlockTernary<B>> in, std::span<float> out) {
  ATOLL_CHECK(out.size() <= in.size() * B, "more outputs than the blocks hold");
  constexpr int kBytes = BlockTernary<B>::kBytes;
  bool ok = true;
  for (size_t b = 0; b < in.size() && b * B < out.size(); ++b) {
    const size_t len = block_len<B>(out.size(), b);
    const uint16_t h = get_scale(in[b].scale);
    const float s = f32_from_bf16(h);
    // 0 * s: a NaN scale (a non-finite input block) decodes to NaN everywhere, zeros included.
    const float level[3] = {0.0f * s, s, -s};
    bool valid = (h & 0x8000u) == 0 && in[b].trits[kBytes - 1] < last_byte_limit<B>();
    float v[5 * kBytes];
    for (int i = 0; i < kBytes; ++i) {
      uint32_t byte = in[b].trits[i];
      valid &= byte < 243;
      for (int k = 0; k < 5; ++k) {
        v[5 * i + k] = level[byte % 3];
        byte /= 3;
      }
    }
    float* y = out.data() + b * B;
    if (!valid) {
      ok = false;
      std::fill(y, y + len, 0.0f);
      continue;
    }
    std::memcpy(y, v, len * sizeof(float));
  }
  return ok;
}

#define ATL_INSTANTIATE_LOWBIT(B)                                                                 \
  template void quantize_sign<B>(std::span<const float>, std::span<BlockSign<B>>);                \
  template void quantize_ternary<B>(std::span<const float>, std::span<BlockTernary<B>>);          \
  template void quantize_ternary_portable<B>(std::span<const float>, std::span<BlockTernary<B>>); \
  template bool dequantize_sign<B>(std::span<const BlockSign<B>>, std::span<float>);              \
  template bool dequantize_ternary<B>(std::span<const BlockTernary<B>>, std::span<float>);
ATL_INSTANTIATE_LOWBIT(32)
ATL_INSTANTIATE_LOWBIT(64)
ATL_INSTANTIATE_LOWBIT(128)
ATL_INSTANTIATE_LOWBIT(256)
#undef ATL_INSTANTIATE_LOWBIT

}  // namespace atl::kernels::formats
