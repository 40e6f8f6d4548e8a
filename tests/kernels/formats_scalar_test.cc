// Exhaustive tests of the scalar formats: every code of every format, every midpoint between
// adjacent representable values, overflow and NaN, and a reference computed in double precision
// by nearest-value search (independent of the bit-manipulation encoders).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "kernels/core/philox.h"
#include "kernels/formats/convert.h"
#include "kernels/formats/scalar.h"

namespace atl::kernels::formats {
namespace {

// One format under test, as plain functions over 32-bit codes.
struct Fmt {
  const char* name;
  int code_bits;
  int man_bits;
  Special special;
  std::function<uint32_t(float)> enc;            // default (RNE, default overflow)
  std::function<uint32_t(float)> enc_sat;        // RNE, saturating
  std::function<uint32_t(float, uint32_t)> enc_sr;
  std::function<float(uint32_t)> dec;
  Overflow default_overflow;
};

std::vector<Fmt> all_formats() {
  return {
      {"bf16", 16, 7, Special::kIeee, [](float x) { return uint32_t{bf16_from_f32(x)}; },
       [](float x) { return minifloat_encode<kBf16Spec>(x, Overflow::kSaturate); },
       [](float x, uint32_t r) { return uint32_t{bf16_from_f32_sr(x, r)}; },
       [](uint32_t c) { return f32_from_bf16(static_cast<uint16_t>(c)); }, Overflow::kInfinity},
      {"fp16", 16, 10, Special::kIeee, [](float x) { return uint32_t{fp16_from_f32(x)}; },
       [](float x) { return uint32_t{fp16_from_f32(x, Overflow::kSaturate)}; },
       [](float x, uint32_t r) { return uint32_t{fp16_from_f32_sr(x, r)}; },
       [](uint32_t c) { return f32_from_fp16(static_cast<uint16_t>(c)); }, Overflow::kInfinity},
      {"e4m3", 8, 3, Special::kE4M3, [](float x) { return uint32_t{e4m3_from_f32(x)}; },
       [](float x) { return uint32_t{e4m3_from_f32(x, Overflow::kSaturate)}; },
       [](float x, uint32_t r) { return uint32_t{e4m3_from_f32_sr(x, r)}; },
       [](uint32_t c) { return f32_from_e4m3(static_cast<uint8_t>(c)); }, Overflow::kSaturate},
      {"e5m2", 8, 2, Special::kIeee, [](float x) { return uint32_t{e5m2_from_f32(x)}; },
       [](float x) { return uint32_t{e5m2_from_f32(x, Overflow::kSaturate)}; },
       [](float x, uint32_t r) { return uint32_t{e5m2_from_f32_sr(x, r)}; },
       [](uint32_t c) { return f32_from_e5m2(static_cast<uint8_t>(c)); }, Overflow::kInfinity},
      {"e2m1", 4, 1, Special::kNone, [](float x) { return uint32_t{e2m1_from_f32(x)}; },
       [](float x) { return uint32_t{e2m1_from_f32(x)}; },
       [](float x, uint32_t r) { return uint32_t{e2m1_from_f32_sr(x, r)}; },
       [](uint32_t c) { return f32_from_e2m1(static_cast<uint8_t>(c)); }, Overflow::kSaturate},
  };
}

uint32_t sign_bit(const Fmt& f) { return 1u << (f.code_bits - 1); }

// (value, code) for every finite code with the sign bit clear, sorted by value. +0 is first.
std::vector<std::pair<double, uint32_t>> positive_grid(const Fmt& f) {
  std::vector<std::pair<double, uint32_t>> g;
  for (uint32_t c = 0; c < sign_bit(f); ++c) {
    const float v = f.dec(c);
    if (std::isfinite(v)) g.emplace_back(static_cast<double>(v), c);
  }
  std::sort(g.begin(), g.end());
  return g;
}

TEST(FormatsScalar, DecodeEncodeIsIdentityOnEveryCode) {
  for (const Fmt& f : all_formats()) {
    const uint32_t ncodes = 1u << f.code_bits;
    int nan_codes = 0;
    for (uint32_t c = 0; c < ncodes; ++c) {
      const float x = f.dec(c);
      uint32_t want = c;
      if (std::isnan(x)) {
        ++nan_codes;
        // Quiet bit forced on IEEE NaNs; E4M3's single NaN pattern per sign is already canonical.
        if (f.special == Special::kIeee) want = c | (1u << (f.man_bits - 1));
      }
      ASSERT_EQ(f.enc(x), want) << f.name << " code " << c;
      // Saturating mode: same, except that infinities become +-max.
      const uint32_t sat_max = f.enc_sat(std::numeric_limits<float>::max());
      ASSERT_EQ(f.enc_sat(x), std::isinf(x) ? (c & sign_bit(f)) | sat_max : want)
          << f.name << " saturating, code " << c;
      // Stochastic rounding never moves a representable value, whatever the random bits.
      for (uint32_t r : {0u, 1u, 0x80000000u, 0xffffffffu}) {
        ASSERT_EQ(f.enc_sr(x, r), want) << f.name << " sr code " << c << " r " << r;
      }
    }
    // Number of NaN codes per spec.
    const int expect_nans = f.special == Special::kIeee
                                ? 2 * ((1 << f.man_bits) - 1)
                                : f.special == Special::kE4M3 ? 2 : 0;
    EXPECT_EQ(nan_codes, expect_nans) << f.name;
  }
}

TEST(FormatsScalar, KnownValues) {
  EXPECT_EQ(f32_from_e4m3(0x7e), 448.0f);
  EXPECT_EQ(f32_from_e4m3(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(f32_from_e4m3(0x08), std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(f32_from_e4m3(0x7f)) && std::isnan(f32_from_e4m3(0xff)));
  EXPECT_EQ(f32_from_e4m3(0x78), 256.0f);  // S.1111.000 is finite in E4M3
  EXPECT_EQ(f32_from_e5m2(0x7b), 57344.0f);
  EXPECT_EQ(f32_from_e5m2(0x01), std::ldexp(1.0f, -16));
  EXPECT_TRUE(std::isinf(f32_from_e5m2(0x7c)) && f32_from_e5m2(0xfc) < 0);
  EXPECT_EQ(f32_from_fp16(0x7bff), 65504.0f);
  EXPECT_EQ(f32_from_fp16(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_from_fp16(0x3c00), 1.0f);
  EXPECT_EQ(f32_from_bf16(0x3f80), 1.0f);
  EXPECT_EQ(f32_from_bf16(0x0001), std::ldexp(1.0f, -133));
  const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(f32_from_e2m1(c), e2m1[c]);
    EXPECT_EQ(f32_from_e2m1(c | 8), -e2m1[c]);
  }
  EXPECT_TRUE(std::signbit(f32_from_e2m1(8)));
}

// Ties go to the even code; one fp32 ulp either side goes to the nearer neighbour.
TEST(FormatsScalar, EveryMidpointRoundsToEven) {
  for (const Fmt& f : all_formats()) {
    const auto g = positive_grid(f);
    size_t checked = 0;
    for (size_t i = 0; i + 1 < g.size(); ++i) {
      const auto [lo, clo] = g[i];
      const auto [hi, chi] = g[i + 1];
      const double mid_d = (lo + hi) / 2;
      const float mid = static_cast<float>(mid_d);
      ASSERT_EQ(static_cast<double>(mid), mid_d) << f.name << ": midpoint not exact in fp32";
      const uint32_t even = (clo & 1u) == 0 ? clo : chi;
      ASSERT_EQ((even & 1u), 0u);
      for (uint32_t s : {0u, sign_bit(f)}) {
        const float sg = s ? -1.0f : 1.0f;
        ASSERT_EQ(f.enc(sg * mid), s | even) << f.name << " midpoint " << mid;
        ASSERT_EQ(f.enc(sg * std::nextafter(mid, 2 * mid)), s | chi) << f.name << " above " << mid;
        ASSERT_EQ(f.enc(sg * std::nextafter(mid, 0.0f)), s | clo) << f.name << " below " << mid;
      }
      ++checked;
    }
    EXPECT_EQ(checked, g.size() - 1);
  }
}

TEST(FormatsScalar, OverflowAndSaturation) {
  for (const Fmt& f : all_formats()) {
    const auto g = positive_grid(f);
    const double max = g.back().first;
    const uint32_t cmax = g.back().second;
    const double ulp = max - g[g.size() - 2].first;  // top binade spacing
    const float over_mid = static_cast<float>(max + ulp / 2);
    const float inf = std::numeric_limits<float>::infinity();
    for (uint32_t s : {0u, sign_bit(f)}) {
      const float sg = s ? -1.0f : 1.0f;
      // Below the overflow midpoint: max, in every mode.
      EXPECT_EQ(f.enc(sg * std::nextafter(over_mid, 0.0f)), s | cmax) << f.name;
      EXPECT_EQ(f.enc_sat(sg * std::nextafter(over_mid, 0.0f)), s | cmax) << f.name;
      // Saturating: everything above, including inf, is max.
      for (float x : {over_mid, std::nextafter(over_mid, inf), std::numeric_limits<float>::max(), inf}) {
        EXPECT_EQ(f.enc_sat(sg * x), s | cmax) << f.name << " " << x;
      }
      // Default overflow mode per format.
      const float big = std::nextafter(over_mid, inf);
      if (f.special == Special::kIeee) {
        const uint32_t cinf = f.enc(inf);
        EXPECT_TRUE(std::isinf(f.dec(cinf)));
        EXPECT_EQ(f.enc(sg * big), s | cinf) << f.name;
        EXPECT_EQ(f.enc(sg * inf), s | cinf) << f.name;
        // The midpoint itself: max has an odd mantissa (all ones), so the tie goes to inf.
        EXPECT_EQ(f.enc(sg * over_mid), s | cinf) << f.name;
      } else {
        EXPECT_EQ(f.enc(sg * big), s | cmax) << f.name;  // E4M3, E2M1 saturate by default
        EXPECT_EQ(f.enc(sg * inf), s | cmax) << f.name;
        EXPECT_EQ(f.enc(sg * over_mid), s | cmax) << f.name;  // 448's mantissa 110 is even
      }
    }
  }
  // E4M3 non-saturating mode (OCP): overflow and inf give NaN, 464 (tie) still rounds to 448.
  EXPECT_EQ(e4m3_from_f32(464.0f, Overflow::kInfinity), 0x7e);
  EXPECT_EQ(e4m3_from_f32(464.1f, Overflow::kInfinity), 0x7f);
  EXPECT_EQ(e4m3_from_f32(-1e9f, Overflow::kInfinity), 0xff);
  EXPECT_EQ(e4m3_from_f32(-std::numeric_limits<float>::infinity(), Overflow::kInfinity), 0xff);
  EXPECT_EQ(fp16_from_f32(65519.996f), 0x7bff);
  EXPECT_EQ(fp16_from_f32(65520.0f), 0x7c00);
}

TEST(FormatsScalar, NanInputs) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float snan = std::bit_cast<float>(0x7f800001u);  // payload only in the low bits
  const float neg_nan = std::bit_cast<float>(0xffc12345u);
  for (float x : {qnan, snan, neg_nan}) {
    EXPECT_TRUE(std::isnan(f32_from_bf16(bf16_from_f32(x))));
    EXPECT_TRUE(std::isnan(f32_from_fp16(fp16_from_f32(x))));
    EXPECT_TRUE(std::isnan(f32_from_fp16(fp16_from_f32(x, Overflow::kSaturate))));
    EXPECT_TRUE(std::isnan(f32_from_e4m3(e4m3_from_f32(x))));
    EXPECT_TRUE(std::isnan(f32_from_e5m2(e5m2_from_f32(x))));
    EXPECT_TRUE(std::isnan(f32_from_e5m2(e5m2_from_f32(x, Overflow::kSaturate))));
    EXPECT_TRUE(std::isnan(f32_from_bf16(bf16_from_f32_sr(x, 0xffffffffu))));
    EXPECT_TRUE(std::isnan(f32_from_e4m3(e4m3_from_f32_sr(x, 123))));
    const bool neg = std::signbit(x);
    EXPECT_EQ(std::signbit(f32_from_bf16(bf16_from_f32(x))), neg);
    EXPECT_EQ(std::signbit(f32_from_fp16(fp16_from_f32(x))), neg);
    EXPECT_EQ(std::signbit(f32_from_e4m3(e4m3_from_f32(x))), neg);
    EXPECT_EQ(std::signbit(f32_from_e5m2(e5m2_from_f32(x))), neg);
    // E2M1 has no NaN: zero with the sign kept (documented; block formats flag NaN in the scale).
    EXPECT_EQ(e2m1_from_f32(x), neg ? 8 : 0);
  }
  EXPECT_EQ(bf16_from_f32(snan), 0x7fc0);
  EXPECT_EQ(e4m3_from_f32(qnan), 0x7f);
}

// Reference fp32 -> target rounding by nearest-value search in double precision over the grid.
uint32_t reference_encode(const Fmt& f, const std::vector<std::pair<double, uint32_t>>& g,
                          float x) {
  const uint32_t s = std::signbit(x) ? sign_bit(f) : 0u;
  const double a = std::fabs(static_cast<double>(x));
  const double max = g.back().first;
  const double over = max + (max - g[g.size() - 2].first) / 2;  // tie goes to inf (odd max)
  if (a >= over) return s | f.enc(std::numeric_limits<float>::infinity());
  auto it = std::lower_bound(g.begin(), g.end(), std::make_pair(a, 0u));
  if (it == g.end()) return s | g.back().second;
  if (it->first == a) return s | it->second;
  const auto hi = *it;
  const auto lo = *(it - 1);
  const double dlo = a - lo.first, dhi = hi.first - a;
  if (dlo < dhi) return s | lo.second;
  if (dhi < dlo) return s | hi.second;
  return s | ((lo.second & 1u) == 0 ? lo.second : hi.second);
}

TEST(FormatsScalar, Bf16AndFp16MatchDoubleReferenceOnRandomFloats) {
  const Philox rng(42, 7);
  for (const Fmt& f : all_formats()) {
    if (f.code_bits != 16) continue;
    const auto g = positive_grid(f);
    const int n = 400000;
    std::vector<float> xs(n);
    for (int i = 0; i < n; ++i) {
      const uint32_t r = rng.u32(2 * i), t = rng.u32(2 * i + 1);
      uint32_t bits;
      switch (t % 4) {
        case 0: bits = r; break;                                        // any pattern
        case 1: bits = (r & 0x807fffffu); break;                        // fp32 subnormals, zero
        case 2: bits = (r & 0x807fffffu) | ((100 + t % 50) << 23); break;  // fp16 range
        default: bits = (r & 0x807fffffu) | ((t >> 8) % 256 << 23); break;
      }
      xs[i] = std::bit_cast<float>(bits);
    }
    for (float x : xs) {
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(f.dec(f.enc(x))));
        continue;
      }
      ASSERT_EQ(f.enc(x), reference_encode(f, g, x)) << f.name << " x=" << x << " bits "
                                                     << std::bit_cast<uint32_t>(x);
    }
    // Span kernels agree with the scalar encoder bit for bit.
    std::vector<uint16_t> out(n);
    if (std::string(f.name) == "bf16") quantize_bf16(xs, out); else quantize_fp16(xs, out);
    for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], f.enc(xs[i])) << f.name << " span " << i;
  }
}

