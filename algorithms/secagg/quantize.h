// Fixed-point quantization shared by every site of a secure-aggregation round (as Flower's
// SecAgg+: clipping_range c, quantization_range Q). Element x of a pseudo-gradient becomes
//   q = ⌊(clip(x, −c, c) + c) · Q / (2c) + u⌋ ∈ [0, Q],  u ∈ [0, 1) uniform
// (stochastic rounding: E[q] is the unrounded value, so the mean is unbiased). u is drawn from
// a counter-based stream keyed by a per-site, per-round seed: the same inputs give the same q
// on every run. Sums of n sites' q are taken mod 2^32; with n·Q < 2^32 they never wrap, and
//   mean = (Σ q) · 2c / (Q · n) − c
// recovers the equal-weight mean of the clipped values up to the rounding (≤ 2c/Q per element).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "kernels/core/status.h"

namespace atl::algorithms::secagg {

struct QuantizeOptions {
  double clip_range = 0.0;          // c > 0
  uint32_t quantization_range = 0;  // Q ≥ 1: integers 0..Q
};

// OK when c > 0 and finite, Q ≥ 1, and the sum of `max_sites` values in [0, Q] fits in 32 bits.
Status check_quantization(const QuantizeOptions& options, uint64_t max_sites);

// out[k] ← q(x[k]) (sizes equal). Non-finite x: NaN → the midpoint, ±inf → the clip bounds.
void quantize(std::span<const float> x, const QuantizeOptions& options, uint64_t rounding_seed,
              std::span<uint32_t> out);

// out[k] ← the mean over `sites` of the dequantized values whose quantized sum is sum[k].
void dequantize_mean(std::span<const uint32_t> sum, uint64_t sites, const QuantizeOptions& options,
                     std::span<float> out);

// The rounding seed of one site in one round: a hash of the experiment seed, the round and the
// site's name.
uint64_t rounding_seed(uint64_t experiment_seed, uint64_t round, std::string_view site);

}  // namespace atl::algorithms::secagg
