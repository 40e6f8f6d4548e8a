// sparse-delta: the bf16 guarantee of the round trip, exact sizes, in-place decode, and
// validation of hostile messages (each mutation re-checksummed so the structural check is what
// catches it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "algorithms/compress/sparse_delta.h"
#include "kernels/core/crc32c.h"
#include "kernels/core/philox.h"
#include "kernels/formats/scalar.h"

namespace atl::algorithms::compress::sparse_delta {
namespace {

namespace fmt = atl::kernels::formats;

// A base θ and a current θ where a fraction of the elements moved by an outer step.
struct Pair {
  std::vector<float> base, current;
};
Pair make_pair(size_t n, double moved, uint64_t seed) {
  const Philox rng(seed, 1);
  Pair p{std::vector<float>(n), std::vector<float>(n)};
  for (size_t i = 0; i < n; ++i) {
    p.base[i] = 0.02f * static_cast<float>(rng.normal(i));
    const bool move = rng.uniform_double(n + i) < moved;
    // Moved elements change by ~1%, far above bf16's resolution; the others by 1e-7 relative,
    // far below it (some still cross a bf16 rounding boundary, which is what the guarantee is
    // about).
    p.current[i] = p.base[i] * (move ? 1.01f : 1.0000001f);
  }
  return p;
}

void fix_crc(std::vector<uint8_t>& m) {
  const uint32_t c = crc32c_extend(crc32c(m.data(), 24), m.data() + 28, m.size() - 28);
  std::memcpy(m.data() + 24, &c, 4);
}

uint64_t load_u64(const std::vector<uint8_t>& m, size_t at) {
  uint64_t v;
  std::memcpy(&v, m.data() + at, 8);
  return v;
}

TEST(SparseDelta, RoundTripIsCurrentAtBf16) {
  for (size_t n : {1, 2, 3, 17, 1000, 65536, 100003}) {
    const Pair p = make_pair(n, 0.1, n);
    auto msg = encode(p.current, p.base);
    ASSERT_TRUE(msg.ok()) << msg.status().to_string();
    const uint64_t k = count_changed(p.current, p.base);
    EXPECT_EQ(msg->size(), message_bytes(n, k)) << n;
    EXPECT_EQ(load_u64(*msg, 16), k);
    auto out = decode(*msg, p.base);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(fmt::bf16_from_f32((*out)[i]), fmt::bf16_from_f32(p.current[i])) << n << " " << i;
      // Unsent elements are the base's own value, bit for bit.
      if (fmt::bf16_from_f32(p.current[i]) == fmt::bf16_from_f32(p.base[i])) {
        ASSERT_EQ(std::bit_cast<uint32_t>((*out)[i]), std::bit_cast<uint32_t>(p.base[i]));
      }
    }
  }
}

TEST(SparseDelta, SizesFollowTheChangedFraction) {
  const size_t n = 1 << 20;
  const Pair p = make_pair(n, 0.05, 9);
  const uint64_t k = count_changed(p.current, p.base);
  EXPECT_GT(k, n * 0.04);
  EXPECT_LT(k, n * 0.07);
  // 20-bit indices + 16-bit values: 36 bits per changed element.
  EXPECT_EQ(message_bytes(n, k), 32 + (k * 20 + 7) / 8 + 2 * k);
  EXPECT_LT(message_bytes(n, k), 2 * n / 5);  // well under a dense bf16 θ
  // Nothing changed: the header alone; everything changed: still decodable.
  auto same = encode(p.base, p.base);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->size(), 32u);
  auto all = encode(p.base, std::vector<float>(n, 1e30f));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), message_bytes(n, n));
  auto back = decode(*all, std::vector<float>(n, 1e30f));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ((*back)[12345], fmt::f32_from_bf16(fmt::bf16_from_f32(p.base[12345])));
  // Empty tensors.
  auto empty = encode({}, {});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(decode(*empty, {}).ok());
}

TEST(SparseDelta, DecodesInPlaceAndLeavesOutputAloneOnError) {
  const Pair p = make_pair(5000, 0.2, 4);
  const auto msg = *encode(p.current, p.base);
  std::vector<float> theta = p.base;
  ASSERT_TRUE(decode_into(msg, theta, theta).ok());
  for (size_t i = 0; i < theta.size(); ++i) {
    ASSERT_EQ(fmt::bf16_from_f32(theta[i]), fmt::bf16_from_f32(p.current[i]));
  }
  // A message that fails only at its last value (bf16 +inf): indices are all valid, so a decoder
  // that applied elements as it validated them would already have written to theta.
  auto bad = msg;
  const uint16_t inf = 0x7f80;
  std::memcpy(bad.data() + bad.size() - 2, &inf, 2);
  fix_crc(bad);
  std::vector<float> untouched = p.base;
  EXPECT_EQ(decode_into(bad, untouched, untouched).code(), StatusCode::kDataLoss);
  EXPECT_EQ(untouched, p.base);
}

