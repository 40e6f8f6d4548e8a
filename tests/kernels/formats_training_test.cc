// Format pieces of the low-precision training recipes: per-tensor current scaling (E4M3 / E5M2)
// and NVFP4 16x16 two-dimensional blocks.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/core/philox.h"
#include "kernels/formats/convert.h"
#include "kernels/formats/nvfp4.h"
#include "kernels/formats/scalar.h"

namespace atl::kernels::formats {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(FormatsTraining, CurrentInvScale) {
  EXPECT_EQ(current_inv_scale(448.0f, kE4M3Max), 1.0f);
  EXPECT_EQ(current_inv_scale(2.0f, kE4M3Max), 224.0f);
  EXPECT_EQ(current_inv_scale(57344.0f * 4, kE5M2Max), 0.25f);
  // Degenerate amax: no scaling.
  EXPECT_EQ(current_inv_scale(0.0f, kE4M3Max), 1.0f);
  EXPECT_EQ(current_inv_scale(1e-40f, kE4M3Max), 1.0f);  // subnormal
  EXPECT_EQ(current_inv_scale(kInf, kE4M3Max), 1.0f);
  EXPECT_EQ(current_inv_scale(kNan, kE4M3Max), 1.0f);
  EXPECT_EQ(current_inv_scale(FLT_MIN, kE5M2Max), 1.0f);  // 57344 / 2^-126 overflows
}

// Every E5M2 / E4M3 code, times a scale, encodes back to itself through the scaled kernels;
// every input rounds as the scalar encoder does on x * inv_scale (saturating).
TEST(FormatsTraining, ScaledFp8MatchesScalarOnEveryCode) {
  for (float scale : {1.0f, 0.125f, 3.0f, 1.0f / 448.0f}) {
    const float inv = 1.0f / scale;
    std::vector<float> in(256);
    for (uint32_t c = 0; c < 256; ++c) in[c] = f32_from_e5m2(static_cast<uint8_t>(c)) * scale;
    std::vector<uint8_t> q(256);
    quantize_e5m2_scaled(in, inv, q);
    std::vector<float> out(256);
    dequantize_e5m2_scaled(q, scale, out);
    for (uint32_t c = 0; c < 256; ++c) {
      const float v = f32_from_e5m2(static_cast<uint8_t>(c));
      if (std::isnan(v)) {
        ASSERT_TRUE(std::isnan(out[c])) << c;
      } else if (std::isinf(v)) {
        // Saturating: inf becomes the largest finite value.
        ASSERT_EQ(out[c], std::copysign(kE5M2Max, v) * scale) << c;
      } else {
        ASSERT_EQ(q[c], c) << c;
        ASSERT_EQ(out[c], v * scale) << c;
      }
    }
  }
  // Random inputs against the scalar encoder, including overflow (saturates, never inf).
  const Philox rng(9, 9);
  std::vector<float> x(4096);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = std::ldexp(static_cast<float>(rng.normal(i)), static_cast<int>(i % 40) - 20);
  const float inv = current_inv_scale(abs_max(x).amax, kE5M2Max);
  std::vector<uint8_t> q(x.size());
  quantize_e5m2_scaled(x, inv * 4, q);  // 4x too large: the top values saturate
  bool saturated = false;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(q[i], e5m2_from_f32(x[i] * inv * 4, Overflow::kSaturate)) << i;
    ASSERT_FALSE(std::isinf(f32_from_e5m2(q[i]))) << i;
    saturated |= std::fabs(f32_from_e5m2(q[i])) == kE5M2Max;
  }
  EXPECT_TRUE(saturated);
  // With the current scale the amax element maps exactly onto the format max.
  quantize_e4m3_scaled(x, current_inv_scale(abs_max(x).amax, kE4M3Max), q);
  uint8_t qmax = 0;
  for (uint8_t c : q) qmax = std::max<uint8_t>(qmax, c & 0x7f);
  EXPECT_EQ(f32_from_e4m3(qmax), kE4M3Max);
}

// (rows, cols) matrix with tiles of very different magnitudes (within NVFP4's range).
std::vector<float> tiled_matrix(size_t rows, size_t cols, uint64_t seed) {
  const Philox rng(seed, 3);
  std::vector<float> m(rows * cols);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) {
      const int e = static_cast<int>((r / 16 * 5 + c / 16 * 3) % 12) - 6;
      m[r * cols + c] = std::ldexp(static_cast<float>(rng.normal(r * cols + c)), e);
    }
  return m;
}