TEST(FormatsScalar, EightBitMatchDoubleReferenceOnRandomFloats) {
  const Philox rng(43, 7);
  for (const Fmt& f : all_formats()) {
    if (f.code_bits != 8 && f.code_bits != 4) continue;
    const auto g = positive_grid(f);
    for (int i = 0; i < 200000; ++i) {
      const float x = std::ldexp(static_cast<float>(rng.normal(i)),
                                 static_cast<int>(rng.u32(i) % 40) - 20);
      uint32_t want = reference_encode(f, g, x);
      // Formats without infinity saturate where the reference overflows.
      if (f.special != Special::kIeee && std::fabs(x) > g.back().first) {
        want = (std::signbit(x) ? sign_bit(f) : 0) | g.back().second;
      }
      ASSERT_EQ(f.enc(x), want) << f.name << " x=" << x;
    }
  }
}

// The compare-based E2M1 encoder against the generic integer rounding, on every sign, exponent
// and top-11 mantissa bit pattern of fp32 with four choices of the low 12 bits (NaN included).
TEST(FormatsScalar, E2m1FastEncoderMatchesGenericOnSweep) {
  for (uint32_t hi = 0; hi < (1u << 20); ++hi) {
    for (uint32_t lo : {0x000u, 0x001u, 0x800u, 0xfffu}) {
      const float x = std::bit_cast<float>((hi << 12) | lo);
      ASSERT_EQ(uint32_t{e2m1_from_f32(x)}, minifloat_encode<kE2M1Spec>(x))
          << "bits " << std::hex << ((hi << 12) | lo);
    }
  }
}

