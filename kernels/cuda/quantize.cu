// Quantize / dequantize kernels (see quantize.h). The element encoders are the CPU's own
// constexpr functions (kernels/formats/scalar.h, minifloat.h), compiled for the device with
// --expt-relaxed-constexpr, so a code can only differ from the CPU's through the float
// arithmetic around them, which is written out here operation by operation (_rn intrinsics:
// nvcc may not contract or reorder it).
//
// Work split: elementwise formats give each thread 16 consecutive values (four 16-byte loads,
// one or two 16-byte stores when the pointers allow; a scalar path otherwise and for the tail).
// Block formats give each thread one block (16-byte loads of its 64..1024 input bytes; the block
// structs are 9, 17, 33, ... bytes, so their stores are bytewise). Dequantizers give each thread
// one output value.
#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quantize.h"
#include "kernels/formats/int_block.h"
#include "kernels/formats/scalar.h"

namespace atl::kernels::cuda {
namespace {

namespace fm = atl::kernels::formats;
using detail::blocks_for;
using detail::launch_status;

// ---- Philox4x32-10, the device twin of kernels/core/philox.h (tests compare the two) ---------
__device__ inline uint4 philox_block(uint64_t key, uint64_t stream, uint64_t index) {
  uint32_t c0 = uint32_t(index), c1 = uint32_t(index >> 32), c2 = uint32_t(stream),
           c3 = uint32_t(stream >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return make_uint4(c0, c1, c2, c3);
}
// Random words for elements first..first+count-1 of the stream (count <= 256).
__device__ inline void philox_fill(const SrKey& k, uint64_t first, uint32_t* r, int count) {
  int j = 0;
  while (j < count) {
    const uint64_t idx = first + j;
    const uint4 b = philox_block(k.seed, k.stream, idx >> 2);
    const uint32_t w[4] = {b.x, b.y, b.z, b.w};
    for (uint64_t q = idx & 3; q < 4 && j < count; ++q, ++j) r[j] = w[q];
  }
}

// a · b with x86 SSE NaN results (the host's truth): a NaN operand comes back quieted (first
// operand first), and an invalid product (inf · 0) is the x86 default NaN 0xFFC00000. The GPU's
// own NaN is 0x7FFFFFFF, whose sign would change E4M3/E2M1 codes.
__device__ inline float mul_x86(float a, float b) {
  if (isnan(a)) return __uint_as_float(__float_as_uint(a) | 0x400000u);
  if (isnan(b)) return __uint_as_float(__float_as_uint(b) | 0x400000u);
  const float p = __fmul_rn(a, b);
  return isnan(p) ? __uint_as_float(0xffc00000u) : p;
}

// ---- elementwise formats
// -------------------------------------------------------------------------
struct ElemParams {
  Overflow ov;
  bool sr;
  SrKey key;
  bool scaled;  // E4M3 with a per-tensor inverse scale
  float inv_scale;
};

template <ScalarFormat F>
__device__ inline uint32_t encode(float x, const ElemParams& p, uint32_t r) {
  if constexpr (F == ScalarFormat::kBf16) {
    return p.sr ? fm::bf16_from_f32_sr(x, r) : fm::bf16_from_f32(x);
  } else if constexpr (F == ScalarFormat::kFp16) {
    return p.sr ? fm::fp16_from_f32_sr(x, r, p.ov) : fm::fp16_from_f32(x, p.ov);
  } else if constexpr (F == ScalarFormat::kE4M3) {
    if (p.scaled) x = mul_x86(x, p.inv_scale);
    return p.sr ? fm::e4m3_from_f32_sr(x, r, p.ov) : fm::e4m3_from_f32(x, p.ov);
  } else {
    return p.sr ? fm::e5m2_from_f32_sr(x, r, p.ov) : fm::e5m2_from_f32(x, p.ov);
  }
}
template <ScalarFormat F>
__device__ inline float decode(uint32_t c) {
  if constexpr (F == ScalarFormat::kBf16)
    return fm::f32_from_bf16(uint16_t(c));
  else if constexpr (F == ScalarFormat::kFp16)
    return fm::f32_from_fp16(uint16_t(c));
  else if constexpr (F == ScalarFormat::kE4M3)
    return fm::f32_from_e4m3(uint8_t(c));
  else
    return fm::f32_from_e5m2(uint8_t(c));
}
template <ScalarFormat F>
using CodeT =
    std::conditional_t<F == ScalarFormat::kBf16 || F == ScalarFormat::kFp16, uint16_t, uint8_t>;

constexpr int kGroup = 16;  // values per thread

template <ScalarFormat F>
__global__ void quantize_elem_kernel(const float* in, CodeT<F>* out, size_t n, ElemParams p,
                                     bool vec) {
  const size_t groups = (n + kGroup - 1) / kGroup;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t g = size_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const size_t i0 = g * kGroup;
    const int cnt = int(min(size_t(kGroup), n - i0));
    float v[kGroup];
    if (vec && cnt == kGroup) {
      const float4* src = reinterpret_cast<const float4*>(in + i0);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 f = src[q];
        v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
      }
    } else {
      for (int j = 0; j < cnt; ++j) v[j] = in[i0 + j];
    }
    uint32_t r[kGroup] = {};
    if (p.sr) philox_fill(p.key, p.key.first_index + i0, r, cnt);
    alignas(16) CodeT<F> c[kGroup];
#pragma unroll
    for (int j = 0; j < kGroup; ++j) c[j] = CodeT<F>(encode<F>(v[j], p, r[j]));
    if (vec && cnt == kGroup) {
      const uint4* s = reinterpret_cast<const uint4*>(c);
      uint4* dst = reinterpret_cast<uint4*>(out + i0);
#pragma unroll
      for (int q = 0; q < int(sizeof(c) / 16); ++q) dst[q] = s[q];
    } else {
      for (int j = 0; j < cnt; ++j) out[i0 + j] = c[j];
    }
  }
}

template <ScalarFormat F>
__global__ void dequantize_elem_kernel(const CodeT<F>* in, float* out, size_t n, bool scaled,
                                       float scale) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float d = decode<F>(in[i]);
    out[i] = scaled ? __fmul_rn(d, scale) : d;
  }
}

