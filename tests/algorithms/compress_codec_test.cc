// Codec pipeline: spec parsing, round trips with error bounds per codec, exact sizes, top-k
// selection and tie-breaks, validation of hostile messages, error feedback.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "algorithms/compress/codec.h"
#include "algorithms/compress/entropy.h"
#include "kernels/core/crc32c.h"
#include "algorithms/compress/error_feedback.h"
#include "algorithms/compress/spec.h"
#include "algorithms/compress/topk.h"
#include "kernels/core/philox.h"

namespace atl::algorithms::compress {
namespace {

std::vector<float> gradient_like(size_t n, uint64_t seed, float scale = 1e-3f) {
  const Philox rng(seed, 1);
  std::vector<float> v(n);
  // Heavy-ish tails: normal times a per-256 magnitude drift, like layers of a pseudo-gradient.
  for (size_t i = 0; i < n; ++i) {
    v[i] = scale * static_cast<float>(rng.normal(i)) * (1.0f + static_cast<float>((i / 256) % 7));
  }
  return v;
}

Codec make(const std::string& s) {
  auto c = Codec::create(s);
  EXPECT_TRUE(c.ok()) << s << ": " << c.status().to_string();
  return *c;
}

TEST(CompressSpec, ParseAndCanonicalForm) {
  const std::vector<std::pair<std::string, std::string>> ok = {
      {"none", "none"},          {"fp32", "none"},
      {"bf16", "bf16"},          {"fp16", "fp16"},
      {"fp8", "fp8"},            {"int8", "int8:32"},
      {"int8:64", "int8:64"},    {"int4", "int4:32"},
      {"int4:256", "int4:256"},  {"nvfp4", "nvfp4"},
      {"mxfp4", "mxfp4"},        {"mxfp8", "mxfp8"},
      {"topk:0.02", "topk:0.02"}, {"topk:0.02+int4", "topk:0.02+int4:32"},
      {"topk:1", "topk:1"},      {"topk-chunked:0.01", "topk-chunked:0.01:4096"},
      {"topk-chunked:0.1:512+nvfp4", "topk-chunked:0.1:512+nvfp4"},
      {"topk:0.5+fp32", "topk:0.5"},
      {"sign", "sign:128"},      {"sign:32", "sign:32"},
      {"ternary", "ternary:128"}, {"ternary:256", "ternary:256"},
      {"topk-chunked:0.015625:4096+sign:64", "topk-chunked:0.015625:4096+sign:64"},
      {"int4:256+zstd", "int4:256+zstd"}, {"int4+zstd", "int4:32+zstd"},
      {"int3", "int3:32"},                {"int3:256+zstd", "int3:256+zstd"},
      {"fp32+zstd", "fp32+zstd"},         {"topk:0.02+zstd", "topk:0.02+zstd"},
      {"topk-chunked:0.1:512+nvfp4+zstd", "topk-chunked:0.1:512+nvfp4+zstd"},
  };
  for (const auto& [in, canon] : ok) {
    auto s = parse_spec(in);
    ASSERT_TRUE(s.ok()) << in << ": " << s.status().to_string();
    EXPECT_EQ(s->to_string(), canon) << in;
    auto again = parse_spec(s->to_string());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *s) << in;
  }
  for (const char* bad : {"", "zip", "topk", "topk:", "topk:0", "topk:1.5", "topk:-0.1",
                          "topk:nan", "topk:0.1x", "int8:33", "int8:", "int4:32:1", "bf16:3",
                          "bf16+int8", "int8+topk:0.1", "topk:0.1+topk:0.2", "none+bf16",
                          "topk-chunked:0.1:8", "topk-chunked:0.1:99999999999",
                          "topk:0.1+bf16+int8", "BF16", " bf16", "sign:16", "sign:129",
                          "ternary:", "ternary:128:1", "int2", "zstd", "none+zstd",
                          "zstd+int4", "int4+zstd+zstd", "topk:0.1+int4+bf16+zstd",
                          "int4+ZSTD", "int3:16", "int3:"}) {
    auto s = parse_spec(bad);
    EXPECT_FALSE(s.ok()) << "'" << bad << "' parsed";
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

// Per-element error bound for each dense codec, given the block max around the element.
struct Bound {
  std::string spec;
  int block;          // elements per scale block (0: whole tensor)
  double rel;         // times |x|
  double rel_amax;    // times the block (or tensor) amax
};

TEST(CompressCodec, DenseRoundTripsWithinBounds) {
  const std::vector<Bound> bounds = {
      {"none", 0, 0, 0},
      {"bf16", 0, 1.0 / 256, 0},
      {"fp16", 0, 1.0 / 2048, 1e-4},  // fp16 subnormals near 1e-8 relative to amax ~1e-2
      {"fp8", 0, 1.0 / 16, 1.0 / 448 / 512},
      {"int8", 32, 0, 1.0 / 254},
      {"int8:256", 256, 0, 1.0 / 254},
      {"int4", 32, 0, 1.0 / 14},
      {"int4:64", 64, 0, 1.0 / 14},
      {"int3", 32, 0, 1.0 / 6},
      {"int3:256", 256, 0, 1.0 / 6},
      {"mxfp8", 32, 0, 1.0 / 14},
      {"mxfp4", 32, 0, 1.0 / 3},
      {"nvfp4", 16, 0, 1.0 / 4},
  };
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{33}, size_t{10007}}) {
    const auto x = gradient_like(n, n + 1);
    for (const Bound& b : bounds) {
      const Codec c = make(b.spec);
      auto bytes = c.encode(x);
      ASSERT_TRUE(bytes.ok()) << b.spec;
      EXPECT_EQ(bytes->size(), encoded_bytes(c.spec(), n)) << b.spec;
      if (n > 0) {
        EXPECT_DOUBLE_EQ(*bits_per_value(b.spec, n), 8.0 * bytes->size() / n);
      }
      auto y = c.decode(*bytes, n);
      ASSERT_TRUE(y.ok()) << b.spec << ": " << y.status().to_string();
      auto y2 = decode(*bytes, n);  // spec from the message
      ASSERT_TRUE(y2.ok());
      ASSERT_EQ(*y, *y2);
      for (size_t i = 0; i < n; ++i) {
        double amax = 0;
        const size_t lo = b.block ? i / b.block * b.block : 0;
        const size_t hi = b.block ? std::min(n, lo + b.block) : n;
        for (size_t j = lo; j < hi; ++j) amax = std::max(amax, std::fabs(double{x[j]}));
        const double err = std::fabs(double{(*y)[i]} - x[i]);
        ASSERT_LE(err, (b.rel * std::fabs(x[i]) + b.rel_amax * amax) * 1.0001 + 1e-30)
            << b.spec << " n=" << n << " i=" << i << " x=" << x[i] << " y=" << (*y)[i];
      }
    }
  }
  // Sizes: bits per value of the dense codecs at large n (header amortized).
  const uint64_t big = uint64_t{1} << 24;
  EXPECT_NEAR(*bits_per_value("none", big), 32, 1e-3);
  EXPECT_NEAR(*bits_per_value("bf16", big), 16, 1e-3);
  EXPECT_NEAR(*bits_per_value("fp8", big), 8, 1e-3);
  EXPECT_NEAR(*bits_per_value("int8", big), 9, 1e-3);
  EXPECT_NEAR(*bits_per_value("int4", big), 5, 1e-3);
  EXPECT_NEAR(*bits_per_value("int3", big), 5, 1e-3);  // 4-bit fields: for "+zstd"
  EXPECT_NEAR(*bits_per_value("int3:256", big), 4.125, 1e-3);
  EXPECT_NEAR(*bits_per_value("mxfp4", big), 4.25, 1e-3);
  EXPECT_NEAR(*bits_per_value("nvfp4", big), 4.5, 1e-3);
  EXPECT_NEAR(*bits_per_value("topk:0.02+int4", big), 0.02 * (24 + 5), 1e-3);  // 24-bit index + 5-bit int4
  // Sub-2-bit: 1 bit + 16/B (sign), 8/5 bits rounded up per block + 16/B (ternary).
  EXPECT_NEAR(*bits_per_value("sign", big), 1.125, 1e-3);
  EXPECT_NEAR(*bits_per_value("sign:256", big), 1.0625, 1e-3);
  EXPECT_NEAR(*bits_per_value("ternary", big), 28.0 * 8 / 128, 1e-3);
  EXPECT_NEAR(*bits_per_value("ternary:256", big), 54.0 * 8 / 256, 1e-3);
  // 64 of 4096 with a 12-bit chunk-local index and a sign bit, a bf16 scale per 128 kept.
  EXPECT_NEAR(*bits_per_value("topk-chunked:0.015625:4096+sign", big),
              (64 * 13 + 64.0 / 128 * 16) / 4096, 1e-3);
  EXPECT_FALSE(bits_per_value("nope", 10).ok());
}

TEST(CompressCodec, SignAndTernaryRoundTrip) {
  for (size_t n : {size_t{1}, size_t{15}, size_t{129}, size_t{10007}}) {
    const auto x = gradient_like(n, n + 5);
    for (const char* spec : {"sign", "sign:32", "ternary", "ternary:256"}) {
      const Codec c = make(spec);
      const int b = c.spec().block;
      auto bytes = c.encode(x);
      ASSERT_TRUE(bytes.ok()) << spec;
      EXPECT_EQ(bytes->size(), encoded_bytes(c.spec(), n)) << spec;
      auto y = c.decode(*bytes, n);
      ASSERT_TRUE(y.ok()) << spec << ": " << y.status().to_string();
      ASSERT_EQ(*y, *decode(*bytes, n));
      const bool sign = c.spec().quantizer == Quantizer::kSign;
      for (size_t lo = 0; lo < n; lo += b) {
        const size_t hi = std::min(n, lo + b);
        double mean = 0, err = 0, energy = 0;
        for (size_t i = lo; i < hi; ++i) mean += std::fabs(double{x[i]}) / double(hi - lo);
        for (size_t i = lo; i < hi; ++i) {
          const double yi = (*y)[i];
          if (sign) {
            // Every value is ±mean|x| of its block (bf16-rounded), with x's sign.
            ASSERT_NEAR(std::fabs(yi), mean, mean / 256) << spec << " i=" << i;
            ASSERT_EQ(yi < 0, x[i] < 0) << spec << " i=" << i;
          } else if (yi != 0) {
            ASSERT_EQ(yi < 0, x[i] < 0) << spec << " i=" << i;
            ASSERT_GT(std::fabs(double{x[i]}), 0.7 * mean * 0.999) << spec << " i=" << i;
          }
          err += (yi - x[i]) * (yi - x[i]);
          energy += double{x[i]} * x[i];
        }
        // Never worse than sending zeros: the scale is the least-squares one for the codes.
        ASSERT_LE(err, energy * 1.01 + 1e-30) << spec << " block at " << lo;
      }
    }
  }
  // Chunked top-k with sign values: the kept positions are the top 64 of each chunk.
  const size_t n = 3 * 4096 + 100;
  const auto x = gradient_like(n, 9);
  const Codec c = make("topk-chunked:0.015625:4096+sign:64");
  auto y = c.decode(*c.encode(x), n);
  ASSERT_TRUE(y.ok());
  size_t nonzero = 0;
  for (size_t i = 0; i < n; ++i) {
    if ((*y)[i] != 0) {
      ++nonzero;
      ASSERT_EQ((*y)[i] < 0, x[i] < 0);
    }
  }
  EXPECT_EQ(nonzero, 3 * 64 + 2);  // round(100 / 64) = 2 kept in the tail chunk
}

TEST(CompressCodec, TopkIsExactWithIndexTieBreak) {
  const size_t n = 5000;
  auto x = gradient_like(n, 9);
  const Codec c = make("topk:0.03");
  auto y = c.decode(*c.encode(x), n);
  ASSERT_TRUE(y.ok());
  const uint64_t k = kept_in(0.03, n);
  EXPECT_EQ(k, 150u);
  float min_kept = std::numeric_limits<float>::infinity(), max_dropped = 0;
  uint64_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if ((*y)[i] != 0) {
      ++kept;
      EXPECT_EQ((*y)[i], x[i]);  // fp32 values are sent exactly
      min_kept = std::min(min_kept, std::fabs(x[i]));
    } else {
      max_dropped = std::max(max_dropped, std::fabs(x[i]));
    }
  }
  EXPECT_EQ(kept, k);
  EXPECT_GE(min_kept, max_dropped);
  // Ties: all equal magnitudes, alternating sign -> the k lowest indices win.
  std::vector<float> t(100);
  for (size_t i = 0; i < t.size(); ++i) t[i] = (i % 2) ? -1.0f : 1.0f;
  const Codec c10 = make("topk:0.1");
  auto yt = c10.decode(*c10.encode(t), t.size());
  ASSERT_TRUE(yt.ok());
  for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ((*yt)[i], i < 10 ? t[i] : 0.0f) << i;
  // A larger value later still wins over ties.
  t[77] = 2.0f;
  yt = c10.decode(*c10.encode(t), t.size());
  EXPECT_EQ((*yt)[77], 2.0f);
  EXPECT_EQ((*yt)[9], 0.0f);
  EXPECT_EQ((*yt)[8], 1.0f);
}

