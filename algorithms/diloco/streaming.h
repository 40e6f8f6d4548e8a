// Streaming DiLoCo (Douillard et al., 2025, "Streaming DiLoCo with overlapping communication"):
// pure math of the fragment schedule and the merge rule.
//
// θ is split into P fragments: contiguous element ranges of the flat ParamSet buffer whose
// boundaries fall on tensor (view) boundaries, so a fragment is a run of whole tensors (whole
// layers, or parts of neighbouring layers). Round r synchronizes fragment r mod P after
// H/P inner steps, so each fragment is synchronized every H inner steps with the staggered
// offset (p + 1)·H/P, and each sync moves 1/P of θ. The coordinator applies the outer Nesterov
// step to the fragment's slice of θ and of the momentum (both are per element). A node keeps
// training for τ inner steps while its sync is in flight, then merges the new global fragment:
//   θ_local[frag] ← α·θ_local[frag] + (1 − α)·θ_global[frag]      (α = 0: replace)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"

namespace atl::algorithms {

// Elements [offset, offset + numel) of the flat buffer.
struct FragmentRange {
  size_t offset = 0;
  size_t numel = 0;
  bool operator==(const FragmentRange&) const = default;
};

// P contiguous fragments covering the layout in order, each non-empty. Boundary k (1 ≤ k < P)
// is the view boundary nearest to k·numel/P (the lower one on a tie) that leaves at least one
// view for every fragment before and after it. InvalidArgument when P is 0 or exceeds the
// number of views.
StatusOr<std::vector<FragmentRange>> fragment_ranges(const ParamLayout& layout, uint32_t fragments);

// The fragment round r synchronizes (P ≥ 1).
inline uint32_t fragment_of_round(uint64_t round, uint32_t fragments) {
  return static_cast<uint32_t>(round % fragments);
}

// local[i] ← α·local[i] + (1 − α)·global[i] in fp32, element by element (deterministic);
// α = 0 copies global bit for bit. Sizes must match (checked by the caller).
void merge_fragment(std::span<float> local, std::span<const float> global, float alpha);

}  // namespace atl::algorithms
