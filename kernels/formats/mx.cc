#include "kernels/formats/mx.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "kernels/core/check.h"
#include "kernels/formats/pack.h"
#include "kernels/formats/scalar.h"
#include "kernels/formats/stochastic.h"

namespace atl::kernels::formats {
namespace {

// Decode tables: E2M1 by nibble, E4M3 by byte (built at compile time from the scalar decoder).
constexpr std::array<float, 16> kE2M1Table = [] {
  std::array<float, 16> t{};
  for (uint32_t c = 0; c < 16; ++c) t[c] = minifloat_decode<kE2M1Spec>(c);
  return t;
}();
constexpr std::array<float, 256> kE4M3Table = [] {
  std::array<float, 256> t{};
  for (uint32_t c = 0; c < 256; ++c) t[c] = minifloat_decode<kE4M3Spec>(c);
  return t;
}();

constexpr int kE4M3Emax = 8;
constexpr uint32_t kE4M3MaxMant = 0x600000;  // 448 = 1.75 * 2^8
constexpr int kE2M1Emax = 2;
constexpr uint32_t kE2M1MaxMant = 0x400000;  // 6 = 1.5 * 2^2

// Exact 2^e for e in [-127, 127] (2^-127 is an fp32 subnormal).
inline float pow2(int e) {
  return e >= -126 ? std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23)
                   : std::bit_cast<float>(0x00400000u >> (-127 - e));
}

// Points v at the 32 values of block b (in place for a full block, else a zero-padded copy in
// pad: copying every block and reloading it as vectors stalls on store forwarding) and returns
// its scale code; sets inv to 1/X (exact, a power of two) or 0 for a NaN block.
inline uint8_t load_block(std::span<const float> in, size_t b, float (&pad)[kMxBlockSize],
                          const float*& v, int emax, uint32_t max_mant, float& inv) {
  const size_t begin = b * kMxBlockSize;
  const size_t n = std::min<size_t>(kMxBlockSize, in.size() - begin);
  v = in.data() + begin;
  if (n < kMxBlockSize) {
    std::memset(pad, 0, sizeof(pad));
    std::memcpy(pad, v, n * sizeof(float));
    v = pad;
  }
  uint32_t amax_bits = 0;
  for (int j = 0; j < kMxBlockSize; ++j) {
    const uint32_t a = std::bit_cast<uint32_t>(v[j]) & 0x7fffffffu;
    amax_bits = std::max(amax_bits, a);
  }
  if (amax_bits >= 0x7f800000u) {  // inf or NaN somewhere in the block
    inv = 0.0f;
    return kE8M0Nan;
  }
  const int s = mx_shared_exponent(std::bit_cast<float>(amax_bits), emax, max_mant);
  // 1/X = 2^-s; for s = -127, 2^127 is representable, so always exact.
  inv = pow2(-s);
  return e8m0_from_exponent(s);
}

template <bool kStochastic>
void mxfp8_impl(std::span<const float> in, std::span<BlockMxfp8> out, const Philox* rng,
                uint64_t first) {
  ATOLL_CHECK(out.size() == mx_num_blocks(in.size()), "the block span does not fit the values");
  for (size_t b = 0; b < out.size(); ++b) {
    float pad[kMxBlockSize];
    const float* v;
    float inv;
    BlockMxfp8& blk = out[b];
    blk.scale = load_block(in, b, pad, v, kE4M3Emax, kE4M3MaxMant, inv);
    if constexpr (kStochastic) {
      uint32_t r[kMxBlockSize];
      philox_fill(*rng, first + b * kMxBlockSize, r, kMxBlockSize);
      for (int j = 0; j < kMxBlockSize; ++j) blk.q[j] = e4m3_from_f32_sr(v[j] * inv, r[j]);
    } else {
      for (int j = 0; j < kMxBlockSize; ++j) blk.q[j] = e4m3_from_f32(v[j] * inv);
    }
  }
}

template <bool kStochastic>
void mxfp4_impl(std::span<const float> in, std::span<BlockMxfp4> out, const Philox* rng,
                uint64_t first) {
  ATOLL_CHECK(out.size() == mx_num_blocks(in.size()), "the block span does not fit the values");
  for (size_t b = 0; b < out.size(); ++b) {
    float pad[kMxBlockSize];
    const float* v;
    float inv;
    BlockMxfp4& blk = out[b];
    blk.scale = load_block(in, b, pad, v, kE2M1Emax, kE2M1MaxMant, inv);
    uint8_t c[kMxBlockSize];
    if constexpr (kStochastic) {
      uint32_t r[kMxBlockSize];
      philox_fill(*rng, first + b * kMxBlockSize, r, kMxBlockSize);
      for (int j = 0; j < kMxBlockSize; ++j) c[j] = e2m1_from_f32_sr(v[j] * inv, r[j]);
    } else {
      for (int j = 0; j < kMxBlockSize; ++j) c[j] = e2m1_from_f32(v[j] * inv);
    }
    for (int j = 0; j < kMxBlockSize; j += 8) pack_nibbles8(c + j, blk.q + j / 2);
  }
}

}  // namespace