TEST(FormatsScalar, SpanKernelsMatchScalarOnEveryCode) {
  std::vector<float> xs;
  for (uint32_t c = 0; c < 65536; ++c) xs.push_back(f32_from_fp16(static_cast<uint16_t>(c)));
  for (uint32_t c = 0; c < 65536; ++c) xs.push_back(f32_from_bf16(static_cast<uint16_t>(c)));
  for (size_t i = 0; i < 65536; ++i) xs.push_back(std::nextafter(xs[i], 0.0f));  // off-grid
  std::vector<uint8_t> o8(xs.size());
  quantize_e4m3(xs, o8);
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(o8[i], e4m3_from_f32(xs[i])) << i;
  quantize_e4m3(xs, o8, Overflow::kInfinity);
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(o8[i], e4m3_from_f32(xs[i], Overflow::kInfinity));
  quantize_e5m2(xs, o8);
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(o8[i], e5m2_from_f32(xs[i])) << i;
  quantize_e5m2(xs, o8, Overflow::kSaturate);
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(o8[i], e5m2_from_f32(xs[i], Overflow::kSaturate));

  std::vector<uint8_t> c8(256);
  std::vector<float> d8(256);
  for (int c = 0; c < 256; ++c) c8[c] = static_cast<uint8_t>(c);
  dequantize_e4m3(c8, d8);
  for (int c = 0; c < 256; ++c) {
    ASSERT_EQ(std::bit_cast<uint32_t>(d8[c]), std::bit_cast<uint32_t>(f32_from_e4m3(c)));
  }
  dequantize_e5m2(c8, d8);
  for (int c = 0; c < 256; ++c) {
    ASSERT_EQ(std::bit_cast<uint32_t>(d8[c]), std::bit_cast<uint32_t>(f32_from_e5m2(c)));
  }
  std::vector<uint16_t> c16(65536);
  std::vector<float> d16(65536);
  for (uint32_t c = 0; c < 65536; ++c) c16[c] = static_cast<uint16_t>(c);
  dequantize_fp16(c16, d16);
  for (uint32_t c = 0; c < 65536; ++c) {
    ASSERT_EQ(std::bit_cast<uint32_t>(d16[c]), std::bit_cast<uint32_t>(f32_from_fp16(c)));
  }
  dequantize_bf16(c16, d16);
  for (uint32_t c = 0; c < 65536; ++c) {
    ASSERT_EQ(std::bit_cast<uint32_t>(d16[c]), std::bit_cast<uint32_t>(f32_from_bf16(c)));
  }
}

