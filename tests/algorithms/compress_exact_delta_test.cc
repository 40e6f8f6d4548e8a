// sparse-delta-exact: bitwise round trips in both layouts, the layout choice by size, in-place
// decode, and validation of hostile messages (each mutation re-checksummed so the structural
// check is what catches it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "algorithms/compress/exact_delta.h"
#include "kernels/core/crc32c.h"
#include "kernels/core/philox.h"

namespace atl::algorithms::compress::exact_delta {
namespace {

std::vector<float> random_values(size_t n, uint64_t seed) {
  const Philox rng(seed, 7);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.02f * static_cast<float>(rng.normal(i));
  return v;
}

void fix_crc(std::vector<uint8_t>& m) {
  const uint32_t c = crc32c_extend(crc32c(m.data(), 24), m.data() + 28, m.size() - 28);
  std::memcpy(m.data() + 24, &c, 4);
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(ExactDelta, ScatteredChangesUseIndicesAndRoundTripBitwise) {
  const size_t n = 100003;
  const std::vector<float> base = random_values(n, 1);
  std::vector<float> cur = base;
  for (size_t i = 0; i < n; i += 97) cur[i] = std::nextafter(cur[i], 1.0f);  // 1-ulp changes
  const Plan p = plan(cur, base);
  EXPECT_FALSE(p.use_runs);
  EXPECT_EQ(p.changed, (n + 96) / 97);
  auto msg = encode(cur, base);
  ASSERT_TRUE(msg.ok()) << msg.status().to_string();
  EXPECT_EQ(msg->size(), p.bytes);
  EXPECT_LT(msg->size(), n * 4 / 10);
  auto out = decode(*msg, base);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_TRUE(bitwise_equal(*out, cur));
}

TEST(ExactDelta, ContiguousChangesUseRunsAndRoundTripBitwise) {
  const size_t n = 50000;
  const std::vector<float> base = random_values(n, 2);
  std::vector<float> cur = base;
  // One fragment changes (Streaming DiLoCo), with a few unchanged elements inside it (bridged)
  // and -0 vs +0 (different bits, equal values: must be sent).
  for (size_t i = 10000; i < 30000; ++i)
    if (i % 1000 != 3) cur[i] += 0.001f;
  cur[40000] = -0.0f;
  std::vector<float> base2 = base;
  base2[40000] = 0.0f;
  const Plan p = plan(cur, base2);
  EXPECT_TRUE(p.use_runs);
  EXPECT_EQ(p.runs, 2u);
  EXPECT_EQ(p.run_values, 20001u);
  auto msg = encode(cur, base2);
  ASSERT_TRUE(msg.ok());
  EXPECT_EQ(msg->size(), kHeaderBytes + 2 * 16 + 20001 * 4);
  // In place: the base buffer becomes current.
  std::vector<float> inplace = base2;
  ASSERT_TRUE(decode_into(*msg, inplace, inplace).ok());
  EXPECT_TRUE(bitwise_equal(inplace, cur));
}

TEST(ExactDelta, NothingChangedIsAHeader) {
  const std::vector<float> base = random_values(1000, 3);
  auto msg = encode(base, base);
  ASSERT_TRUE(msg.ok());
  EXPECT_EQ(msg->size(), kHeaderBytes);
  auto out = decode(*msg, base);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(bitwise_equal(*out, base));
}

TEST(ExactDelta, EncoderRejectsBadInput) {
  std::vector<float> base(10, 1.0f), cur(10, 1.0f);
  EXPECT_EQ(encode(cur, std::vector<float>(9)).status().code(), StatusCode::kInvalidArgument);
  cur[4] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(encode(cur, base).status().code(), StatusCode::kInvalidArgument);
  cur[4] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(encode(cur, base).status().code(), StatusCode::kInvalidArgument);
}

// Every corruption is a Status and leaves the output untouched.
TEST(ExactDelta, CorruptedMessagesAreRejectedBeforeWriting) {
  const size_t n = 4096;
  const std::vector<float> base = random_values(n, 4);
  std::vector<float> scattered = base, contiguous = base;
  for (size_t i = 0; i < n; i += 50) scattered[i] += 1.0f;
  for (size_t i = 100; i < 900; ++i) contiguous[i] += 1.0f;
  for (const auto* cur : {&scattered, &contiguous}) {
    auto good = encode(*cur, base);
    ASSERT_TRUE(good.ok());
    auto expect_rejected = [&](std::vector<uint8_t> m, bool recrc, const char* what) {
      if (recrc && m.size() >= 32) fix_crc(m);
      std::vector<float> out = base;
      Status st = decode_into(m, base, out);
      EXPECT_FALSE(st.ok()) << what;
      EXPECT_TRUE(bitwise_equal(out, base)) << what;
    };
    std::vector<uint8_t> m = *good;
    ASSERT_GE(m.size(), 32u);
    m[m.size() - 10] ^= 0x40;
    expect_rejected(m, false, "flipped value bit, stale CRC");
    expect_rejected(std::vector<uint8_t>(good->begin(), good->end() - 1), true, "truncated");
    m = *good;
    m.push_back(0);
    expect_rejected(m, true, "trailing byte");
    m = *good;
    m[0] = 'X';
    expect_rejected(m, true, "magic");
    m = *good;
    m[4] = 2;
    expect_rejected(m, true, "version");
    m = *good;
    m[6] = 7;
    expect_rejected(m, true, "mode");
    m = *good;
    m[30] = 1;
    expect_rejected(m, true, "reserved");
    m = *good;
    m[8] ^= 1;
    expect_rejected(m, true, "numel");
    m = *good;
    m[16] += 1;
    expect_rejected(m, true, "count");
    // A NaN value (exponent all ones) in the last value slot.
    m = *good;
    const uint32_t nan_bits = 0x7fc00000u;
    std::memcpy(m.data() + m.size() - 4, &nan_bits, 4);
    expect_rejected(m, true, "NaN value");
    // Structural: indices out of order / runs overlapping or out of range.
    m = *good;
    if (m[6] == 0) {
      m[32] ^= 0xff;  // first index bits
      m[33] ^= 0xff;
      expect_rejected(m, true, "indices");
    } else {
      uint64_t start = n;  // run beyond the end
      std::memcpy(m.data() + 32, &start, 8);
      expect_rejected(m, true, "run start");
      m = *good;
      uint64_t len = 0;
      std::memcpy(m.data() + 40, &len, 8);
      expect_rejected(m, true, "empty run");
    }
    // Another base size.
    std::vector<float> small(n - 1), out(n - 1);
    EXPECT_FALSE(decode_into(*good, small, out).ok());
  }
}

// Random mutations with a valid CRC: never a crash, never a non-finite output.
TEST(ExactDelta, RandomMutationsNeverCrash) {
  const size_t n = 300;
  const std::vector<float> base = random_values(n, 5);
  std::vector<float> cur = base;
  for (size_t i = 10; i < 60; ++i) cur[i] += 1.0f;
  for (size_t i = 100; i < n; i += 7) cur[i] -= 1.0f;
  auto good = encode(cur, base);
  ASSERT_TRUE(good.ok());
  const Philox rng(99, 1);
  for (uint64_t t = 0; t < 20000; ++t) {
    std::vector<uint8_t> m = *good;
    const int flips = 1 + static_cast<int>(rng.u32(3 * t) % 4);
    for (int f = 0; f < flips; ++f)
      m[rng.u32(3 * t + 1 + f) % m.size()] ^= static_cast<uint8_t>(1u << (rng.u32(7 * t + f) % 8));
    fix_crc(m);
    auto out = decode(m, base);
    if (out.ok()) {
      for (float v : *out) ASSERT_TRUE(std::isfinite(v));
    }
  }
}

}  // namespace
}  // namespace atl::algorithms::compress::exact_delta