// ---- abs max (integer max over |bits|: exact and order-independent) -----------------------------
__global__ void abs_max_kernel(const float* in, size_t n, unsigned* result) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  unsigned any = 0, fin = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const unsigned a = __float_as_uint(in[i]) & 0x7fffffffu;
    any = max(any, a);
    fin = max(fin, a < 0x7f800000u ? a : 0u);
  }
  any = __reduce_max_sync(0xffffffffu, any);
  fin = __reduce_max_sync(0xffffffffu, fin);
  if ((threadIdx.x & 31) == 0) {
    atomicMax(result, any);
    atomicMax(result + 1, fin);
  }
}

// ---- MX
// ------------------------------------------------------------------------------------------ Loads
// the 32 values of block b (zero-padded past n), returns max |bits|.
__device__ inline uint32_t load_block32(const float* in, size_t n, size_t b, float (&v)[32],
                                        bool vec) {
  const size_t i0 = b * 32;
  if (vec && i0 + 32 <= n) {
    const float4* src = reinterpret_cast<const float4*>(in + i0);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const float4 f = src[q];
      v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
    }
  } else {
    for (int j = 0; j < 32; ++j) v[j] = i0 + j < n ? in[i0 + j] : 0.0f;
  }
  uint32_t m = 0;
#pragma unroll
  for (int j = 0; j < 32; ++j) m = max(m, __float_as_uint(v[j]) & 0x7fffffffu);
  return m;
}

