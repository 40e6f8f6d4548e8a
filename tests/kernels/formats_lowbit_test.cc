// Sub-2-bit block formats (sign, ternary): every code and every non-negative finite bf16 scale
// round-trip (decode∘encode is the identity on representable blocks), scale rounding ties to
// even, the threshold rule, zero / NaN / inf / huge blocks, tails, and rejection of invalid codes.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/core/philox.h"
#include "kernels/formats/lowbit.h"
#include "kernels/formats/scalar.h"

namespace atl::kernels::formats {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

template <typename Block>
uint16_t scale_of(const Block& b) {
  uint16_t h;
  std::memcpy(&h, b.scale, 2);
  return h;
}
template <typename Block>
void set_scale(Block& b, uint16_t h) {
  std::memcpy(b.scale, &h, 2);
}

// Every sign byte at every position pattern, under every non-negative finite bf16 scale:
// decode, encode again, get the same block.
template <int B>
void sign_identity() {
  for (uint32_t h = 0; h < 0x7f80; ++h) {
    BlockSign<B> b{};
    set_scale(b, static_cast<uint16_t>(h));
    for (int i = 0; i < B / 8; ++i) b.bits[i] = static_cast<uint8_t>((h + 37 * i) & 0xff);
    if (h == 0) std::memset(b.bits, 0, sizeof(b.bits));  // s = 0 decodes to +0 / -0; see below
    std::vector<float> y(B);
    ASSERT_TRUE(dequantize_sign<B>(std::span(&b, 1), y));
    BlockSign<B> again{};
    quantize_sign<B>(y, std::span(&again, 1));
    ASSERT_EQ(std::memcmp(&b, &again, sizeof(b)), 0) << "scale code " << h;
  }
  // Every byte value in every byte position (scale 1.5).
  for (int pos = 0; pos < B / 8; ++pos) {
    for (int c = 0; c < 256; ++c) {
      BlockSign<B> b{};
      set_scale(b, bf16_from_f32(1.5f));
      b.bits[pos] = static_cast<uint8_t>(c);
      std::vector<float> y(B);
      ASSERT_TRUE(dequantize_sign<B>(std::span(&b, 1), y));
      for (int j = 0; j < 8; ++j) ASSERT_EQ(y[pos * 8 + j], (c >> j) & 1 ? -1.5f : 1.5f);
      BlockSign<B> again{};
      quantize_sign<B>(y, std::span(&again, 1));
      ASSERT_EQ(std::memcmp(&b, &again, sizeof(b)), 0) << pos << " " << c;
    }
  }
}

template <int B>
void ternary_identity() {
  constexpr int kBytes = BlockTernary<B>::kBytes;
  // Every byte (valid or not) in byte 0, scale 1.5: valid ones decode to their trits and
  // re-encode to the same block; invalid ones (>= 243) are reported.
  for (int c = 0; c < 256; ++c) {
    BlockTernary<B> b{};
    set_scale(b, bf16_from_f32(1.5f));
    b.trits[0] = static_cast<uint8_t>(c);
    b.trits[1] = 1;  // at least one nonzero, so the scale survives even for c = 0
    std::vector<float> y(B);
    const bool ok = dequantize_ternary<B>(std::span(&b, 1), y);
    ASSERT_EQ(ok, c < 243) << c;
    if (!ok) {
      for (float v : y) ASSERT_EQ(v, 0.0f);
      continue;
    }
    int rest = c;
    for (int k = 0; k < 5; ++k, rest /= 3) {
      const float want = rest % 3 == 0 ? 0.0f : rest % 3 == 1 ? 1.5f : -1.5f;
      ASSERT_EQ(y[k], want) << c << " trit " << k;
    }
    BlockTernary<B> again{};
    quantize_ternary<B>(y, std::span(&again, 1));
    ASSERT_EQ(std::memcmp(&b, &again, sizeof(b)), 0) << c;
  }
  // Every non-negative finite scale with a fixed mixed pattern.
  for (uint32_t h = 1; h < 0x7f80; ++h) {
    BlockTernary<B> b{};
    set_scale(b, static_cast<uint16_t>(h));
    for (int i = 0; i < kBytes - 1; ++i) b.trits[i] = static_cast<uint8_t>((h * 7 + 11 * i) % 243);
    b.trits[0] = 2;  // one -s at least
    std::vector<float> y(B);
    ASSERT_TRUE(dequantize_ternary<B>(std::span(&b, 1), y));
    BlockTernary<B> again{};
    quantize_ternary<B>(y, std::span(&again, 1));
    ASSERT_EQ(std::memcmp(&b, &again, sizeof(b)), 0) << "scale code " << h;
  }
  // The last byte holds B - 5 (kBytes - 1) trits; a nonzero trit beyond B is invalid.
  int tail = 1;
  for (int i = 0; i < B - 5 * (kBytes - 1); ++i) tail *= 3;
  BlockTernary<B> b{};
  set_scale(b, bf16_from_f32(1.0f));
  b.trits[kBytes - 1] = static_cast<uint8_t>(tail - 1);
  std::vector<float> y(B);
  EXPECT_TRUE(dequantize_ternary<B>(std::span(&b, 1), y));
  b.trits[kBytes - 1] = static_cast<uint8_t>(tail);
  EXPECT_FALSE(dequantize_ternary<B>(std::span(&b, 1), y));
}

TEST(FormatsLowbit, SignEveryCodeAndScaleRoundTrips) {
  sign_identity<32>();
  sign_identity<64>();
  sign_identity<128>();
  sign_identity<256>();
}

TEST(FormatsLowbit, TernaryEveryCodeAndScaleRoundTrips) {
  ternary_identity<32>();
  ternary_identity<64>();
  ternary_identity<128>();
  ternary_identity<256>();
}

TEST(FormatsLowbit, ScaleIsMeanAbsRoundedToNearestEven) {
  // bf16 keeps 7 mantissa bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 and goes to the even
  // code (1); 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6 and goes to 1 + 2^-6.
  for (float m : {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f}) {
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = j % 3 ? m : -m;
    BlockSign<32> s;
    quantize_sign<32>(x, std::span(&s, 1));
    EXPECT_EQ(f32_from_bf16(scale_of(s)), m == 1.0f + 0x1p-8f ? 1.0f : 1.0f + 0x1p-6f);
    BlockTernary<32> t;
    quantize_ternary<32>(x, std::span(&t, 1));
    EXPECT_EQ(scale_of(t), scale_of(s));
  }
  // Sign: s = mean |x| of the real values (a tail block of 3 divides by 3, not by B).
  const std::vector<float> x = {3.0f, -1.0f, 0.5f, -2.0f, 0.0f, -0.0f, 7.0f, 4.5f};
  std::vector<BlockSign<32>> s(1);
  quantize_sign<32>(std::span(x).first(3), s);
  EXPECT_EQ(f32_from_bf16(scale_of(s[0])), 1.5f);
  EXPECT_EQ(s[0].bits[0], 0b010);
  std::vector<float> y(3);
  ASSERT_TRUE(dequantize_sign<32>(s, y));
  EXPECT_EQ(y, (std::vector<float>{1.5f, -1.5f, 1.5f}));
  // Zeros (either sign) send +s.
  quantize_sign<32>(x, s);
  EXPECT_EQ(s[0].bits[0], 0b00001010);
}

TEST(FormatsLowbit, TernaryThresholdAndScale) {
  // mean |x| = 1 (sum 10 over 10 values), t = 0.7: values above t become ±s with s their mean
  // |x|; 0.69 and smaller become 0.
  const std::vector<float> x = {2.0f, -1.0f, 0.69f, -0.5f, 0.0f, 1.5f, -0.31f, 0.6f, 0.9f, -2.5f};
  std::vector<BlockTernary<32>> t(1);
  quantize_ternary<32>(x, t);
  // Kept: 2, -1, 1.5, 0.9, -2.5; s = 7.9 / 5 = 1.58 -> bf16 1.578125.
  const float s = f32_from_bf16(scale_of(t[0]));
  EXPECT_EQ(s, 1.578125f);
  std::vector<float> y(10);
  ASSERT_TRUE(dequantize_ternary<32>(t, y));
  EXPECT_EQ(y, (std::vector<float>{s, -s, 0, 0, 0, s, 0, 0, s, -s}));
  // With t = 0 (an all-zero block, -0 included) nothing is above the threshold: codes stay 0.
  const std::vector<float> zm = {0.0f, -0.0f, 0.0f};
  quantize_ternary<32>(zm, t);
  for (uint8_t c : t[0].trits) EXPECT_EQ(c, 0);
  // All zero: scale 0, codes 0.
  std::vector<float> z(32, 0.0f);
  quantize_ternary<32>(z, t);
  EXPECT_EQ(scale_of(t[0]), 0);
  for (uint8_t c : t[0].trits) EXPECT_EQ(c, 0);
}

TEST(FormatsLowbit, NonFiniteHugeAndInvalidBlocks) {
  std::vector<float> x(64, 1.0f);
  x[40] = kInf;
  std::vector<BlockSign<32>> s(2);
  std::vector<BlockTernary<32>> t(2);
  quantize_sign<32>(x, s);
  quantize_ternary<32>(x, t);
  std::vector<float> y(64);
  ASSERT_TRUE(dequantize_sign<32>(s, y));
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_TRUE(std::isnan(y[33]));
  ASSERT_TRUE(dequantize_ternary<32>(t, y));
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_TRUE(std::isnan(y[33]));
  // No saturation: the largest inputs the codecs accept (1e38) keep a finite scale (the sums
  // run in double, so 256 of them do not overflow).
  std::vector<float> big(256, 1e38f);
  big[3] = -1e38f;
  std::vector<BlockSign<256>> sb(1);
  std::vector<BlockTernary<256>> tb(1);
  quantize_sign<256>(big, sb);
  quantize_ternary<256>(big, tb);
  std::vector<float> yb(256);
  ASSERT_TRUE(dequantize_sign<256>(sb, yb));
  EXPECT_EQ(yb[3], -f32_from_bf16(bf16_from_f32(1e38f)));
  ASSERT_TRUE(dequantize_ternary<256>(tb, yb));
  EXPECT_EQ(yb[0], f32_from_bf16(bf16_from_f32(1e38f)));
  // A scale with the sign bit set is never written and is rejected (the block decodes to 0).
  set_scale(s[0], 0x8000 | bf16_from_f32(1.0f));
  EXPECT_FALSE(dequantize_sign<32>(s, y));
  EXPECT_EQ(y[0], 0.0f);
  set_scale(t[0], 0x8000);
  EXPECT_FALSE(dequantize_ternary<32>(t, y));
}

// Full blocks are encoded four at a time; the bytes must equal encoding each block on its own.
template <int B>
void groups_match_single_blocks() {
  const size_t n = 9 * B + B / 2;  // two groups of four, one single block, a short tail
  const Philox rng(3, 2);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(rng.normal(i)) * (1 + i / B);
  x[5 * B + 7] = kInf;  // a non-finite block inside a group
  std::vector<BlockSign<B>> s(lowbit_num_blocks<B>(n)), s1(1);
  std::vector<BlockTernary<B>> t(lowbit_num_blocks<B>(n)), t1(1);
  quantize_sign<B>(x, s);
  quantize_ternary<B>(x, t);
  for (size_t b = 0; b < s.size(); ++b) {
    const auto part = std::span(x).subspan(b * B, std::min<size_t>(B, n - b * B));
    quantize_sign<B>(part, s1);
    quantize_ternary<B>(part, t1);
    ASSERT_EQ(std::memcmp(&s[b], &s1[0], sizeof(s1[0])), 0) << "sign block " << b;
    ASSERT_EQ(std::memcmp(&t[b], &t1[0], sizeof(t1[0])), 0) << "ternary block " << b;
  }
}

TEST(FormatsLowbit, GroupedEncodingMatchesSingleBlocks) {
  groups_match_single_blocks<32>();
  groups_match_single_blocks<64>();
  groups_match_single_blocks<128>();
  groups_match_single_blocks<256>();
}

TEST(FormatsLowbit, ErrorOnGaussianBlocks) {
  // Relative squared error on normal data: sign ≈ 1 - 2/π = 0.363; ternary (TWN) ≈ 0.19-0.20.
  const size_t n = 128 * 400;
  const Philox rng(5, 1);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(rng.normal(i)) * 1e-3f;
  std::vector<BlockSign<128>> s(lowbit_num_blocks<128>(n));
  std::vector<BlockTernary<128>> t(lowbit_num_blocks<128>(n));
  quantize_sign<128>(x, s);
  quantize_ternary<128>(x, t);
  std::vector<float> ys(n), yt(n);
  ASSERT_TRUE(dequantize_sign<128>(s, ys));
  ASSERT_TRUE(dequantize_ternary<128>(t, yt));
  double es = 0, et = 0, e = 0;
  for (size_t i = 0; i < n; ++i) {
    es += (ys[i] - x[i]) * double(ys[i] - x[i]);
    et += (yt[i] - x[i]) * double(yt[i] - x[i]);
    e += x[i] * double(x[i]);
    ASSERT_EQ(std::signbit(ys[i]), x[i] < 0) << i;
  }
  EXPECT_NEAR(es / e, 1 - 2 / M_PI, 0.02);
  EXPECT_GT(et / e, 0.17);
  EXPECT_LT(et / e, 0.22);
}

}  // namespace
}  // namespace atl::kernels::formats