// Top-k by a full sort: larger |x| first, then the smaller index; the k indices ascending.
std::vector<uint32_t> topk_by_full_sort(std::span<const float> x, uint64_t k) {
  std::vector<uint32_t> order(x.size());
  for (uint32_t i = 0; i < x.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

// The radix selection equals a full sort under "larger |x| first, then the smaller index", on
// inputs with many ties (repeated magnitudes, zeros, both signs) and every bucket boundary.
TEST(CompressTopk, RadixSelectionEqualsAFullSort) {
  const Philox rng(7, 3);
  for (int trial = 0; trial < 40; ++trial) {
    const size_t n = 1 + static_cast<size_t>(rng.below(static_cast<uint64_t>(trial), 5000));
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t r = rng.below((static_cast<uint64_t>(trial) << 32) | i, 1u << 20);
      switch (trial % 4) {
        case 0: x[i] = static_cast<float>(rng.normal((static_cast<uint64_t>(trial) << 32) | i)); break;
        case 1: x[i] = static_cast<float>(static_cast<int>(r % 7) - 3); break;  // many ties, zeros
        case 2: x[i] = std::ldexp(1.0f, static_cast<int>(r % 40) - 20) * ((r & 1) ? -1 : 1); break;
        default: x[i] = (r % 3 == 0) ? 0.0f : std::nextafter(1.0f, 2.0f) * static_cast<float>(r % 5);
      }
    }
    for (uint64_t k : {uint64_t{1}, uint64_t{2}, static_cast<uint64_t>(n / 50 + 1),
                       static_cast<uint64_t>(n / 2), static_cast<uint64_t>(n - 1),
                       static_cast<uint64_t>(n)}) {
      if (k > n) continue;
      EXPECT_EQ(topk_indices(x, k), topk_by_full_sort(x, k)) << "trial " << trial << " n " << n << " k " << k;
    }
  }
}

// Large inputs, and one scratch reused across selections of different sizes, give the indices
// of a full sort.
TEST(CompressTopk, LargeInputsWithReusedScratchEqualAFullSort) {
  const Philox rng(11, 4);
  const size_t n = 600001;
  TopkScratch scratch;
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t r = rng.below((static_cast<uint64_t>(kind) << 32) | i, 1u << 20);
      switch (kind) {
        case 0: x[i] = static_cast<float>(rng.normal((static_cast<uint64_t>(kind) << 32) | i)); break;
        case 1: x[i] = static_cast<float>(static_cast<int>(r % 7) - 3); break;  // ties everywhere
        default: x[i] = (r % 50 == 0) ? 1.0f : 1e-3f * static_cast<float>(r % 1000);  // a tied top
      }
    }
    for (uint64_t k : {uint64_t{1}, uint64_t{600}, uint64_t{12000}, uint64_t{200000}}) {
      const auto want = topk_by_full_sort(x, k);
      std::vector<uint32_t> got;
      topk_indices(x, k, scratch, got);
      EXPECT_EQ(got, want) << "kind " << kind << " k " << k;
      topk_indices(std::span<const float>(x).first(5000), k / 100 + 1, scratch, got);
      EXPECT_EQ(got, topk_by_full_sort(std::span<const float>(x).first(5000), k / 100 + 1)) << kind;
    }
  }
}

