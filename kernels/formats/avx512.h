// AVX-512 building blocks of the block quantizers (nvfp4.cc, mx.cc). Compiled only where the
// compiler targets AVX-512 F/BW/VL (ATOLL_FORMATS_AVX512 is then 1); every caller keeps a
// portable path, and the two give the same bytes (tests/kernels/formats_simd_test.cc).
// Each helper is the vector form of a scalar function of scalar.h, lane by lane.
#pragma once

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    !defined(ATOLL_FORMATS_PORTABLE)
#define ATOLL_FORMATS_AVX512 1
// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_* reads itself: GCC bug 105593,
// fixed in 13); the diagnostic state at those header lines is what counts, so it is set here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

namespace atl::kernels::formats::avx512 {

// |x| as bits (sign cleared): for non-negative floats the unsigned order is the numeric order.
inline __m512i abs_bits(__m512 x) {
  return _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
}

// 16 vectors v[b] (16 lanes each) -> one vector whose lane b is the unsigned max of v[b]'s lanes.
// A transposing tree: each level halves the vectors and doubles the blocks a vector holds, 15
// maxes in all instead of 16 horizontal reductions of 4 steps each.
inline __m512i max_of_each_u32(const __m512i (&v)[16]) {
  // Level 1: a, b -> [max(a.q0, a.q2), max(a.q1, a.q3), max(b.q0, b.q2), max(b.q1, b.q3)]
  // (q = 128-bit quarters): 8 vectors, 2 blocks each, 8 partial maxes a block.
  __m512i l1[8];
  for (int i = 0; i < 8; ++i) {
    const __m512i a = v[2 * i], b = v[2 * i + 1];
    l1[i] = _mm512_max_epu32(_mm512_shuffle_i32x4(a, b, 0x44), _mm512_shuffle_i32x4(a, b, 0xee));
  }
  // Level 2: quarters 0,2 against 1,3: 4 vectors, one block a quarter, 4 partials each.
  __m512i l2[4];
  for (int i = 0; i < 4; ++i) {
    const __m512i a = l1[2 * i], b = l1[2 * i + 1];
    l2[i] = _mm512_max_epu32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xdd));
  }
  // Level 3: within each quarter, 64-bit halves: 2 vectors, 2 blocks a quarter, 2 partials each.
  __m512i l3[2];
  for (int i = 0; i < 2; ++i) {
    const __m512i a = l2[2 * i], b = l2[2 * i + 1];
    l3[i] = _mm512_max_epu32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
  }
  // Level 4: even against odd 32-bit lanes: one value a block.
  const __m512 a = _mm512_castsi512_ps(l3[0]), b = _mm512_castsi512_ps(l3[1]);
  const __m512i m = _mm512_max_epu32(_mm512_castps_si512(_mm512_shuffle_ps(a, b, 0x88)),
                                     _mm512_castps_si512(_mm512_shuffle_ps(a, b, 0xdd)));
  // After the tree, lane 4i + j holds block 4j + i (a 4x4 transpose, its own inverse).
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_epi32(order, m);
}

// e2m1_from_f32 of 16 floats (scalar.h). E2M1's magnitudes are steps of 0.5 below 2, of 1 in
// [2, 4) and of 2 from 4 on, so the code is |x| * 2, |x| or |x| / 2 (exact) rounded to the nearest
// integer, ties to even, plus 0, 2 or 4, then at most 7: rounding to even puts each tie on the
// side e2m1_from_f32's thresholds do (0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2, 2.5 -> 2,
// 3.5 -> 4, 5 -> 4). |x| <= 0.25 and NaN give 0; inf and values past 2^31 convert to 0x80000000,
// which the unsigned min turns into 7. Codes in the low 4 bits of each 32-bit lane, the sign in
// bit 3. Three compares instead of seven: compares run on one port of the two.
inline __m512i e2m1_codes(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512 a = _mm512_castsi512_ps(abs_bits(x));
  const __mmask16 from2 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.0f), _CMP_GE_OQ);
  const __mmask16 from4 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(4.0f), _CMP_GE_OQ);
  const __mmask16 nonzero = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.25f), _CMP_GT_OQ);
  __m512 step = _mm512_mask_mov_ps(_mm512_set1_ps(2.0f), from2, _mm512_set1_ps(1.0f));
  step = _mm512_mask_mov_ps(step, from4, _mm512_set1_ps(0.5f));
  __m512i mag = _mm512_maskz_cvt_roundps_epi32(nonzero, _mm512_mul_ps(a, step),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512i two = _mm512_set1_epi32(2);
  mag = _mm512_mask_add_epi32(mag, from2, mag, two);
  mag = _mm512_mask_add_epi32(mag, from4, mag, two);
  mag = _mm512_min_epu32(mag, _mm512_set1_epi32(7));
  // (u >> 28) & 8 | mag
  return _mm512_ternarylogic_epi32(_mm512_srli_epi32(u, 28), _mm512_set1_epi32(8), mag, 0xea);
}

// 16 codes (< 16, one a 32-bit lane) -> 8 bytes, element 2i in the low nibble of byte i.
inline void store_nibbles16(__m512i codes, uint8_t* q) {
  // In each 64-bit lane the odd element sits at bit 32; shifted to bit 4 it joins the even one.
  const __m512i pairs = _mm512_or_si512(codes, _mm512_srli_epi64(codes, 28));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(q), _mm512_cvtepi64_epi8(pairs));
}

// e4m3_from_f32(x, Overflow::kSaturate) of 16 floats (minifloat.h's rounding, to nearest even):
// normal targets round the fp32 bits to 3 mantissa bits (the carry runs into the exponent),
// subnormal ones (|x| < 2^-6) are |x| * 2^9 rounded to an integer; overflow and +-inf saturate
// to 0x7e, NaN gives 0x7f, the sign goes to bit 7. Codes in the low 8 bits of each lane.
inline __m512i e4m3_codes(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i a = abs_bits(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, 20), _mm512_set1_epi32(1));
  const __m512i normal = _mm512_sub_epi32(
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(0x7ffff)), lsb), 20),
      _mm512_set1_epi32(120 << 3));
  const __m512i sub =
      _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(512.0f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512i code = _mm512_mask_blend_epi32(_mm512_cmpge_epu32_mask(a, _mm512_set1_epi32(0x3c800000)),
                                         sub, normal);
  code = _mm512_min_epu32(code, _mm512_set1_epi32(0x7e));
  code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000)),
                               _mm512_set1_epi32(0x7f));
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
  return _mm512_or_si512(sign, code);
}

}  // namespace atl::kernels::formats::avx512

#else
#define ATOLL_FORMATS_AVX512 0
#endif
