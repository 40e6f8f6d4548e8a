// The AVX-512 kernels of the block quantizers (kernels/formats/avx512.h) against the portable
// code that machines without AVX-512 run: the same bytes on inputs built to hit every branch
// (format thresholds and midpoints, zero, subnormal, inf and NaN blocks, extreme magnitudes,
// blocks whose sums take the exact vector path and blocks that fall back). Where the build has
// no AVX-512 both sides run the portable code and the test still checks that they agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/core/philox.h"
#include "kernels/formats/nvfp4.h"
#include "kernels/formats/avx512.h"
#include "kernels/formats/portable.h"
#include "kernels/formats/scalar.h"

namespace atl::kernels::formats {
namespace {

// Values of every kind the encoders branch on, at magnitudes from 2^-150 to the largest float:
// each value picks a kind from its own random word.
std::vector<float> adversarial_input(size_t n, uint64_t seed) {
  const Philox rng(seed, 7);
  // E2M1 and E4M3 decision points and codes (scaled by powers of two below).
  const float grid[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f,   3.5f,   5.0f, 6.0f,
                        0.5f,  1.0f,  3.0f,  4.0f,  448.0f, 464.0f, 0.0f};
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rng.u32(2 * i), r2 = rng.u32(2 * i + 1);
    const float sign = (r & 1u) ? -1.0f : 1.0f;
    float v =
        static_cast<float>(rng.normal(i)) * std::ldexp(1.0f, static_cast<int>(r2 % 280) - 140);
    switch ((r >> 8) % 40) {
      case 0:
        v = 0.0f;
        break;
      case 1:
        v = -0.0f;
        break;
      case 2:
        v = sign * grid[(r >> 16) % 15] * std::ldexp(1.0f, static_cast<int>((r2 >> 8) % 24) - 12);
        break;
      case 3:
        v = sign * std::bit_cast<float>((r2 >> 9) | 1u);
        break;  // subnormal
      case 4:
        if ((r >> 16) % 64 == 0) v = sign * INFINITY;
        break;
      case 5:
        if ((r >> 16) % 64 == 0) v = std::nanf("");
        break;
      case 6:
        v = sign * std::bit_cast<float>(0x7f7fffffu - ((r2 >> 12) & 0xffu));
        break;
      default:
        break;
    }
    x[i] = v;
  }
  // Whole blocks of zeros, and of subnormals only, at places no block size aligns away.
  for (size_t i = 0; i + 64 <= n; i += 4096) std::fill(x.begin() + i, x.begin() + i + 64, 0.0f);
  for (size_t i = 1024; i + 64 <= n; i += 4096) {
    for (uint32_t j = 0; j < 64; ++j) x[i + j] = std::bit_cast<float>(j + 1u);
  }
  return x;
}

// Normals of one scale per 4096 values, some on a grid of quarters, some zero: the spread of
// nearly every block is small enough for the exact vector sums of the ternary kernel.
std::vector<float> narrow_input(size_t n, uint64_t seed) {
  const Philox rng(seed, 9);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rng.u32(i);
    float v = static_cast<float>(rng.normal(i)) * static_cast<float>(1 + (i / 4096) % 7);
    if (r % 97 == 0) v = std::round(v * 4.0f) / 4.0f;
    if (r % 1000 == 1) v = 0.0f;
    x[i] = v;
  }
  return x;
}

template <typename Block>
void expect_same_blocks(const std::vector<Block>& fast, const std::vector<Block>& portable,
                        const char* what) {
  ASSERT_EQ(fast.size(), portable.size());
  for (size_t b = 0; b < fast.size(); ++b) {
    ASSERT_EQ(std::memcmp(&fast[b], &portable[b], sizeof(Block)), 0)
        << what << ": block " << b << " differs from the portable encoder";
  }
}

// Sizes with full groups of every kernel and partial tails.
constexpr size_t kSizes[] = {16, 255, 256, 511, 512, 4096, 65536 + 77, 300007};

