#include "kernels/formats/convert.h"

#include <array>
#include <cfloat>
#include <cstddef>

#include "kernels/core/check.h"
#include "kernels/formats/decode_tables.h"
#include "kernels/formats/scalar.h"
#include "kernels/formats/stochastic.h"

namespace atl::kernels::formats {
namespace {

// Stochastic loops: random words come in chunks from a stack buffer so the Philox cost is one
// block per four elements and the conversion loop itself stays branch-free.
template <typename Out, typename Fn>
void sr_loop(std::span<const float> in, std::span<Out> out, const Philox& rng, uint64_t first,
             Fn fn) {
  ATOLL_CHECK(in.size() == out.size(), "input and output spans differ in length");
  uint32_t r[kRandomChunk];
  for (size_t base = 0; base < in.size(); base += kRandomChunk) {
    const size_t n = std::min(kRandomChunk, in.size() - base);
    philox_fill(rng, first + base, r, n);
    const float* x = in.data() + base;
    Out* y = out.data() + base;
    for (size_t i = 0; i < n; ++i) y[i] = fn(x[i], r[i]);
  }
}

}  // namespace

void quantize_bf16(std::span<const float> in, std::span<uint16_t> out) {
  ATOLL_CHECK(in.size() == out.size(), "input and output spans differ in length");
  const float* x = in.data();
  uint16_t* y = out.data();
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) y[i] = bf16_from_f32(x[i]);
}
void quantize_bf16_sr(std::span<const float> in, std::span<uint16_t> out, const Philox& rng,
                      uint64_t first_index) {
  sr_loop(in, out, rng, first_index, [](float x, uint32_t r) { return bf16_from_f32_sr(x, r); });
}
void dequantize_bf16(std::span<const uint16_t> in, std::span<float> out) {
  ATOLL_CHECK(in.size() == out.size(), "input and output spans differ in length");
  const uint16_t* x = in.data();
  float* y = out.data();
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) y[i] = f32_from_bf16(x[i]);
}

void quantize_fp16(std::span<const float> in, std::span<uint16_t> out, Overflow ov) {
  ATOLL_CHECK(in.size() == out.size(), "input and output spans differ in length");
  const float* x = in.data();
  uint16_t* y = out.data();
  const size_t n = in.size();
  if (ov == Overflow::kInfinity) {
    for (size_t i = 0; i < n; ++i) y[i] = fp16_from_f32(x[i], Overflow::kInfinity);
  } else {
    for (size_t i = 0; i < n; ++i) y[i] = fp16_from_f32(x[i], Overflow::kSaturate);
  }
}
void quantize_fp16_sr(std::span<const float> in, std::span<uint16_t> out, const Philox& rng,
                      uint64_t first_index, Overflow ov) {
  sr_loop(in, out, rng, first_index, [ov](float x, uint32_t r) { return fp16_from_f32_sr(x, r, ov); });
}
void dequantize_fp16(std::span<const uint16_t> in, std::span<float> out) {
  ATOLL_CHECK(in.size() == out.size(), "input and output spans differ in length");
  const uint16_t* x = in.data();
  float* y = out.data();
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) y[i] = f32_from_fp16(x[i]);
}

void quantize_e4m3(std::span<const float> in, std::span<uint8_t> out, Overflow ov) {
  ATOLL_CHECK(in.size() == out.size(), "input and output spans differ in length");
  const float* x = in.data();
  uint8_t* y = out.data();
  const size_t n = in.size();
  if (ov == Overflow::kSaturate) {
    for (size_t i = 0; i < n; ++i) y[i] = e4m3_from_f32(x[i], Overflow::kSaturate);
  } else {
    for (size_t i = 0; i < n; ++i) y[i] = e4m3_from_f32(x[i], Overflow::kInfinity);
  }
}
void quantize_e4m3_sr(std::span<const float> in, std::span<uint8_t> out, const Philox& rng,
                      uint64_t first_index, Overflow ov) {
  sr_loop(in, out, rng, first_index, [ov](float x, uint32_t r) { return e4m3_from_f32_sr(x, r, ov); });
}
void dequantize_e4m3(std::span<const uint8_t> in, std::span<float> out) {
  ATOLL_CHECK(in.size() == out.size(), "input and output spans differ in length");
  const uint8_t* x = in.data();
  float* y = out.data();
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) y[i] = kE4M3Table[x[i]];
}

