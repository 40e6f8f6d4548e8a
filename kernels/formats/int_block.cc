#include "kernels/formats/int_block.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/core/check.h"
#include "kernels/formats/stochastic.h"

namespace atl::kernels::formats {
namespace {

// Round to nearest even for |y| < 2^22 without libm: adding 1.5 * 2^23 pushes the fraction out of
// the fp32 mantissa with the FPU's (nearest-even) rounding. Vectorizes to one add and one sub.
inline float rne_small(float y) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (y + kMagic) - kMagic;
}

// rne_small(x * inv) with the product and the magic add fused (one rounding), written as an
// explicit fma so the codes do not depend on whether the compiler contracts x * inv + c (GCC
// does under -march=native with FMA, not without it); the CUDA twin uses the same fma.
inline float rne_small_scaled(float x, float inv) {
  constexpr float kMagic = 12582912.0f;
  return std::fma(x, inv, kMagic) - kMagic;
}

// Shared block setup: point v at the block (in place when full, else a zero-padded copy in pad:
// copying every block and reloading it as vectors stalls on store forwarding), find amax /
// non-finite; returns the scale and sets inv (0 when the block is stored as zeros).
template <int B>
inline float prepare(std::span<const float> in, size_t b, float (&pad)[B], const float*& v,
                     float qmax, float& inv) {
  const size_t begin = b * B;
  const size_t n = std::min<size_t>(B, in.size() - begin);
  v = in.data() + begin;
  if (n < static_cast<size_t>(B)) {
    std::memset(pad, 0, sizeof(pad));
    std::memcpy(pad, v, n * sizeof(float));
    v = pad;
  }
  uint32_t amax_bits = 0;
  for (int j = 0; j < B; ++j) {
    amax_bits = std::max(amax_bits, std::bit_cast<uint32_t>(v[j]) & 0x7fffffffu);
  }
  if (amax_bits >= 0x7f800000u) {
    inv = 0.0f;
    return std::bit_cast<float>(0x7fc00000u);
  }
  const float amax = std::bit_cast<float>(amax_bits);
  const float i = qmax / amax;  // inf for amax = 0 or tiny amax
  if (!(i <= 3.0e38f)) {
    inv = 0.0f;
    return 0.0f;
  }
  inv = i;
  return amax / qmax;
}

template <int B, bool kSr>
void q8_impl(std::span<const float> in, std::span<BlockQ8<B>> out, const Philox* rng,
             uint64_t first) {
  ATOLL_CHECK(out.size() == int_num_blocks<B>(in.size()), "the block span does not fit the values");
  for (size_t b = 0; b < out.size(); ++b) {
    float pad[B];
    const float* v;
    float inv;
    out[b].scale = prepare<B>(in, b, pad, v, 127.0f, inv);
    if constexpr (kSr) {
      uint32_t r[B];
      philox_fill(*rng, first + b * B, r, B);
      for (int j = 0; j < B; ++j) {
        const float y = std::fma(v[j], inv, static_cast<float>(r[j] >> 8) * (1.0f / 16777216.0f));
        float f = rne_small(y);
        f -= f > y ? 1.0f : 0.0f;  // floor
        out[b].q[j] = static_cast<int8_t>(std::clamp(f, -127.0f, 127.0f));
      }
    } else {
      // |x| * inv <= 127 (inv = 127 / amax), so the clamp only guards. On int32 it vectorizes to
      // a min and a max; clamping the float first compiled to mask juggling per value. The
      // same codes for every finite x (the rounded value is an integer well inside int32).
      for (int j = 0; j < B; ++j) {
        const auto q = static_cast<int32_t>(rne_small_scaled(v[j], inv));
        out[b].q[j] = static_cast<int8_t>(std::clamp(q, -127, 127));
      }
    }
  }
}

// Codes in [-kMax, kMax] in the 4-bit block layout: int4 (kMax 7) and int3 (kMax 3).
template <int B, bool kSr, int kMax>
void q4_impl(std::span<const float> in, std::span<BlockQ4<B>> out, const Philox* rng,
             uint64_t first) {
  ATOLL_CHECK(out.size() == int_num_blocks<B>(in.size()), "the block span does not fit the values");
  for (size_t b = 0; b < out.size(); ++b) {
    float pad[B];
    const float* v;
    float inv;
    out[b].scale = prepare<B>(in, b, pad, v, static_cast<float>(kMax), inv);
    int32_t c[B];
    if constexpr (kSr) {
      uint32_t r[B];
      philox_fill(*rng, first + b * B, r, B);
      for (int j = 0; j < B; ++j) {
        const float y = std::fma(v[j], inv, static_cast<float>(r[j] >> 8) * (1.0f / 16777216.0f));
        float f = rne_small(y);
        f -= f > y ? 1.0f : 0.0f;
        c[j] = static_cast<int32_t>(std::clamp(f, -float{kMax}, float{kMax}));
      }
    } else {
      for (int j = 0; j < B; ++j) {  // as in q8_impl: an int32 clamp, the same codes
        c[j] = std::clamp(static_cast<int32_t>(rne_small_scaled(v[j], inv)), -kMax, kMax);
      }
    }
    for (int j = 0; j < B / 2; ++j) {
      out[b].q[j] = static_cast<uint8_t>((c[2 * j] & 0xf) | ((c[2 * j + 1] & 0xf) << 4));
    }
  }
}

}  // namespace