TEST(FormatsScalar, E8M0EveryCodeAndTies) {
  for (int c = 0; c < 256; ++c) {
    const float x = f32_from_e8m0(static_cast<uint8_t>(c));
    if (c == 255) {
      EXPECT_TRUE(std::isnan(x));
    } else {
      EXPECT_EQ(x, std::ldexp(1.0f, c - 127)) << c;
    }
    EXPECT_EQ(e8m0_from_f32(x), c) << c;
    EXPECT_EQ(e8m0_from_exponent(c - 127), c == 255 ? 254 : c);
  }
  // Midpoints between 2^k and 2^(k+1) at 1.5 * 2^k go to the even code.
  for (int c = 0; c < 254; ++c) {
    const float lo = f32_from_e8m0(c);
    const float mid = lo * 1.5f;
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(e8m0_from_f32(mid), even) << c;
    EXPECT_EQ(e8m0_from_f32(std::nextafter(mid, 0.0f)), c) << c;
    EXPECT_EQ(e8m0_from_f32(std::nextafter(mid, 1e38f * 4)), c + 1) << c;
  }
  EXPECT_EQ(e8m0_from_f32(0.0f), 0);
  EXPECT_EQ(e8m0_from_f32(-0.0f), 0);
  EXPECT_EQ(e8m0_from_f32(1e-45f), 0);
  EXPECT_EQ(e8m0_from_f32(std::numeric_limits<float>::max()), 254);
  EXPECT_EQ(e8m0_from_f32(-1.0f), kE8M0Nan);
  EXPECT_EQ(e8m0_from_f32(std::numeric_limits<float>::infinity()), kE8M0Nan);
  EXPECT_EQ(e8m0_from_f32(std::numeric_limits<float>::quiet_NaN()), kE8M0Nan);
}

