// OCP Microscaling (MX v1.0) block formats: 32 elements share one E8M0 scale X = 2^s.
//   MXFP8 (E4M3 elements): 1 + 32 bytes per block = 8.25 bits/value
//   MXFP4 (E2M1 elements): 1 + 16 bytes per block = 4.25 bits/value
// Element j of a block decodes to decode_elem(q_j) * X.
//
// Scale choice. The spec takes s = floor(log2(amax)) - emax_elem (emax_elem = 8 for E4M3, 2 for
// E2M1) and clamps elements that then exceed the element max (amax/X can reach 1.99 * 2^emax,
// above E4M3's 1.75 * 2^8 and E2M1's 1.5 * 2^2). Atoll adds one when that happens:
//   s = floor(log2(amax)) - emax_elem, plus 1 if amax / 2^s > max_elem,
// i.e. the smallest power of two with amax / X <= max_elem, so no element is ever clamped. The
// comparison is exact (it compares fp32 mantissa fields). s is clamped to [-127, 127]; an
// all-zero block gets X = 1 (code 127).
//
// Non-finite inputs: a block with any NaN or +-inf gets scale code 0xFF (NaN) and zero elements,
// so every element of that block decodes to NaN. Decoders downstream reject or propagate it.
//
// Packing of MXFP4: element 2i in the low nibble of q[i], element 2i+1 in the high nibble.
// Arrays of n values use ceil(n/32) blocks; the tail of the last block is zero-padded, and
// dequantize writes only out.size() values.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/core/philox.h"

namespace atl::kernels::formats {

inline constexpr int kMxBlockSize = 32;

struct BlockMxfp8 {
  uint8_t scale;  // E8M0
  uint8_t q[32];  // E4M3 codes
};
static_assert(sizeof(BlockMxfp8) == 33, "MXFP8 block must be 33 bytes");

struct BlockMxfp4 {
  uint8_t scale;  // E8M0
  uint8_t q[16];  // 32 E2M1 codes, two per byte (low nibble first)
};
static_assert(sizeof(BlockMxfp4) == 17, "MXFP4 block must be 17 bytes");

constexpr size_t mx_num_blocks(size_t n) { return (n + kMxBlockSize - 1) / kMxBlockSize; }

// Unbiased shared exponent s for a block with the given (finite, >= 0) amax, per the rule above.
// elem_emax: exponent of the element format's max (8 for E4M3, 2 for E2M1); elem_max_mant: the
// fp32 mantissa field of that max (0x600000 for 1.75, 0x400000 for 1.5).
int mx_shared_exponent(float amax, int elem_emax, uint32_t elem_max_mant);

// in (n) -> out (ceil(n/32) blocks). Round to nearest even.
void quantize_mxfp8(std::span<const float> in, std::span<BlockMxfp8> out);
void quantize_mxfp4(std::span<const float> in, std::span<BlockMxfp4> out);
// Stochastic rounding of the elements (the scale is chosen as above); element i draws
// rng.u32(first_index + i).
void quantize_mxfp8_sr(std::span<const float> in, std::span<BlockMxfp8> out, const Philox& rng,
                       uint64_t first_index);
void quantize_mxfp4_sr(std::span<const float> in, std::span<BlockMxfp4> out, const Philox& rng,
                       uint64_t first_index);
// in (ceil(n/32) blocks) -> out (n).
void dequantize_mxfp8(std::span<const BlockMxfp8> in, std::span<float> out);
void dequantize_mxfp4(std::span<const BlockMxfp4> in, std::span<float> out);

}  // namespace atl::kernels::formats
