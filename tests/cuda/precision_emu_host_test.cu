// The per-element and per-tile functions of the precision emulation kernels
// (kernels/cuda/precision_emu_blocks.cuh), run on the HOST against the CPU code they mirror:
// PrecisionGemm::hadamard_rows, formats' scaled E5M2 and the NVFP4 16x16 weight tiles, bit for
// bit. These run on every machine (no GPU needed) and pin the logic the kernels execute;
// tests/cuda/llama_cuda_precision_test.cc checks the kernels themselves on a GPU. Compiled by
// nvcc with -ffp-contract=off for the host side, so each rounding step is the one written in
// the header.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "algorithms/model/precision.h"
#include "cuda/cuda_test_util.h"
#include "cuda/int_ties.h"
#include "kernels/core/philox.h"
#include "kernels/cuda/precision_emu_blocks.cuh"
#include "kernels/formats/convert.h"
#include "kernels/formats/nvfp4.h"

namespace atl::kernels::cuda {
namespace {

namespace fm = atl::kernels::formats;
using testing::same_bits;
using testing::tricky;

TEST(PrecisionEmuHostTest, HadamardColumnsAreTheCpuTransform) {
  for (const int rows : {16, 37, 48, 7}) {  // whole groups, a tail, no group at all
    const int cols = 20;
    std::vector<float> m = tricky(size_t(rows) * cols, 5u + uint32_t(rows), false);
    std::vector<float> want = m;
    algorithms::PrecisionGemm g;
    g.configure(algorithms::Precision::kNvfp4, 31);
    g.hadamard_rows(want.data(), rows, cols);
    // The signs as CudaPrecisionGemm::configure draws them (PrecisionGemm's rule).
    const Philox rng(31, ~uint64_t{0});
    float signs[16];
    for (int j = 0; j < 16; ++j) signs[j] = (rng.u32(uint64_t(j)) & 1u) ? -1.0f : 1.0f;
    for (int grp = 0; grp + 16 <= rows; grp += 16)
      for (int c = 0; c < cols; ++c)
        emu::hadamard16_column(m.data() + size_t(grp) * cols + c, size_t(cols), signs);
    EXPECT_TRUE(same_bits(m, want)) << rows << " rows";
  }
}

TEST(PrecisionEmuHostTest, ScaledE5m2IsTheCpuQuantizeDequantize) {
  for (const bool special : {false, true}) {
    const std::vector<float> x = tricky(4000, 17, special);
    const float inv = fm::current_inv_scale(fm::abs_max(x).amax, fm::kE5M2Max);
    std::vector<uint8_t> q(x.size());
    std::vector<float> want(x.size()), got(x.size());
    fm::quantize_e5m2_scaled(x, inv, q);
    fm::dequantize_e5m2_scaled(q, 1.0f / inv, want);
    for (size_t i = 0; i < x.size(); ++i) got[i] = emu::qdq_e5m2_scaled(x[i], inv, 1.0f / inv);
    EXPECT_TRUE(same_bits(got, want)) << (special ? "with inf/NaN" : "finite");
  }
}

TEST(PrecisionEmuHostTest, Nvfp4TilesAreTheCpu2dQuantizer) {
  const int shapes[][2] = {{37, 40}, {16, 16}, {5, 70}, {33, 17}};
  for (const auto& sh : shapes) {
    for (const bool special : {false, true}) {
      const int rows = sh[0], cols = sh[1];
      const size_t n = size_t(rows) * cols;
      std::vector<float> x = tricky(n, 40u + uint32_t(rows * cols), false);
      if (special) {  // a tile with inf and one with NaN; the others stay finite
        x[3] = std::numeric_limits<float>::infinity();
        x[n - 1] = std::numeric_limits<float>::quiet_NaN();
      }
      // PrecisionGemm's kNv2d: the tensor scale of the whole operand, then the 2-D quantizer.
      const float ts = fm::nvfp4_tensor_scale(x);
      std::vector<fm::BlockNvfp4> blk(fm::nvfp4_2d_num_blocks(rows, cols));
      std::vector<float> want(n), got(n);
      fm::quantize_nvfp4_2d(x, rows, cols, ts, blk);
      fm::dequantize_nvfp4_2d(blk, rows, cols, ts, want);
      for (int r0 = 0; r0 < rows; r0 += 16)
        for (int c0 = 0; c0 < cols; c0 += 16)
          emu::qdq_nvfp4_tile(x.data(), got.data(), rows, cols, r0, c0, ts);
      EXPECT_TRUE(same_bits(got, want)) << rows << "x" << cols << (special ? " with inf/NaN" : "");
      // In place, as the kernel may run it.
      std::vector<float> inplace = x;
      for (int r0 = 0; r0 < rows; r0 += 16)
        for (int c0 = 0; c0 < cols; c0 += 16)
          emu::qdq_nvfp4_tile(inplace.data(), inplace.data(), rows, cols, r0, c0, ts);
      EXPECT_TRUE(same_bits(inplace, want)) << "in place";
    }
  }
}

}  // namespace
}  // namespace atl::kernels::cuda
