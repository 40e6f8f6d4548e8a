// First-order Taylor importance of the units of a Llama model (DESIGN.md "Hydra subnetworks"):
//   I(u) = Σ_{i ∈ params(u)} |g_i · w_i|,   g = ∂(mean loss)/∂w on one batch,
// averaged over the batches a site measures on. |g_i·w_i| is the first-order estimate of the
// loss change when w_i is zeroed, so I(u) ranks what removing a unit would cost on this data.
// Units (subnet.h): a layer = every parameter of the block (both norms, attention, FFN); a head
// unit (a KV group: g = heads / kv_heads query heads and their KV head) = its gD rows of q_proj,
// its D rows of k_proj and v_proj, its gD columns of o_proj and, with attention_bias, the same
// entries of the q/k/v biases; an FFN block = its Fb rows of gate_proj and up_proj and its Fb
// columns of down_proj.
// MoE extension point: an MoE layer reports one score per expert in `ffn` (its experts are the
// layer's FFN units); nothing else in the selection changes.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"

namespace atl::algorithms::hydra {

struct UnitScores {
  int layers = 0, heads = 0, ffn_blocks = 0;  // L, head units U (= KV heads), G
  std::vector<double> layer;                  // (L)
  std::vector<double> head;                   // (L·U), index l·U + j
  std::vector<double> ffn;                    // (L·G), index l·G + b
  int batches = 0;                            // number of batches averaged
};

UnitScores empty_scores(const ModelConfig& cfg, int ffn_blocks);

// Adds one batch's Σ|g⊙w| per unit to acc (acc.batches += 1). grads: full-model gradient.
void accumulate_taylor(const ParamSet& params, const ParamSet& grads, const ModelConfig& cfg,
                       UnitScores& acc);

// Divides by acc.batches (no-op for 0).
void finish_average(UnitScores& acc);

// Measures the scores on `batches` batches of rows (B, T + 1) tokens each, laid out one after
// the other in `tokens` (batches·B·(T+1)): full-model forward and backward per batch, params
// untouched. ffn_blocks must divide ffn_hidden.
StatusOr<UnitScores> taylor_importance(Llama& model, const ParamSet& params, const int32_t* tokens,
                                       int batches, int B, int T, int ffn_blocks);

// OK iff the shapes match (L, U, G) and every score is finite and >= 0 (for scores received
// from the network).
Status validate(const UnitScores& s, const ModelConfig& cfg, int ffn_blocks);

}  // namespace atl::algorithms::hydra