// Stochastic rounding: only the two neighbours, unbiased, reproducible, piece-independent.
TEST(FormatsScalar, StochasticRoundingUnbiasedAndReproducible) {
  const Philox rng(2024, 3);
  for (const Fmt& f : all_formats()) {
    const auto g = positive_grid(f);
    // A few values between grid points at several magnitudes (incl. subnormal range).
    for (size_t gi : {size_t{1}, size_t{2}, g.size() / 3, g.size() / 2, g.size() - 2}) {
      const double lo = g[gi].first, hi = g[gi + 1].first;
      for (double frac : {0.1, 0.5, 0.77}) {
        const float x = static_cast<float>(lo + frac * (hi - lo));
        const double xd = x;
        const int n = 200000;
        double sum = 0;
        for (int i = 0; i < n; ++i) {
          const float y = f.dec(f.enc_sr(x, rng.u32(i)));
          ASSERT_TRUE(y == static_cast<float>(lo) || y == static_cast<float>(hi)) << f.name;
          sum += y;
        }
        const double mean = sum / n;
        const double p = (xd - lo) / (hi - lo);
        const double sigma = (hi - lo) * std::sqrt(p * (1 - p) / n);
        EXPECT_NEAR(mean, xd, 5 * sigma + 1e-12 * hi) << f.name << " x=" << x;
        EXPECT_NEAR(f.dec(f.enc_sr(-x, rng.u32(5))), -f.dec(f.enc_sr(x, rng.u32(5))), 0.0);
      }
    }
  }
  // Span SR: same key -> same bits; done in two pieces with offsets -> same bits.
  std::vector<float> xs(10000);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(rng.normal(i + 99));
  std::vector<uint16_t> a(xs.size()), b(xs.size()), c(xs.size());
  quantize_bf16_sr(xs, a, Philox(5, 1), 0);
  quantize_bf16_sr(xs, b, Philox(5, 1), 0);
  EXPECT_EQ(a, b);
  quantize_bf16_sr(std::span(xs).first(3333), std::span(c).first(3333), Philox(5, 1), 0);
  quantize_bf16_sr(std::span(xs).subspan(3333), std::span(c).subspan(3333), Philox(5, 1), 3333);
  EXPECT_EQ(a, c);
  quantize_bf16_sr(xs, c, Philox(6, 1), 0);
  EXPECT_NE(a, c);
  std::vector<uint8_t> e1(xs.size()), e2(xs.size());
  quantize_e4m3_sr(xs, e1, Philox(5, 1), 17);
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(e1[i], e4m3_from_f32_sr(xs[i], Philox(5, 1).u32(17 + i)));
  }
  quantize_e5m2_sr(xs, e2, Philox(5, 1), 17);
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(e2[i], e5m2_from_f32_sr(xs[i], Philox(5, 1).u32(17 + i)));
  }
  quantize_fp16_sr(xs, a, Philox(5, 1), 17);
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(a[i], fp16_from_f32_sr(xs[i], Philox(5, 1).u32(17 + i)));
  }
}

