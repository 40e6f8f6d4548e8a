#include "algorithms/secagg/quantize.h"

#include <algorithm>
#include <cmath>

#include "kernels/core/number_text.h"

namespace atl::algorithms::secagg {
namespace {

// SplitMix64's finalizer: a bijective mix of 64 bits.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

Status check_quantization(const QuantizeOptions& o, uint64_t max_sites) {
  if (!(o.clip_range > 0) || !std::isfinite(o.clip_range))
    return InvalidArgument("secagg.clip_range must be a finite number > 0, got " +
                           shortest_decimal(o.clip_range));
  if (o.quantization_range < 1)
    return InvalidArgument("secagg.quantization_range must be >= 1, got " +
                           std::to_string(o.quantization_range));
  const unsigned __int128 worst =
      static_cast<unsigned __int128>(o.quantization_range) * std::max<uint64_t>(max_sites, 1);
  if (worst > UINT32_MAX)
    return InvalidArgument("secagg.quantization_range " + std::to_string(o.quantization_range) +
                           " × diloco.max_nodes " + std::to_string(max_sites) +
                           " does not fit in 32 bits (sums are mod 2^32); lower one of them");
  return Status::Ok();
}

void quantize(std::span<const float> x, const QuantizeOptions& o, uint64_t seed,
              std::span<uint32_t> out) {
  const double c = o.clip_range;
  const double q_max = static_cast<double>(o.quantization_range);
  const double scale = q_max / (2.0 * c);
  for (size_t k = 0; k < x.size(); ++k) {
    double v = static_cast<double>(x[k]);
    if (std::isnan(v)) v = 0.0;
    v = std::clamp(v, -c, c);
    const double scaled = (v + c) * scale;  // [0, Q]
    // u = the top 53 bits of a hash of (seed, k), in [0, 1).
    const double u = static_cast<double>(mix64(seed ^ mix64(k + 0x9e3779b97f4a7c15ULL)) >> 11) *
                     0x1.0p-53;
    const double q = std::min(std::floor(scaled + u), q_max);
    out[k] = static_cast<uint32_t>(q);
  }
}

void dequantize_mean(std::span<const uint32_t> sum, uint64_t sites, const QuantizeOptions& o,
                     std::span<float> out) {
  const double c = o.clip_range;
  const double step = 2.0 * c / static_cast<double>(o.quantization_range);
  const double n = static_cast<double>(std::max<uint64_t>(sites, 1));
  for (size_t k = 0; k < sum.size(); ++k)
    out[k] = static_cast<float>(static_cast<double>(sum[k]) * step / n - c);
}

uint64_t rounding_seed(uint64_t experiment_seed, uint64_t round, std::string_view site) {
  // FNV-1a of the name, then mixed with the seed and the round.
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char ch : site) h = (h ^ ch) * 0x100000001b3ULL;
  return mix64(mix64(experiment_seed ^ 0x5ec0a99) ^ mix64(round + 1) ^ h);
}

}  // namespace atl::algorithms::secagg
