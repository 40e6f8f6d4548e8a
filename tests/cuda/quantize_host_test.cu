// The block encoders of the CUDA quantizers (kernels/cuda/quantize_blocks.cuh), run on the HOST
// against the CPU encoders of kernels/formats: scales and codes bit for bit, round to nearest and
// stochastic, with inf/NaN where the format defines them. These run on every machine (no GPU
// needed) and pin the logic the kernels execute; tests/cuda/quantize_test.cc checks the kernels
// themselves on a GPU. Compiled by nvcc with -ffp-contract=off for the host side, so each
// rounding step here is the one written in the header.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cuda/int_ties.h"
#include "kernels/core/philox.h"
#include "kernels/cuda/quantize_blocks.cuh"
#include "kernels/formats/convert.h"
#include "kernels/formats/int_block.h"
#include "kernels/formats/mx.h"
#include "kernels/formats/nvfp4.h"

namespace atl::kernels::cuda {
namespace {

namespace fm = atl::kernels::formats;
namespace bl = atl::kernels::cuda::blocks;
using testing::tricky;

constexpr uint64_t kSeed = 99, kStream = 3, kFirst = 1001;

// Values [i0, i0 + B) zero-padded.
std::vector<float> block_of(const std::vector<float>& x, size_t i0, int B) {
  std::vector<float> v(size_t(B), 0.0f);
  for (int j = 0; j < B && i0 + j < x.size(); ++j) v[size_t(j)] = x[i0 + j];
  return v;
}

TEST(QuantizeBlocksHostTest, PhiloxTwinMatchesCore) {
  const atl::Philox rng(kSeed, kStream);
  uint32_t r[37];
  bl::philox_fill(kSeed, kStream, kFirst, r, 37);
  for (int j = 0; j < 37; ++j) EXPECT_EQ(r[j], rng.u32(kFirst + j)) << j;
  const atl::Philox big(0xfedcba9876543210ull, 0x0123456789abcdefull);
  EXPECT_EQ(bl::philox_block(0xfedcba9876543210ull, 0x0123456789abcdefull, 5).w[2],
            big.block(5)[2]);
}

TEST(QuantizeBlocksHostTest, MulX86MatchesTheHostOnSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  volatile float zero = 0.0f;  // keep the products at run time
  for (float a : {inf, -inf, std::numeric_limits<float>::quiet_NaN(), -1.5f, 3.0f}) {
    for (float b : {0.0f, 2.0f, -0.5f}) {
      const float host = a * (b + zero);
      EXPECT_EQ(std::bit_cast<uint32_t>(bl::mul_x86(a, b)), std::bit_cast<uint32_t>(host))
          << a << " * " << b;
    }
  }
}

TEST(QuantizeBlocksHostTest, MxBlocksEqualCpu) {
  const size_t n = 32 * 40 + 5;
  const atl::Philox rng(kSeed, kStream);
  for (bool special : {false, true}) {
    const auto x = tricky(n, 50 + special, special);
    const size_t nb = fm::mx_num_blocks(n);
    for (bool sr : {false, true}) {
      std::vector<fm::BlockMxfp8> r8(nb);
      std::vector<fm::BlockMxfp4> r4(nb);
      sr ? fm::quantize_mxfp8_sr(x, r8, rng, kFirst) : fm::quantize_mxfp8(x, r8);
      sr ? fm::quantize_mxfp4_sr(x, r4, rng, kFirst) : fm::quantize_mxfp4(x, r4);
      for (size_t b = 0; b < nb; ++b) {
        const auto v = block_of(x, b * 32, 32);
        uint32_t r[32];
        bl::philox_fill(kSeed, kStream, kFirst + b * 32, r, 32);
        uint8_t got8[33], got4[17];
        bl::encode_mx_block(v.data(), false, sr ? r : nullptr, got8);
        bl::encode_mx_block(v.data(), true, sr ? r : nullptr, got4);
        ASSERT_EQ(std::memcmp(got8, &r8[b], 33), 0) << "mxfp8 block " << b << " sr " << sr;
        ASSERT_EQ(std::memcmp(got4, &r4[b], 17), 0) << "mxfp4 block " << b << " sr " << sr;
      }
    }
  }
}

TEST(QuantizeBlocksHostTest, Nvfp4BlocksEqualCpu) {
  const size_t n = 16 * 90 + 7;
  const atl::Philox rng(kSeed, kStream);
  for (bool special : {false, true}) {
    const auto x = tricky(n, 60 + special, special);
    const float ts = fm::nvfp4_tensor_scale(x);
    const size_t nb = fm::nvfp4_num_blocks(n);
    for (bool sr : {false, true}) {
      for (auto rounding : {fm::NvfpScaleRounding::kUp, fm::NvfpScaleRounding::kNearest}) {
        std::vector<fm::BlockNvfp4> ref(nb);
        sr ? fm::quantize_nvfp4_sr(x, ts, ref, rng, kFirst, rounding)
           : fm::quantize_nvfp4(x, ts, ref, rounding);
        for (size_t b = 0; b < nb; ++b) {
          const auto v = block_of(x, b * 16, 16);
          uint32_t r[16];
          bl::philox_fill(kSeed, kStream, kFirst + b * 16, r, 16);
          uint8_t got[9];
          bl::encode_nvfp4_block(v.data(), ts, rounding == fm::NvfpScaleRounding::kUp,
                                 sr ? r : nullptr, got);
          ASSERT_EQ(std::memcmp(got, &ref[b], 9), 0) << "block " << b << " sr " << sr;
        }
      }
    }
  }
}

template <int B>
void check_int(const std::vector<float>& x) {
  const atl::Philox rng(kSeed, kStream);
  const size_t nb = fm::int_num_blocks<B>(x.size());
  for (bool sr : {false, true}) {
    std::vector<fm::BlockQ8<B>> r8(nb);
    std::vector<fm::BlockQ4<B>> r4(nb);
    sr ? fm::quantize_q8_sr<B>(x, r8, rng, kFirst) : fm::quantize_q8<B>(x, r8);
    sr ? fm::quantize_q4_sr<B>(x, r4, rng, kFirst) : fm::quantize_q4<B>(x, r4);
    for (size_t b = 0; b < nb; ++b) {
      const auto v = block_of(x, b * B, B);
      uint32_t amax = 0;
      for (float f : v) amax = std::max(amax, std::bit_cast<uint32_t>(f) & 0x7fffffffu);
      std::vector<uint32_t> r(size_t(B), 0);
      bl::philox_fill(kSeed, kStream, kFirst + b * B, r.data(), B);
      for (int bits : {8, 4}) {
        const float qmax = bits == 8 ? 127.0f : 7.0f;
        float inv;
        const float scale = bl::int_block_scale(amax, qmax, inv);
        const float want = bits == 8 ? r8[b].scale : r4[b].scale;
        ASSERT_EQ(std::bit_cast<uint32_t>(scale), std::bit_cast<uint32_t>(want)) << b;
        for (int j = 0; j < B; ++j) {
          const int c = bl::int_code(v[size_t(j)], inv, qmax, sr, r[size_t(j)]);
          int ref;
          if (bits == 8) {
            ref = r8[b].q[j];
          } else {
            const uint8_t byte = r4[b].q[j / 2];
            ref = (j & 1) ? int(int8_t(byte) >> 4) : int(int8_t(uint8_t(byte << 4)) >> 4);
          }
          ASSERT_EQ(c, ref) << "int" << bits << " B " << B << " block " << b << " j " << j << " sr "
                            << sr << " x " << v[size_t(j)];
        }
      }
    }
  }
}

// Finite inputs (see quantize.h on the codes of non-finite int blocks). The FMA-sensitive blocks
// pin the fused rounding steps: int_block.cc's explicit std::fma and the twin's f_fma must agree.
TEST(QuantizeBlocksHostTest, IntBlocksEqualCpu) {
  auto x = tricky(256 * 6, 70, false);
  // Values whose codes differ between a contracted (FMA) and an uncontracted host build.
  EXPECT_GT(testing::append_fma_sensitive_blocks(x), 50);
  x.resize(x.size() + 45, 0.25f);  // a partial last block
  check_int<32>(x);
  check_int<64>(x);
  check_int<128>(x);
  check_int<256>(x);
}

}  // namespace
}  // namespace atl::kernels::cuda