// formats::mx_shared_exponent, on the device.
__device__ inline int mx_exponent(uint32_t a, int emax, uint32_t max_mant) {
  if (a == 0) return 0;
  int fl;
  uint32_t mant;
  if ((a >> 23) != 0) {
    fl = int(a >> 23) - 127;
    mant = a & 0x7fffffu;
  } else {
    const int lead = 31 - __clz(a);
    fl = lead - 149;
    mant = (a << (23 - lead)) & 0x7fffffu;
  }
  int s = fl - emax;
  if (mant > max_mant) s += 1;
  return min(max(s, -127), 127);
}
__device__ inline float pow2(int e) {
  return e >= -126 ? __uint_as_float(uint32_t(e + 127) << 23)
                   : __uint_as_float(0x00400000u >> (-127 - e));
}

// grid over blocks, one thread per block. fp4: MXFP4 (17-byte blocks) else MXFP8 (33 bytes).
__global__ void quantize_mx_kernel(const float* in, size_t n, uint8_t* out, size_t nblocks,
                                   bool fp4, bool sr, SrKey key, bool vec) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t b = size_t(blockIdx.x) * blockDim.x + threadIdx.x; b < nblocks; b += stride) {
    float v[32];
    const uint32_t amax = load_block32(in, n, b, v, vec);
    uint8_t scale;
    float inv;
    if (amax >= 0x7f800000u) {
      scale = fm::kE8M0Nan;
      inv = 0.0f;
    } else {
      const int s = fp4 ? mx_exponent(amax, 2, 0x400000u) : mx_exponent(amax, 8, 0x600000u);
      inv = pow2(-s);
      scale = fm::e8m0_from_exponent(s);
    }
    uint32_t r[32] = {};
    if (sr) philox_fill(key, key.first_index + b * 32, r, 32);
    uint8_t* blk = out + b * (fp4 ? sizeof(fm::BlockMxfp4) : sizeof(fm::BlockMxfp8));
    blk[0] = scale;
    if (fp4) {
      for (int j = 0; j < 16; ++j) {
        const float x0 = mul_x86(v[2 * j], inv), x1 = mul_x86(v[2 * j + 1], inv);
        const uint8_t c0 = sr ? fm::e2m1_from_f32_sr(x0, r[2 * j]) : fm::e2m1_from_f32(x0);
        const uint8_t c1 = sr ? fm::e2m1_from_f32_sr(x1, r[2 * j + 1]) : fm::e2m1_from_f32(x1);
        blk[1 + j] = uint8_t(c0 | (c1 << 4));
      }
    } else {
      for (int j = 0; j < 32; ++j) {
        const float x = mul_x86(v[j], inv);
        blk[1 + j] = sr ? fm::e4m3_from_f32_sr(x, r[j]) : fm::e4m3_from_f32(x);
      }
    }
  }
}

__global__ void dequantize_mx_kernel(const uint8_t* in, float* out, size_t n, bool fp4) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t bytes = fp4 ? sizeof(fm::BlockMxfp4) : sizeof(fm::BlockMxfp8);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint8_t* blk = in + (i / 32) * bytes;
    const int j = int(i % 32);
    const float x = fm::f32_from_e8m0(blk[0]);
    const float e = fp4 ? fm::f32_from_e2m1(uint8_t(blk[1 + j / 2] >> (4 * (j & 1))))
                        : fm::f32_from_e4m3(blk[1 + j]);
    out[i] = __fmul_rn(e, x);
  }
}

// ---- NVFP4
// ---------------------------------------------------------------------------------------
__global__ void quantize_nvfp4_kernel(const float* in, size_t n, float ts, uint8_t* out,
                                      size_t nblocks, bool round_up, bool sr, SrKey key, bool vec) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t b = size_t(blockIdx.x) * blockDim.x + threadIdx.x; b < nblocks; b += stride) {
    const size_t i0 = b * 16;
    float v[16];
    if (vec && i0 + 16 <= n) {
      const float4* src = reinterpret_cast<const float4*>(in + i0);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 f = src[q];
        v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
      }
    } else {
      for (int j = 0; j < 16; ++j) v[j] = i0 + j < n ? in[i0 + j] : 0.0f;
    }
    uint32_t amax = 0;