TEST(FormatsScalar, AbsMax) {
  std::vector<float> v = {1.0f, -3.0f, 2.0f};
  EXPECT_EQ(abs_max(v).amax, 3.0f);
  EXPECT_TRUE(abs_max(v).all_finite);
  v.push_back(std::numeric_limits<float>::quiet_NaN());
  v.push_back(-std::numeric_limits<float>::infinity());
  EXPECT_EQ(abs_max(v).amax, 3.0f);
  EXPECT_FALSE(abs_max(v).all_finite);
  EXPECT_EQ(abs_max(std::span<const float>()).amax, 0.0f);
}

}  // namespace
}  // namespace atl::kernels::formats

namespace atl::kernels::formats {
namespace {

// The branch-free E4M3 round-up encoder of NVFP4 block scales equals the generic encoder, and its
// decoder the generic decoder: every 61st non-negative bit pattern (every exponent, many
// mantissas), the patterns around each E4M3 boundary, +-0, the largest values, inf and NaN.
TEST(FormatsScalar, E4M3RoundUpForNonNegativeEqualsTheGenericEncoder) {
  auto check = [](uint32_t bits) {
    const float x = std::bit_cast<float>(bits);
    ASSERT_EQ(e4m3_from_f32_up_nonneg(x),
              (minifloat_encode<kE4M3Spec, Rounding::kAwayFromZero>(x)))
        << std::hex << bits;
  };
  for (uint64_t b = 0; b <= 0x7fffffffu; b += 61) check(static_cast<uint32_t>(b));
  for (uint32_t code = 0; code < 0x7f; ++code) {  // each code's value and its neighbours
    const uint32_t v = std::bit_cast<uint32_t>(minifloat_decode<kE4M3Spec>(code));
    for (uint32_t d = 0; d < 3; ++d) {
      check(v + d);
      if (v >= d) check(v - d);
    }
  }
  for (uint32_t bits : {0u, 1u, 0x007fffffu, 0x00800000u, 0x7f7fffffu, 0x7f800000u, 0x7fc00000u,
                        0x7fffffffu}) {
    check(bits);
  }
  for (uint32_t code = 0; code < 0x80; ++code) {
    const float want = minifloat_decode<kE4M3Spec>(code), got = f32_from_e4m3_nonneg(code);
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << code;
  }
}

}  // namespace
}  // namespace atl::kernels::formats
