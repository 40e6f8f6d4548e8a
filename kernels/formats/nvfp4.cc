#include "kernels/formats/nvfp4.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cfloat>
#include <cstring>

#include "kernels/formats/convert.h"
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

constexpr uint8_t kE4M3NanCode = 0x7f;

template <bool kStochastic>
void nvfp4_impl(std::span<const float> in, float ts, std::span<BlockNvfp4> out,
                NvfpScaleRounding rounding, const Philox* rng, uint64_t first) {
  assert(out.size() == nvfp4_num_blocks(in.size()));
  for (size_t b = 0; b < out.size(); ++b) {
    const size_t begin = b * kNvfp4BlockSize;
    const size_t n = std::min<size_t>(kNvfp4BlockSize, in.size() - begin);
    float v[kNvfp4BlockSize] = {};
    std::memcpy(v, in.data() + begin, n * sizeof(float));
    uint32_t amax_bits = 0;
    for (int j = 0; j < kNvfp4BlockSize; ++j) {
      amax_bits = std::max(amax_bits, std::bit_cast<uint32_t>(v[j]) & 0x7fffffffu);
    }
    BlockNvfp4& blk = out[b];
    uint8_t c[kNvfp4BlockSize] = {};
    if (amax_bits >= 0x7f800000u) {
      blk.scale = kE4M3NanCode;
    } else {
      const float want = std::bit_cast<float>(amax_bits) / (kE2M1Max * ts);
      uint8_t sc = rounding == NvfpScaleRounding::kUp
                       ? static_cast<uint8_t>(minifloat_encode<kE4M3Spec, Rounding::kAwayFromZero>(want))
                       : e4m3_from_f32(want);
      blk.scale = sc;
      const float denom = f32_from_e4m3(sc) * ts;
      // denom == 0 only for an all-zero block (or kNearest underflow): elements stay 0.
      const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;
      if constexpr (kStochastic) {
        uint32_t r[kNvfp4BlockSize];
        philox_fill(*rng, first + begin, r, kNvfp4BlockSize);
        for (int j = 0; j < kNvfp4BlockSize; ++j) c[j] = e2m1_from_f32_sr(v[j] * inv, r[j]);
      } else {
        for (int j = 0; j < kNvfp4BlockSize; ++j) c[j] = e2m1_from_f32(v[j] * inv);
      }
    }
    for (int j = 0; j < kNvfp4BlockSize / 2; ++j) {
      blk.q[j] = static_cast<uint8_t>(c[2 * j] | (c[2 * j + 1] << 4));
    }
  }
}

}  // namespace

float nvfp4_tensor_scale(std::span<const float> in) {
  const float ts = abs_max(in).amax / (kE4M3Max * kE2M1Max);
  return ts >= FLT_MIN ? ts : 1.0f;
}

void quantize_nvfp4(std::span<const float> in, float tensor_scale, std::span<BlockNvfp4> out,
                    NvfpScaleRounding rounding) {
  nvfp4_impl<false>(in, tensor_scale, out, rounding, nullptr, 0);
}
void quantize_nvfp4_sr(std::span<const float> in, float tensor_scale, std::span<BlockNvfp4> out,
                       const Philox& rng, uint64_t first_index, NvfpScaleRounding rounding) {
  nvfp4_impl<true>(in, tensor_scale, out, rounding, &rng, first_index);
}

void dequantize_nvfp4(std::span<const BlockNvfp4> in, float tensor_scale, std::span<float> out) {
  assert(out.size() <= in.size() * kNvfp4BlockSize);
  for (size_t b = 0; b < in.size(); ++b) {
    const size_t begin = b * kNvfp4BlockSize;
    if (begin >= out.size()) break;
    const float x = f32_from_e4m3(in[b].scale) * tensor_scale;
    float v[kNvfp4BlockSize];
    for (int j = 0; j < kNvfp4BlockSize / 2; ++j) {
      v[2 * j] = kE2M1Table[in[b].q[j] & 0xf] * x;
      v[2 * j + 1] = kE2M1Table[in[b].q[j] >> 4] * x;
    }
    std::memcpy(out.data() + begin, v,
                std::min<size_t>(kNvfp4BlockSize, out.size() - begin) * sizeof(float));
  }
}

}  // namespace atl::kernels::formats
