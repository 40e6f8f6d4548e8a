// Exact top-k selection by magnitude with a deterministic tie-break: larger |x| first, and among
// equal |x| the smaller index. Returns the selected indices in ascending order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace atl::algorithms::compress {

// Buffers of one selection, reused across calls (top-k per chunk selects thousands of times
// per tensor; none of them allocates once these have grown).
struct TopkScratch {
  std::vector<uint32_t> hist;         // 4 interleaved radix histograms of 2^11 buckets
  std::vector<uint32_t> above;        // indices in buckets above the k-th value's
  std::vector<uint64_t> candidates;   // (magnitude, index) keys of the k-th value's bucket
  std::vector<uint64_t> keys;         // a copy of candidates for nth_element
  std::vector<uint32_t> chosen;       // indices taken from that bucket
};

// x (n, finite, n < 2^32) -> k indices, ascending, into out (resized). k <= n.
void topk_indices(std::span<const float> x, uint64_t k, TopkScratch& scratch,
                  std::vector<uint32_t>& out);
std::vector<uint32_t> topk_indices(std::span<const float> x, uint64_t k);

}  // namespace atl::algorithms::compress
