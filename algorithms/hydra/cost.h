// Cost model of a Hydra subnetwork: training FLOPs per token as a fraction of the full model's.
//
// Per token, context T, D = C/H, g = H/KV query heads per head unit (1 without grouped-query
// attention), Fb = F/G (all counts are exactly what Llama executes under the subnetwork):
//   a_head  = 2·(2g + 2)·D·C + 4·g·T·D    forward of one head unit (a KV group): q rows of its
//                              g query heads and k, v rows of its KV head (2(g + 2)DC), o_proj
//                              columns (2gDC), scores Q·Kᵀ and A·V of g heads (2gTD each, the
//                              full T×T square); g = 1: 8·D·C + 4·T·D
//   a_block = 6·Fb·C           forward of one FFN block: gate, up rows (4FbC), down columns (2FbC)
//   a_lm    = 2·V·C            forward of the output head (tied or untied)
// A kept unit costs, by where its layer l sits relative to S and l0 = min S:
//   l ∈ S (trained)            3·a          forward + activation gradient + weight gradient
//   l ∉ S, l > l0 (frozen)     head: a_head + 2·(2g + 2)·D·C + 8·g·T·D,  block: 2·a_block
//                              (forward + activation gradient, no weight gradient)
//   l ∉ S, l < l0 (frozen)     a            forward only: backward stops at l0
// plus a_lm forward and, when S ≠ ∅, a_lm backward (activation gradient only: the head is
// frozen). A removed unit costs 0. The reference is the full model trained end to end,
// flops_per_token(cfg, T) = 6·P + 12·L·C·T (llama.h), which differs from Σ 3·a over every unit
// plus 3·a_lm only by the RMSNorm gains (6·(2L+1)·C) and the q/k/v biases (6·(C + 2·KV·D)·L).
// Memory is reported, not budgeted: a site holds θ (4 bytes/param) plus gradient and AdamW
// moments for trained elements only (12 bytes each) plus activations of layers >= l0.
#pragma once

#include <cstdint>

#include "algorithms/model/llama.h"
#include "algorithms/model/subnet.h"

namespace atl::algorithms::hydra {

struct CostModel {
  ModelConfig model;
  int ffn_blocks = 1;  // G
  int seq = 128;       // T the sites train with

  int64_t head_fwd() const;
  int64_t block_fwd() const;
  int64_t lm_fwd() const;
  // Cost of one kept unit of layer l (kind: 0 head unit, 1 FFN block) given S's membership of l and
  // whether l is above the lowest trained layer l0.
  int64_t unit_cost(bool is_block, bool in_S, bool above_l0) const;
  double full_flops_per_token() const;  // flops_per_token(model, seq)
};

// Training FLOPs per token of the subnetwork (the formula above; equals what Llama counts under
// the subnetwork, last_forward_flops + last_backward_flops, divided by B·T).
int64_t subnet_flops_per_token(const CostModel& cm, const Subnet& s);
// subnet_flops_per_token / full_flops_per_token.
double cost_fraction(const CostModel& cm, const Subnet& s);
// The training FLOPs per token a site with `budget` (share of the full model's cost) may spend:
// floor(budget · full_flops_per_token). A subnetwork fits when its subnet_flops_per_token does
// not exceed it.
int64_t budget_flops_per_token(const CostModel& cm, double budget);
// Forward share φ of a subnetwork: the forward FLOPs per token it runs (a of every kept unit plus
// a_lm) over the full model's forward FLOPs per token (a of every unit plus a_lm), in (0, 1].
// Trained or frozen does not matter: it measures how much of the model the site's forward pass
// (the one its pseudo-gradient was fitted under) is. Weights Hydra's aggregation (aggregate.h).
double forward_share(const CostModel& cm, const Subnet& s);
// Parameters + trained-state bytes (4·P + 12·trained) over the full model's 16·P.
double state_memory_fraction(const CostModel& cm, const Subnet& s);

}  // namespace atl::algorithms::hydra
