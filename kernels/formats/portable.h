// The block quantizers without their AVX-512 kernels (kernels/formats/avx512.h): the code a
// machine without AVX-512 runs, and the reference the vector kernels are tested against. Each
// gives the same bytes as the public function it mirrors, on every input.
#pragma once

#include <span>

#include "kernels/formats/lowbit.h"
#include "kernels/formats/mx.h"
#include "kernels/formats/nvfp4.h"

namespace atl::kernels::formats {

// quantize_nvfp4 with NvfpScaleRounding::kUp.
void quantize_nvfp4_portable(std::span<const float> in, float tensor_scale,
                             std::span<BlockNvfp4> out);
// quantize_mxfp8, quantize_mxfp4.
void quantize_mxfp8_portable(std::span<const float> in, std::span<BlockMxfp8> out);
void quantize_mxfp4_portable(std::span<const float> in, std::span<BlockMxfp4> out);
// quantize_ternary (B = 32, 64, 128, 256).
template <int B>
void quantize_ternary_portable(std::span<const float> in, std::span<BlockTernary<B>> out);

}  // namespace atl::kernels::formats