int mx_shared_exponent(float amax, int elem_emax, uint32_t elem_max_mant) {
  const uint32_t a = std::bit_cast<uint32_t>(amax) & 0x7fffffffu;
  if (a == 0) return 0;
  int fl;           // floor(log2(amax))
  uint32_t mant;    // amax's mantissa normalized to 23 bits after the leading one
  if ((a >> 23) != 0) {
    fl = static_cast<int>(a >> 23) - 127;
    mant = a & 0x7fffffu;
  } else {  // fp32 subnormal: normalize
    const int lead = 31 - std::countl_zero(a);  // bit index of the leading one, < 23
    fl = lead - 149;
    mant = (a << (23 - lead)) & 0x7fffffu;
  }
  int s = fl - elem_emax;
  if (mant > elem_max_mant) s += 1;  // amax / 2^s would exceed the element max
  return std::clamp(s, -127, 127);
}

void quantize_mxfp8(std::span<const float> in, std::span<BlockMxfp8> out) {
  mxfp8_impl<false>(in, out, nullptr, 0);
}
void quantize_mxfp4(std::span<const float> in, std::span<BlockMxfp4> out) {
  mxfp4_impl<false>(in, out, nullptr, 0);
}
void quantize_mxfp8_sr(std::span<const float> in, std::span<BlockMxfp8> out, const Philox& rng,
                       uint64_t first_index) {
  mxfp8_impl<true>(in, out, &rng, first_index);
}
void quantize_mxfp4_sr(std::span<const float> in, std::span<BlockMxfp4> out, const Philox& rng,
                       uint64_t first_index) {
  mxfp4_impl<true>(in, out, &rng, first_index);
}

void dequantize_mxfp8(std::span<const BlockMxfp8> in, std::span<float> out) {
  ATOLL_CHECK(out.size() <= in.size() * kMxBlockSize, "more outputs than the blocks hold");
  for (size_t b = 0; b < in.size(); ++b) {
    const float x = f32_from_e8m0(in[b].scale);
    float v[kMxBlockSize];
    for (int j = 0; j < kMxBlockSize; ++j) v[j] = kE4M3Table[in[b].q[j]] * x;
    const size_t begin = b * kMxBlockSize;
    if (begin >= out.size()) break;
    std::memcpy(out.data() + begin, v,
                std::min<size_t>(kMxBlockSize, out.size() - begin) * sizeof(float));
  }
}
void dequantize_mxfp4(std::span<const BlockMxfp4> in, std::span<float> out) {
  ATOLL_CHECK(out.size() <= in.size() * kMxBlockSize, "more outputs than the blocks hold");
  for (size_t b = 0; b < in.size(); ++b) {
    const float x = f32_from_e8m0(in[b].scale);
    float v[kMxBlockSize];
    for (int j = 0; j < kMxBlockSize / 2; ++j) {
      v[2 * j] = kE2M1Table[in[b].q[j] & 0xf] * x;
      v[2 * j + 1] = kE2M1Table[in[b].q[j] >> 4] * x;
    }
    const size_t begin = b * kMxBlockSize;
    if (begin >= out.size()) break;
    std::memcpy(out.data() + begin, v,
                std::min<size_t>(kMxBlockSize, out.size() - begin) * sizeof(float));
  }
}

}  // namespace atl::kernels::formats
