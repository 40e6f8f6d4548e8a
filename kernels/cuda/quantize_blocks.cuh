// Per-block encoders of the CUDA quantizers, __host__ __device__: the kernels of quantize.cu
// run them on the GPU, and tests/cuda/quantize_host_test.cu runs the very same functions on the
// host against the CPU encoders of kernels/formats (so the block logic is checked bit for bit
// even on a machine without a GPU). Compile with nvcc, --expt-relaxed-constexpr; host code of a
// file including this must not contract floating-point operations (-ffp-contract=off): every
// rounding step here is written out on purpose.
#pragma once

#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/formats/minifloat.h"
#include "kernels/formats/mx.h"
#include "kernels/formats/nvfp4.h"
#include "kernels/formats/scalar.h"

namespace atl::kernels::cuda::blocks {

namespace fm = atl::kernels::formats;

#define ATL_HD __host__ __device__ inline

// ---- exactly rounded float operations (no contraction, no reordering) --------------------------
#if defined(__CUDA_ARCH__)
ATL_HD float f_mul(float a, float b) {
  return __fmul_rn(a, b);
}
ATL_HD float f_add(float a, float b) {
  return __fadd_rn(a, b);
}
ATL_HD float f_sub(float a, float b) {
  return __fsub_rn(a, b);
}
ATL_HD float f_div(float a, float b) {
  return __fdiv_rn(a, b);
}
ATL_HD float f_fma(float a, float b, float c) {
  return __fmaf_rn(a, b, c);
}
ATL_HD uint32_t mulhi(uint32_t a, uint32_t b) {
  return __umulhi(a, b);
}
ATL_HD int clz32(uint32_t a) {
  return __clz(a);
}
#else
ATL_HD float f_mul(float a, float b) {
  return a * b;
}
ATL_HD float f_add(float a, float b) {
  return a + b;
}
ATL_HD float f_sub(float a, float b) {
  return a - b;
}
ATL_HD float f_div(float a, float b) {
  return a / b;
}
ATL_HD float f_fma(float a, float b, float c) {
  return std::fma(a, b, c);
}
ATL_HD uint32_t mulhi(uint32_t a, uint32_t b) {
  return uint32_t((uint64_t(a) * b) >> 32);
}
ATL_HD int clz32(uint32_t a) {
  return __builtin_clz(a);
}
#endif
ATL_HD uint32_t bits_of(float x) {
  return std::bit_cast<uint32_t>(x);
}
ATL_HD float from_bits(uint32_t u) {
  return std::bit_cast<float>(u);
}
ATL_HD bool is_nan(float x) {
  return (bits_of(x) & 0x7fffffffu) > 0x7f800000u;
}
ATL_HD uint32_t umax(uint32_t a, uint32_t b) {
  return a > b ? a : b;
}

// a · b with x86 SSE NaN results (the host's truth): a NaN operand comes back quieted (first
// operand first), and an invalid product (inf · 0) is the x86 default NaN 0xFFC00000. The GPU's
// own NaN is 0x7FFFFFFF, whose sign would change E4M3/E2M1 codes.
ATL_HD float mul_x86(float a, float b) {
  if (is_nan(a)) return from_bits(bits_of(a) | 0x400000u);
  if (is_nan(b)) return from_bits(bits_of(b) | 0x400000u);
  const float p = f_mul(a, b);
  return is_nan(p) ? from_bits(0xffc00000u) : p;
}

// ---- Philox4x32-10, the twin of kernels/core/philox.h
// --------------------------------------------
struct Words {
  uint32_t w[4];
};
ATL_HD Words philox_block(uint64_t key, uint64_t stream, uint64_t index) {
  uint32_t c0 = uint32_t(index), c1 = uint32_t(index >> 32), c2 = uint32_t(stream),
           c3 = uint32_t(stream >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    const uint32_t hi0 = mulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = mulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Words{{c0, c1, c2, c3}};
}
// r[j] = Philox(seed, stream).u32(first + j) for j < count.
ATL_HD void philox_fill(uint64_t seed, uint64_t stream, uint64_t first, uint32_t* r, int count) {
  int j = 0;
  while (j < count) {
    const uint64_t idx = first + uint64_t(j);
    const Words b = philox_block(seed, stream, idx >> 2);
    for (uint64_t q = idx & 3; q < 4 && j < count; ++q, ++j) r[j] = b.w[q];
  }
}

// ---- MX (32 values -> E8M0 scale + E4M3 or packed E2M1 codes) ----------------------------------
// formats::mx_shared_exponent.
ATL_HD int mx_exponent(uint32_t a, int emax, uint32_t max_mant) {
  if (a == 0) return 0;
  int fl;
  uint32_t mant;
  if ((a >> 23) != 0) {
    fl = int(a >> 23) - 127;
    mant = a & 0x7fffffu;
  } else {
    const int lead = 31 - clz32(a);
    fl = lead - 149;
    mant = (a << (23 - lead)) & 0x7fffffu;
  }
  int s = fl - emax;
  if (mant > max_mant) s += 1;
  return s < -127 ? -127 : (s > 127 ? 127 : s);
}
ATL_HD float pow2(int e) {
  return e >= -126 ? from_bits(uint32_t(e + 127) << 23) : from_bits(0x00400000u >> (-127 - e));
}
// v: the block's 32 values (zero-padded); r: 32 random words (stochastic) or nullptr.
// blk: 33 (MXFP8) or 17 (MXFP4) bytes, the layout of formats::BlockMxfp8 / BlockMxfp4.
ATL_HD void encode_mx_block(const float* v, bool fp4, const uint32_t* r, uint8_t* blk) {
  uint32_t amax = 0;
  for (int j = 0; j < 32; ++j) amax = umax(amax, bits_of(v[j]) & 0x7fffffffu);
  float inv;
  if (amax >= 0x7f800000u) {
    blk[0] = fm::kE8M0Nan;
    inv = 0.0f;
  } else {
    const int s = fp4 ? mx_exponent(amax, 2, 0x400000u) : mx_exponent(amax, 8, 0x600000u);
    inv = pow2(-s);
    blk[0] = fm::e8m0_from_exponent(s);
  }
  if (fp4) {
    for (int j = 0; j < 16; ++j) {
      const float x0 = mul_x86(v[2 * j], inv), x1 = mul_x86(v[2 * j + 1], inv);
      const uint8_t c0 = r != nullptr ? fm::e2m1_from_f32_sr(x0, r[2 * j]) : fm::e2m1_from_f32(x0);
      const uint8_t c1 =
          r != nullptr ? fm::e2m1_from_f32_sr(x1, r[2 * j + 1]) : fm::e2m1_from_f32(x1);
      blk[1 + j] = uint8_t(c0 | (c1 << 4));
    }
  } else {
    for (int j = 0; j < 32; ++j) {
      const float x = mul_x86(v[j], inv);
      blk[1 + j] = r != nullptr ? fm::e4m3_from_f32_sr(x, r[j]) : fm::e4m3_from_f32(x);
    }
  }
}

// ---- NVFP4 (16 values -> E4M3 scale + 8 bytes of E2M1 codes)
// ------------------------------------- As kernels/formats/nvfp4.cc: want = amax / (6 · ts), scale
// = E4M3(want) (rounded up or to nearest), inv = 1 / (decode(scale) · ts); a block with inf/NaN
// gets scale 0x7F and zero codes.
ATL_HD void encode_nvfp4_block(const float* v, float ts, bool round_up, const uint32_t* r,
                               uint8_t* blk) {
  uint32_t amax = 0;
  for (int j = 0; j < 16; ++j) amax = umax(amax, bits_of(v[j]) & 0x7fffffffu);
  const float want = f_div(from_bits(amax), f_mul(fm::kE2M1Max, ts));
  const uint8_t sc =
      round_up ? uint8_t(fm::minifloat_encode<fm::kE4M3Spec, fm::Rounding::kAwayFromZero>(want))
               : uint8_t(fm::minifloat_encode<fm::kE4M3Spec, fm::Rounding::kNearestEven>(want));
  if (amax >= 0x7f800000u) {
    blk[0] = 0x7f;
    for (int j = 0; j < 8; ++j) blk[1 + j] = 0;
    return;
  }
  blk[0] = sc;
  const float denom = f_mul(fm::minifloat_decode<fm::kE4M3Spec>(sc), ts);
  const float inv = denom > 0.0f ? f_div(1.0f, denom) : 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float x0 = f_mul(v[2 * j], inv), x1 = f_mul(v[2 * j + 1], inv);
    const uint8_t c0 = r != nullptr ? fm::e2m1_from_f32_sr(x0, r[2 * j]) : fm::e2m1_from_f32(x0);
    const uint8_t c1 =
        r != nullptr ? fm::e2m1_from_f32_sr(x1, r[2 * j + 1]) : fm::e2m1_from_f32(x1);
    blk[1 + j] = uint8_t(c0 | (c1 << 4));
  }
}

// ---- int8 / int4 blocks (B values -> fp32 scale + codes) -------------------------------------
// Matches kernels/formats/int_block.cc, which writes its fused steps as explicit std::fma (so its
// codes do not depend on the host compiler's contraction): round-to-nearest is
// fma(x, inv, 1.5·2^23) − 1.5·2^23 and the stochastic value is fma(x, inv, u), u = (r >> 8)/2^24.
// Scale of the block from its max |bits| (amax); sets inv (0: codes are 0).
ATL_HD float int_block_scale(uint32_t amax, float qmax, float& inv) {
  if (amax >= 0x7f800000u) {
    inv = 0.0f;
    return from_bits(0x7fc00000u);
  }
  const float a = from_bits(amax);
  const float i = f_div(qmax, a);
  if (!(i <= 3.0e38f)) {
    inv = 0.0f;
    return 0.0f;
  }
  inv = i;
  return f_div(a, qmax);
}
// Code of value x (r: its random word when stochastic).
ATL_HD int int_code(float x, float inv, float qmax, bool sr, uint32_t r) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  if (inv == 0.0f) return 0;
  float f;
  if (sr) {
    const float y = f_fma(x, inv, f_mul(float(r >> 8), 1.0f / 16777216.0f));
    f = f_sub(f_add(y, kMagic), kMagic);
    if (f > y) f = f_sub(f, 1.0f);
  } else {
    f = f_sub(f_fma(x, inv, kMagic), kMagic);
  }
  f = f < -qmax ? -qmax : (f > qmax ? qmax : f);
  return int(f);
}

#undef ATL_HD

}  // namespace atl::kernels::cuda::blocks
