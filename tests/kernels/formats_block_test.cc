// Block formats: MXFP8, MXFP4, NVFP4, int8/int4 absmax blocks. Scale choice, error bounds, no
// clipping from the scale, zero / NaN / inf blocks, tails, stochastic rounding.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <tuple>
#include <limits>
#include <vector>

#include "kernels/core/philox.h"
#include "kernels/formats/int_block.h"
#include "kernels/formats/mx.h"
#include "kernels/formats/nvfp4.h"
#include "kernels/formats/scalar.h"

namespace atl::kernels::formats {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// n values; block b has magnitude 2^(b*7 % 200 - 100) so scales span most of the E8M0 range.
std::vector<float> random_blocks(size_t n, uint64_t seed, int block) {
  const Philox rng(seed, 0);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const int e = static_cast<int>((i / block) * 7 % 200) - 100;
    v[i] = std::ldexp(static_cast<float>(rng.normal(i)), e);
  }
  return v;
}

TEST(FormatsBlock, MxSharedExponentRule) {
  // E4M3 elements (emax 8, max 448 = 1.75 * 2^8).
  EXPECT_EQ(mx_shared_exponent(448.0f, 8, 0x600000), 0);
  EXPECT_EQ(mx_shared_exponent(std::nextafter(448.0f, 1e9f), 8, 0x600000), 1);
  EXPECT_EQ(mx_shared_exponent(256.0f, 8, 0x600000), 0);
  EXPECT_EQ(mx_shared_exponent(std::nextafter(256.0f, 0.0f), 8, 0x600000), 0);  // 511.99 > 448
  EXPECT_EQ(mx_shared_exponent(224.0f, 8, 0x600000), -1);                       // 448 fits
  EXPECT_EQ(mx_shared_exponent(std::nextafter(224.0f, 1e9f), 8, 0x600000), 0);
  // E2M1 elements (emax 2, max 6 = 1.5 * 2^2).
  EXPECT_EQ(mx_shared_exponent(6.0f, 2, 0x400000), 0);
  EXPECT_EQ(mx_shared_exponent(7.0f, 2, 0x400000), 1);
  EXPECT_EQ(mx_shared_exponent(1.0f, 2, 0x400000), -2);
  // Clamped at the E8M0 range; fp32 subnormals.
  EXPECT_EQ(mx_shared_exponent(1e-45f, 2, 0x400000), -127);
  EXPECT_EQ(mx_shared_exponent(std::numeric_limits<float>::max(), 8, 0x600000), 120);
  // Minimality for random amax: amax / 2^s <= max and amax / 2^(s-1) > max.
  const Philox rng(1, 1);
  for (int i = 0; i < 10000; ++i) {
    const float amax = std::ldexp(1.0f + static_cast<float>(rng.uniform(i)), i % 200 - 100);
    for (auto [emax, mant, mx] : {std::tuple{8, 0x600000u, 448.0}, std::tuple{2, 0x400000u, 6.0}}) {
      const int s = mx_shared_exponent(amax, emax, mant);
      ASSERT_LE(std::ldexp(static_cast<double>(amax), -s), mx);
      ASSERT_GT(std::ldexp(static_cast<double>(amax), -(s - 1)), mx);
    }
  }
}