TEST(SparseDelta, RejectsBadInput) {
  std::vector<float> a(10, 1.0f), b(11, 1.0f);
  EXPECT_EQ(encode(a, b).status().code(), StatusCode::kInvalidArgument);
  a[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(encode(a, std::vector<float>(10)).status().code(), StatusCode::kInvalidArgument);
  a[3] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(encode(a, std::vector<float>(10)).ok());
  a[3] = 3.4e38f;  // finite in fp32, rounds to inf in bf16
  EXPECT_FALSE(encode(a, std::vector<float>(10)).ok());
  // A NaN in the base is only compared: the element is sent, the result is finite.
  a[3] = 2.0f;
  std::vector<float> base(10, 1.0f);
  base[5] = std::numeric_limits<float>::quiet_NaN();
  auto out = decode(*encode(a, base), base);
  ASSERT_TRUE(out.ok());
  for (float v : *out) EXPECT_TRUE(std::isfinite(v));
  // Output size must match the base.
  std::vector<float> small(9);
  EXPECT_FALSE(decode_into(*encode(a, base), base, small).ok());
}

TEST(SparseDelta, RejectsMalformedMessages) {
  const size_t n = 300;
  const Pair p = make_pair(n, 0.3, 5);
  const auto good = *encode(p.current, p.base);
  const uint64_t k = load_u64(good, 16);
  ASSERT_GT(k, 10u);
  ASSERT_TRUE(decode(good, p.base).ok());
  for (size_t len = 0; len < good.size(); ++len) {
    EXPECT_FALSE(decode(std::span(good).first(len), p.base).ok()) << len;
  }
  auto longer = good;
  longer.push_back(0);
  EXPECT_FALSE(decode(longer, p.base).ok());
  // A flipped bit anywhere is caught by the checksum.
  for (size_t i = 0; i < good.size(); ++i) {
    auto m = good;
    m[i] ^= 0x10;
    EXPECT_FALSE(decode(m, p.base).ok()) << "byte " << i;
  }
  // Wrong base size.
  EXPECT_EQ(decode(good, std::vector<float>(n + 1)).status().code(), StatusCode::kInvalidArgument);

  auto mutate = [&](auto fn) {
    auto m = good;
    fn(m);
    fix_crc(m);
    return decode(m, p.base).status();
  };
  EXPECT_FALSE(mutate([](auto& m) { m[0] = 'X'; }).ok());
  EXPECT_EQ(mutate([](auto& m) { m[4] = 2; }).code(), StatusCode::kInvalidArgument);  // version
  EXPECT_FALSE(mutate([](auto& m) { m[6] = 10; }).ok());                              // width
  EXPECT_FALSE(mutate([](auto& m) { m[7] = 1; }).ok());                               // reserved
  EXPECT_FALSE(mutate([](auto& m) { m[29] = 1; }).ok());                              // reserved
  EXPECT_FALSE(mutate([&](auto& m) {
                 const uint64_t big = n + 1;
                 std::memcpy(m.data() + 16, &big, 8);  // k > n
               }).ok());
  EXPECT_FALSE(mutate([&](auto& m) {
                 const uint64_t fewer = k - 1;  // length no longer matches
                 std::memcpy(m.data() + 16, &fewer, 8);
               }).ok());
  EXPECT_FALSE(mutate([&](auto& m) {
                 const uint64_t other = n * 2;  // numel
                 std::memcpy(m.data() + 8, &other, 8);
               }).ok());
  // Indices: 9 bits each for n = 300. Index 0 := index 1 (not strictly increasing); index
  // 0 := 511 (out of range, and above index 1).
  auto set_index = [](std::vector<uint8_t>& m, size_t j, uint32_t v) {
    for (uint32_t b = 0; b < 9; ++b) {
      const size_t bit = 32 * 8 + j * 9 + b;
      m[bit / 8] =
          static_cast<uint8_t>((m[bit / 8] & ~(1u << (bit % 8))) | (((v >> b) & 1u) << (bit % 8)));
    }
  };
  auto get_index = [](const std::vector<uint8_t>& m, size_t j) {
    uint32_t v = 0;
    for (uint32_t b = 0; b < 9; ++b) {
      const size_t bit = 32 * 8 + j * 9 + b;
      v |= ((m[bit / 8] >> (bit % 8)) & 1u) << b;
    }
    return v;
  };
  EXPECT_FALSE(mutate([&](auto& m) { set_index(m, 0, get_index(m, 1)); }).ok());
  EXPECT_FALSE(mutate([&](auto& m) { set_index(m, k - 1, 300); }).ok());
  EXPECT_FALSE(mutate([&](auto& m) { set_index(m, k - 1, 511); }).ok());
  // Nonzero padding bits after the last index (k * 9 bits do not fill the last byte unless
  // k is a multiple of 8).
  if ((k * 9) % 8 != 0) {
    EXPECT_FALSE(mutate([&](auto& m) { m[32 + (k * 9) / 8] |= 0x80; }).ok());
  }
  // Non-finite values: bf16 +inf and NaN.
  const size_t vals = 32 + (k * 9 + 7) / 8;
  for (uint16_t code : {0x7f80, 0xff80, 0x7fc0}) {
    EXPECT_FALSE(mutate([&](auto& m) { std::memcpy(m.data() + vals + 2, &code, 2); }).ok());
  }
}

}  // namespace
}  // namespace atl::algorithms::compress::sparse_delta
