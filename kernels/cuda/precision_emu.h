// Device pieces of the precision recipes' emulation (algorithms/cuda/precision_cuda.h) that the
// quantize kernels of quantize.h do not cover, each bit for bit the host code it mirrors in
// algorithms/model/precision.cc and kernels/formats: a transpose, the 16x16 random Hadamard
// transform of the nvfp4 wgrad inputs, per-tensor-scaled E5M2, and the NVFP4 16x16-tile weight
// quantizer. The last two return the DEQUANTIZED values (what the emulated GEMM multiplies),
// fused: quantize then dequantize in one pass, no code buffer. Plain C++ header.
//
// Conventions as kernels/cuda/ops.h: device pointers, ops enqueue on ctx.stream(), no atomics.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/core/status.h"
#include "kernels/cuda/runtime.h"

namespace atl::kernels::cuda {

// out (cols, rows) = in (rows, cols)ᵀ. in and out must not overlap.
Status transpose(Context& ctx, float* out, const float* in, int rows, int cols);

// The 16 signs (+1 or -1) of the random Hadamard transform.
struct HadamardSigns {
  float s[16];
};
// In place on m (rows, cols): every full group of 16 consecutive rows is replaced by
// H · diag(signs) · group / 4 (H the 16x16 Sylvester matrix), the tail of rows % 16 rows left
// unchanged; per column, the sign flips, four butterfly stages and the final ·0.25 in the order
// of PrecisionGemm::hadamard_rows (same bits).
Status hadamard16_rows(Context& ctx, float* m, int rows, int cols, const HadamardSigns& signs);

// out (n) = decode_E5M2(E5M2(in · inv_scale), saturating) · scale: formats'
// quantize_e5m2_scaled followed by dequantize_e5m2_scaled. in == out is allowed.
Status qdq_e5m2_scaled(Context& ctx, const float* in, float* out, size_t n, float inv_scale,
                       float scale);

// out (rows, cols) = dequantize_nvfp4_2d(quantize_nvfp4_2d(in, tensor_scale)) with the scale
// rounded up (NvfpScaleRounding::kUp, the recipes' choice): one E4M3 scale per 16x16 tile from
// the tile's amax, elements to nearest even. One thread per tile. in == out is allowed.
Status qdq_nvfp4_2d(Context& ctx, const float* in, float* out, int rows, int cols,
                    float tensor_scale);

}  // namespace atl::kernels::cuda
