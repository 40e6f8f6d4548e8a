// Quantize / dequantize kernels for every format of kernels/formats, on device buffers, bit for
// bit the CPU encoders (the device code calls the same constexpr scalar encoders of
// kernels/formats/scalar.h and minifloat.h). Plain C++ header. Sizes are element counts n; block
// outputs hold ceil(n/B) blocks laid out exactly as the CPU structs (BlockMxfp8, BlockQ8<B>, ...).
// Stochastic rounding: element i draws Philox(seed, stream).u32(first_index + i), as on the CPU.
//
// Non-finite inputs: codes and scales equal the CPU's (x86 NaN-sign rules are reproduced where a
// code depends on them), except the int8/int4 codes of a non-finite block, which are 0 as
// int_block.h documents (the CPU leaves them to the float->int conversion of the host).
// Decoded NaNs are NaN, but their payload bits may differ from the host's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/core/status.h"
#include "kernels/cuda/runtime.h"
#include "kernels/formats/convert.h"
#include "kernels/formats/minifloat.h"
#include "kernels/formats/mx.h"
#include "kernels/formats/nvfp4.h"

namespace atl::kernels::cuda {

using formats::Overflow;

// Elementwise formats.
enum class ScalarFormat : uint8_t { kBf16, kFp16, kE4M3, kE5M2 };
size_t scalar_format_bytes(ScalarFormat f);  // 2 or 1

// Key of the stochastic rounding stream (formats' Philox(seed, stream)).
struct SrKey {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t first_index = 0;
};

// in (n) fp32 -> out (n) codes (uint16_t for bf16/fp16, uint8_t for FP8). ov is ignored for bf16
// (IEEE, like the CPU's quantize_bf16). sr == nullptr: round to nearest even.
Status quantize(Context& ctx, ScalarFormat f, const float* in, void* out, size_t n, Overflow ov,
                const SrKey* sr = nullptr);
Status dequantize(Context& ctx, ScalarFormat f, const void* in, float* out, size_t n);
// Scaled E4M3 (per-tensor scale): out = E4M3(in · inv_scale) saturating; decode code · scale.
Status quantize_e4m3_scaled(Context& ctx, const float* in, float inv_scale, uint8_t* out, size_t n);
Status dequantize_e4m3_scaled(Context& ctx, const uint8_t* in, float scale, float* out, size_t n);

// Largest finite |x| and whether all are finite (as formats::abs_max). Synchronizes.
StatusOr<formats::AbsMax> abs_max(Context& ctx, const float* in, size_t n);

// MX (32-element blocks, E8M0 scales).
Status quantize_mxfp8(Context& ctx, const float* in, size_t n, formats::BlockMxfp8* out,
                      const SrKey* sr = nullptr);
Status quantize_mxfp4(Context& ctx, const float* in, size_t n, formats::BlockMxfp4* out,
                      const SrKey* sr = nullptr);
Status dequantize_mxfp8(Context& ctx, const formats::BlockMxfp8* in, float* out, size_t n);
Status dequantize_mxfp4(Context& ctx, const formats::BlockMxfp4* in, float* out, size_t n);

// NVFP4 (16-element blocks, E4M3 scales, one fp32 tensor scale given by the caller, e.g. from
// nvfp4_tensor_scale).
StatusOr<float> nvfp4_tensor_scale(Context& ctx, const float* in, size_t n);  // synchronizes
Status quantize_nvfp4(Context& ctx, const float* in, size_t n, float tensor_scale,
                      formats::BlockNvfp4* out,
                      formats::NvfpScaleRounding rounding = formats::NvfpScaleRounding::kUp,
                      const SrKey* sr = nullptr);
Status dequantize_nvfp4(Context& ctx, const formats::BlockNvfp4* in, float tensor_scale, float* out,
                        size_t n);

// Symmetric int8 / int4 blocks (BlockQ8<B> / BlockQ4<B>), B in {32, 64, 128, 256}. `out` points
// at ceil(n/B) blocks of the CPU layout (4-byte fp32 scale, then the codes).
Status quantize_int(Context& ctx, int bits, int B, const float* in, size_t n, void* out,
                    const SrKey* sr = nullptr);
Status dequantize_int(Context& ctx, int bits, int B, const void* in, float* out, size_t n);

}  // namespace atl::kernels::cuda
