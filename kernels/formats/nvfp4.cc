#include "kernels/formats/nvfp4.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/formats/avx512.h"
#include "kernels/formats/convert.h"
#include "kernels/formats/pack.h"
#include "kernels/formats/portable.h"
#include "kernels/formats/decode_tables.h"
#include "kernels/formats/scalar.h"
#include "kernels/formats/stochastic.h"

namespace atl::kernels::formats {
namespace {

constexpr uint8_t kE4M3NanCode = 0x7f;

template <Rounding R>
inline uint32_t e4m3_scale_code(float want) {
  if constexpr (R == Rounding::kAwayFromZero) {
    return e4m3_from_f32_up_nonneg(want);
  } else {
    return minifloat_encode<kE4M3Spec, R>(want);
  }
}

// Blocks are processed in groups of kGroup (256 values) in phases, each a loop over the group
// that the compiler vectorizes: block amaxes, block scales (E4M3 encode, decode and reciprocal
// for 16 blocks at once), elements, packing. One block at a time, the scalar scale arithmetic
// and the per-block reductions dominated.
constexpr size_t kGroup = 16;

#if ATOLL_FORMATS_AVX512
// One full group (256 values at v) -> out[0, 16), elements to nearest even, block scales rounded
// up: the phases of nvfp4_impl with one 512-bit vector a block, and one lane a block for the
// scale arithmetic (the same operations as e4m3_from_f32_up_nonneg and f32_from_e4m3_nonneg).
void nvfp4_group_up_avx512(const float* v, float ts, BlockNvfp4* out) {
  using namespace avx512;
  __m512i a[kGroup];
  for (size_t b = 0; b < kGroup; ++b) a[b] = abs_bits(_mm512_loadu_ps(v + b * kNvfp4BlockSize));
  const __m512i amax = max_of_each_u32(a);
  const __m512 want = _mm512_div_ps(_mm512_castsi512_ps(amax), _mm512_set1_ps(kE2M1Max * ts));
  // E4M3 code of want, rounded up (want >= 0 or NaN).
  const __m512i w = abs_bits(want);
  const __m512i min_normal = _mm512_set1_epi32(0x3c800000);  // 2^-6
  const __m512i normal =
      _mm512_sub_epi32(_mm512_srli_epi32(_mm512_add_epi32(w, _mm512_set1_epi32(0xfffff)), 20),
                       _mm512_set1_epi32(120 << 3));
  const __m512 below = _mm512_castsi512_ps(_mm512_min_epu32(w, min_normal));
  const __m512i sub = _mm512_cvttps_epi32(_mm512_roundscale_ps(
      _mm512_mul_ps(below, _mm512_set1_ps(512.0f)), _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC));
  __m512i code = _mm512_mask_blend_epi32(_mm512_cmpge_epu32_mask(w, min_normal), sub, normal);
  code = _mm512_min_epu32(code, _mm512_set1_epi32(0x7e));
  code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(w, _mm512_set1_epi32(0x7f800000)),
                               _mm512_set1_epi32(0x7f));
  // Its value times the tensor scale.
  const __m512 normal_value = _mm512_castsi512_ps(
      _mm512_add_epi32(_mm512_slli_epi32(code, 20), _mm512_set1_epi32(120 << 23)));
  const __m512 sub_value = _mm512_mul_ps(_mm512_cvtepi32_ps(code), _mm512_set1_ps(1.0f / 512.0f));
  __m512 value = _mm512_mask_blend_ps(_mm512_cmpge_epu32_mask(code, _mm512_set1_epi32(8)),
                                      sub_value, normal_value);
  value = _mm512_mask_mov_ps(value, _mm512_cmpeq_epi32_mask(code, _mm512_set1_epi32(0x7f)),
                             _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
  const __m512 denom = _mm512_mul_ps(value, _mm512_set1_ps(ts));
  const __mmask16 nan_block = _mm512_cmpge_epu32_mask(amax, _mm512_set1_epi32(0x7f800000));
  const __mmask16 scaled = _mm512_cmp_ps_mask(denom, _mm512_setzero_ps(), _CMP_GT_OQ) &
                           static_cast<__mmask16>(~nan_block);
  alignas(64) float inv[kGroup];
  alignas(64) uint32_t scale[kGroup];
  _mm512_store_ps(inv, _mm512_maskz_div_ps(scaled, _mm512_set1_ps(1.0f), denom));
  _mm512_store_si512(scale,
                     _mm512_mask_mov_epi32(code, nan_block, _mm512_set1_epi32(kE4M3NanCode)));
  for (size_t b = 0; b < kGroup; ++b) {
    const __m512 x =
        _mm512_mul_ps(_mm512_loadu_ps(v + b * kNvfp4BlockSize), _mm512_set1_ps(inv[b]));
    // A NaN block keeps zero elements.
    const __m512i codes = _mm512_maskz_mov_epi32(
        static_cast<__mmask16>((nan_block >> b) & 1u ? 0u : 0xffffu), e2m1_codes(x));
    out[b].scale = static_cast<uint8_t>(scale[b]);
    store_nibbles16(codes, out[b].q);
  }
}
#endif

// kVector: full groups go through the AVX-512 kernel where it is built (round-to-nearest
// elements, kUp scales); the portable code below does everything else and gives the same bytes.
template <bool kStochastic, Rounding kScaleRounding, bool kVector = true>
void nvfp4_impl(std::span<const float> in, float ts, std::span<BlockNvfp4> out, const Philox* rng,
                uint64_t first) {
  ATOLL_CHECK(out.size() == nvfp4_num_blocks(in.size()), "the block span does not fit the values");
  constexpr size_t kValues = kGroup * kNvfp4BlockSize;
  for (size_t g = 0; g < out.size(); g += kGroup) {
    const size_t begin = g * kNvfp4BlockSize;
    const size_t nb = std::min(kGroup, out.size() - g);
    const size_t n = std::min(kValues, in.size() - begin);
#if ATOLL_FORMATS_AVX512
    if constexpr (kVector && !kStochastic && kScaleRounding == Rounding::kAwayFromZero) {
      if (n == kValues) {
        nvfp4_group_up_avx512(in.data() + begin, ts, out.data() + g);
        continue;
      }
    }
#endif
    // A full group is read in place; a partial one through a zero-padded copy.
    float pad[kValues];
    const float* v = in.data() + begin;
    if (n < kValues) {
      std::memset(pad, 0, sizeof(pad));
      std::memcpy(pad, v, n * sizeof(float));
      v = pad;
    }
    uint32_t amax_bits[kGroup];
    for (size_t b = 0; b < kGroup; ++b) {
      uint32_t m = 0;
      for (int j = 0; j < kNvfp4BlockSize; ++j) {
        const uint32_t a = std::bit_cast<uint32_t>(v[b * kNvfp4BlockSize + j]) & 0x7fffffffu;
        m = a > m ? a : m;
      }
      amax_bits[b] = m;
    }
    uint8_t scale[kGroup];
    float inv[kGroup];
    for (size_t b = 0; b < kGroup; ++b) {
      const float want = std::bit_cast<float>(amax_bits[b]) / (kE2M1Max * ts);
      const uint32_t code = e4m3_scale_code<kScaleRounding>(want);
      const auto sc = static_cast<uint8_t>(code);
      const float denom = (kScaleRounding == Rounding::kAwayFromZero
                               ? f32_from_e4m3_nonneg(code)
                               : minifloat_decode<kE4M3Spec>(code)) * ts;
      const bool nan_block = amax_bits[b] >= 0x7f800000u;
      scale[b] = nan_block ? kE4M3NanCode : sc;
      // denom == 0 only for an all-zero block (or kNearest underflow): elements stay 0. A block
      // with inf or NaN gets the NaN scale and zero elements (below).
      inv[b] = (denom > 0.0f && !nan_block) ? 1.0f / denom : 0.0f;
    }
    uint8_t c[kValues];
    if constexpr (kStochastic) {
      uint32_t r[kValues];
      philox_fill(*rng, first + begin, r, nb * kNvfp4BlockSize);
      for (size_t b = 0; b < nb; ++b) {
        for (int j = 0; j < kNvfp4BlockSize; ++j) {
          const size_t i = b * kNvfp4BlockSize + j;
          c[i] = e2m1_from_f32_sr(v[i] * inv[b], r[i]);
        }
      }
    } else {
      for (size_t b = 0; b < kGroup; ++b) {
        for (int j = 0; j < kNvfp4BlockSize; ++j) {
          const size_t i = b * kNvfp4BlockSize + j;
          c[i] = e2m1_from_f32(v[i] * inv[b]);
        }
      }
    }
    for (size_t b = 0; b < nb; ++b) {
      BlockNvfp4& blk = out[g + b];
      blk.scale = scale[b];
      if (scale[b] == kE4M3NanCode) {
        std::memset(blk.q, 0, sizeof(blk.q));
      } else {
        pack_nibbles8(c + b * kNvfp4BlockSize, blk.q);
        pack_nibbles8(c + b * kNvfp4BlockSize + 8, blk.q + 4);
      }
    }
  }
}

// Scale code and element multiplier of one block or tile from its amax (as bits), by the rule of
// nvfp4_impl: the same arithmetic, so a 16x16 tile and a 1x16 block with the same amax agree.
template <Rounding kScaleRounding>
void block_scale(uint32_t amax_bits, float ts, uint8_t* scale, float* inv) {
  const float want = std::bit_cast<float>(amax_bits) / (kE2M1Max * ts);
  const auto sc = static_cast<uint8_t>(minifloat_encode<kE4M3Spec, kScaleRounding>(want));
  const float denom = minifloat_decode<kE4M3Spec>(sc) * ts;
  const bool nan_block = amax_bits >= 0x7f800000u;
  *scale = nan_block ? kE4M3NanCode : sc;
  *inv = (denom > 0.0f && !nan_block) ? 1.0f / denom : 0.0f;
}

template <Rounding kScaleRounding>
void nvfp4_2d_impl(std::span<const float> in, size_t rows, size_t cols, float ts,
                   std::span<BlockNvfp4> out) {
  ATOLL_CHECK(in.size() == rows * cols, "the span does not hold rows x cols values");
  ATOLL_CHECK(out.size() == nvfp4_2d_num_blocks(rows, cols),
              "the block span does not fit the values");
  const size_t nb = nvfp4_num_blocks(cols);
  constexpr size_t kT = kNvfp4BlockSize;
  std::vector<uint32_t> amax(nb);
  std::vector<uint8_t> scale(nb);
  std::vector<float> inv(nb);
  for (size_t r0 = 0; r0 < rows; r0 += kT) {
    const size_t r1 = std::min(rows, r0 + kT);
    // Tile amaxes of this band of (up to) 16 rows, one per column block.
    std::fill(amax.begin(), amax.end(), 0u);
    for (size_t r = r0; r < r1; ++r) {
      const float* row = in.data() + r * cols;
      for (size_t c = 0; c < cols; ++c) {
        const uint32_t a = std::bit_cast<uint32_t>(row[c]) & 0x7fffffffu;
        uint32_t& m = amax[c / kT];
        m = a > m ? a : m;
      }
    }
    for (size_t b = 0; b < nb; ++b) block_scale<kScaleRounding>(amax[b], ts, &scale[b], &inv[b]);
    for (size_t r = r0; r < r1; ++r) {
      const float* row = in.data() + r * cols;
      for (size_t b = 0; b < nb; ++b) {
        BlockNvfp4& blk = out[r * nb + b];
        blk.scale = scale[b];
        uint8_t c[kT] = {};
        if (scale[b] != kE4M3NanCode) {
          const size_t n = std::min(kT, cols - b * kT);
          for (size_t j = 0; j < n; ++j) c[j] = e2m1_from_f32(row[b * kT + j] * inv[b]);
        }
        pack_nibbles8(c, blk.q);
        pack_nibbles8(c + 8, blk.q + 4);
      }
    }
  }
}

}  // namespace

void quantize_nvfp4_2d(std::span<const float> in, size_t rows, size_t cols, float tensor_scale,
                       std::span<BlockNvfp4> out, NvfpScaleRounding rounding) {
  if (rounding == NvfpScaleRounding::kUp) {
    nvfp4_2d_impl<Rounding::kAwayFromZero>(in, rows, cols, tensor_scale, out);
  } else {
    nvfp4_2d_impl<Rounding::kNearestEven>(in, rows, cols, tensor_scale, out);
  }
}

void dequantize_nvfp4_2d(std::span<const BlockNvfp4> in, size_t rows, size_t cols,
                         float tensor_scale, std::span<float> out) {
  ATOLL_CHECK(in.size() == nvfp4_2d_num_blocks(rows, cols),
              "the block span does not fit the values");
  ATOLL_CHECK(out.size() == rows * cols, "the span does not hold rows x cols values");
  const size_t nb = nvfp4_num_blocks(cols);
  for (size_t r = 0; r < rows; ++r)
    dequantize_nvfp4(in.subspan(r * nb, nb), tensor_scale, out.subspan(r * cols, cols));
}

float nvfp4_tensor_scale(float amax) {
  const float ts = amax / (kE4M3Max * kE2M1Max);
  return ts >= FLT_MIN ? ts : 1.0f;
}
float nvfp4_tensor_scale(std::span<const float> in) {
  return nvfp4_tensor_scale(abs_max(in).amax);
}

void quantize_nvfp4(std::span<const float> in, float tensor_scale, std::span<BlockNvfp4> out,
                    NvfpScaleRounding rounding) {
  if (rounding == NvfpScaleRounding::kUp) {
    nvfp4_impl<false, Rounding::kAwayFromZero>(in, tensor_scale, out, nullptr, 0);
  } else {
    nvfp4_impl<false, Rounding::kNearestEven>(in, tensor_scale, out, nullptr, 0);
  }
}
void quantize_nvfp4_portable(std::span<const float> in, float tensor_scale,
                             std::span<BlockNvfp4> out) {
  nvfp4_impl<false, Rounding::kAwayFromZero, false>(in, tensor_scale, out, nullptr, 0);
}
void quantize_nvfp4_sr(std::span<const float> in, float tensor_scale, std::span<BlockNvfp4> out,
                       const Philox& rng, uint64_t first_index, NvfpScaleRounding rounding) {
  if (rounding == NvfpScaleRounding::kUp) {
    nvfp4_impl<true, Rounding::kAwayFromZero>(in, tensor_scale, out, &rng, first_index);
  } else {
    nvfp4_impl<true, Rounding::kNearestEven>(in, tensor_scale, out, &rng, first_index);
  }
}

void dequantize_nvfp4(std::span<const BlockNvfp4> in, float tensor_scale, std::span<float> out) {
  ATOLL_CHECK(out.size() <= in.size() * kNvfp4BlockSize, "more outputs than the blocks hold");
  for (size_t b = 0; b < in.size(); ++b) {
    const size_t begin = b * kNvfp4BlockSize;
    if (begin >= out.size()) break;
    const float x = f32_from_e4m3(in[b].scale) * tensor_scale;
    float v[kNvfp4BlockSize];
    for (int j = 0; j < kNvfp4BlockSize / 2; ++j) {
      v[2 * j] = kE2M1Table[in[b].q[j] & 0xf] * x;
      v[2 * j + 1] = kE2M1Table[in[b].q[j] >> 4] * x;
    }
    std::memcpy(out.data() + begin, v,
                std::min<size_t>(kNvfp4BlockSize, out.size() - begin) * sizeof(float));
  }
}

}  // namespace atl::kernels::formats
