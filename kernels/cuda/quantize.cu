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
#include "kernels/cuda/quantize_blocks.cuh"
#include "kernels/formats/int_block.h"
#include "kernels/formats/scalar.h"

namespace atl::kernels::cuda {
namespace {

namespace fm = atl::kernels::formats;
using detail::blocks_for;
using detail::launch_status;

using blocks::mul_x86;
using blocks::philox_fill;

// ---- elementwise formats (16 values per thread) ----------------------------------------
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
    if (p.sr) philox_fill(p.key.seed, p.key.stream, p.key.first_index + i0, r, cnt);
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

// ---- MX (one thread per 32-value block) ---------------------------------------------------
// Loads B values from i0 (zero-padded past n): 16-byte loads when aligned and full.
__device__ inline void load_block(const float* in, size_t n, size_t i0, int B, float* v, bool vec) {
  if (vec && i0 + B <= n) {
    const float4* src = reinterpret_cast<const float4*>(in + i0);
    for (int q = 0; q < B / 4; ++q) {
      const float4 f = src[q];
      v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
    }
  } else {
    for (int j = 0; j < B; ++j) v[j] = i0 + j < n ? in[i0 + j] : 0.0f;
  }
}

// fp4: MXFP4 (17-byte blocks) else MXFP8 (33 bytes).
__global__ void quantize_mx_kernel(const float* in, size_t n, uint8_t* out, size_t nblocks,
                                   bool fp4, bool sr, SrKey key, bool vec) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t bytes = fp4 ? sizeof(fm::BlockMxfp4) : sizeof(fm::BlockMxfp8);
  for (size_t b = size_t(blockIdx.x) * blockDim.x + threadIdx.x; b < nblocks; b += stride) {
    float v[32];
    load_block(in, n, b * 32, 32, v, vec);
    uint32_t r[32];
    if (sr) philox_fill(key.seed, key.stream, key.first_index + b * 32, r, 32);
    blocks::encode_mx_block(v, fp4, sr ? r : nullptr, out + b * bytes);
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

// ---- NVFP4 (one thread per 16-value block) ----------------------------------------------
__global__ void quantize_nvfp4_kernel(const float* in, size_t n, float ts, uint8_t* out,
                                      size_t nblocks, bool round_up, bool sr, SrKey key, bool vec) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t b = size_t(blockIdx.x) * blockDim.x + threadIdx.x; b < nblocks; b += stride) {
    float v[16];
    load_block(in, n, b * 16, 16, v, vec);
    uint32_t r[16];
    if (sr) philox_fill(key.seed, key.stream, key.first_index + b * 16, r, 16);
    blocks::encode_nvfp4_block(v, ts, round_up, sr ? r : nullptr, out + b * sizeof(fm::BlockNvfp4));
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

// ---- int8 / int4 blocks (one thread per block) ------------------------------------------
// A pass for the block max (16-byte loads when aligned), then the codes 32 values at a time
// (the random words of 32 values stay in registers). Arithmetic: see quantize_blocks.cuh.
__global__ void quantize_int_kernel(const float* in, size_t n, uint8_t* out, size_t nblocks,
                                    int bits, int B, bool sr, SrKey key, bool vec) {
  const float qmax = bits == 8 ? 127.0f : 7.0f;
  const size_t bytes = 4 + size_t(bits == 8 ? B : B / 2);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t b = size_t(blockIdx.x) * blockDim.x + threadIdx.x; b < nblocks; b += stride) {
    const size_t i0 = b * size_t(B);
    uint32_t amax = 0;
    for (int j0 = 0; j0 < B; j0 += 32) {
      float v[32];
      load_block(in, n, i0 + j0, 32, v, vec);
      for (int j = 0; j < 32; ++j) amax = max(amax, __float_as_uint(v[j]) & 0x7fffffffu);
    }
    uint8_t* blk = out + b * bytes;
    float inv;
    const float scale = blocks::int_block_scale(amax, qmax, inv);
    memcpy(blk, &scale, 4);
    for (int j0 = 0; j0 < B; j0 += 32) {
      float v[32];
      load_block(in, n, i0 + j0, 32, v, vec);
      uint32_t r[32] = {};
      if (sr && inv != 0.0f) philox_fill(key.seed, key.stream, key.first_index + i0 + j0, r, 32);
      int c[32];
      for (int j = 0; j < 32; ++j) c[j] = blocks::int_code(v[j], inv, qmax, sr, r[j]);
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