// Long inputs select from a sampled floor; inputs that mislead the sample (large values only
// where it looks, or only where it does not) still give the indices of a full sort.
TEST(CompressTopk, InputsThatMisleadTheSampleEqualAFullSort) {
  const size_t n = (size_t{1} << 16) + 4099;
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) {
      const bool sampled = i % 64 == 32;  // the positions a stride-64 sample reads
      const float big = 1.0f + static_cast<float>(i % 977) / 977.0f;
      switch (kind) {
        case 0: x[i] = sampled ? big : 1e-6f * big; break;   // the sample sees only the top
        case 1: x[i] = sampled ? 1e-6f * big : big; break;   // the sample sees only the bottom
        default: x[i] = (i / 4096) % 2 ? big : -1e-3f * big; break;  // halves apart
      }
    }
    for (uint64_t k : {uint64_t{1}, uint64_t{n / 100}, uint64_t{n / 50}, uint64_t{n / 10},
                       uint64_t{n / 2}}) {
      EXPECT_EQ(topk_indices(x, k), topk_by_full_sort(x, k)) << "kind " << kind << " k " << k;
    }
  }
}

// topk_select (AVX-512 where built) and topk_select_portable give the indices of a full sort and
// the values at them, and report the largest magnitude, on short inputs (chunks; one scratch
// reused, so each selection starts from the last one's hint) and long ones, with ties, zeros,
// subnormals, scales far apart and a few huge values.
TEST(CompressTopk, SelectionAndItsPortableFormEqualAFullSort) {
  const Philox rng(13, 5);
  TopkScratch vector_scratch, portable_scratch;
  for (int trial = 0; trial < 120; ++trial) {
    const uint64_t t = static_cast<uint64_t>(trial);
    const size_t n = 1 + static_cast<size_t>(rng.below(t, trial % 10 == 9 ? 150000 : 6000));
    const double scale = std::pow(10.0, -static_cast<double>(rng.below(t << 8, 30)));
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t at = (t << 32) | i;
      const uint64_t r = rng.below(at, 1u << 20);
      switch (trial % 6) {
        case 0: x[i] = static_cast<float>(rng.normal(at) * scale); break;
        case 1: x[i] = static_cast<float>(static_cast<int>(r % 7) - 3); break;  // ties, zeros
        case 2: x[i] = std::ldexp(1.0f, static_cast<int>(r % 40) - 20) * ((r & 1) ? -1 : 1); break;
        case 3: x[i] = r % 100 == 0 ? 1e30f : static_cast<float>(rng.normal(at) * 1e-30); break;
        case 4: x[i] = std::ldexp(1.0f, -140) * static_cast<float>(r % 50); break;  // subnormal
        default: x[i] = static_cast<float>(rng.normal(at) * std::pow(10.0, -double(i / 4096 % 5)));
      }
    }
    float largest = 0;
    for (float v : x) largest = std::max(largest, std::fabs(v));
    for (uint64_t k : {uint64_t{1}, static_cast<uint64_t>(n / 50 + 1),
                       static_cast<uint64_t>(n / 7 + 1), static_cast<uint64_t>(n - n / 3),
                       static_cast<uint64_t>(n)}) {
      if (k > n) continue;
      const auto want = topk_by_full_sort(x, k);
      std::vector<uint32_t> index(k), portable_index(k);
      std::vector<float> value(k), portable_value(k);
      const uint32_t top = topk_select(x, k, vector_scratch, index.data(), value.data());
      const uint32_t portable_top =
          topk_select_portable(x, k, portable_scratch, portable_index.data(),
                               portable_value.data());
      ASSERT_EQ(index, want) << "trial " << trial << " n " << n << " k " << k;
      ASSERT_EQ(portable_index, want) << "trial " << trial << " n " << n << " k " << k;
      for (uint64_t j = 0; j < k; ++j) {
        ASSERT_EQ(std::bit_cast<uint32_t>(value[j]), std::bit_cast<uint32_t>(x[want[j]])) << j;
        ASSERT_EQ(std::bit_cast<uint32_t>(portable_value[j]), std::bit_cast<uint32_t>(x[want[j]]));
      }
      EXPECT_EQ(top, std::bit_cast<uint32_t>(largest));
      EXPECT_EQ(portable_top, std::bit_cast<uint32_t>(largest));
    }
  }
}