std::vector<float> transposed(const std::vector<float>& m, size_t rows, size_t cols) {
  std::vector<float> t(m.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  return t;
}

TEST(FormatsTraining, Nvfp4TwoDimensionalBlocks) {
  for (auto [rows, cols] : {std::pair<size_t, size_t>{64, 48}, {37, 53}, {16, 16}, {5, 70}}) {
    const auto a = tiled_matrix(rows, cols, rows * 1000 + cols);
    const float ts = nvfp4_tensor_scale(a);
    for (auto mode : {NvfpScaleRounding::kUp, NvfpScaleRounding::kNearest}) {
      std::vector<BlockNvfp4> q(nvfp4_2d_num_blocks(rows, cols));
      quantize_nvfp4_2d(a, rows, cols, ts, q, mode);
      std::vector<float> y(rows * cols);
      dequantize_nvfp4_2d(q, rows, cols, ts, y);
      const size_t nb = nvfp4_num_blocks(cols);
      for (size_t r = 0; r < rows; ++r)
        for (size_t b = 0; b < nb; ++b) {
          // One scale per tile: every row block of the tile carries the tile's scale, which is
          // the 1x16 rule applied to the tile's amax.
          float amax = 0;
          for (size_t rr = r / 16 * 16; rr < std::min(rows, r / 16 * 16 + 16); ++rr)
            for (size_t c = b * 16; c < std::min(cols, b * 16 + 16); ++c)
              amax = std::max(amax, std::fabs(a[rr * cols + c]));
          std::vector<float> probe(16, 0.0f);
          probe[0] = amax;
          std::vector<BlockNvfp4> pb(1);
          quantize_nvfp4(probe, ts, pb, mode);
          ASSERT_EQ(q[r * nb + b].scale, pb[0].scale) << r << "," << b;
          // Elements: RNE of x / (scale * ts) in E2M1 (clamped at 6 for kNearest).
          const float unit = f32_from_e4m3(pb[0].scale) * ts;
          for (size_t c = b * 16; c < std::min(cols, b * 16 + 16); ++c) {
            const float x = a[r * cols + c];
            const float want = f32_from_e2m1(e2m1_from_f32(x * (1.0f / unit))) * unit;
            ASSERT_EQ(y[r * cols + c], want) << r << "," << c;
          }
        }
      // Transposition invariance: quantize_2d(Aᵀ) is the transpose of quantize_2d(A).
      const auto at = transposed(a, rows, cols);
      std::vector<BlockNvfp4> qt(nvfp4_2d_num_blocks(cols, rows));
      quantize_nvfp4_2d(at, cols, rows, ts, qt, mode);
      std::vector<float> yt(rows * cols);
      dequantize_nvfp4_2d(qt, cols, rows, ts, yt);
      const auto y_t = transposed(y, rows, cols);
      ASSERT_EQ(std::memcmp(yt.data(), y_t.data(), yt.size() * sizeof(float)), 0);
    }
  }
}

TEST(FormatsTraining, Nvfp4TwoDimensionalEqualsRowBlocksForOneRow) {
  // A single row: each tile is one 1x16 block, so 2-D and 1-D quantization agree bit for bit.
  const auto a = tiled_matrix(1, 16 * 30 + 7, 5);
  const float ts = nvfp4_tensor_scale(a);
  std::vector<BlockNvfp4> q2(nvfp4_2d_num_blocks(1, a.size())), q1(nvfp4_num_blocks(a.size()));
  quantize_nvfp4_2d(a, 1, a.size(), ts, q2);
  quantize_nvfp4(a, ts, q1);
  ASSERT_EQ(std::memcmp(q1.data(), q2.data(), q1.size() * sizeof(BlockNvfp4)), 0);
}

TEST(FormatsTraining, Nvfp4TwoDimensionalNanTileAndZeros) {
  std::vector<float> a(32 * 32, 0.0f);
  a[3 * 32 + 20] = 1.0f;    // tile (0, 1)
  a[20 * 32 + 5] = kNan;    // tile (1, 0)
  a[30 * 32 + 30] = -kInf;  // tile (1, 1)
  const float ts = nvfp4_tensor_scale(a);
  std::vector<BlockNvfp4> q(nvfp4_2d_num_blocks(32, 32));
  quantize_nvfp4_2d(a, 32, 32, ts, q);
  std::vector<float> y(a.size());
  dequantize_nvfp4_2d(q, 32, 32, ts, y);
  for (size_t r = 0; r < 32; ++r)
    for (size_t c = 0; c < 32; ++c) {
      const float v = y[r * 32 + c];
      if (r >= 16) {
        ASSERT_TRUE(std::isnan(v)) << r << "," << c;  // both lower tiles hold a non-finite value
      } else if (r == 3 && c == 20) {
        ASSERT_FLOAT_EQ(v, 1.0f);
      } else {
        ASSERT_EQ(v, 0.0f) << r << "," << c;
      }
    }
}

}  // namespace
}  // namespace atl::kernels::formats
