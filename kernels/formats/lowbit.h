// Sub-2-bit block formats for pseudo-gradients (1.125 and 1.75 bits a value at B = 128, the only
// dense codes past 16x below fp32): a block of B values is one non-negative bf16 scale s plus a
// code per value.
//   sign:    x ≈ ±s,      s = mean |x| over the block      1 bit/value  (B = 128: 1.125 bits)
//   ternary: x ≈ {-s,0,s}, s = mean |x| over |x| > t,       log2(3) bits, packed 5 per byte
//            t = 0.7 * mean |x| over the block             (B = 128: 1.75 bits)
// mean |x| is the scale that minimizes the squared error for the chosen signs (EF-signSGD,
// 1-bit Adam); ternary's threshold and scale are those of Ternary Weight Networks (Li et al.,
// 2016), a close approximation of the squared-error-optimal ternary quantizer.
//
// The sums run in double, in index order, over the block's real values (a zero-padded tail
// block divides by its real count), and the mean rounds to bf16 (nearest even). There is no
// saturation: the scale comes from the data and the codes are signs, so any finite input with
// mean |x| below bf16's max (3.39e38) encodes without overflow.
//
// Codes: sign: bit j%8 of bits[j/8] (LSB first) is 1 for x < 0 (so +0, -0 and NaN-free zeros
// give +s). Ternary: trit 0 = 0, 1 = +s, 2 = -s; byte i holds values 5i..5i+4 as
// t0 + 3 t1 + 9 t2 + 27 t3 + 81 t4. A byte of 243 or more, or a last byte with a nonzero trit
// beyond B, is not a ternary code: dequantize_ternary reports it. |x| == t goes to 0 (strictly
// greater goes to ±s). A block with NaN or ±inf gets a NaN scale (decodes to NaN); an all-zero
// block gets scale 0 and zero codes.
//
// Block sizes 32, 64, 128 and 256 are instantiated. Arrays of n values use ceil(n/B) blocks.
#pragma once

#include <cstdint>
#include <span>

namespace atl::kernels::formats {

template <int B>
struct BlockSign {
  static_assert(B % 8 == 0);
  uint8_t scale[2];  // bf16 bits of s, little-endian (bytes keep the struct unpadded)
  uint8_t bits[B / 8];
};
template <int B>
struct BlockTernary {
  static constexpr int kBytes = (B + 4) / 5;
  uint8_t scale[2];  // bf16 bits of s, little-endian
  uint8_t trits[kBytes];
};
static_assert(sizeof(BlockSign<32>) == 6 && sizeof(BlockSign<128>) == 18);
static_assert(sizeof(BlockSign<256>) == 34);
static_assert(sizeof(BlockTernary<32>) == 9 && sizeof(BlockTernary<64>) == 15);
static_assert(sizeof(BlockTernary<128>) == 28 && sizeof(BlockTernary<256>) == 54);

template <int B>
constexpr size_t lowbit_num_blocks(size_t n) {
  return (n + B - 1) / B;
}
inline constexpr float kTernaryThreshold = 0.7f;  // t = 0.7 * mean |x|

// in (n) -> out (ceil(n/B) blocks).
template <int B>
void quantize_sign(std::span<const float> in, std::span<BlockSign<B>> out);
template <int B>
void quantize_ternary(std::span<const float> in, std::span<BlockTernary<B>> out);
// in (ceil(n/B) blocks) -> out (n). Returns false (and decodes that block to zeros) when a block
// is not a valid encoding: a scale with its sign bit set (the encoder never writes one) or, for
// ternary, an invalid code byte. Non-finite scales decode to non-finite values for the caller
// to reject.
template <int B>
bool dequantize_sign(std::span<const BlockSign<B>> in, std::span<float> out);
template <int B>
bool dequantize_ternary(std::span<const BlockTernary<B>> in, std::span<float> out);

}  // namespace atl::kernels::formats
