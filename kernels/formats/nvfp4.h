// NVFP4: E2M1 values in blocks of 16 with an E4M3 block scale, and one fp32 scale per tensor.
//   per block: 1 + 8 bytes = 4.5 bits/value; plus 4 bytes per tensor.
// Element j of block b decodes to e2m1(q_j) * e4m3(scale_b) * tensor_scale.
//
// NVIDIA's recipe: tensor_scale = amax / (448 * 6), so that the largest block scale is at most
// E4M3's max; block scale = E4M3(block_amax / (6 * tensor_scale)).
// Rounding of the block scale (NvfpScaleRounding):
//   kUp (default): round the block scale up to the next E4M3 value, so |x| / (scale *
//     tensor_scale) <= 6 and no element is ever clamped; the scale is never zero for a nonzero
//     block.
//   kNearest: round to nearest even (NVIDIA's recipe bit for bit); the block max may then
//     exceed 6 by up to 1/16 and is clamped to 6.
// Decoding is the same either way; the choice only changes which valid encoding is produced.
//
// tensor_scale is computed over finite elements only. A block containing NaN or +-inf gets the
// E4M3 NaN scale (0x7F) and zero elements: every element of the block decodes to NaN.
// An all-zero tensor gets tensor_scale 1. Packing: element 2i low nibble of q[i], 2i+1 high.
// Arrays of n values use ceil(n/16) blocks, the tail zero-padded.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/core/philox.h"

namespace atl::kernels::formats {

inline constexpr int kNvfp4BlockSize = 16;

struct BlockNvfp4 {
  uint8_t scale;  // E4M3, positive
  uint8_t q[8];   // 16 E2M1 codes, low nibble first
};
static_assert(sizeof(BlockNvfp4) == 9, "NVFP4 block must be 9 bytes");

enum class NvfpScaleRounding : uint8_t { kUp, kNearest };

constexpr size_t nvfp4_num_blocks(size_t n) {
  return (n + kNvfp4BlockSize - 1) / kNvfp4BlockSize;
}

// amax(finite |x|) / (448 * 6), or 1 when that is zero or not a normal fp32 number.
float nvfp4_tensor_scale(std::span<const float> in);
// The same from a tensor's amax already at hand.
float nvfp4_tensor_scale(float amax);

// in (n) -> out (ceil(n/16) blocks). Elements round to nearest even.
void quantize_nvfp4(std::span<const float> in, float tensor_scale, std::span<BlockNvfp4> out,
                    NvfpScaleRounding rounding = NvfpScaleRounding::kUp);
// Elements round stochastically; element i draws rng.u32(first_index + i).
void quantize_nvfp4_sr(std::span<const float> in, float tensor_scale, std::span<BlockNvfp4> out,
                       const Philox& rng, uint64_t first_index,
                       NvfpScaleRounding rounding = NvfpScaleRounding::kUp);
// in (ceil(n/16) blocks) -> out (n).
void dequantize_nvfp4(std::span<const BlockNvfp4> in, float tensor_scale, std::span<float> out);

// ---- 16x16 two-dimensional blocks (NVIDIA's NVFP4 training recipe quantizes weights so) ------
// in: a (rows, cols) row-major matrix. One E4M3 scale per 16x16 tile (rows 16i..16i+15, columns
// 16j..16j+15; edge tiles are partial), chosen from the tile's amax by the same rule (and the
// same NvfpScaleRounding) as a 1x16 block, and elements rounded to nearest even. Because the
// scale is shared by the whole tile, the quantized matrix is the same whether its blocks are read
// along rows or along columns: the transpose of quantize_2d(A) equals quantize_2d(Aᵀ) (tested),
// so a GEMM that reduces over either axis sees the same weights.
// Layout of out: the 1x16 layout of each row, rows after each other: row r owns blocks
// [r * nb, (r + 1) * nb) with nb = ceil(cols / 16), each carrying its tile's scale; a row's tail
// is zero-padded. out.size() must be rows * nb. A tile with NaN or +-inf gets the NaN scale.
constexpr size_t nvfp4_2d_num_blocks(size_t rows, size_t cols) {
  return rows * nvfp4_num_blocks(cols);
}
void quantize_nvfp4_2d(std::span<const float> in, size_t rows, size_t cols, float tensor_scale,
                       std::span<BlockNvfp4> out,
                       NvfpScaleRounding rounding = NvfpScaleRounding::kUp);
// Blocks in the layout above -> out (rows, cols) row-major.
void dequantize_nvfp4_2d(std::span<const BlockNvfp4> in, size_t rows, size_t cols,
                         float tensor_scale, std::span<float> out);

}  // namespace atl::kernels::formats