template <typename Block, typename Q, typename D, typename Enc, typename Dec>
void check_mx(Q quantize, D dequantize, Enc enc, Dec dec, float elem_max) {
  const size_t n = 32 * 100 + 13;  // tail of 13
  const auto x = random_blocks(n, 7, 32);
  std::vector<Block> blocks(mx_num_blocks(n));
  quantize(x, std::span(blocks));
  std::vector<float> y(n);
  dequantize(std::span<const Block>(blocks), std::span(y));
  for (size_t i = 0; i < n; ++i) {
    const Block& b = blocks[i / 32];
    const float X = f32_from_e8m0(b.scale);
    // Nothing overflows: |x| / X <= element max, so the encoding is plain RNE of x / X.
    ASSERT_LE(std::fabs(x[i]) / X, elem_max) << i;
    const float want = dec(enc(x[i] / X)) * X;
    ASSERT_EQ(y[i], want) << i;
  }
  // Every block uses its range: the block max lands in the top binade of the element format.
  for (size_t b = 0; b + 1 < blocks.size(); ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    ASSERT_GT(amax / f32_from_e8m0(blocks[b].scale), elem_max / 2) << b;
  }
  // Zero block -> scale 1, zeros. NaN / inf block -> NaN scale, whole block NaN, others intact.
  std::vector<float> z(96, 0.0f);
  for (int j = 0; j < 32; ++j) z[32 + j] = static_cast<float>(j) - 16;
  z[70] = kNan;
  std::vector<float> z2 = z;
  z2[70] = -kInf;
  for (const auto& in : {z, z2}) {
    std::vector<Block> zb(3);
    quantize(in, std::span(zb));
    EXPECT_EQ(zb[0].scale, 127);
    EXPECT_EQ(zb[2].scale, kE8M0Nan);
    std::vector<float> zy(96);
    dequantize(std::span<const Block>(zb), std::span(zy));
    for (int j = 0; j < 32; ++j) {
      EXPECT_EQ(zy[j], 0.0f);
      // amax 16 -> X = 16 / 2^emax; error at most half an element step (<= 1/4 relative) or X/4.
      const float X = f32_from_e8m0(zb[1].scale);
      EXPECT_NEAR(zy[32 + j], z[32 + j], 0.25f * std::fabs(z[32 + j]) + 0.25f * X);
      EXPECT_TRUE(std::isnan(zy[64 + j]));
    }
  }
}

TEST(FormatsBlock, Mxfp8) {
  check_mx<BlockMxfp8>(
      [](std::span<const float> in, std::span<BlockMxfp8> out) { quantize_mxfp8(in, out); },
      [](std::span<const BlockMxfp8> in, std::span<float> out) { dequantize_mxfp8(in, out); },
      [](float v) { return e4m3_from_f32(v); }, [](uint8_t c) { return f32_from_e4m3(c); },
      448.0f);
}

TEST(FormatsBlock, Mxfp4) {
  check_mx<BlockMxfp4>(
      [](std::span<const float> in, std::span<BlockMxfp4> out) { quantize_mxfp4(in, out); },
      [](std::span<const BlockMxfp4> in, std::span<float> out) { dequantize_mxfp4(in, out); },
      [](float v) { return e2m1_from_f32(v); }, [](uint8_t c) { return f32_from_e2m1(c); },
      6.0f);
}

TEST(FormatsBlock, MxStochasticUnbiasedAndReproducible) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 0.1f + 0.37f * j;  // off-grid values, one block
  std::vector<double> mean(32, 0.0);
  const int draws = 20000;
  std::vector<BlockMxfp4> b(1);
  std::vector<float> y(32);
  for (int d = 0; d < draws; ++d) {
    quantize_mxfp4_sr(x, b, Philox(99, 0), static_cast<uint64_t>(d) * 32);
    dequantize_mxfp4(b, y);
    for (int j = 0; j < 32; ++j) mean[j] += y[j] / draws;
  }
  const float X = f32_from_e8m0(b[0].scale);
  for (int j = 0; j < 32; ++j) EXPECT_NEAR(mean[j], x[j], 0.03 * X) << j;  // ~5 sigma
  std::vector<BlockMxfp8> p(1), q(1);
  quantize_mxfp8_sr(x, p, Philox(1, 2), 5);
  quantize_mxfp8_sr(x, q, Philox(1, 2), 5);
  EXPECT_EQ(std::memcmp(p.data(), q.data(), sizeof(BlockMxfp8)), 0);
}

