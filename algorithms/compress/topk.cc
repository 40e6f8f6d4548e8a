#include "algorithms/compress/topk.h"

#include <algorithm>
#include <array>
#include <bit>

#include "kernels/core/check.h"

namespace atl::algorithms::compress {

namespace {

// |x| as its IEEE bits without the sign: for finite x these order like the magnitudes.
inline uint32_t magnitude_bits(float v) { return std::bit_cast<uint32_t>(v) & 0x7fffffffu; }

// Radix buckets of the magnitude's top bits: the 8 exponent bits and 3 mantissa bits
// (bucket width 12.5% of its lower edge), 2^11 buckets in all.
constexpr int kBucketShift = 20;
constexpr size_t kBuckets = size_t{1} << 11;

}  // namespace

// Selection by radix (two passes over x), not by sorting:
//  1. a histogram of the buckets finds the bucket b that holds the k-th largest magnitude, and
//     how many of the k come from buckets above it;
//  2. one scan collects, in index order, every index of a bucket above b, and the (magnitude,
//     index) keys of bucket b; the rest of the k are the smallest keys of bucket b under the
//     order "larger |x| first, then the smaller index" (nth_element over that bucket only);
//  3. the two ascending lists are merged.
// The result equals a full selection under that order (unique keys), so it does not depend on
// the algorithm.
std::vector<uint32_t> topk_indices(std::span<const float> x, uint64_t k) {
  ATOLL_CHECK(k <= x.size() && x.size() < (uint64_t{1} << 32),
              "k exceeds the values, or 2^32 values or more");
  std::vector<uint32_t> out;
  if (k == 0) return out;
  out.reserve(k);
  const size_t n = x.size();
  if (k == n) {
    for (uint32_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  // Four interleaved histograms: consecutive equal buckets do not wait on each other's stores.
  std::vector<std::array<uint32_t, 4>> hist(kBuckets, std::array<uint32_t, 4>{});
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (size_t lane = 0; lane < 4; ++lane)
      ++hist[magnitude_bits(x[i + lane]) >> kBucketShift][lane];
  for (; i < n; ++i) ++hist[magnitude_bits(x[i]) >> kBucketShift][0];

  size_t bucket = kBuckets;
  uint64_t above = 0;  // values in buckets above `bucket`
  while (bucket-- > 0) {
    const auto& h = hist[bucket];
    const uint64_t here = uint64_t{h[0]} + h[1] + h[2] + h[3];
    if (above + here >= k) break;
    above += here;
  }
  const uint64_t from_bucket = k - above;  // 1 .. values in `bucket`

  // key = (0x7FFFFFFF - |x| bits) << 32 | index: ascending key = descending |x|, then index.
  // Blocks of 16 values are first tested as a whole (a loop the compiler vectorizes): most hold
  // nothing at or above bucket b and are skipped without a branch per value.
  const uint32_t b = static_cast<uint32_t>(bucket);
  const uint32_t floor_bits = b << kBucketShift;  // the smallest magnitude bits in bucket b
  std::vector<uint64_t> candidates;  // bucket b, in index order
  auto take = [&](uint32_t j) {
    const uint32_t a = magnitude_bits(x[j]);
    if (a < floor_bits) return;
    if ((a >> kBucketShift) > b)
      out.push_back(j);
    else
      candidates.push_back((static_cast<uint64_t>(0x7fffffffu - a) << 32) | j);
  };
  constexpr size_t kBlock = 16;
  size_t j = 0;
  for (; j + kBlock <= n; j += kBlock) {
    uint32_t hits = 0;  // bit l: value j + l is at or above bucket b
    for (size_t l = 0; l < kBlock; ++l)
      hits |= static_cast<uint32_t>(magnitude_bits(x[j + l]) >= floor_bits) << l;
    for (; hits != 0; hits &= hits - 1)
      take(static_cast<uint32_t>(j + static_cast<size_t>(std::countr_zero(hits))));
  }
  for (; j < n; ++j) take(static_cast<uint32_t>(j));

  // The from_bucket smallest keys of bucket b: their threshold from a selection on a copy, then
  // one pass over the candidates keeps index order (no sort).
  std::vector<uint64_t> keys = candidates;
  std::nth_element(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(from_bucket - 1), keys.end());
  const uint64_t last_key = keys[from_bucket - 1];
  std::vector<uint32_t> chosen;
  chosen.reserve(from_bucket);
  for (uint64_t key : candidates)
    if (key <= last_key) chosen.push_back(static_cast<uint32_t>(key));
  std::vector<uint32_t> merged(out.size() + chosen.size());
  std::merge(out.begin(), out.end(), chosen.begin(), chosen.end(), merged.begin());
  return merged;
}

}  // namespace atl::algorithms::compress
