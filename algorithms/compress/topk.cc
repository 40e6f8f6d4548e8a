#include "algorithms/compress/topk.h"

#include <algorithm>
#include <bit>

#include "kernels/core/check.h"

namespace atl::algorithms::compress {

std::vector<uint32_t> topk_indices(std::span<const float> x, uint64_t k) {
  ATOLL_CHECK(k <= x.size() && x.size() < (uint64_t{1} << 32),
              "k exceeds the values, or 2^32 values or more");
  std::vector<uint32_t> out;
  if (k == 0) return out;
  out.reserve(k);
  if (k == x.size()) {
    for (uint32_t i = 0; i < x.size(); ++i) out.push_back(i);
    return out;
  }
  // key = (0x7FFFFFFF - |x| bits) << 32 | index: ascending key order is descending magnitude
  // (|x| bits order like the values for finite x), then ascending index. Keys are unique, so
  // the selected set does not depend on the selection algorithm.
  std::vector<uint64_t> keys(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t a = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
    keys[i] = (static_cast<uint64_t>(0x7fffffffu - a) << 32) | i;
  }
  std::nth_element(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(k - 1), keys.end());
  for (uint64_t j = 0; j < k; ++j) out.push_back(static_cast<uint32_t>(keys[j]));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace atl::algorithms::compress