TEST(FormatsBlock, Nvfp4) {
  const size_t n = 16 * 200 + 5;
  auto x = random_blocks(n, 3, 16);
  // NVFP4's dynamic range is one tensor scale times E4M3: keep blocks within ~2^17 of each other.
  for (size_t i = 0; i < n; ++i) x[i] = std::ldexp(x[i], -std::ilogb(x[i]) + static_cast<int>(i / 16 % 16));
  const float ts = nvfp4_tensor_scale(x);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  EXPECT_FLOAT_EQ(ts, amax / (448.0f * 6.0f));
  for (auto mode : {NvfpScaleRounding::kUp, NvfpScaleRounding::kNearest}) {
    std::vector<BlockNvfp4> b(nvfp4_num_blocks(n));
    quantize_nvfp4(x, ts, b, mode);
    std::vector<float> y(n);
    dequantize_nvfp4(b, ts, y);
    for (size_t i = 0; i < n; ++i) {
      const float s = f32_from_e4m3(b[i / 16].scale);
      ASSERT_GT(s, 0.0f);
      ASSERT_FALSE(std::isnan(s));
      const float unit = s * ts;
      const float r = std::fabs(x[i]) / unit;
      if (mode == NvfpScaleRounding::kUp) {
        ASSERT_LE(r, 6.0f * (1 + 1e-6f)) << i;  // never clamped
      } else if (s >= 1.0f / 64) {
        // RNE of a normal E4M3 scale is at most 1/16 low, so the block max is at most 1/16 over.
        ASSERT_LE(r, 6.0f * (1 + 1.0f / 16) * (1 + 1e-6f)) << i;
      }
      // Error: half the E2M1 spacing at that magnitude (0.25 below 2, 0.5 below 4, 1 above),
      // plus clamping in kNearest mode.
      const float half_gap = r < 2 ? 0.25f : r < 4 ? 0.5f : 1.0f;
      const float clamp = std::max(0.0f, r - 6.0f);
      ASSERT_LE(std::fabs(y[i] - x[i]), (half_gap + clamp) * unit * (1 + 1e-5f)) << i;
    }
  }
  // Zero tensor, NaN block.
  std::vector<float> z(48, 0.0f);
  EXPECT_EQ(nvfp4_tensor_scale(z), 1.0f);
  z[20] = 1.0f;
  z[40] = kNan;
  const float zts = nvfp4_tensor_scale(z);
  EXPECT_FLOAT_EQ(zts, 1.0f / 2688.0f);
  std::vector<BlockNvfp4> zb(3);
  quantize_nvfp4(z, zts, zb);
  std::vector<float> zy(48);
  dequantize_nvfp4(zb, zts, zy);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(zy[j], 0.0f);
  EXPECT_FLOAT_EQ(zy[20], 1.0f);
  for (int j = 32; j < 48; ++j) EXPECT_TRUE(std::isnan(zy[j]));
  // Stochastic: unbiased.
  std::vector<float> x16(16);
  for (int j = 0; j < 16; ++j) x16[j] = 0.05f + 0.11f * j;
  const float ts16 = nvfp4_tensor_scale(x16);
  std::vector<double> mean(16, 0.0);
  std::vector<BlockNvfp4> b1(1);
  std::vector<float> y16(16);
  const int draws = 20000;
  for (int d = 0; d < draws; ++d) {
    quantize_nvfp4_sr(x16, ts16, b1, Philox(4, 4), static_cast<uint64_t>(d) * 16);
    dequantize_nvfp4(b1, ts16, y16);
    for (int j = 0; j < 16; ++j) mean[j] += y16[j] / draws;
  }
  for (int j = 0; j < 16; ++j) EXPECT_NEAR(mean[j], x16[j], 0.01) << j;
}