#pragma unroll
    for (int j = 0; j < 16; ++j) amax = max(amax, __float_as_uint(v[j]) & 0x7fffffffu);
    // As kernels/formats/nvfp4.cc: want = amax / (6 · ts), scale = E4M3(want) (up or nearest),
    // inv = 1 / (decode(scale) · ts).
    const float want = __fdiv_rn(__uint_as_float(amax), __fmul_rn(fm::kE2M1Max, ts));
    const uint8_t sc =
        round_up ? uint8_t(fm::minifloat_encode<fm::kE4M3Spec, fm::Rounding::kAwayFromZero>(want))
                 : uint8_t(fm::minifloat_encode<fm::kE4M3Spec, fm::Rounding::kNearestEven>(want));
    const float denom = __fmul_rn(fm::minifloat_decode<fm::kE4M3Spec>(sc), ts);
    const bool nan_block = amax >= 0x7f800000u;
    uint8_t* blk = out + b * sizeof(fm::BlockNvfp4);
    blk[0] = nan_block ? uint8_t(0x7f) : sc;
    if (nan_block) {
      for (int j = 0; j < 8; ++j) blk[1 + j] = 0;
      continue;
    }
    const float inv = denom > 0.0f ? __fdiv_rn(1.0f, denom) : 0.0f;
    uint32_t r[16] = {};
    if (sr) philox_fill(key, key.first_index + i0, r, 16);
    for (int j = 0; j < 8; ++j) {
      const float x0 = __fmul_rn(v[2 * j], inv), x1 = __fmul_rn(v[2 * j + 1], inv);
      const uint8_t c0 = sr ? fm::e2m1_from_f32_sr(x0, r[2 * j]) : fm::e2m1_from_f32(x0);
      const uint8_t c1 = sr ? fm::e2m1_from_f32_sr(x1, r[2 * j + 1]) : fm::e2m1_from_f32(x1);
      blk[1 + j] = uint8_t(c0 | (c1 << 4));
    }
  }
}

__global__ void dequantize_nvfp4_kernel(const uint8_t* in, float ts, float* out, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint8_t* blk = in + (i / 16) * sizeof(fm::BlockNvfp4);
    const int j = int(i % 16);
    const float x = __fmul_rn(fm::f32_from_e4m3(blk[0]), ts);
    out[i] = __fmul_rn(fm::f32_from_e2m1(uint8_t(blk[1 + j / 2] >> (4 * (j & 1)))), x);
  }
}

