// The MoE FFN of the Llama model (docs/moe.md): for every MoE layer of the config, the parameter
// offsets and the activations of its kernels::cpu::moe_ffn_forward, and the layer's router
// losses. The model (llama.cc) dispatches its FFN sub-block here for MoE layers. The expert
// GEMMs (routed, grouped, and the shared expert) go through the model's PrecisionGemm, so they
// follow the training recipe; the router GEMM stays fp32 (docs/precision.md).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "algorithms/model/param_set.h"
#include "algorithms/model/precision.h"

namespace atl::algorithms {

struct ModelConfig;

// The GemmSites of one MoE layer's expert weights: routed gate|up and down (one site each for
// all E experts: PrecisionGemm::grouped_* separates the experts' random streams), the shared
// expert's gate|up and down.
struct MoeSites {
  GemmSite gu, down, shared_gu, shared_down;
};

// The expert GemmSites of MoE block l (same high_precision as the block's dense sites): routed
// experts reuse the ids of the dense FFN's gate|up and down (an MoE block has no dense FFN); the
// shared expert's ids lie above every dense id (l·4 + k < 2^19 for any model).
MoeSites moe_gemm_sites(int layers, Precision precision, int l);

class MoeBlocks {
 public:
  // layout must be make_layout(cfg).
  MoeBlocks(const ModelConfig& cfg, const ParamLayout& layout);
  ~MoeBlocks();
  MoeBlocks(const MoeBlocks&) = delete;
  MoeBlocks& operator=(const MoeBlocks&) = delete;

  bool is_moe(int layer) const { return index_[layer] >= 0; }

  // x (N, C) the normalized FFN input -> out (N, C) written. Records the layer's router losses.
  // The expert GEMMs run through `gemm` with `sites` (fp32 recipe: the plain fp32 ops).
  void forward(int layer, const float* P, const float* x, float* out, int N, PrecisionGemm& gemm,
               const MoeSites& sites);
  // Backward of the last forward of `layer` for <dout, out> + aux_coef·L_aux + z_coef·L_z:
  // dx (N, C) += ; the layer's parameter gradients in G += .
  // Same gemm and sites as the forward.
  void backward(int layer, const float* P, float* G, const float* x, const float* dout, float* dx,
                PrecisionGemm& gemm, const MoeSites& sites);

  // Σ over MoE layers of the last forward: aux_coef·L_aux + z_coef·L_z (the term added to the
  // training loss), and the unscaled sums.
  double weighted_loss() const;
  double aux_loss_sum() const;
  double z_loss_sum() const;

 private:
  struct Offsets {
    size_t router, experts, shared_gu, shared_down;
  };
  struct Impl;
  std::vector<int> index_;  // per layer: index into off_ / impl, -1 for a dense layer
  std::vector<Offsets> off_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace atl::algorithms
