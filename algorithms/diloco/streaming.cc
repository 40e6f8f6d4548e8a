#include "algorithms/diloco/streaming.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace atl::algorithms {

StatusOr<std::vector<FragmentRange>> fragment_ranges(const ParamLayout& layout,
                                                     uint32_t fragments) {
  const auto& views = layout.views();
  const size_t V = views.size();
  if (fragments == 0) return InvalidArgument("streaming fragments must be >= 1");
  if (fragments > V)
    return InvalidArgument("cannot split " + std::to_string(V) + " tensors into " +
                           std::to_string(fragments) + " fragments (at most one per tensor)");
  // prefix[b] = elements in views [0, b): the candidate boundaries (views are packed in order).
  std::vector<size_t> prefix(V + 1, 0);
  for (size_t i = 0; i < V; ++i) prefix[i + 1] = views[i].offset + views[i].numel();
  const size_t n = layout.numel();
  std::vector<size_t> cut{0};
  for (uint32_t k = 1; k < fragments; ++k) {
    // Fragment k−1 needs ≥ 1 view after the previous cut; the P−k later ones need ≥ 1 each.
    const size_t lo = cut.back() + 1, hi = V - (fragments - k);
    const double target = static_cast<double>(n) * k / fragments;
    size_t best = lo;
    double best_err = -1;
    for (size_t b = lo; b <= hi; ++b) {
      const double err = std::abs(static_cast<double>(prefix[b]) - target);
      if (best_err < 0 || err < best_err) best = b, best_err = err;
    }
    cut.push_back(best);
  }
  cut.push_back(V);
  std::vector<FragmentRange> out;
  for (uint32_t k = 0; k < fragments; ++k)
    out.push_back({prefix[cut[k]], prefix[cut[k + 1]] - prefix[cut[k]]});
  return out;
}

void merge_fragment(std::span<float> local, std::span<const float> global, float alpha) {
  const size_t n = std::min(local.size(), global.size());
  if (alpha == 0.0f) {
    std::memcpy(local.data(), global.data(), n * sizeof(float));
    return;
  }
  const float beta = 1.0f - alpha;
  for (size_t i = 0; i < n; ++i) local[i] = alpha * local[i] + beta * global[i];
}

}  // namespace atl::algorithms