template <int B>
void check_int_blocks() {
  const size_t n = B * 50 + 3;
  const auto x = random_blocks(n, 11, B);
  std::vector<BlockQ8<B>> q8(int_num_blocks<B>(n));
  std::vector<BlockQ4<B>> q4(int_num_blocks<B>(n)), q3(int_num_blocks<B>(n));
  quantize_q8<B>(x, q8);
  quantize_q4<B>(x, q4);
  quantize_q3<B>(x, q3);
  std::vector<float> y8(n), y4(n), y3(n);
  dequantize_q8<B>(q8, y8);
  dequantize_q4<B>(q4, y4);
  dequantize_q4<B>(q3, y3);  // int3 codes in the int4 layout
  // int3 codes stay in [-3, 3] and reach both ends.
  int lowest = 0, highest = 0;
  for (const BlockQ4<B>& blk : q3) {
    for (int j = 0; j < B / 2; ++j) {
      for (int code : {static_cast<int8_t>(static_cast<uint8_t>(blk.q[j] << 4)) >> 4,
                       static_cast<int8_t>(blk.q[j]) >> 4}) {
        ASSERT_LE(std::abs(code), 3);
        lowest = std::min(lowest, code);
        highest = std::max(highest, code);
      }
    }
  }
  EXPECT_EQ(lowest, -3);
  EXPECT_EQ(highest, 3);
  for (size_t i = 0; i < n; ++i) {
    const size_t b = i / B;
    float amax = 0;
    for (size_t j = b * B; j < std::min(n, (b + 1) * B); ++j) amax = std::max(amax, std::fabs(x[j]));
    ASSERT_FLOAT_EQ(q8[b].scale, amax / 127);
    ASSERT_FLOAT_EQ(q4[b].scale, amax / 7);
    ASSERT_FLOAT_EQ(q3[b].scale, amax / 3);
    ASSERT_LE(std::fabs(y8[i] - x[i]), q8[b].scale * 0.5001f) << i;
    ASSERT_LE(std::fabs(y4[i] - x[i]), q4[b].scale * 0.5001f) << i;
    ASSERT_LE(std::fabs(y3[i] - x[i]), q3[b].scale * 0.5001f) << i;
    // Round to nearest: the int3 code is the nearest of the seven levels.
    ASSERT_EQ(y3[i], q3[b].scale * std::nearbyint(x[i] / q3[b].scale)) << i;
    if (std::fabs(x[i]) == amax) {
      ASSERT_NEAR(y8[i], x[i], amax * 1e-6f);
    }
  }
  // Zero and NaN/inf blocks.
  std::vector<float> z(3 * B, 0.0f);
  z[B + 1] = 2.0f;
  z[2 * B + 3] = kInf;
  std::vector<BlockQ8<B>> zq(3);
  std::vector<BlockQ4<B>> zq4(3);
  quantize_q8<B>(z, zq);
  quantize_q4<B>(z, zq4);
  EXPECT_EQ(zq[0].scale, 0.0f);
  EXPECT_TRUE(std::isnan(zq[2].scale) && std::isnan(zq4[2].scale));
  std::vector<float> zy(3 * B);
  dequantize_q8<B>(zq, zy);
  EXPECT_EQ(zy[0], 0.0f);
  EXPECT_FLOAT_EQ(zy[B + 1], 2.0f);
  EXPECT_TRUE(std::isnan(zy[2 * B]));
  dequantize_q4<B>(zq4, zy);
  EXPECT_FLOAT_EQ(zy[B + 1], 2.0f);
  EXPECT_TRUE(std::isnan(zy[2 * B + 5]));
  // Stochastic: unbiased and reproducible.
  std::vector<float> xs(B);
  for (int j = 0; j < B; ++j) xs[j] = std::sin(static_cast<float>(j));
  std::vector<double> m4(B, 0.0);
  std::vector<BlockQ4<B>> s4(1), s4b(1);
  std::vector<float> ys(B);
  const int draws = 20000;
  for (int d = 0; d < draws; ++d) {
    quantize_q4_sr<B>(xs, s4, Philox(8, 8), static_cast<uint64_t>(d) * B);
    dequantize_q4<B>(s4, ys);
    for (int j = 0; j < B; ++j) m4[j] += ys[j] / draws;
  }
  for (int j = 0; j < B; ++j) EXPECT_NEAR(m4[j], xs[j], 0.01) << j;
  quantize_q4_sr<B>(xs, s4, Philox(8, 8), 3);
  quantize_q4_sr<B>(xs, s4b, Philox(8, 8), 3);
  EXPECT_EQ(std::memcmp(s4.data(), s4b.data(), sizeof(BlockQ4<B>)), 0);
  std::vector<BlockQ8<B>> s8(1);
  std::vector<double> m8(B, 0.0);
  for (int d = 0; d < draws; ++d) {
    quantize_q8_sr<B>(xs, s8, Philox(9, 8), static_cast<uint64_t>(d) * B);
    dequantize_q8<B>(s8, ys);
    for (int j = 0; j < B; ++j) m8[j] += ys[j] / draws;
  }
  for (int j = 0; j < B; ++j) EXPECT_NEAR(m8[j], xs[j], 0.001) << j;
}

TEST(FormatsBlock, Int8Int4Int3AllBlockSizes) {
  check_int_blocks<32>();
  check_int_blocks<64>();
  check_int_blocks<128>();
  check_int_blocks<256>();
}

TEST(FormatsBlock, Int4DecodesEveryNibble) {
  BlockQ4<32> b{};
  b.scale = 1.0f;
  for (int j = 0; j < 16; ++j) b.q[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  std::vector<float> y(32);
  dequantize_q4<32>(std::span(&b, 1), y);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[2 * j], j < 8 ? j : j - 16);
    EXPECT_EQ(y[2 * j + 1], (15 - j) < 8 ? 15 - j : 15 - j - 16);
  }
}

}  // namespace
}  // namespace atl::kernels::formats
