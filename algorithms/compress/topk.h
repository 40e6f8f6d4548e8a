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
  std::vector<uint32_t> hist;   // 2^11 magnitude buckets of a sample (long inputs)
  std::vector<uint32_t> index;  // collected indices at or above a floor, in index order
  std::vector<float> value;     // their values (the same length; collected with slack of 16)
  // How far, in fp32 magnitude bits (2^23 a binade), the k-th magnitude of the last short
  // selection lay below its bulk's scale: where the next one starts looking. A speed hint only;
  // no result depends on it.
  int64_t gap_hint = 1 << 23;
};

// x (n values, n < 2^32) -> the k selected indices, ascending, at index[0, k) and their values
// at value[0, k). k <= n. Returns the largest magnitude of x as fp32 bits with the sign cleared
// (>= 0x7f800000 when x holds inf or NaN; the selection is then unspecified), so that a caller
// validates its input without a pass of its own. next: values the caller selects from next (the
// following chunk), brought into cache while x is scanned; a speed hint only.
uint32_t topk_select(std::span<const float> x, uint64_t k, TopkScratch& scratch, uint32_t* index,
                     float* value, std::span<const float> next = {});
// The same without the AVX-512 code (what a machine without AVX-512 runs); the same result.
uint32_t topk_select_portable(std::span<const float> x, uint64_t k, TopkScratch& scratch,
                              uint32_t* index, float* value, std::span<const float> next = {});

// x (n, finite, n < 2^32) -> k indices, ascending, into out (resized). k <= n.
void topk_indices(std::span<const float> x, uint64_t k, TopkScratch& scratch,
                  std::vector<uint32_t>& out);
std::vector<uint32_t> topk_indices(std::span<const float> x, uint64_t k);

}  // namespace atl::algorithms::compress