TEST(CompressCodec, ChunkedTopkAndCombos) {
  const size_t n = 4096 * 3 + 100;
  const auto x = gradient_like(n, 5);
  const Codec c = make("topk-chunked:0.05:4096");
  auto y = c.decode(*c.encode(x), n);
  ASSERT_TRUE(y.ok());
  for (size_t base = 0; base < n; base += 4096) {
    const size_t len = std::min<size_t>(4096, n - base);
    size_t kept = 0;
    float min_kept = 1e30f, max_dropped = 0;
    for (size_t i = base; i < base + len; ++i) {
      if ((*y)[i] != 0) {
        ++kept;
        min_kept = std::min(min_kept, std::fabs(x[i]));
      } else {
        max_dropped = std::max(max_dropped, std::fabs(x[i]));
      }
    }
    EXPECT_EQ(kept, kept_in(0.05, len));
    EXPECT_GE(min_kept, max_dropped);
  }
  // topk + quantizer: same support as plain top-k, values within the quantizer's bound.
  const Codec plain = make("topk:0.02");
  const Codec q = make("topk:0.02+int4");
  auto yp = plain.decode(*plain.encode(x), n);
  auto yq = q.decode(*q.encode(x), n);
  ASSERT_TRUE(yp.ok() && yq.ok());
  float amax = 0;
  for (float v : *yp) amax = std::max(amax, std::fabs(v));
  for (size_t i = 0; i < n; ++i) {
    if ((*yq)[i] != 0) {
      EXPECT_NE((*yp)[i], 0.0f) << i;  // nothing outside the top-k support
    }
    EXPECT_LE(std::fabs((*yq)[i] - (*yp)[i]), amax / 14 * 1.001f) << i;
  }
  for (const char* s : {"topk:0.1+bf16", "topk:0.1+fp8", "topk:0.1+nvfp4", "topk:0.1+mxfp4",
                        "topk-chunked:0.1:64+int8:64", "topk:1+int8"}) {
    const Codec cc = make(s);
    for (size_t m : {size_t{1}, size_t{17}, size_t{1000}}) {
      auto b = cc.encode(std::span(x).first(m));
      ASSERT_TRUE(b.ok()) << s;
      EXPECT_EQ(b->size(), encoded_bytes(cc.spec(), m)) << s;
      ASSERT_TRUE(cc.decode(*b, m).ok()) << s << " m=" << m;
    }
  }
}

