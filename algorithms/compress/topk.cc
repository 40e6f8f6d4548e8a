#include "algorithms/compress/topk.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "kernels/core/check.h"

namespace atl::algorithms::compress {

namespace {

// |x| as its IEEE bits without the sign: for finite x these order like the magnitudes.
inline uint32_t magnitude_bits(float v) { return std::bit_cast<uint32_t>(v) & 0x7fffffffu; }

// key = (0x7FFFFFFF - |x| bits) << 32 | index: ascending key = descending |x|, then index.
// Keys are unique, so "the k smallest keys" is one set whatever algorithm finds it.
inline uint64_t key_of(uint32_t magnitude, uint32_t index) {
  return (static_cast<uint64_t>(0x7fffffffu - magnitude) << 32) | index;
}

// Radix buckets of the magnitude's top bits: the 8 exponent bits and 3 mantissa bits
// (bucket width 12.5% of its lower edge), 2^11 buckets in all.
constexpr int kBucketShift = 20;
constexpr size_t kBuckets = size_t{1} << 11;

// Scans x[begin, end) for magnitudes at or above floor_bits; calls take(index) for each, in
// index order. Blocks of 16 values are first tested as a whole (a loop the compiler vectorizes):
// most hold nothing at or above the floor and are skipped without a branch per value. Stops
// early (returns false) once take returns false.
template <typename Take>
bool scan_at_or_above(std::span<const float> x, size_t begin, size_t end, uint32_t floor_bits,
                      Take&& take) {
  constexpr size_t kBlock = 16;
  size_t j = begin;
  for (; j + kBlock <= end; j += kBlock) {
    uint32_t hits = 0;  // bit l: value j + l is at or above the floor
    for (size_t l = 0; l < kBlock; ++l)
      hits |= static_cast<uint32_t>(magnitude_bits(x[j + l]) >= floor_bits) << l;
    for (; hits != 0; hits &= hits - 1)
      if (!take(static_cast<uint32_t>(j + static_cast<size_t>(std::countr_zero(hits)))))
        return false;
  }
  for (; j < end; ++j)
    if (magnitude_bits(x[j]) >= floor_bits && !take(static_cast<uint32_t>(j))) return false;
  return true;
}

// Appends to out, in index order, the indices of the `count` smallest keys of candidates (which
// are in index order): their threshold from a selection on a copy, then one pass (no sort).
void append_smallest_keys(const std::vector<uint64_t>& candidates, uint64_t count,
                          std::vector<uint64_t>& keys, std::vector<uint32_t>& out) {
  keys.assign(candidates.begin(), candidates.end());
  std::nth_element(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(count - 1), keys.end());
  const uint64_t last_key = keys[count - 1];
  for (uint64_t key : candidates)
    if (key <= last_key) out.push_back(static_cast<uint32_t>(key));
}

// The end of both selections: the `from_bucket` smallest keys of s.candidates (bucket b, index
// order) merged with s.above (every index of a bucket above b, ascending), appended to out.
void append_selection(TopkScratch& s, uint64_t from_bucket, std::vector<uint32_t>& out) {
  const size_t first_chosen = out.size();
  append_smallest_keys(s.candidates, from_bucket, s.keys, out);
  // out = [chosen of bucket b]; merge with the indices above it.
  s.chosen.assign(out.begin() + static_cast<ptrdiff_t>(first_chosen), out.end());
  out.resize(first_chosen + s.above.size() + s.chosen.size());
  std::merge(s.above.begin(), s.above.end(), s.chosen.begin(), s.chosen.end(),
             out.begin() + static_cast<ptrdiff_t>(first_chosen));
}

// Selection by radix (two passes over x), for any input:
//  1. a histogram of the buckets finds the bucket b that holds the k-th largest magnitude, and
//     how many of the k come from buckets above it;
//  2. one scan collects, in index order, every index of a bucket above b, and the keys of
//     bucket b; the rest of the k are the smallest keys of bucket b;
//  3. the two ascending lists are merged.
void select_by_radix(std::span<const float> x, uint64_t k, TopkScratch& s,
                     std::vector<uint32_t>& out) {
  const size_t n = x.size();
  // Four interleaved histograms: consecutive equal buckets do not wait on each other's stores.
  s.hist.assign(4 * kBuckets, 0u);
  uint32_t* hist = s.hist.data();
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (size_t lane = 0; lane < 4; ++lane)
      ++hist[4 * (magnitude_bits(x[i + lane]) >> kBucketShift) + lane];
  for (; i < n; ++i) ++hist[4 * (magnitude_bits(x[i]) >> kBucketShift)];

  // The walk down from the top starts at the largest value's bucket (a max that vectorizes):
  // for a chunk of a few thousand values, walking the empty buckets above it cost as much as
  // the histogram.
  uint32_t top = 0;
  for (size_t j = 0; j < n; ++j) top = std::max(top, magnitude_bits(x[j]));
  size_t bucket = (top >> kBucketShift) + 1;
  uint64_t above = 0;  // values in buckets above `bucket`
  while (bucket-- > 0) {
    const uint32_t* h = hist + 4 * bucket;
    const uint64_t here = uint64_t{h[0]} + h[1] + h[2] + h[3];
    if (above + here >= k) break;
    above += here;
  }
  const uint64_t from_bucket = k - above;  // 1 .. values in `bucket`

  const uint32_t b = static_cast<uint32_t>(bucket);
  s.above.clear();
  s.candidates.clear();  // bucket b, in index order
  scan_at_or_above(x, 0, n, b << kBucketShift, [&](uint32_t j) {
    const uint32_t a = magnitude_bits(x[j]);
    if ((a >> kBucketShift) > b)
      s.above.push_back(j);
    else
      s.candidates.push_back(key_of(a, j));
    return true;
  });
  append_selection(s, from_bucket, out);
}

// Inputs at least this long select by select_by_sampled_floor first; shorter ones (the chunks
// of chunked top-k) by the radix histogram.
constexpr size_t kSampledMinValues = size_t{1} << 16;
// One value in kSampleStride goes into the sampled histogram.
constexpr size_t kSampleStride = 64;

// Selection with one pass over x instead of two, for long inputs; the same indices as
// select_by_radix, or false (out unchanged) when the sample misjudged the input:
//  1. a histogram of every kSampleStride-th value picks a floor bucket that, by the sample,
//     holds the k-th largest magnitude with a wide margin (about 1.25 k values at or above it);
//  2. one scan collects the indices at or above the floor (the masked scan skips the rest);
//  3. the exact histogram of those indices finds the k-th value's bucket b, which must lie at
//     or above the floor (else false), then the split and selection of select_by_radix follow.
// Everything at or above bucket b is collected in step 2, so the result is exact for any input.
bool select_by_sampled_floor(std::span<const float> x, uint64_t k, TopkScratch& s,
                             std::vector<uint32_t>& out) {
  const size_t n = x.size();
  s.hist.assign(kBuckets, 0u);
  uint32_t* hist = s.hist.data();
  size_t samples = 0;
  for (size_t i = kSampleStride / 2; i < n; i += kSampleStride, ++samples)
    ++hist[magnitude_bits(x[i]) >> kBucketShift];
  // Sampled count wanted at or above the floor: 1.25 k's share plus 4 standard deviations.
  const double share =
      static_cast<double>(k) * static_cast<double>(samples) / static_cast<double>(n);
  const double want = 1.25 * share + 4.0 * std::sqrt(share) + 4.0;
  size_t floor_bucket = kBuckets;
  double seen = 0;
  while (floor_bucket > 0 && seen < want) seen += hist[--floor_bucket];
  s.above.clear();  // here: every index at or above the floor, in index order
  // Room for what the sample predicts (and a margin), so the list does not grow by copies.
  s.above.reserve(
      static_cast<size_t>(1.1 * seen * static_cast<double>(n) / static_cast<double>(samples)) +
      1024);
  scan_at_or_above(x, 0, n, static_cast<uint32_t>(floor_bucket) << kBucketShift, [&](uint32_t j) {
    s.above.push_back(j);
    return true;
  });
  if (s.above.size() < k) return false;
  // The exact histogram of what was collected, from the top: the k-th value's bucket.
  std::fill(s.hist.begin(), s.hist.end(), 0u);
  for (uint32_t j : s.above) ++hist[magnitude_bits(x[j]) >> kBucketShift];
  size_t bucket = kBuckets;
  uint64_t above = 0;
  while (bucket-- > floor_bucket) {
    if (above + hist[bucket] >= k) break;
    above += hist[bucket];
  }
  if (bucket < floor_bucket || bucket >= kBuckets) return false;  // not reached: cannot happen
  const uint64_t from_bucket = k - above;
  const uint32_t b = static_cast<uint32_t>(bucket);
  // Split in place: indices above bucket b stay (in order) in s.above, bucket b's keys go to
  // s.candidates, lower buckets are dropped.
  s.candidates.clear();
  size_t kept = 0;
  for (uint32_t j : s.above) {
    const uint32_t a = magnitude_bits(x[j]);
    if ((a >> kBucketShift) > b)
      s.above[kept++] = j;
    else if ((a >> kBucketShift) == b)
      s.candidates.push_back(key_of(a, j));
  }
  s.above.resize(kept);
  append_selection(s, from_bucket, out);
  return true;
}

}  // namespace

void topk_indices(std::span<const float> x, uint64_t k, TopkScratch& scratch,
                  std::vector<uint32_t>& out) {
  ATOLL_CHECK(k <= x.size() && x.size() < (uint64_t{1} << 32),
              "k exceeds the values, or 2^32 values or more");
  out.clear();
  if (k == 0) return;
  const size_t n = x.size();
  if (k == n) {
    out.resize(n);
    for (uint32_t i = 0; i < n; ++i) out[i] = i;
    return;
  }
  if (n >= kSampledMinValues && select_by_sampled_floor(x, k, scratch, out)) return;
  out.clear();
  select_by_radix(x, k, scratch, out);
}

std::vector<uint32_t> topk_indices(std::span<const float> x, uint64_t k) {
  TopkScratch scratch;
  std::vector<uint32_t> out;
  topk_indices(x, k, scratch, out);
  return out;
}

}  // namespace atl::algorithms::compress
