// The MoE FFN layers of the CUDA model (llama_cuda.h): algorithms/model/moe_block.h on the
// device, i.e. kernels::cpu::moe_ffn_forward / moe_ffn_backward (kernels/cpu/moe_layer.cc)
// op for op, composed from the CUDA MoE ops (kernels/cuda/moe_ops.h) and the router losses of
// kernels/cuda/moe_aux.h:
//   logits (N, E) = x · Wrᵀ -> scores (softmax | sigmoid) -> top-k idx, w (N, K), renormalized
//   -> plan -> L_aux, L_z -> gather xp (M, C) -> grouped gate|up (M, 2F) -> SwiGLU (M, F)
//   -> grouped down yp (M, C) -> combine out (N, C) [+ shared expert down(swiglu(x·W_guᵀ))]
// Backward walks the same ops in reverse in the CPU's order and adds the gradients of
// aux_coef·L_aux + z_coef·L_z (the config's moe_aux_coef, moe_z_coef) times a scale the caller
// gives (1 on one device; a rank's share of the batch on several, docs/cuda.md).
//
// Parameters: the make_layout(cfg) offsets of the CPU model (router, the E adjacent expert
// blocks of 3·Fe·C floats, shared expert), so θ is the same flat buffer on host and device.
// Activations: per MoE layer (kept from forward for backward), grown to the largest N seen;
// backward scratch shared by the layers. The expert GEMMs follow the model's precision recipe
// (CudaPrecisionGemm, as MoeBlocks' RecipeGemms); the router GEMM is always fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/cuda/precision_cuda.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"
#include "kernels/cuda/moe_ops.h"
#include "kernels/cuda/runtime.h"

namespace atl::algorithms::cuda {

class CudaMoeBlocks {
 public:
  // layout must be make_layout(cfg); ctx is borrowed (the model's).
  CudaMoeBlocks(const ModelConfig& cfg, const ParamLayout& layout, kernels::cuda::Context& ctx);

  bool is_moe(int layer) const { return index_[size_t(layer)] >= 0; }
  bool empty() const { return off_.empty(); }

  // Grows every buffer to N tokens. Synchronizes the stream before freeing a buffer that queued
  // kernels may still read.
  Status ensure(int N);

  // x (N, C) the normalized FFN input (device) -> out (N, C) written. Records the layer's router
  // losses on the device. N <= the last ensure().
  // The expert GEMMs (routed and shared) go through `gemm` with `sites`, as MoeBlocks does; the
  // router GEMM stays fp32.
  Status forward(int layer, const float* P, const float* x, float* out, int N,
                 CudaPrecisionGemm& gemm, const MoeSites& sites);
  // Backward of the last forward of `layer` for <dout, out> + scale·(aux_coef·L_aux +
  // z_coef·L_z): dx (N, C) += ; the layer's parameter gradients in G +=.
  // Same gemm and sites as the forward.
  Status backward(int layer, const float* P, float* G, const float* x, const float* dout, float* dx,
                  double scale, CudaPrecisionGemm& gemm, const MoeSites& sites);

  // Σ over MoE layers of the last forward of L_aux and of L_z (unscaled), read from the device
  // (synchronizes the stream), added in layer order in double as MoeBlocks does.
  Status loss_sums(double& aux_sum, double& z_sum);

 private:
  struct Offsets {
    size_t router, experts, shared_gu, shared_down;
  };
  struct Layer {  // forward activations of one MoE layer, shapes as MoeFfnWork's
    kernels::cuda::MoeDevicePlan plan;
    kernels::cuda::DeviceBuffer<int32_t> idx;              // (N, K)
    kernels::cuda::DeviceBuffer<float> logits, scores, w;  // (N, E) (N, E) (N, K)
    kernels::cuda::DeviceBuffer<float> xp, gu, swi, yp;    // (M, C) (M, 2F) (M, F) (M, C)
    kernels::cuda::DeviceBuffer<float> sgu, sswi, sy;      // (N, 2Fs) (N, Fs) (N, C)
    int N = 0;
  };

  ModelConfig cfg_;
  kernels::cuda::Context& ctx_;
  kernels::cuda::MoeScore score_;
  std::vector<int> index_;  // per model layer: index into off_ / layers_, -1 for a dense layer
  std::vector<Offsets> off_;
  std::vector<Layer> layers_;
  int cap_ = 0;  // tokens the buffers hold
  // Backward scratch shared by the layers: dyp (M, C), dswi (max(M·F, N·Fs)), dgu (max(M·2F,
  // N·2Fs)), dxp (M, C), dw (N, K), dsc dlg (N, E); the router losses' double work area and the
  // per-layer loss slots (2 per MoE layer: L_aux, L_z).
  kernels::cuda::DeviceBuffer<float> dyp_, dswi_, dgu_, dxp_, dw_, dsc_, dlg_;
  kernels::cuda::DeviceBuffer<double> work_, losses_;
};

}  // namespace atl::algorithms::cuda