TEST(CompressSpec, NoneIsTheIdentityCodec) {
  EXPECT_TRUE(Codec::none().is_none());
  EXPECT_EQ(Codec::none().spec().to_string(), kNoneSpec);
  EXPECT_EQ(make(std::string(kNoneSpec)).spec(), Codec::none().spec());
  EXPECT_TRUE(make("fp32").is_none());  // dense fp32 is the same codec
  for (const char* s : {"bf16", "topk:0.5", "int8", "topk:1"}) EXPECT_FALSE(make(s).is_none()) << s;
}

TEST(CompressCodec, EncoderRejectsNonFinite) {
  std::vector<float> x(10, 1.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(make("int8").encode(x).ok());
  x[3] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(make("none").encode(x).ok());
  x[3] = 3e38f;
  EXPECT_FALSE(make("bf16").encode(x).ok());
  // Top-k checks its input inside the selection: a bad value anywhere, kept or not.
  std::vector<float> y(20000, 1.0f);
  for (const char* spec : {"topk:0.01", "topk:0.5", "topk-chunked:0.02:1024+int4", "topk:1"}) {
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::infinity(), 3e38f}) {
      for (const size_t at : {size_t{0}, size_t{12345}, y.size() - 1}) {
        y[at] = bad;
        const auto msg = make(spec).encode(y);
        EXPECT_FALSE(msg.ok()) << spec << " " << bad << " at " << at;
        y[at] = 1.0f;
      }
    }
    EXPECT_TRUE(make(spec).encode(y).ok()) << spec;
  }
  // A failed encode into a reused buffer leaves no message that decodes, even where the bytes it
  // wrote before stopping are those of the last good message (a NaN where a kept value was).
  for (const char* spec : {"topk-chunked:0.02:1024+int4", "topk:0.01", "int8", "nvfp4"}) {
    const Codec c = make(spec);
    std::vector<float> z(20000, 1.0f);
    z[5000] = 7.0f;
    std::vector<uint8_t> msg;
    ASSERT_TRUE(c.encode_into(z, msg).ok()) << spec;
    ASSERT_TRUE(c.decode(msg, z.size()).ok()) << spec;
    z[5000] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_FALSE(c.encode_into(z, msg).ok()) << spec;
    EXPECT_FALSE(c.decode(msg, z.size()).ok()) << spec;
  }
}

// ---- hostile messages ----------------------------------------------------------------------------

void fix_crc(std::vector<uint8_t>& m) {
  const uint32_t c = crc32c_extend(crc32c(m.data(), 24), m.data() + 28, m.size() - 28);
  std::memcpy(m.data() + 24, &c, 4);
}

size_t payload_offset(const std::vector<uint8_t>& m) {
  uint16_t l;
  std::memcpy(&l, m.data() + 6, 2);
  return 32 + l;
}