void quantize_e5m2(std::span<const float> in, std::span<uint8_t> out, Overflow ov) {
  ATOLL_CHECK(in.size() == out.size(), "input and output spans differ in length");
  const float* x = in.data();
  uint8_t* y = out.data();
  const size_t n = in.size();
  if (ov == Overflow::kInfinity) {
    for (size_t i = 0; i < n; ++i) y[i] = e5m2_from_f32(x[i], Overflow::kInfinity);
  } else {
    for (size_t i = 0; i < n; ++i) y[i] = e5m2_from_f32(x[i], Overflow::kSaturate);
  }
}
void quantize_e5m2_sr(std::span<const float> in, std::span<uint8_t> out, const Philox& rng,
                      uint64_t first_index, Overflow ov) {
  sr_loop(in, out, rng, first_index, [ov](float x, uint32_t r) { return e5m2_from_f32_sr(x, r, ov); });
}
void dequantize_e5m2(std::span<const uint8_t> in, std::span<float> out) {
  ATOLL_CHECK(in.size() == out.size(), "input and output spans differ in length");
  const uint8_t* x = in.data();
  float* y = out.data();
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) y[i] = kE5M2Table[x[i]];
}

void quantize_e4m3_scaled(std::span<const float> in, float inv_scale, std::span<uint8_t> out) {
  ATOLL_CHECK(in.size() == out.size(), "input and output spans differ in length");
  const float* x = in.data();
  uint8_t* y = out.data();
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) y[i] = e4m3_from_f32(x[i] * inv_scale, Overflow::kSaturate);
}
void dequantize_e4m3_scaled(std::span<const uint8_t> in, float scale, std::span<float> out) {
  ATOLL_CHECK(in.size() == out.size(), "input and output spans differ in length");
  const uint8_t* x = in.data();
  float* y = out.data();
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) y[i] = kE4M3Table[x[i]] * scale;
}

void quantize_e5m2_scaled(std::span<const float> in, float inv_scale, std::span<uint8_t> out) {
  ATOLL_CHECK(in.size() == out.size(), "input and output spans differ in length");
  const float* x = in.data();
  uint8_t* y = out.data();
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) y[i] = e5m2_from_f32(x[i] * inv_scale, Overflow::kSaturate);
}
void dequantize_e5m2_scaled(std::span<const uint8_t> in, float scale, std::span<float> out) {
  ATOLL_CHECK(in.size() == out.size(), "input and output spans differ in length");
  const uint8_t* x = in.data();
  float* y = out.data();
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) y[i] = kE5M2Table[x[i]] * scale;
}

float current_inv_scale(float amax, float fmax) {
  if (!(amax >= FLT_MIN) || !(amax <= FLT_MAX)) return 1.0f;
  const float inv = fmax / amax;
  return inv <= FLT_MAX ? inv : 1.0f;
}

AbsMax abs_max(std::span<const float> in) {
  // Integer max over |bits|: for non-negative floats the bit order is the numeric order, and
  // anything >= 0x7f800000 is inf or NaN. The common case is one unsigned max reduction (which
  // compilers vectorize; a second, conditional accumulator defeats that); only an input with
  // inf or NaN pays a second pass for the largest finite value.
  const float* x = in.data();
  const size_t n = in.size();
  uint32_t any_max = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
    any_max = a > any_max ? a : any_max;
  }
  if (any_max < 0x7f800000u) return {std::bit_cast<float>(any_max), true};
  uint32_t finite_max = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
    const uint32_t f = a < 0x7f800000u ? a : 0u;
    finite_max = f > finite_max ? f : finite_max;
  }
  return {std::bit_cast<float>(finite_max), false};
}

}  // namespace atl::kernels::formats
