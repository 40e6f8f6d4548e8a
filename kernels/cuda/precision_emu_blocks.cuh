// Per-element and per-tile pieces of the precision_emu.cu kernels, __host__ __device__: the
// kernels run them on the GPU, and tests/cuda/precision_emu_host_test.cu runs the very same
// functions on the host against the CPU code they mirror (PrecisionGemm::hadamard_rows,
// formats' scaled E5M2 and NVFP4 16x16 tiles), so their logic is checked bit for bit on any
// machine. Every rounding step goes through quantize_blocks.cuh's exactly rounded helpers
// (intrinsics on the device; host code must be built with -ffp-contract=off); products that can
// see a NaN use its x86 NaN rules, so NaN payloads match the host's too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/quantize_blocks.cuh"
#include "kernels/formats/minifloat.h"
#include "kernels/formats/scalar.h"

namespace atl::kernels::cuda::emu {

namespace bl = atl::kernels::cuda::blocks;
namespace fm = atl::kernels::formats;

#define ATL_EMU_HD __host__ __device__ inline

// One column of one group of 16 rows: base[j·stride] for j < 16. Sign flips, the four
// butterfly stages of the 16-point Walsh-Hadamard transform (Sylvester order) and the final
// ·1/4, in PrecisionGemm::hadamard_rows' order. Finite inputs give the host's bits.
ATL_EMU_HD void hadamard16_column(float* base, size_t stride, const float* signs) {
  float v[16];
  for (int j = 0; j < 16; ++j) v[j] = base[size_t(j) * stride];
  for (int j = 0; j < 16; ++j)
    if (signs[j] < 0) v[j] = -v[j];
  for (int h = 1; h < 16; h <<= 1)
    for (int a = 0; a < 16; a += 2 * h)
      for (int j = a; j < a + h; ++j) {
        const float u = v[j], w = v[j + h];
        v[j] = bl::f_add(u, w);
        v[j + h] = bl::f_sub(u, w);
      }
  for (int j = 0; j < 16; ++j) base[size_t(j) * stride] = bl::f_mul(v[j], 0.25f);
}

// formats' quantize_e5m2_scaled then dequantize_e5m2_scaled of one value.
ATL_EMU_HD float qdq_e5m2_scaled(float x, float inv_scale, float scale) {
  const uint8_t q = fm::e5m2_from_f32(bl::mul_x86(x, inv_scale), fm::Overflow::kSaturate);
  return bl::mul_x86(fm::f32_from_e5m2(q), scale);
}

// The 16x16 tile at (r0, c0) of in (rows, cols): formats' nvfp4_2d_impl with the scale rounded
// away from zero (NvfpScaleRounding::kUp), then dequantize_nvfp4 of its elements, into out
// (same layout; out == in allowed: every element is read before it is written).
ATL_EMU_HD void qdq_nvfp4_tile(const float* in, float* out, int rows, int cols, int r0, int c0,
                               float ts) {
  const int r1 = rows < r0 + 16 ? rows : r0 + 16, c1 = cols < c0 + 16 ? cols : c0 + 16;
  uint32_t amax = 0;
  for (int r = r0; r < r1; ++r)
    for (int c = c0; c < c1; ++c)
      amax = bl::umax(amax, bl::bits_of(in[size_t(r) * cols + c]) & 0x7fffffffu);
  const float want = bl::f_div(bl::from_bits(amax), bl::f_mul(fm::kE2M1Max, ts));
  const auto sc = uint8_t(fm::minifloat_encode<fm::kE4M3Spec, fm::Rounding::kAwayFromZero>(want));
  const float denom = bl::f_mul(fm::minifloat_decode<fm::kE4M3Spec>(sc), ts);
  const bool nan_tile = amax >= 0x7f800000u;
  const uint8_t scale = nan_tile ? uint8_t(0x7f) : sc;
  const float inv = (denom > 0.0f && !nan_tile) ? bl::f_div(1.0f, denom) : 0.0f;
  const float x = bl::mul_x86(fm::f32_from_e4m3(scale), ts);  // dequantize_nvfp4's factor
  for (int r = r0; r < r1; ++r)
    for (int c = c0; c < c1; ++c) {
      const size_t k = size_t(r) * cols + c;
      const uint8_t q = scale != 0x7f ? fm::e2m1_from_f32(bl::f_mul(in[k], inv)) : uint8_t(0);
      out[k] = bl::mul_x86(fm::f32_from_e2m1(q), x);
    }
}

#undef ATL_EMU_HD

}  // namespace atl::kernels::cuda::emu
