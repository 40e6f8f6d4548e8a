#include "kernels/formats/lowbit.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>

#include "kernels/formats/scalar.h"

namespace atl::kernels::formats {
namespace {

constexpr uint16_t kBf16Nan = 0x7fc0;

// Number of real values in block b of an array of n values.
template <int B>
inline size_t block_len(size_t n, size_t b) {
  return std::min<size_t>(B, n - b * B);
}

inline void put_scale(uint8_t (&dst)[2], uint16_t h) {
  std::memcpy(dst, &h, 2);
}
inline uint16_t get_scale(const uint8_t (&src)[2]) {
  uint16_t h;
  std::memcpy(&h, src, 2);
  return h;
}

// mean |v| over len values, summed in double in index order; false when a value is not finite.
inline bool mean_abs(const float* v, size_t len, double& mean) {
  double sum = 0;
  uint32_t bad = 0;
  for (size_t j = 0; j < len; ++j) {
    const uint32_t u = std::bit_cast<uint32_t>(v[j]);
    bad |= (u & 0x7f800000u) == 0x7f800000u;
    sum += std::fabs(static_cast<double>(v[j]));
  }
  mean = sum / static_cast<double>(len);
  return bad == 0;
}

// The first byte index and the largest valid value of the last code byte of a ternary block
// (trits beyond B must be 0): 3^(B - 5 * (kBytes - 1)).
template <int B>
constexpr uint32_t last_byte_limit() {
  uint32_t lim = 1;
  for (int i = 0; i < B - 5 * (BlockTernary<B>::kBytes - 1); ++i) lim *= 3;
  return lim;
}

}  // namespace

template <int B>
void quantize_sign(std::span<const float> in, std::span<BlockSign<B>> out) {
  assert(out.size() == lowbit_num_blocks<B>(in.size()));
  for (size_t b = 0; b < out.size(); ++b) {
    const size_t len = block_len<B>(in.size(), b);
    const float* v = in.data() + b * B;
    BlockSign<B>& o = out[b];
    std::memset(o.bits, 0, sizeof(o.bits));
    double mean;
    if (!mean_abs(v, len, mean)) {
      put_scale(o.scale, kBf16Nan);
      continue;
    }
    put_scale(o.scale, bf16_from_f32(static_cast<float>(mean)));
    // One byte per 8 values from compares (x < 0, so -0 sends +s), which vectorize.
    for (size_t i = 0; i < (len + 7) / 8; ++i) {
      uint32_t byte = 0;
      for (size_t k = 0; k < 8; ++k) {
        const size_t j = 8 * i + k;
        byte |= (j < len && v[j] < 0.0f ? 1u : 0u) << k;
      }
      o.bits[i] = static_cast<uint8_t>(byte);
    }
  }
}

template <int B>
void quantize_ternary(std::span<const float> in, std::span<BlockTernary<B>> out) {
  assert(out.size() == lowbit_num_blocks<B>(in.size()));
  for (size_t b = 0; b < out.size(); ++b) {
    const size_t len = block_len<B>(in.size(), b);
    const float* v = in.data() + b * B;
    BlockTernary<B>& o = out[b];
    std::memset(o.trits, 0, sizeof(o.trits));
    double mean;
    if (!mean_abs(v, len, mean)) {
      put_scale(o.scale, kBf16Nan);
      continue;
    }
    // The threshold is taken in double so that a block of ±s and zeros (mean = s * c / len,
    // c <= len) never puts an s at or below it: 0.7 * s * c / len < s. For float |x|,
    // |x| > t exactly when |x| > tf, tf = t rounded down to float; the loop compares floats.
    const double t = static_cast<double>(kTernaryThreshold) * mean;
    float tf = static_cast<float>(t);
    if (static_cast<double>(tf) > t) tf = std::nextafter(tf, 0.0f);
    double sum = 0;  // in index order (adding +0 for the values not kept changes nothing)
    uint32_t count = 0;
    uint8_t trit[5 * BlockTernary<B>::kBytes] = {};
    for (size_t j = 0; j < len; ++j) {
      const float a = std::fabs(v[j]);
      const bool keep = a > tf;
      sum += keep ? static_cast<double>(a) : 0.0;
      count += keep;
      trit[j] = static_cast<uint8_t>(keep ? (v[j] < 0.0f ? 2 : 1) : 0);
    }
    const float s = count > 0 ? static_cast<float>(sum / static_cast<double>(count)) : 0.0f;
    put_scale(o.scale, bf16_from_f32(s));
    if (s == 0.0f) continue;  // all zero: keep zero codes
    for (int i = 0; i < BlockTernary<B>::kBytes; ++i) {
      const uint8_t* c = trit + 5 * i;
      o.trits[i] = static_cast<uint8_t>(c[0] + 3 * c[1] + 9 * c[2] + 27 * c[3] + 81 * c[4]);
    }
  }
}

template <int B>
bool dequantize_sign(std::span<const BlockSign<B>> in, std::span<float> out) {
  assert(out.size() <= in.size() * B);
  bool ok = true;
  for (size_t b = 0; b < in.size() && b * B < out.size(); ++b) {
    const size_t len = block_len<B>(out.size(), b);
    const uint16_t h = get_scale(in[b].scale);
    float* y = out.data() + b * B;
    if (h & 0x8000u) {
      ok = false;
      std::fill(y, y + len, 0.0f);
      continue;
    }
    const float s = f32_from_bf16(h);
    // Flip the sign bit of s where the code is 1 (-s for s = 0 is -0, as written).
    const uint32_t sb = std::bit_cast<uint32_t>(s);
    for (size_t j = 0; j < len; ++j) {
      const uint32_t bit = (in[b].bits[j / 8] >> (j % 8)) & 1u;
      y[j] = std::bit_cast<float>(sb ^ (bit << 31));
    }
  }
  return ok;
}

template <int B>
bool dequantize_ternary(std::span<const BlockTernary<B>> in, std::span<float> out) {
  assert(out.size() <= in.size() * B);
  constexpr int kBytes = BlockTernary<B>::kBytes;
  bool ok = true;
  for (size_t b = 0; b < in.size() && b * B < out.size(); ++b) {
    const size_t len = block_len<B>(out.size(), b);
    const uint16_t h = get_scale(in[b].scale);
    const float s = f32_from_bf16(h);
    // 0 * s: a NaN scale (a non-finite input block) decodes to NaN everywhere, zeros included.
    const float level[3] = {0.0f * s, s, -s};
    bool valid = (h & 0x8000u) == 0 && in[b].trits[kBytes - 1] < last_byte_limit<B>();
    float v[5 * kBytes];
    for (int i = 0; i < kBytes; ++i) {
      uint32_t byte = in[b].trits[i];
      valid &= byte < 243;
      for (int k = 0; k < 5; ++k) {
        v[5 * i + k] = level[byte % 3];
        byte /= 3;
      }
    }
    float* y = out.data() + b * B;
    if (!valid) {
      ok = false;
      std::fill(y, y + len, 0.0f);
      continue;
    }
    std::memcpy(y, v, len * sizeof(float));
  }
  return ok;
}

#define ATL_INSTANTIATE_LOWBIT(B)                                                        \
  template void quantize_sign<B>(std::span<const float>, std::span<BlockSign<B>>);       \
  template void quantize_ternary<B>(std::span<const float>, std::span<BlockTernary<B>>); \
  template bool dequantize_sign<B>(std::span<const BlockSign<B>>, std::span<float>);     \
  template bool dequantize_ternary<B>(std::span<const BlockTernary<B>>, std::span<float>);
ATL_INSTANTIATE_LOWBIT(32)
ATL_INSTANTIATE_LOWBIT(64)
ATL_INSTANTIATE_LOWBIT(128)
ATL_INSTANTIATE_LOWBIT(256)
#undef ATL_INSTANTIATE_LOWBIT

}  // namespace atl::kernels::formats