template <int B>
void quantize_q8(std::span<const float> in, std::span<BlockQ8<B>> out) {
  q8_impl<B, false>(in, out, nullptr, 0);
}
template <int B>
void quantize_q4(std::span<const float> in, std::span<BlockQ4<B>> out) {
  q4_impl<B, false, 7>(in, out, nullptr, 0);
}
template <int B>
void quantize_q3(std::span<const float> in, std::span<BlockQ4<B>> out) {
  q4_impl<B, false, 3>(in, out, nullptr, 0);
}
template <int B>
void quantize_q8_sr(std::span<const float> in, std::span<BlockQ8<B>> out, const Philox& rng,
                    uint64_t first_index) {
  q8_impl<B, true>(in, out, &rng, first_index);
}
template <int B>
void quantize_q4_sr(std::span<const float> in, std::span<BlockQ4<B>> out, const Philox& rng,
                    uint64_t first_index) {
  q4_impl<B, true, 7>(in, out, &rng, first_index);
}

template <int B>
void dequantize_q8(std::span<const BlockQ8<B>> in, std::span<float> out) {
  ATOLL_CHECK(out.size() <= in.size() * B, "more outputs than the blocks hold");
  const size_t full = out.size() / B;
  for (size_t b = 0; b < full; ++b) {
    const float s = in[b].scale;
    float* y = out.data() + b * B;
    for (int j = 0; j < B; ++j) y[j] = static_cast<float>(in[b].q[j]) * s;
  }
  for (size_t i = full * B; i < out.size(); ++i) {
    out[i] = static_cast<float>(in[full].q[i - full * B]) * in[full].scale;
  }
}

template <int B>
void dequantize_q4(std::span<const BlockQ4<B>> in, std::span<float> out) {
  ATOLL_CHECK(out.size() <= in.size() * B, "more outputs than the blocks hold");
  for (size_t b = 0; b < in.size(); ++b) {
    const size_t begin = b * B;
    if (begin >= out.size()) break;
    const float s = in[b].scale;
    float v[B];
    for (int j = 0; j < B / 2; ++j) {
      // Sign-extend each nibble: shift it to the top of an int8 and shift back arithmetically.
      const int8_t lo = static_cast<int8_t>(static_cast<uint8_t>(in[b].q[j] << 4)) >> 4;
      const int8_t hi = static_cast<int8_t>(in[b].q[j]) >> 4;
      v[2 * j] = static_cast<float>(lo) * s;
      v[2 * j + 1] = static_cast<float>(hi) * s;
    }
    std::memcpy(out.data() + begin, v, std::min<size_t>(B, out.size() - begin) * sizeof(float));
  }
}

#define ATL_INSTANTIATE_INT_BLOCK(B)                                                            \
  template void quantize_q8<B>(std::span<const float>, std::span<BlockQ8<B>>);                  \
  template void quantize_q4<B>(std::span<const float>, std::span<BlockQ4<B>>);                  \
  template void quantize_q3<B>(std::span<const float>, std::span<BlockQ4<B>>);                  \
  template void quantize_q8_sr<B>(std::span<const float>, std::span<BlockQ8<B>>, const Philox&, \
                                  uint64_t);                                                    \
  template void quantize_q4_sr<B>(std::span<const float>, std::span<BlockQ4<B>>, const Philox&, \
                                  uint64_t);                                                    \
  template void dequantize_q8<B>(std::span<const BlockQ8<B>>, std::span<float>);                \
  template void dequantize_q4<B>(std::span<const BlockQ4<B>>, std::span<float>);
ATL_INSTANTIATE_INT_BLOCK(32)
ATL_INSTANTIATE_INT_BLOCK(64)
ATL_INSTANTIATE_INT_BLOCK(128)
ATL_INSTANTIATE_INT_BLOCK(256)
#undef ATL_INSTANTIATE_INT_BLOCK

}  // namespace atl::kernels::formats