TEST(CompressCodec, RejectsMalformedMessages) {
  const size_t n = 300;
  const auto x = gradient_like(n, 3);
  const Codec c = make("topk:0.1");
  const auto good = *c.encode(x);
  ASSERT_TRUE(c.decode(good, n).ok());
  // Every truncation and every extension.
  for (size_t len = 0; len < good.size(); ++len) {
    EXPECT_FALSE(c.decode(std::span(good).first(len), n).ok()) << len;
  }
  auto longer = good;
  longer.push_back(0);
  EXPECT_FALSE(c.decode(longer, n).ok());
  // Wrong numel, wrong codec.
  EXPECT_EQ(c.decode(good, n + 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(make("topk:0.2").decode(good, n).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(decode(good, n).ok());
  // Field-level corruption with a valid checksum, so the structural checks are what catch it.
  auto mutate = [&](auto fn) {
    auto m = good;
    fn(m);
    fix_crc(m);
    return c.decode(m, n);
  };
  EXPECT_FALSE(mutate([](auto& m) { m[0] = 'X'; }).ok());
  EXPECT_FALSE(mutate([](auto& m) { m[4] = 2; }).ok());           // version
  EXPECT_FALSE(mutate([](auto& m) { m[28] = 1; }).ok());          // reserved
  EXPECT_FALSE(mutate([](auto& m) { m[16] ^= 1; }).ok());         // payload length
  EXPECT_FALSE(mutate([](auto& m) { m[6] = 0; }).ok());           // spec length
  EXPECT_FALSE(mutate([](auto& m) { m[8] ^= 4; }).ok());          // numel
  EXPECT_FALSE(mutate([](auto& m) { m[32 + 5] = '9'; }).ok());    // spec text changes sizes
  // Indices: 9 bits each (n = 300). Make the second index equal to the first: not increasing.
  EXPECT_FALSE(mutate([&](auto& m) {
                 const size_t p = payload_offset(m);
                 const uint32_t first = m[p] | ((m[p + 1] & 1) << 8);
                 m[p + 1] = static_cast<uint8_t>((m[p + 1] & 1) | ((first & 0x7f) << 1));
                 m[p + 2] = static_cast<uint8_t>((m[p + 2] & ~3) | ((first >> 7) & 3));
               }).ok());
  // An index out of range: all ones in the first 9 bits is 511 >= 300.
  EXPECT_FALSE(mutate([&](auto& m) {
                 const size_t p = payload_offset(m);
                 m[p] = 0xff;
                 m[p + 1] |= 1;
               }).ok());
  // A NaN among the fp32 values.
  EXPECT_FALSE(mutate([&](auto& m) {
                 const float nan = std::numeric_limits<float>::quiet_NaN();
                 std::memcpy(m.data() + m.size() - 4, &nan, 4);
               }).ok());
  // Dense codecs: NaN / inf through scales or codes.
  auto dense_mutate = [&](const char* spec, size_t at_from_payload, uint8_t v) {
    const Codec d = make(spec);
    auto m = *d.encode(x);
    m[payload_offset(m) + at_from_payload] = v;
    fix_crc(m);
    return d.decode(m, n);
  };
  EXPECT_FALSE(dense_mutate("bf16", 1, 0x7f).ok() && dense_mutate("bf16", 0, 0x80).ok());
  EXPECT_FALSE(dense_mutate("int8", 3, 0x7f).ok());  // scale -> NaN/inf exponent
  EXPECT_FALSE(dense_mutate("fp8", 3, 0x7f).ok());   // tensor scale
  EXPECT_FALSE(dense_mutate("fp8", 4, 0x7f).ok());   // E4M3 NaN code
  EXPECT_FALSE(dense_mutate("mxfp4", 0, 0xff).ok()); // E8M0 NaN scale
  EXPECT_FALSE(dense_mutate("nvfp4", 4, 0x7f).ok()); // E4M3 NaN block scale
  EXPECT_FALSE(dense_mutate("nvfp4", 3, 0x7f).ok()); // tensor scale
  // Sign / ternary: a negative or NaN bf16 scale, a ternary code byte >= 243, a nonzero trit
  // beyond the block in the last code byte (byte 27 of a ternary:128 block holds 3 trits).
  EXPECT_FALSE(dense_mutate("sign", 1, 0x80).ok());
  {
    const Codec d = make("sign");
    auto m = *d.encode(x);
    m[payload_offset(m)] = 0xc0;  // bf16 0x7fc0: NaN
    m[payload_offset(m) + 1] = 0x7f;
    fix_crc(m);
    EXPECT_FALSE(d.decode(m, n).ok());
  }
  EXPECT_FALSE(dense_mutate("ternary", 1, 0xbf).ok());
  EXPECT_FALSE(dense_mutate("ternary", 2, 243).ok());
  EXPECT_FALSE(dense_mutate("ternary", 27, 27).ok());
  EXPECT_TRUE(dense_mutate("ternary", 27, 26).ok());
  // After 90 9-bit indices (102 bytes), a ternary:32 block: 2 scale bytes, then codes.
  EXPECT_FALSE(dense_mutate("topk:0.3+ternary:32", 102 + 2, 255).ok());
  EXPECT_TRUE(dense_mutate("topk:0.3+ternary:32", 102 + 2, 242).ok());
}

// msg's header and spec with `payload` after them (the payload length and the CRC fixed).
std::vector<uint8_t> with_payload_of(const std::vector<uint8_t>& msg,
                                     std::span<const uint8_t> payload) {
  std::vector<uint8_t> m(msg.begin(), msg.begin() + static_cast<std::ptrdiff_t>(payload_offset(msg)));
  m.insert(m.end(), payload.begin(), payload.end());
  const uint64_t len = payload.size();
  std::memcpy(m.data() + 16, &len, 8);
  fix_crc(m);
  return m;
}

// "+zstd" is lossless: the values the stages before it make, bit for bit, in fewer bytes where
// the codes are skewed; the bytes do not depend on the thread count.
TEST(CompressCodec, ZstdStageIsLosslessAndSmaller) {
  const size_t n = (size_t{1} << 19) + 77;  // more than one slice of work, a ragged tail
  const auto x = gradient_like(n, 5);
  for (const char* raw_spec : {"int4:256", "int4", "int3:256", "int8", "nvfp4", "mxfp4", "bf16", "fp32",
                               "ternary:32", "sign", "topk-chunked:0.05:512+int4", "topk:0.01"}) {
    const std::string spec = std::string(raw_spec) + "+zstd";
    const Codec raw = make(raw_spec);
    const Codec packed = make(spec);
    const auto raw_msg = *raw.encode(x);
    const auto msg = *packed.encode(x);
    EXPECT_EQ(*Codec(packed).set_threads(2).encode(x), msg) << spec;
    EXPECT_LE(msg.size(), max_encoded_bytes(packed.spec(), n)) << spec;
    // The encoded_bytes of a "+zstd" spec count the bytes before the stage.
    EXPECT_EQ(encoded_bytes(packed.spec(), n), raw_msg.size() + 5) << spec;  // "+zstd"
    const auto want = *raw.decode(raw_msg, n);
    const auto got = packed.decode(msg, n);
    ASSERT_TRUE(got.ok()) << spec << ": " << got.status().to_string();
    ASSERT_EQ(std::memcmp(got->data(), want.data(), n * 4), 0) << spec;
    ASSERT_EQ(*decode(msg, n, 2), want) << spec;  // the spec read from the message, 2 threads
    // The stage is named in the message: a decoder for the plain spec refuses it, and back.
    EXPECT_EQ(raw.decode(msg, n).status().code(), StatusCode::kInvalidArgument) << spec;
    EXPECT_EQ(packed.decode(raw_msg, n).status().code(), StatusCode::kInvalidArgument) << spec;
  }
  // Skewed codes shrink: 4-bit codes of normal values with an absmax scale carry about 3.3 bits
  // a value over 256-value blocks (3.45 of int4:256's 4.125 with the scales) and 3.6 over 32
  // (4.6 of int4:32's 5).
  auto ratio = [&](const char* spec) {
    const Codec raw = make(spec);
    const Codec packed = make(std::string(spec) + "+zstd");
    return static_cast<double>(packed.encode(x)->size()) / static_cast<double>(raw.encode(x)->size());
  };
  EXPECT_LT(ratio("int4:256"), 0.88);
  EXPECT_LT(ratio("int4"), 0.95);
  // int3's seven levels: about 2.1 bits a code, 2.3 with the scales, of its 4.125-bit fields.
  EXPECT_LT(ratio("int3:256"), 0.6);
  // Empty and one-value tensors.
  for (size_t m : {size_t{0}, size_t{1}}) {
    const Codec c = make("int4:256+zstd");
    const std::vector<float> v(m, 0.25f);
    const auto msg = *c.encode(v);
    const auto y = c.decode(msg, m);
    ASSERT_TRUE(y.ok()) << m << ": " << y.status().to_string();
    EXPECT_EQ(*y, v);
  }
  // Non-finite input is refused as without the stage, and leaves no message behind.
  std::vector<float> bad = x;
  bad[1000] = std::numeric_limits<float>::infinity();
  std::vector<uint8_t> out = *make("int4:256+zstd").encode(x);
  EXPECT_EQ(make("int4:256+zstd").encode_into(bad, out).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(out.empty());
}

// A "+zstd" payload is trusted no more than any other: it must be one zstd frame holding exactly
// the bytes the spec and numel imply, and those bytes pass the checks of the plain spec.
TEST(CompressCodec, ZstdPayloadIsChecked) {
  const size_t n = 4096;
  const auto x = gradient_like(n, 9);
  const Codec c = make("int4:256+zstd");
  const auto good = *c.encode(x);
  ASSERT_TRUE(c.decode(good, n).ok());
  const size_t at = payload_offset(good);
  auto with_payload = [&](std::span<const uint8_t> payload) {
    return c.decode(with_payload_of(good, payload), n);
  };
  const std::span<const uint8_t> frame = std::span(good).subspan(at);
  EXPECT_TRUE(with_payload(frame).ok());
  // The raw int4:256 payload of the same values (not a frame).
  const auto raw = *make("int4:256").encode(x);
  const auto not_frame = with_payload(std::span(raw).subspan(payload_offset(raw)));
  EXPECT_EQ(not_frame.status().code(), StatusCode::kDataLoss);
  // A frame with a byte after it.
  std::vector<uint8_t> longer(frame.begin(), frame.end());
  longer.push_back(0);
  EXPECT_EQ(with_payload(longer).status().code(), StatusCode::kDataLoss);
  // Frames that hold one byte more or less than the spec implies (made by the same stage).
  const auto raw_payload = std::span(raw).subspan(payload_offset(raw));
  for (int delta : {-1, 1}) {
    std::vector<uint8_t> bytes(raw_payload.begin(), raw_payload.end());
    bytes.resize(delta < 0 ? bytes.size() - 1 : bytes.size() + 1);
    std::vector<uint8_t> other;
    zstd_append(bytes, other);
    EXPECT_EQ(with_payload(other).status().code(), StatusCode::kDataLoss) << delta;
  }
  // A frame of the right size whose bytes are not valid int4:256 blocks: a NaN scale.
  {
    std::vector<uint8_t> bytes(raw_payload.begin(), raw_payload.end());
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(bytes.data(), &nan, 4);
    std::vector<uint8_t> other;
    zstd_append(bytes, other);
    EXPECT_EQ(with_payload(other).status().code(), StatusCode::kDataLoss);
  }
  // A payload larger than any frame of that size could be is refused before it is read.
  std::vector<uint8_t> huge(max_encoded_bytes(c.spec(), n), 0);
  EXPECT_EQ(with_payload(huge).status().code(), StatusCode::kDataLoss);
  // Every truncation.
  for (size_t len = 0; len < good.size(); len += 7) {
    EXPECT_FALSE(c.decode(std::span(good).first(len), n).ok()) << len;
  }
}

// A payload above 1 MiB is cut in 1 MiB parts, one frame each: the frames must be those parts',
// in number and size; 2 threads make and read the same bytes as 1.
TEST(CompressCodec, ZstdFramesAreTheParts) {
  const size_t n = (size_t{1} << 19) + 77;  // fp32: 2 MiB + 308 bytes, three parts
  const auto x = gradient_like(n, 13);
  const Codec c = make("fp32+zstd");
  const auto good = *c.encode(x);
  EXPECT_EQ(*Codec(c).set_threads(2).encode(x), good);
  ASSERT_EQ(*Codec(c).set_threads(2).decode(good, n), x);
  auto with_payload = [&](std::span<const uint8_t> payload) {
    return c.decode(with_payload_of(good, payload), n);
  };
  std::vector<uint8_t> raw(n * 4);
  std::memcpy(raw.data(), x.data(), raw.size());
  std::vector<uint8_t> frames;
  zstd_append(raw, frames);
  ASSERT_TRUE(with_payload(frames).ok());
  // The same bytes cut elsewhere: two halves, or one frame for all of it.
  std::vector<uint8_t> halves;
  zstd_append(std::span(raw).first(raw.size() / 2), halves);
  zstd_append(std::span(raw).subspan(raw.size() / 2), halves);
  EXPECT_EQ(with_payload(halves).status().code(), StatusCode::kDataLoss);
  // The first two parts only, and all three with a fourth (empty) frame after them.
  std::vector<uint8_t> two;
  zstd_append(std::span(raw).first(2 * kZstdPartBytes), two);
  EXPECT_EQ(with_payload(two).status().code(), StatusCode::kDataLoss);
  std::vector<uint8_t> four = frames;
  zstd_append(std::span<const uint8_t>(), four);
  EXPECT_EQ(with_payload(four).status().code(), StatusCode::kDataLoss);
}

TEST(CompressCodec, RandomMutationsNeverCrash) {
  const Philox rng(77, 0);
  uint64_t draw = 0;
  const std::vector<std::string> specs = {"none", "bf16", "fp16", "fp8", "int8", "int4:64",
                                          "nvfp4", "mxfp4", "mxfp8", "topk:0.05+int4",
                                          "topk-chunked:0.1:64+nvfp4", "topk:0.3", "sign",
                                          "ternary:32", "topk-chunked:0.1:64+ternary",
                                          "int4:64+zstd", "topk:0.05+int4+zstd",
                                          "int3:32+zstd"};
  int rejected = 0, total = 0;
  for (const auto& s : specs) {
    const Codec c = make(s);
    const size_t n = 257;
    const auto good = *c.encode(gradient_like(n, 1));
    for (int t = 0; t < 400; ++t) {
      auto m = good;
      const int kind = static_cast<int>(rng.below(draw++, 4));
      const int flips = 1 + static_cast<int>(rng.below(draw++, 4));
      for (int f = 0; f < flips; ++f) {
        const size_t at = rng.below(draw++, m.size());
        m[at] ^= static_cast<uint8_t>(1u << rng.below(draw++, 8));
      }
      if (kind == 1) m.resize(rng.below(draw++, m.size()));
      if (kind >= 2 && m.size() >= 32) fix_crc(m);  // get past the checksum
      auto y = decode(m, n);
      ++total;
      if (!y.ok()) {
        ++rejected;
      } else {
        for (float v : *y) ASSERT_TRUE(std::isfinite(v)) << s;
      }
      if (kind == 0) {
        ASSERT_FALSE(y.ok()) << s << ": checksum missed a bit flip";
      }
    }
    // Pure garbage of random lengths.
    for (int t = 0; t < 100; ++t) {
      std::vector<uint8_t> g(rng.below(draw++, 200));
      for (auto& b : g) b = static_cast<uint8_t>(rng.u32(draw++));
      if (g.size() >= 4) std::memcpy(g.data(), "ATLC", 4);
      ASSERT_FALSE(decode(g, n).ok());
    }
  }
  EXPECT_GT(rejected, total / 4);
}

// ---- error feedback ---------------------------------------------------------------------------

TEST(CompressCodec, ErrorFeedbackTracksRunningSum) {
  const size_t n = 4096;
  const int rounds = 40;
  for (const char* s : {"int4", "topk:0.02+int4", "nvfp4", "topk-chunked:0.05:512", "sign",
                        "ternary", "topk-chunked:0.05:512+sign:32"}) {
    const Codec c = make(s);
    ErrorFeedback ef(n);
    std::vector<double> sum_in(n, 0), sum_out(n, 0), sum_out_no_ef(n, 0);
    double max_gap = 0, max_gap_no_ef = 0;
    for (int r = 0; r < rounds; ++r) {
      // A persistent bias plus noise: without feedback, small coordinates are never sent.
      auto x = gradient_like(n, 1000 + r);
      for (size_t i = 0; i < n; ++i) x[i] += 2e-4f * static_cast<float>(i % 5);
      auto bytes = ef.encode(c, x);
      ASSERT_TRUE(bytes.ok()) << s;
      auto y = c.decode(*bytes, n);
      auto y0 = c.decode(*c.encode(x), n);
      ASSERT_TRUE(y.ok() && y0.ok());
      for (size_t i = 0; i < n; ++i) {
        sum_in[i] += x[i];
        sum_out[i] += (*y)[i];
        sum_out_no_ef[i] += (*y0)[i];
        // Invariant: sum of inputs - sum of what was sent == residual.
        ASSERT_NEAR(sum_in[i] - sum_out[i], ef.residual()[i], 1e-5) << s << " i=" << i;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      max_gap = std::max(max_gap, std::fabs(sum_in[i] - sum_out[i]));
      max_gap_no_ef = std::max(max_gap_no_ef, std::fabs(sum_in[i] - sum_out_no_ef[i]));
    }
    EXPECT_LT(max_gap, max_gap_no_ef / 2) << s;
    ef.reset();
    EXPECT_EQ(ef.residual()[0], 0.0f);
  }
  ErrorFeedback small(3);
  EXPECT_FALSE(small.encode(make("int8"), std::vector<float>(4)).ok());
}

}  // namespace
}  // namespace atl::algorithms::compress
