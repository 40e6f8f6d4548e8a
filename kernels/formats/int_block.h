// Symmetric integer block quantization with a per-block absmax scale (ggml Q8_0 / Q4_0 style,
// but symmetric and with an fp32 scale so tiny pseudo-gradients keep their precision).
//   int8: scale = amax / 127, q in [-127, 127]   (B = 32: 4 + 32 bytes = 9 bits/value)
//   int4: scale = amax / 7,   q in [-7, 7]       (B = 32: 4 + 16 bytes = 5 bits/value)
//   int3: scale = amax / 3,   q in [-3, 3], stored as int4 is (the same blocks, 4 bits a code):
//         a coarser step for an entropy coder behind it (about 2.1 bits a code of normal values
//         at B = 256), which a byte-aligned nibble keeps visible and a 3-bit packing would hide.
// x ≈ q * scale. -128 / -8 are never produced (symmetric range); decoders accept them.
// int4 packing: element 2i in the low nibble of q[i] (two's complement), 2i+1 in the high one.
//
// Block sizes 32, 64, 128 and 256 are instantiated. Arrays of n values use ceil(n/B) blocks, the
// tail zero-padded. A block with NaN or +-inf gets a NaN scale and zero codes (decodes to NaN);
// an all-zero block gets scale 0. A block whose amax is so small that 127/amax overflows fp32
// (amax < ~3.7e-37) is stored as zeros with scale 0.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/core/philox.h"

namespace atl::kernels::formats {

template <int B>
struct BlockQ8 {
  static_assert(B % 4 == 0, "block size keeps the fp32 scale aligned");
  float scale;  // amax / 127
  int8_t q[B];
};
template <int B>
struct BlockQ4 {
  static_assert(B % 8 == 0, "block size keeps the fp32 scale aligned");
  float scale;      // amax / 7
  uint8_t q[B / 2];  // two 4-bit two's-complement codes per byte, low nibble first
};
static_assert(sizeof(BlockQ8<32>) == 36 && sizeof(BlockQ8<64>) == 68);
static_assert(sizeof(BlockQ8<128>) == 132 && sizeof(BlockQ8<256>) == 260);
static_assert(sizeof(BlockQ4<32>) == 20 && sizeof(BlockQ4<64>) == 36);
static_assert(sizeof(BlockQ4<128>) == 68 && sizeof(BlockQ4<256>) == 132);

template <int B>
constexpr size_t int_num_blocks(size_t n) {
  return (n + B - 1) / B;
}
constexpr bool int_block_size_supported(int b) { return b == 32 || b == 64 || b == 128 || b == 256; }

// in (n) -> out (ceil(n/B) blocks), round to nearest even.
template <int B>
void quantize_q8(std::span<const float> in, std::span<BlockQ8<B>> out);
template <int B>
void quantize_q4(std::span<const float> in, std::span<BlockQ4<B>> out);
// int3: codes in [-3, 3] in BlockQ4 (dequantize_q4 reads them).
template <int B>
void quantize_q3(std::span<const float> in, std::span<BlockQ4<B>> out);
// Stochastic: q = floor(x / scale + u), u uniform in [0, 1) from rng.uniform(first_index + i), so
// E[q * scale] = x (clamped at +-127 / +-7 only at the block max, which is exact).
template <int B>
void quantize_q8_sr(std::span<const float> in, std::span<BlockQ8<B>> out, const Philox& rng,
                    uint64_t first_index);
template <int B>
void quantize_q4_sr(std::span<const float> in, std::span<BlockQ4<B>> out, const Philox& rng,
                    uint64_t first_index);
// in (ceil(n/B) blocks) -> out (n).
template <int B>
void dequantize_q8(std::span<const BlockQ8<B>> in, std::span<float> out);
template <int B>
void dequantize_q4(std::span<const BlockQ4<B>> in, std::span<float> out);

}  // namespace atl::kernels::formats
