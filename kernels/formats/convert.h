// Elementwise conversion of whole arrays between fp32 and bf16 / fp16 / FP8 (E4M3, E5M2).
// Shapes: in (n) -> out (n); in.size() must equal out.size() (checked with assert only: these are
// inner loops; callers validate sizes). Codes are stored as raw integers (uint16_t, uint8_t).
//
// Stochastic variants round element i with the random word rng.u32(first_index + i), so a tensor
// quantized in pieces (first_index = offset of the piece) rounds exactly as if done in one call.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/core/philox.h"
#include "kernels/formats/minifloat.h"

namespace atl::kernels::formats {

void quantize_bf16(std::span<const float> in, std::span<uint16_t> out);
void quantize_bf16_sr(std::span<const float> in, std::span<uint16_t> out, const Philox& rng,
                      uint64_t first_index);
void dequantize_bf16(std::span<const uint16_t> in, std::span<float> out);

void quantize_fp16(std::span<const float> in, std::span<uint16_t> out,
                   Overflow ov = Overflow::kInfinity);
void quantize_fp16_sr(std::span<const float> in, std::span<uint16_t> out, const Philox& rng,
                      uint64_t first_index, Overflow ov = Overflow::kInfinity);
void dequantize_fp16(std::span<const uint16_t> in, std::span<float> out);

void quantize_e4m3(std::span<const float> in, std::span<uint8_t> out,
                   Overflow ov = Overflow::kSaturate);
void quantize_e4m3_sr(std::span<const float> in, std::span<uint8_t> out, const Philox& rng,
                      uint64_t first_index, Overflow ov = Overflow::kSaturate);
void dequantize_e4m3(std::span<const uint8_t> in, std::span<float> out);

void quantize_e5m2(std::span<const float> in, std::span<uint8_t> out,
                   Overflow ov = Overflow::kInfinity);
void quantize_e5m2_sr(std::span<const float> in, std::span<uint8_t> out, const Philox& rng,
                      uint64_t first_index, Overflow ov = Overflow::kInfinity);
void dequantize_e5m2(std::span<const uint8_t> in, std::span<float> out);

// Scaled E4M3 (per-tensor scale, as FP8 training recipes do): out[i] = E4M3(in[i] * inv_scale),
// decode: code * scale.
void quantize_e4m3_scaled(std::span<const float> in, float inv_scale, std::span<uint8_t> out);
void dequantize_e4m3_scaled(std::span<const uint8_t> in, float scale, std::span<float> out);

// Scaled E5M2, the gradient format of FP8 training: out[i] = E5M2(in[i] * inv_scale), saturating
// at +-57344 (a current-scaled tensor never exceeds it; saturation keeps a rounding overshoot of
// the amax element finite instead of +-inf). NaN stays NaN. Decode: code * scale.
void quantize_e5m2_scaled(std::span<const float> in, float inv_scale, std::span<uint8_t> out);
void dequantize_e5m2_scaled(std::span<const uint8_t> in, float scale, std::span<float> out);

// Per-tensor current scaling (Transformer Engine's Float8CurrentScaling): the factor that maps
// the tensor's finite amax onto the format's largest finite value fmax, inv_scale = fmax / amax,
// so that quantize(x * inv_scale) uses the whole range; decode multiplies by 1 / inv_scale.
// Returns 1 when amax is 0, subnormal or not finite, or when fmax / amax would overflow.
float current_inv_scale(float amax, float fmax);

// Largest |x| over the finite elements, and whether every element is finite. One pass.
struct AbsMax {
  float amax = 0.0f;
  bool all_finite = true;
};
AbsMax abs_max(std::span<const float> in);

}  // namespace atl::kernels::formats