// ---- int8 / int4 blocks
// -------------------------------------------------------------------------- Matches
// kernels/formats/int_block.cc as the host compiler builds it with FMA contraction
// (-march=native on x86-64 with FMA, the default build): round-to-nearest is
// fma(x, inv, 1.5·2^23) − 1.5·2^23 and the stochastic value is fma(x, inv, u) with u = r/2^24.
__global__ void quantize_int_kernel(const float* in, size_t n, uint8_t* out, size_t nblocks,
                                    int bits, int B, bool sr, SrKey key, bool vec) {
  constexpr float kMagic = 12582912.0f;
  const float qmax = bits == 8 ? 127.0f : 7.0f;
  const size_t bytes = 4 + size_t(bits == 8 ? B : B / 2);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t b = size_t(blockIdx.x) * blockDim.x + threadIdx.x; b < nblocks; b += stride) {
    const size_t i0 = b * size_t(B);
    const bool full = vec && i0 + B <= n;
    auto load = [&](int j) { return i0 + j < n ? in[i0 + j] : 0.0f; };
    uint32_t amax = 0;
    if (full) {
      const float4* src = reinterpret_cast<const float4*>(in + i0);
      for (int q = 0; q < B / 4; ++q) {
        const float4 f = src[q];
        amax = max(
            amax, max(max(__float_as_uint(f.x) & 0x7fffffffu, __float_as_uint(f.y) & 0x7fffffffu),
                      max(__float_as_uint(f.z) & 0x7fffffffu, __float_as_uint(f.w) & 0x7fffffffu)));
      }
    } else {
      for (int j = 0; j < B; ++j) amax = max(amax, __float_as_uint(load(j)) & 0x7fffffffu);
    }
    uint8_t* blk = out + b * bytes;
    float scale, inv;
    if (amax >= 0x7f800000u) {
      scale = __uint_as_float(0x7fc00000u);
      inv = 0.0f;
    } else {
      const float a = __uint_as_float(amax);
      const float i = __fdiv_rn(qmax, a);
      if (!(i <= 3.0e38f)) {
        scale = 0.0f;
        inv = 0.0f;
      } else {
        scale = __fdiv_rn(a, qmax);
        inv = i;
      }
    }
    memcpy(blk, &scale, 4);
    const bool zero = inv == 0.0f;        // non-finite or all-zero / tiny block: codes 0
    for (int j0 = 0; j0 < B; j0 += 32) {  // 32 values at a time keeps the random words in registers
      uint32_t r[32] = {};
      if (sr && !zero) philox_fill(key, key.first_index + i0 + j0, r, 32);
      int c[32];
      for (int j = 0; j < 32; ++j) {
        const float x = load(j0 + j);
        float f;
        if (sr) {
          const float y = __fmaf_rn(x, inv, __fmul_rn(float(r[j] >> 8), 1.0f / 16777216.0f));
          f = __fsub_rn(__fadd_rn(y, kMagic), kMagic);
          f = f > y ? __fsub_rn(f, 1.0f) : f;
        } else {
          f = __fsub_rn(__fmaf_rn(x, inv, kMagic), kMagic);
        }
        c[j] = zero ? 0 : int(fminf(fmaxf(f, -qmax), qmax));
      }
      if (bits == 8) {
        for (int j = 0; j < 32; ++j) blk[4 + j0 + j] = uint8_t(int8_t(c[j]));
      } else {
        for (int j = 0; j < 16; ++j) {
          blk[4 + j0 / 2 + j] = uint8_t((c[2 * j] & 0xf) | ((c[2 * j + 1] & 0xf) << 4));
        }
      }
    }
  }
}

__global__ void dequantize_int_kernel(const uint8_t* in, float* out, size_t n, int bits, int B) {
  const size_t bytes = 4 + size_t(bits == 8 ? B : B / 2);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint8_t* blk = in + (i / B) * bytes;
    const int j = int(i % B);
    float s;
    memcpy(&s, blk, 4);
    int q;
    if (bits == 8) {
      q = int8_t(blk[4 + j]);
    } else {
      const uint8_t byte = blk[4 + j / 2];
      q = (j & 1) ? int(int8_t(byte) >> 4) : int(int8_t(uint8_t(byte << 4)) >> 4);
    }
    out[i] = __fmul_rn(float(q), s);
  }
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace

size_t scalar_format_bytes(ScalarFormat f) {
  return f == ScalarFormat::kBf16 || f == ScalarFormat::kFp16 ? 2 : 1;
}

template <ScalarFormat F>
static Status launch_quantize(Context& ctx, const float* in, void* out, size_t n,
                              const ElemParams& p) {
  const bool vec = aligned16(in) && aligned16(out);
  quantize_elem_kernel<F><<<blocks_for((n + kGroup - 1) / kGroup, 256), 256, 0, ctx.stream()>>>(
      in, static_cast<CodeT<F>*>(out), n, p, vec);
  return launch_status("quantize_elem_kernel");
}

Status quantize(Context& ctx, ScalarFormat f, const float* in, void* out, size_t n, Overflow ov,
                const SrKey* sr) {
  if (n == 0) return Status::Ok();
  ElemParams p{ov, sr != nullptr, sr != nullptr ? *sr : SrKey{}, false, 1.0f};
  switch (f) {
    case ScalarFormat::kBf16:
      return launch_quantize<ScalarFormat::kBf16>(ctx, in, out, n, p);
    case ScalarFormat::kFp16:
      return launch_quantize<ScalarFormat::kFp16>(ctx, in, out, n, p);
    case ScalarFormat::kE4M3:
      return launch_quantize<ScalarFormat::kE4M3>(ctx, in, out, n, p);
    case ScalarFormat::kE5M2:
      return launch_quantize<ScalarFormat::kE5M2>(ctx, in, out, n, p);
  }
  return InvalidArgument("quantize: unknown format");
}

