#include "algorithms/diloco/replay.h"

#include <cmath>

namespace atl::algorithms {

namespace {

// splitmix64's finalizer: a fixed, well-mixed hash of the element index. The low 12 bits pick
// the bucket, bit 63 the sign.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static_assert((kReplaySketchBuckets & (kReplaySketchBuckets - 1)) == 0,
              "the bucket is taken from the hash's low bits");

void add_to_sketch(std::vector<double>& sketch, uint64_t element, float value) {
  const uint64_t h = mix(element);
  const double v = static_cast<double>(value);
  sketch[h & (kReplaySketchBuckets - 1)] += (h >> 63) ? -v : v;
}

}  // namespace

std::vector<double> replay_sketch(std::span<const float> values,
                                  std::span<const uint32_t> indices) {
  std::vector<double> sketch(kReplaySketchBuckets, 0.0);
  const bool indexed = !indices.empty() && indices.size() == values.size();
  for (size_t j = 0; j < values.size(); ++j)
    add_to_sketch(sketch, indexed ? indices[j] : j, values[j]);
  return sketch;
}

double sketch_cosine(std::span<const double> a, std::span<const double> b) {
  if (a.size() != b.size()) return 0.0;
  double dot = 0.0, aa = 0.0, bb = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  if (!(aa > 0.0) || !(bb > 0.0)) return 0.0;
  const double c = dot / (std::sqrt(aa) * std::sqrt(bb));
  return std::isfinite(c) ? c : 0.0;
}

}  // namespace atl::algorithms
