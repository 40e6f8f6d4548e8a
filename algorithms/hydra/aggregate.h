// Masked aggregation of Hydra pseudo-gradients (DESIGN.md "Hydra subnetworks").
//
// Site k holds the elements Mₖ (its trained elements, ascending indices) and sends Δₖ only
// there. Per element j, with αₖ = tokensₖ · φₖ^p (tokens site k processed in the round, φₖ its
// forward share (cost.h), p = hydra.forward_share_power, default 0: αₖ = tokensₖ exactly):
//   Δ[j] = Σₖ αₖMₖ[j]Δₖ[j] / Σₖ αₖMₖ[j]        if some site holds j
//   held[j] = number of sites holding j         (0: j is untouched this round)
// then the outer Nesterov step (outer.h) runs on held elements only:
//   m[j] ← μm[j] + Δ[j];  θ[j] ← θ[j] − η(Δ[j] + μm[j])          (held[j] > 0)
//   θ[j], m[j] unchanged                                        (held[j] = 0)
// Momentum of an element nobody trained this round is frozen, not decayed: decaying it would
// silently shrink a direction that the next holder would otherwise resume, and applying it would
// move parameters nobody trained. Why φ^p: a site that runs a small part of the model's forward
// pass fits its trained units to that narrow subnetwork; p > 0 lets the sites whose forward pass
// is closer to the full model's (the one every site is evaluated with) weigh more where they
// share units (docs/hydra.md). Sums are per element in double in ascending node-id order:
// bitwise identical whatever order updates arrived in.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "algorithms/diloco/outer.h"
#include "algorithms/diloco/robust.h"
#include "kernels/core/status.h"

namespace atl::algorithms::hydra {

// hydra.forward_share_power must lie in [0, kMaxForwardSharePower] (φ^8 of a quarter-forward
// site is 1.5e-5: beyond that the weights only underflow).
inline constexpr double kMaxForwardSharePower = 8.0;

struct MaskedUpdate {
  std::string node_id;
  uint64_t tokens = 0;                // > 0
  std::span<const uint32_t> indices;  // ascending, distinct, < numel
  std::span<const float> values;      // Δₖ at indices (same length)
  double forward_share = 1.0;         // φₖ in (0, 1] (cost.h forward_share), used when p > 0
};

// delta (numel) and held (numel) are overwritten; delta is 0 where held is 0. Updates must be
// sorted by node_id, strictly ascending. forward_share_power is p, in [0, 8].
Status aggregate_masked(const std::vector<MaskedUpdate>& sorted_by_node_id, std::span<float> delta,
                        std::span<uint32_t> held, double forward_share_power = 0.0);

// αₖ of one update: tokens · φ^p (exactly tokens when p = 0).
double aggregation_weight(const MaskedUpdate& u, double forward_share_power);

// aggregate_masked with a robust aggregator (algorithms/diloco/robust.h): "mean" is
// aggregate_masked itself (with forward_share_power); "clipped-mean" scales each update to at most
// clip_multiple × the lower median of the updates' norms first; "trimmed-mean" and "median" take,
// per element, the values of the sites holding it (unweighted). "krum" needs updates over the same
// elements and is refused.
Status aggregate_masked_robust(const std::vector<MaskedUpdate>& sorted_by_node_id,
                               const AggregatorOptions& options, std::span<float> delta,
                               std::span<uint32_t> held, double forward_share_power = 0.0);

// The outer step on held elements only (see above). first_step and look_ahead as in
// OuterNesterov::step: the momentum buffer is initialised to Δ where held; look_ahead = false
// moves θ by −lr·Δ (the buffer updated as always).
Status masked_outer_step(const OuterNesterovOptions& opt, std::span<float> theta,
                         std::span<float> momentum, std::span<const float> delta,
                         std::span<const uint32_t> held, bool first_step, bool look_ahead = true);

// OK iff indices are ascending, distinct and < numel, and values are finite with the same length.
Status check_masked_update(const MaskedUpdate& u, size_t numel);

}  // namespace atl::algorithms::hydra