// The vector E2M1 encoder (rounding |x| scaled by 2, 1 or 1/2) against e2m1_from_f32's
// thresholds, bit pattern by bit pattern: 2^14 patterns around each threshold, code and range
// edge, both signs, and the special ones. (All 2^32 patterns were compared once when it was
// written; that takes minutes.)
TEST(FormatsSimd, E2m1CodesEqualTheScalarEncoder) {
#if ATOLL_FORMATS_AVX512
  std::vector<uint32_t> bits;
  for (float centre : {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f,
                       3.5f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 2147483648.0f, 4294967296.0f}) {
    const uint32_t c = std::bit_cast<uint32_t>(centre);
    for (uint32_t d = 0; d < 8192; ++d) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        bits.push_back((c + d) | sign);
        if (c >= d) bits.push_back((c - d) | sign);
      }
    }
  }
  for (uint32_t special : {0x7f800000u, 0x7fc00000u, 0x7f800001u, 0x7f7fffffu, 0x00000001u})
    for (uint32_t sign : {0u, 0x80000000u}) bits.push_back(special | sign);
  while (bits.size() % 16 != 0) bits.push_back(0);
  for (size_t i = 0; i < bits.size(); i += 16) {
    alignas(64) uint32_t codes[16];
    _mm512_store_si512(codes, avx512::e2m1_codes(_mm512_loadu_ps(
                                  reinterpret_cast<const float*>(bits.data() + i))));
    for (size_t l = 0; l < 16; ++l) {
      ASSERT_EQ(codes[l], e2m1_from_f32(std::bit_cast<float>(bits[i + l])))
          << std::hex << "bits 0x" << bits[i + l];
    }
  }
#else
  GTEST_SKIP() << "built without AVX-512: the portable encoder is the only one";
#endif
}

TEST(FormatsSimd, Nvfp4MatchesPortable) {
  for (size_t n : kSizes) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      const std::vector<float> x = adversarial_input(n, seed);
      // The tensor's own scale, and fixed scales under which many blocks overflow or vanish.
      for (float ts : {nvfp4_tensor_scale(x), 1.0f, 1.0f / 2688.0f, 3e-30f}) {
        std::vector<BlockNvfp4> fast(nvfp4_num_blocks(n)), portable(fast.size());
        quantize_nvfp4(x, ts, fast);
        quantize_nvfp4_portable(x, ts, portable);
        expect_same_blocks(fast, portable, "nvfp4");
      }
    }
  }
}

TEST(FormatsSimd, MxMatchesPortable) {
  for (size_t n : kSizes) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      for (const std::vector<float>& x : {adversarial_input(n, seed), narrow_input(n, seed)}) {
        std::vector<BlockMxfp4> f4(mx_num_blocks(n)), p4(f4.size());
        quantize_mxfp4(x, f4);
        quantize_mxfp4_portable(x, p4);
        expect_same_blocks(f4, p4, "mxfp4");
        std::vector<BlockMxfp8> f8(mx_num_blocks(n)), p8(f8.size());
        quantize_mxfp8(x, f8);
        quantize_mxfp8_portable(x, p8);
        expect_same_blocks(f8, p8, "mxfp8");
      }
    }
  }
}

template <int B>
void check_ternary(const std::vector<float>& x) {
  std::vector<BlockTernary<B>> fast(lowbit_num_blocks<B>(x.size())), portable(fast.size());
  quantize_ternary<B>(x, fast);
  quantize_ternary_portable<B>(x, portable);
  expect_same_blocks(fast, portable, "ternary");
}

TEST(FormatsSimd, TernaryMatchesPortable) {
  for (size_t n : kSizes) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      for (const std::vector<float>& x : {adversarial_input(n, seed), narrow_input(n, seed)}) {
        check_ternary<32>(x);
        check_ternary<64>(x);
        check_ternary<128>(x);
        check_ternary<256>(x);
      }
    }
  }
}

// A block at the edge of the exact-sum rule: values 2^e and 2^(e - spread) for the largest
// spread the vector kernel accepts and one beyond it, so both paths see a block whose serial
// double sum is inexact when the small values come after large partial sums.
TEST(FormatsSimd, TernarySpreadEdges) {
  for (int spread : {20, 21, 22, 23, 24, 25, 30}) {
    std::vector<float> x(4096);
    const Philox rng(static_cast<uint64_t>(spread), 3);
    for (size_t i = 0; i < x.size(); ++i) {
      const uint32_t r = rng.u32(i);
      const float big = std::ldexp(1.0f + static_cast<float>(r % 255) / 256.0f, 10);
      const float small =
          std::ldexp(1.0f + static_cast<float>((r >> 8) % 255) / 256.0f, 10 - spread);
      x[i] = ((r >> 16) % 3 == 0 ? small : big) * ((r >> 20) & 1 ? -1.0f : 1.0f);
    }
    check_ternary<32>(x);
    check_ternary<64>(x);
    check_ternary<128>(x);
    check_ternary<256>(x);
  }
}

}  // namespace
}  // namespace atl::kernels::formats
