// Every quantizer of kernels/cuda/quantize.h against the CPU encoder of kernels/formats: codes
// and scales bit for bit (round to nearest and stochastic), decoders bit for bit on finite
// values. Inputs mix scales over many binades, exact ties, zeros, subnormals and (where the
// format defines them) inf and NaN; lengths are not multiples of the block size, and an offset
// pointer exercises the unaligned (scalar) paths.
#include "kernels/cuda/quantize.h"

#include <limits>

#include "cuda/cuda_test_util.h"
#include "cuda/int_ties.h"
#include "kernels/core/philox.h"
#include "kernels/formats/convert.h"
#include "kernels/formats/int_block.h"
#include "kernels/formats/mx.h"
#include "kernels/formats/nvfp4.h"

namespace atl::kernels::cuda {
namespace {

namespace fm = atl::kernels::formats;
using testing::CudaTest;
using testing::same_bits;
using testing::tricky;

using QuantizeTest = CudaTest;

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

constexpr uint64_t kSeed = 1234, kStream = 7, kFirst = 4093;

TEST_F(QuantizeTest, ScalarFormatsAreBitwiseEqualToCpu) {
  const size_t n = 4099;
  for (int offset : {0, 1}) {
    const auto all = tricky(n + 1, 40, true);
    const std::vector<float> x(all.begin() + offset, all.begin() + offset + n);
    auto d_all = to_device(all);
    const float* d_x = d_all.data() + offset;
    const atl::Philox rng(kSeed, kStream);
    const SrKey key{kSeed, kStream, kFirst};
    for (bool sr : {false, true}) {
      // bf16 / fp16 (16-bit codes).
      for (ScalarFormat f : {ScalarFormat::kBf16, ScalarFormat::kFp16}) {
        std::vector<uint16_t> ref(n);
        if (f == ScalarFormat::kBf16) {
          sr ? fm::quantize_bf16_sr(x, ref, rng, kFirst) : fm::quantize_bf16(x, ref);
        } else {
          sr ? fm::quantize_fp16_sr(x, ref, rng, kFirst) : fm::quantize_fp16(x, ref);
        }
        auto d_out = to_device(std::vector<uint16_t>(n));
        ASSERT_OK(
            quantize(ctx(), f, d_x, d_out.data(), n, Overflow::kInfinity, sr ? &key : nullptr));
        const auto got = to_host(d_out, n);
        EXPECT_EQ(got, ref) << "format " << int(f) << " sr " << sr << " offset " << offset;
        std::vector<float> dref(n);
        f == ScalarFormat::kBf16 ? fm::dequantize_bf16(ref, dref) : fm::dequantize_fp16(ref, dref);
        auto d_dec = to_device(std::vector<float>(n));
        ASSERT_OK(dequantize(ctx(), f, d_out.data(), d_dec.data(), n));
        EXPECT_TRUE(same_bits(to_host(d_dec, n), dref, true));
      }
      // FP8 (8-bit codes), both overflow modes.
      for (ScalarFormat f : {ScalarFormat::kE4M3, ScalarFormat::kE5M2}) {
        for (Overflow ov : {Overflow::kSaturate, Overflow::kInfinity}) {
          std::vector<uint8_t> ref(n);
          if (f == ScalarFormat::kE4M3) {
            sr ? fm::quantize_e4m3_sr(x, ref, rng, kFirst, ov) : fm::quantize_e4m3(x, ref, ov);
          } else {
            sr ? fm::quantize_e5m2_sr(x, ref, rng, kFirst, ov) : fm::quantize_e5m2(x, ref, ov);
          }
          auto d_out = to_device(std::vector<uint8_t>(n));
          ASSERT_OK(quantize(ctx(), f, d_x, d_out.data(), n, ov, sr ? &key : nullptr));
          EXPECT_EQ(to_host(d_out, n), ref) << "format " << int(f) << " sr " << sr;
          std::vector<float> dref(n);
          f == ScalarFormat::kE4M3 ? fm::dequantize_e4m3(ref, dref)
                                   : fm::dequantize_e5m2(ref, dref);
          auto d_dec = to_device(std::vector<float>(n));
          ASSERT_OK(dequantize(ctx(), f, d_out.data(), d_dec.data(), n));
          EXPECT_TRUE(same_bits(to_host(d_dec, n), dref, true));
        }
      }
    }
    // Scaled E4M3 and abs max.
    std::vector<uint8_t> ref(n);
    fm::quantize_e4m3_scaled(x, 0.37f, ref);
    auto d_out = to_device(std::vector<uint8_t>(n));
    ASSERT_OK(quantize_e4m3_scaled(ctx(), d_x, 0.37f, d_out.data(), n));
    EXPECT_EQ(to_host(d_out, n), ref);
    std::vector<float> dref(n);
    fm::dequantize_e4m3_scaled(ref, 2.5f, dref);
    auto d_dec = to_device(std::vector<float>(n));
    ASSERT_OK(dequantize_e4m3_scaled(ctx(), d_out.data(), 2.5f, d_dec.data(), n));
    EXPECT_TRUE(same_bits(to_host(d_dec, n), dref, true));
    const auto am = abs_max(ctx(), d_x, n);
    ASSERT_TRUE(am.ok());
    const auto am_ref = fm::abs_max(x);
    EXPECT_EQ(am->amax, am_ref.amax);
    EXPECT_EQ(am->all_finite, am_ref.all_finite);
  }
}

TEST_F(QuantizeTest, MxAndNvfp4BlocksAreBitwiseEqualToCpu) {
  const size_t n = 32 * 70 + 13;
  const atl::Philox rng(kSeed, kStream);
  const SrKey key{kSeed, kStream, kFirst};
  for (bool special : {false, true}) {
    const auto x = tricky(n, 41 + special, special);
    auto d_x = to_device(x);
    for (bool sr : {false, true}) {
      const size_t nb = fm::mx_num_blocks(n);
      std::vector<fm::BlockMxfp8> r8(nb);
      std::vector<fm::BlockMxfp4> r4(nb);
      sr ? fm::quantize_mxfp8_sr(x, r8, rng, kFirst) : fm::quantize_mxfp8(x, r8);
      sr ? fm::quantize_mxfp4_sr(x, r4, rng, kFirst) : fm::quantize_mxfp4(x, r4);
      auto d8 = to_device(std::vector<fm::BlockMxfp8>(nb));
      auto d4 = to_device(std::vector<fm::BlockMxfp4>(nb));
      ASSERT_OK(quantize_mxfp8(ctx(), d_x.data(), n, d8.data(), sr ? &key : nullptr));
      ASSERT_OK(quantize_mxfp4(ctx(), d_x.data(), n, d4.data(), sr ? &key : nullptr));
      EXPECT_EQ(bytes_of(to_host(d8, nb)), bytes_of(r8)) << "mxfp8 sr " << sr << " sp " << special;
      EXPECT_EQ(bytes_of(to_host(d4, nb)), bytes_of(r4)) << "mxfp4 sr " << sr << " sp " << special;
      std::vector<float> dec(n);
      auto d_dec = to_device(std::vector<float>(n));
      fm::dequantize_mxfp8(r8, dec);
      ASSERT_OK(dequantize_mxfp8(ctx(), d8.data(), d_dec.data(), n));
      EXPECT_TRUE(same_bits(to_host(d_dec, n), dec, true));
      fm::dequantize_mxfp4(r4, dec);
      ASSERT_OK(dequantize_mxfp4(ctx(), d4.data(), d_dec.data(), n));
      EXPECT_TRUE(same_bits(to_host(d_dec, n), dec, true));

      const float ts_ref = fm::nvfp4_tensor_scale(x);
      const auto ts = nvfp4_tensor_scale(ctx(), d_x.data(), n);
      ASSERT_TRUE(ts.ok());
      EXPECT_EQ(*ts, ts_ref);
      for (auto rounding : {fm::NvfpScaleRounding::kUp, fm::NvfpScaleRounding::kNearest}) {
        const size_t nbn = fm::nvfp4_num_blocks(n);
        std::vector<fm::BlockNvfp4> rn(nbn);
        sr ? fm::quantize_nvfp4_sr(x, ts_ref, rn, rng, kFirst, rounding)
           : fm::quantize_nvfp4(x, ts_ref, rn, rounding);
        auto dn = to_device(std::vector<fm::BlockNvfp4>(nbn));
        ASSERT_OK(
            quantize_nvfp4(ctx(), d_x.data(), n, ts_ref, dn.data(), rounding, sr ? &key : nullptr));
        EXPECT_EQ(bytes_of(to_host(dn, nbn)), bytes_of(rn)) << "nvfp4 sr " << sr;
        fm::dequantize_nvfp4(rn, ts_ref, dec);
        ASSERT_OK(dequantize_nvfp4(ctx(), dn.data(), ts_ref, d_dec.data(), n));
        EXPECT_TRUE(same_bits(to_host(d_dec, n), dec, true));
      }
    }
  }
}

class IntBlockTest : public CudaTest {
 public:
  template <typename T>
  std::vector<T> to_host_public(const DeviceBuffer<T>& d, size_t n) {
    return to_host(d, n);
  }
  Context& context() { return ctx(); }
};

template <int B>
void check_int_blocks(IntBlockTest& t, Context& ctx, const std::vector<float>& x,
                      DeviceBuffer<float>& d_x) {
  const size_t n = x.size();
  const size_t nb = fm::int_num_blocks<B>(n);
  const atl::Philox rng(kSeed, kStream);
  const SrKey key{kSeed, kStream, kFirst};
  for (bool sr : {false, true}) {
    std::vector<fm::BlockQ8<B>> r8(nb);
    std::vector<fm::BlockQ4<B>> r4(nb);
    sr ? fm::quantize_q8_sr<B>(x, r8, rng, kFirst) : fm::quantize_q8<B>(x, r8);
    sr ? fm::quantize_q4_sr<B>(x, r4, rng, kFirst) : fm::quantize_q4<B>(x, r4);
    auto g8 = DeviceBuffer<fm::BlockQ8<B>>::alloc(nb);
    auto g4 = DeviceBuffer<fm::BlockQ4<B>>::alloc(nb);
    ASSERT_TRUE(g8.ok() && g4.ok());
    ASSERT_OK(quantize_int(ctx, 8, B, d_x.data(), n, g8->data(), sr ? &key : nullptr));
    ASSERT_OK(quantize_int(ctx, 4, B, d_x.data(), n, g4->data(), sr ? &key : nullptr));
    EXPECT_EQ(bytes_of(t.to_host_public(*g8, nb)), bytes_of(r8)) << "q8 B " << B << " sr " << sr;
    EXPECT_EQ(bytes_of(t.to_host_public(*g4, nb)), bytes_of(r4)) << "q4 B " << B << " sr " << sr;
    std::vector<float> dec(n);
    auto d_dec = DeviceBuffer<float>::alloc(n);
    ASSERT_TRUE(d_dec.ok());
    fm::dequantize_q8<B>(r8, dec);
    ASSERT_OK(dequantize_int(ctx, 8, B, g8->data(), d_dec->data(), n));
    EXPECT_TRUE(same_bits(t.to_host_public(*d_dec, n), dec));
    fm::dequantize_q4<B>(r4, dec);
    ASSERT_OK(dequantize_int(ctx, 4, B, g4->data(), d_dec->data(), n));
    EXPECT_TRUE(same_bits(t.to_host_public(*d_dec, n), dec));
  }
}

// Finite inputs only: the CPU's int8/int4 codes of a non-finite block depend on the host's
// float->int conversion (see quantize.h); the GPU writes the documented zeros.
TEST_F(IntBlockTest, IntBlocksAreBitwiseEqualToCpu) {
  auto x = tricky(256 * 9, 43, false);
  EXPECT_GT(testing::append_fma_sensitive_blocks(x), 50);
  x.resize(x.size() + 77, -0.75f);
  auto d_x = to_device(x);
  check_int_blocks<32>(*this, context(), x, d_x);
  check_int_blocks<64>(*this, context(), x, d_x);
  check_int_blocks<128>(*this, context(), x, d_x);
  check_int_blocks<256>(*this, context(), x, d_x);
  EXPECT_EQ(quantize_int(context(), 5, 32, d_x.data(), 10, nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace atl::kernels::cuda
