#include "algorithms/compress/topk.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "kernels/core/check.h"
#include "kernels/formats/avx512.h"

namespace atl::algorithms::compress {

namespace {

// |x| as its IEEE bits without the sign: for finite x these order like the magnitudes.
inline uint32_t magnitude_bits(float v) { return std::bit_cast<uint32_t>(v) & 0x7fffffffu; }

// Radix buckets of the magnitude's top bits: the 8 exponent bits and 3 mantissa bits
// (bucket width 12.5% of its lower edge), 2^11 buckets in all.
constexpr int kBucketShift = 20;
constexpr size_t kBuckets = size_t{1} << 11;

// Loops the compiler vectorizes (one unsigned max / compare a lane).
uint32_t max_magnitude(std::span<const float> x) {
  uint32_t top = 0;
  for (float v : x) {
    const uint32_t a = magnitude_bits(v);
    top = a > top ? a : top;
  }
  return top;
}
// Values of v[0, n) whose magnitude bits are >= floor_bits.
uint64_t count_at_or_above(const float* v, size_t n, uint32_t floor_bits) {
  uint32_t count = 0;  // n < 2^32
  for (size_t j = 0; j < n; ++j) count += magnitude_bits(v[j]) >= floor_bits ? 1u : 0u;
  return count;
}

// The largest magnitude of x, and a scale of its bulk that spikes do not move: the smallest of
// the maxima of its 16 interleaved lanes (values j, j + 16, j + 32, ...).
struct Magnitudes {
  uint32_t top = 0;
  uint32_t lane_floor = 0;
};
Magnitudes magnitudes(std::span<const float> x) {
  constexpr size_t kLanes = 16;
  uint32_t lane[kLanes] = {};
  size_t j = 0;
  for (; j + kLanes <= x.size(); j += kLanes)
    for (size_t l = 0; l < kLanes; ++l) {
      const uint32_t a = magnitude_bits(x[j + l]);
      lane[l] = a > lane[l] ? a : lane[l];
    }
  Magnitudes m;
  m.lane_floor = j == 0 ? 0 : lane[0];
  for (size_t l = 0; l < kLanes; ++l) {
    m.top = std::max(m.top, lane[l]);
    if (j > 0) m.lane_floor = std::min(m.lane_floor, lane[l]);
  }
  for (; j < x.size(); ++j) m.top = std::max(m.top, magnitude_bits(x[j]));
  return m;
}

// Room for `need` entries in s.index and s.value (their sizes are the capacity; the count of
// collected entries is kept by the caller).
void grow(TopkScratch& s, size_t need) {
  const size_t size = std::max(need, 2 * s.index.size());
  s.index.resize(size);
  s.value.resize(size);
}
inline void ensure_room(TopkScratch& s, size_t need) {
  if (s.index.size() < need) [[unlikely]] grow(s, need);
}

// Collects (index, value) of every x[j] with magnitude bits >= floor_bits, in index order, at
// s.index / s.value [0, count); returns the largest magnitude bits of x. Blocks of 16 values are
// tested as a whole: most hold nothing at or above the floor. With AVX-512 a block's hits are
// compressed into place with one instruction per array (16 entries of slack are kept).
// prefetch: values to bring into cache meanwhile (the next chunk; nothing when null), one cache
// line per block of 16: the scan runs from L1, and the next chunk's load overlaps it.
template <bool kVector>
uint32_t collect_at_or_above(std::span<const float> x, uint32_t floor_bits, TopkScratch& s,
                             size_t& count, const float* prefetch = nullptr, size_t ahead = 0) {
  constexpr size_t kBlock = 16;
  const size_t n = x.size();
  size_t c = 0, j = 0;
  uint32_t top = 0;
  // Local pointers: stores through them would otherwise make the compiler reload the vectors'.
  uint32_t* index = s.index.data();
  float* value = s.value.data();
  size_t room = s.index.size();
  auto make_room = [&](size_t need) {
    if (room >= need) [[likely]] return;
    grow(s, need);
    index = s.index.data();
    value = s.value.data();
    room = s.index.size();
  };
  auto prefetch_block = [&](size_t at) {
    if (prefetch != nullptr && at < ahead) __builtin_prefetch(prefetch + at, 0, 3);
  };
#if ATOLL_FORMATS_AVX512
  if constexpr (kVector) {
    const __m512i floor_v = _mm512_set1_epi32(static_cast<int>(floor_bits));
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i top_v = _mm512_setzero_si512();
    for (; j + kBlock <= n; j += kBlock) {
      prefetch_block(j);
      const __m512 v = _mm512_loadu_ps(x.data() + j);
      const __m512i a = kernels::formats::avx512::abs_bits(v);
      top_v = _mm512_max_epu32(top_v, a);
      const __mmask16 hits = _mm512_cmpge_epu32_mask(a, floor_v);
      if (hits == 0) continue;
      make_room(c + kBlock);
      const __m512i idx = _mm512_add_epi32(lanes, _mm512_set1_epi32(static_cast<int>(j)));
      _mm512_storeu_si512(index + c, _mm512_maskz_compress_epi32(hits, idx));
      _mm512_storeu_ps(value + c, _mm512_maskz_compress_ps(hits, v));
      c += static_cast<size_t>(std::popcount(static_cast<uint32_t>(hits)));
    }
    top = _mm512_reduce_max_epu32(top_v);
  }
#endif
  for (; j + kBlock <= n; j += kBlock) {
    prefetch_block(j);
    uint32_t hits = 0;  // bit l: value j + l is at or above the floor
    for (size_t l = 0; l < kBlock; ++l) {
      const uint32_t a = magnitude_bits(x[j + l]);
      top = a > top ? a : top;
      hits |= static_cast<uint32_t>(a >= floor_bits) << l;
    }
    if (hits == 0) continue;
    make_room(c + kBlock);
    for (; hits != 0; hits &= hits - 1) {
      const size_t i = j + static_cast<size_t>(std::countr_zero(hits));
      index[c] = static_cast<uint32_t>(i);
      value[c++] = x[i];
    }
  }
  for (; j < n; ++j) {
    const uint32_t a = magnitude_bits(x[j]);
    top = a > top ? a : top;
    if (a < floor_bits) continue;
    make_room(c + 1);
    index[c] = static_cast<uint32_t>(j);
    value[c++] = x[j];
  }
  count = c;
  return top;
}

// From `count` collected entries (index order) holding every value whose magnitude bits are
// >= floor_bits (count >= k) and no magnitude above top: the k selected, in index order, to
// index / value. The k-th largest magnitude m is found by bisection on the bits, each step a
// count over the collected values (a vectorized loop over a list that stays in cache); every
// magnitude above m is taken, and of those equal to m the first (smallest indices) that make k.
// Returns m.
template <bool kVector>
uint32_t write_selection(const TopkScratch& s, size_t count, uint64_t k, uint32_t floor_bits,
                         uint32_t top, uint32_t* index, float* value) {
  const float* v = s.value.data();
  const uint32_t* from = s.index.data();
  int64_t lo = floor_bits, hi = int64_t{top} + 1;  // count(lo) >= k > count(hi)
  uint64_t count_hi = 0;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    const uint64_t c = count_at_or_above(v, count, static_cast<uint32_t>(mid));
    if (c >= k) {
      lo = mid;
    } else {
      hi = mid;
      count_hi = c;
    }
  }
  const auto m = static_cast<uint32_t>(lo);
  uint64_t ties_left = k - count_hi;  // of the values with magnitude exactly m, in index order
  uint64_t out = 0;
  size_t j = 0;
#if ATOLL_FORMATS_AVX512
  if constexpr (kVector) {
    // Blocks of 16, the taken lanes compressed into place (k in all: no overrun).
    const __m512i m_v = _mm512_set1_epi32(static_cast<int>(m));
    for (; j + 16 <= count; j += 16) {
      const __m512 x = _mm512_loadu_ps(v + j);
      const __m512i a = kernels::formats::avx512::abs_bits(x);
      uint32_t take = _mm512_cmpgt_epu32_mask(a, m_v);
      for (uint32_t tie = _mm512_cmpeq_epu32_mask(a, m_v); tie != 0 && ties_left > 0;
           tie &= tie - 1, --ties_left) {
        take |= tie & (0u - tie);  // the lowest remaining tie
      }
      const auto mask = static_cast<__mmask16>(take);
      _mm512_mask_compressstoreu_epi32(index + out, mask, _mm512_loadu_si512(from + j));
      _mm512_mask_compressstoreu_ps(value + out, mask, x);
      out += static_cast<uint64_t>(std::popcount(take));
    }
  }
#endif
  for (; j < count && out < k; ++j) {
    const uint32_t a = magnitude_bits(v[j]);
    const bool tie = a == m && ties_left > 0;
    index[out] = from[j];
    value[out] = v[j];
    out += (a > m || tie) ? 1 : 0;
    ties_left -= tie ? 1 : 0;
  }
  return m;
}

// Selection for any input: a floor guessed from the last selection's distance below the bulk's
// scale (Magnitudes::lane_floor) and an eighth of a binade lower, one collecting scan (repeated
// lower, by doubling steps, in the rare case it holds fewer than k), then write_selection. The
// guess only decides how much is collected, never what is selected.
template <bool kVector>
uint32_t select_by_search(std::span<const float> x, uint64_t k, TopkScratch& s, uint32_t* index,
                          float* value, std::span<const float> next) {
  const Magnitudes mag = magnitudes(x);
  int64_t guess = int64_t{mag.lane_floor} - s.gap_hint - (int64_t{1} << 20);
  int64_t step = int64_t{1} << 22;
  size_t count = 0;
  for (;;) {
    const auto floor_bits = static_cast<uint32_t>(std::max<int64_t>(guess, 0));
    collect_at_or_above<kVector>(x, floor_bits, s, count, next.data(), next.size());
    if (count >= k) {
      const uint32_t m = write_selection<kVector>(s, count, k, floor_bits, mag.top, index, value);
      s.gap_hint = int64_t{mag.lane_floor} - int64_t{m};
      return mag.top;
    }
    // floor 0 collects everything (n >= k), so this ends.
    guess = std::min<int64_t>(guess, mag.top) - step;
    step *= 2;
  }
}

// Inputs at least this long select by select_by_sampled_floor first; shorter ones (the chunks
// of chunked top-k) by select_by_search.
constexpr size_t kSampledMinValues = size_t{1} << 16;
// One value in kSampleStride goes into the sampled histogram.
constexpr size_t kSampleStride = 64;

// Selection with one pass over x, for long inputs; the same result as select_by_search, or false
// (nothing written) when the sample misjudged the input:
//  1. a histogram of every kSampleStride-th value picks a floor bucket that, by the sample,
//     holds the k-th largest magnitude with a wide margin (about 1.25 k values at or above it);
//  2. one scan collects the indices and values at or above the floor (and the largest
//     magnitude, which validates the input on the way);
//  3. when at least k were collected, write_selection picks the k among them (fewer: false).
// Every value at or above the floor is collected in step 2, so the result is exact for any input.
template <bool kVector>
bool select_by_sampled_floor(std::span<const float> x, uint64_t k, TopkScratch& s,
                             uint32_t* index, float* value, uint32_t& top) {
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
  // Room for what the sample predicts (and a margin), so the lists do not grow by copies.
  ensure_room(s, static_cast<size_t>(1.1 * seen * static_cast<double>(n) /
                                     static_cast<double>(samples)) + 1024);
  size_t count = 0;
  const uint32_t floor_bits = static_cast<uint32_t>(floor_bucket) << kBucketShift;
  top = collect_at_or_above<kVector>(x, floor_bits, s, count);
  if (count < k) return false;
  write_selection<kVector>(s, count, k, floor_bits, top, index, value);
  return true;
}

template <bool kVector>
uint32_t select(std::span<const float> x, uint64_t k, TopkScratch& scratch, uint32_t* index,
                float* value, std::span<const float> next) {
  ATOLL_CHECK(k <= x.size() && x.size() < (uint64_t{1} << 32),
              "k exceeds the values, or 2^32 values or more");
  const size_t n = x.size();
  if (k == 0) return max_magnitude(x);
  if (k == n) {
    for (uint32_t i = 0; i < n; ++i) {
      index[i] = i;
      value[i] = x[i];
    }
    return max_magnitude(x);
  }
  uint32_t top = 0;
  if (n >= kSampledMinValues &&
      select_by_sampled_floor<kVector>(x, k, scratch, index, value, top)) {
    return top;
  }
  return select_by_search<kVector>(x, k, scratch, index, value, next);
}

}  // namespace

uint32_t topk_select(std::span<const float> x, uint64_t k, TopkScratch& scratch, uint32_t* index,
                     float* value, std::span<const float> next) {
  return select<true>(x, k, scratch, index, value, next);
}
uint32_t topk_select_portable(std::span<const float> x, uint64_t k, TopkScratch& scratch,
                              uint32_t* index, float* value, std::span<const float> next) {
  return select<false>(x, k, scratch, index, value, next);
}

void topk_indices(std::span<const float> x, uint64_t k, TopkScratch& scratch,
                  std::vector<uint32_t>& out) {
  out.resize(k);
  std::vector<float> values(k);
  topk_select(x, k, scratch, out.data(), values.data());
}

std::vector<uint32_t> topk_indices(std::span<const float> x, uint64_t k) {
  TopkScratch scratch;
  std::vector<uint32_t> out;
  topk_indices(x, k, scratch, out);
  return out;
}

}  // namespace atl::algorithms::compress
