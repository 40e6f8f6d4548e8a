// Exact top-k selection by magnitude with a deterministic tie-break: larger |x| first, and among
// equal |x| the smaller index. Returns the selected indices in ascending order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace atl::algorithms::compress {

// x (n, finite, n < 2^32) -> k indices, ascending. k <= n.
std::vector<uint32_t> topk_indices(std::span<const float> x, uint64_t k);

}  // namespace atl::algorithms::compress