template <ScalarFormat F>
static Status launch_dequantize(Context& ctx, const void* in, float* out, size_t n, bool scaled,
                                float scale) {
  dequantize_elem_kernel<F><<<blocks_for(n, 256), 256, 0, ctx.stream()>>>(
      static_cast<const CodeT<F>*>(in), out, n, scaled, scale);
  return launch_status("dequantize_elem_kernel");
}

Status dequantize(Context& ctx, ScalarFormat f, const void* in, float* out, size_t n) {
  if (n == 0) return Status::Ok();
  switch (f) {
    case ScalarFormat::kBf16:
      return launch_dequantize<ScalarFormat::kBf16>(ctx, in, out, n, false, 1);
    case ScalarFormat::kFp16:
      return launch_dequantize<ScalarFormat::kFp16>(ctx, in, out, n, false, 1);
    case ScalarFormat::kE4M3:
      return launch_dequantize<ScalarFormat::kE4M3>(ctx, in, out, n, false, 1);
    case ScalarFormat::kE5M2:
      return launch_dequantize<ScalarFormat::kE5M2>(ctx, in, out, n, false, 1);
  }
  return InvalidArgument("dequantize: unknown format");
}

Status quantize_e4m3_scaled(Context& ctx, const float* in, float inv_scale, uint8_t* out,
                            size_t n) {
  if (n == 0) return Status::Ok();
  ElemParams p{Overflow::kSaturate, false, SrKey{}, true, inv_scale};
  return launch_quantize<ScalarFormat::kE4M3>(ctx, in, out, n, p);
}
Status dequantize_e4m3_scaled(Context& ctx, const uint8_t* in, float scale, float* out, size_t n) {
  if (n == 0) return Status::Ok();
  return launch_dequantize<ScalarFormat::kE4M3>(ctx, in, out, n, true, scale);
}

StatusOr<formats::AbsMax> abs_max(Context& ctx, const float* in, size_t n) {
  ATOLL_ASSIGN_OR_RETURN(auto res, DeviceBuffer<unsigned>::alloc(2));
  ATOLL_CUDA_CHECK(cudaMemsetAsync(res.data(), 0, 2 * sizeof(unsigned), ctx.stream()));
  if (n > 0) {
    abs_max_kernel<<<blocks_for(n, 256, 4096), 256, 0, ctx.stream()>>>(in, n, res.data());
    ATOLL_RETURN_IF_ERROR(launch_status("abs_max_kernel"));
  }
  unsigned h[2] = {0, 0};
  ATOLL_CUDA_CHECK(cudaMemcpyAsync(h, res.data(), sizeof(h), cudaMemcpyDeviceToHost, ctx.stream()));
  ATOLL_RETURN_IF_ERROR(ctx.synchronize());
  formats::AbsMax r;
  r.all_finite = h[0] < 0x7f800000u;
  r.amax = std::bit_cast<float>(r.all_finite ? h[0] : h[1]);
  return r;
}

Status quantize_mxfp8(Context& ctx, const float* in, size_t n, formats::BlockMxfp8* out,
                      const SrKey* sr) {
  const size_t nb = formats::mx_num_blocks(n);
  if (nb == 0) return Status::Ok();
  quantize_mx_kernel<<<blocks_for(nb, 128), 128, 0, ctx.stream()>>>(
      in, n, reinterpret_cast<uint8_t*>(out), nb, false, sr != nullptr,
      sr != nullptr ? *sr : SrKey{}, aligned16(in));
  return launch_status("quantize_mx_kernel");
}
Status quantize_mxfp4(Context& ctx, const float* in, size_t n, formats::BlockMxfp4* out,
                      const SrKey* sr) {
  const size_t nb = formats::mx_num_blocks(n);
  if (nb == 0) return Status::Ok();
  quantize_mx_kernel<<<blocks_for(nb, 128), 128, 0, ctx.stream()>>>(
      in, n, reinterpret_cast<uint8_t*>(out), nb, true, sr != nullptr,
      sr != nullptr ? *sr : SrKey{}, aligned16(in));
  return launch_status("quantize_mx_kernel");
}
Status dequantize_mxfp8(Context& ctx, const formats::BlockMxfp8* in, float* out, size_t n) {
  if (n == 0) return Status::Ok();
  dequantize_mx_kernel<<<blocks_for(n, 256), 256, 0, ctx.stream()>>>(
      reinterpret_cast<const uint8_t*>(in), out, n, false);
  return launch_status("dequantize_mx_kernel");
}
Status dequantize_mxfp4(Context& ctx, const formats::BlockMxfp4* in, float* out, size_t n) {
  if (n == 0) return Status::Ok();
  dequantize_mx_kernel<<<blocks_for(n, 256), 256, 0, ctx.stream()>>>(
      reinterpret_cast<const uint8_t*>(in), out, n, true);
  return launch_status("dequantize_mx_kernel");
}

