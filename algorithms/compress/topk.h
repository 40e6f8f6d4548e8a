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
  std::vector<uint32_t> sample;       // magnitude bits of a strided sample of x
  std::vector<uint64_t> candidates;   // (magnitude, index) keys at or above a threshold
  std::vector<uint64_t> keys;         // a copy of candidates for nth_element
  std::vector<uint32_t> above;        // indices certainly kept (radix path)
  std::vector<uint32_t> hist;         // radix histogram (radix path)
  std::vector<std::vector<uint64_t>> slice_candidates;  // one per thread (threads > 1)
};

// x (n, finite, n < 2^32) -> k indices, ascending, into out (resized). k <= n. threads > 1
// splits the scan over x in fixed slices; the result never depends on threads.
void topk_indices(std::span<const float> x, uint64_t k, TopkScratch& scratch,
                  std::vector<uint32_t>& out, int threads = 1);
std::vector<uint32_t> topk_indices(std::span<const float> x, uint64_t k);

}  // namespace atl::algorithms::compress