StatusOr<float> nvfp4_tensor_scale(Context& ctx, const float* in, size_t n) {
  ATOLL_ASSIGN_OR_RETURN(const formats::AbsMax am, abs_max(ctx, in, n));
  const float ts = am.amax / (formats::kE4M3Max * formats::kE2M1Max);  // as nvfp4.cc
  return ts >= FLT_MIN ? ts : 1.0f;
}

Status quantize_nvfp4(Context& ctx, const float* in, size_t n, float tensor_scale,
                      formats::BlockNvfp4* out, formats::NvfpScaleRounding rounding,
                      const SrKey* sr) {
  const size_t nb = formats::nvfp4_num_blocks(n);
  if (nb == 0) return Status::Ok();
  quantize_nvfp4_kernel<<<blocks_for(nb, 128), 128, 0, ctx.stream()>>>(
      in, n, tensor_scale, reinterpret_cast<uint8_t*>(out), nb,
      rounding == formats::NvfpScaleRounding::kUp, sr != nullptr, sr != nullptr ? *sr : SrKey{},
      aligned16(in));
  return launch_status("quantize_nvfp4_kernel");
}
Status dequantize_nvfp4(Context& ctx, const formats::BlockNvfp4* in, float tensor_scale, float* out,
                        size_t n) {
  if (n == 0) return Status::Ok();
  dequantize_nvfp4_kernel<<<blocks_for(n, 256), 256, 0, ctx.stream()>>>(
      reinterpret_cast<const uint8_t*>(in), tensor_scale, out, n);
  return launch_status("dequantize_nvfp4_kernel");
}

static Status check_int(int bits, int B) {
  if ((bits != 8 && bits != 4) || !formats::int_block_size_supported(B)) {
    return InvalidArgument("int blocks: bits must be 8 or 4 and the block size 32, 64, 128 or " +
                           std::string("256 (got bits=") + std::to_string(bits) +
                           " B=" + std::to_string(B) + ")");
  }
  return Status::Ok();
}

Status quantize_int(Context& ctx, int bits, int B, const float* in, size_t n, void* out,
                    const SrKey* sr) {
  ATOLL_RETURN_IF_ERROR(check_int(bits, B));
  const size_t nb = (n + B - 1) / B;
  if (nb == 0) return Status::Ok();
  quantize_int_kernel<<<blocks_for(nb, 128), 128, 0, ctx.stream()>>>(
      in, n, static_cast<uint8_t*>(out), nb, bits, B, sr != nullptr, sr != nullptr ? *sr : SrKey{},
      aligned16(in));
  return launch_status("quantize_int_kernel");
}
Status dequantize_int(Context& ctx, int bits, int B, const void* in, float* out, size_t n) {
  ATOLL_RETURN_IF_ERROR(check_int(bits, B));
  if (n == 0) return Status::Ok();
  dequantize_int_kernel<<<blocks_for(n, 256), 256, 0, ctx.stream()>>>(
      static_cast<const uint8_t*>(in), out, n, bits, B);
  return launch_status("dequantize_int_kernel");
}

}  // namespace atl::kernels::cuda
