// The dense Llama of algorithms/model/llama.h on one GPU: the same forward and backward, op for
// op, over device buffers, composed from the CUDA op table (kernels/cuda/ops.h). Parameters and
// gradients are flat device buffers with the ParamSet layout of make_layout(cfg), so moving θ
// between host and device is one copy.
//
// Mirror of Llama::forward / Llama::backward (fp32): embedding -> L blocks (RMSNorm, fused
// q|k|v GEMM, RoPE on q and k, causal attention, o_proj, residual; RMSNorm, then the FFN:
// fused gate|up GEMM, SwiGLU, down_proj in a dense layer, or in an MoE layer (the config's
// moe_* fields, is_moe_layer) the CPU MoE block op for op (llama_cuda_moe.h: router, top-k,
// dropless plan, grouped expert GEMMs, combine, optional shared expert, router losses);
// residual) -> final RMSNorm -> tied head (embedding matrix) -> softmax cross-entropy. Backward
// walks the same ops in reverse, accumulating into the gradients in the same order as the CPU
// model (head first, then blocks L-1 .. 0, embedding last), and differentiates the CPU model's
// objective: cross-entropy + Σ over MoE layers (moe_aux_coef·L_aux + moe_z_coef·L_z).
//
// Every valid ModelConfig is supported, in every precision recipe of algorithms/model/precision.h
// (set_precision; emulated as on the CPU, precision_cuda.h).
//
// Built only when the CUDA backend is (CMake target atoll_algorithms_cuda).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/cuda/precision_cuda.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"
#include "kernels/cuda/runtime.h"

namespace atl::algorithms::cuda {

class CudaMoeBlocks;  // llama_cuda_moe.h

// OK when the CUDA model can train cfg (any config that passes validate(), dense or MoE), else
// one line saying what is wrong.
Status check_supported(const ModelConfig& cfg);

class CudaLlama {
 public:
  // cfg must pass validate() and check_supported(). ctx is borrowed (outlives the model); every
  // op runs on ctx's device and stream.
  static StatusOr<std::unique_ptr<CudaLlama>> create(const ModelConfig& cfg,
                                                     kernels::cuda::Context& ctx);
  ~CudaLlama();

  const ModelConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  kernels::cuda::Context& context() { return ctx_; }

  // Enqueues the forward pass. P: device params (layout().numel() floats). tokens, targets:
  // host arrays (B, T); targets in [0, V) or -1 (ignored), may be nullptr (no loss). They are
  // validated on the host (one line naming the bad id) and copied to the device.
  // Leaves the per-position losses (B·T) on the device; loss_sum() reads them.
  Status forward(const float* P, const int32_t* tokens, const int32_t* targets, int B, int T);

  // start + Σ of the per-position losses of the last forward over non-ignored targets, added in
  // double in index order on the host (as the CPU model does before dividing; a multi-GPU worker
  // passes the previous ranks' running sum, so the additions stay the CPU's sequence).
  // Synchronizes the stream.
  StatusOr<double> loss_sum(double start = 0.0);
  // Number of non-ignored targets in the last forward.
  int64_t num_targets() const { return num_targets_; }
  // The mean loss of the last forward (loss_sum / num_targets, 0 without targets).
  StatusOr<float> loss();

  // Enqueues the backward of the last forward (which must have had targets), ACCUMULATING (+=)
  // into G (device, layout().numel() floats; zero it first). The loss differentiated is
  // Σ losses / denom + router_scale · aux_loss(); denom = 0 means num_targets() (with
  // router_scale = 1: the CPU model's objective). A multi-GPU worker passes the whole batch's
  // target count and its share of the batch's rows as router_scale, so summing the ranks'
  // gradients gives the gradient of the whole batch's mean plus the token-weighted mean of the
  // ranks' router losses (docs/cuda.md). Destroys the logits (the loss gradient is written over
  // them).
  Status backward(const float* P, float* G, int64_t denom = 0, double router_scale = 1.0);

  // The forward up to the final hidden states (the output of the final RMSNorm), without the
  // head or a loss: Llama::forward_hidden on the device, for a loss computed elsewhere (the
  // distillation student's, algorithms/cuda/cuda_student.h). Returns the device hidden states
  // (B·T, C), valid until the next forward.
  StatusOr<const float*> forward_hidden(const float* P, const int32_t* tokens, int B, int T);
  // Llama::backward_from_hidden on the device: from dh (host, B·T × C), the gradient of some loss
  // with respect to the last forward's final hidden states, ACCUMULATES (+=) into G the
  // gradients of the final norm, every block (MoE router losses included, router_scale as in
  // backward()) and the embedding lookup. The head's own gradient is the caller's.
  Status backward_from_hidden(const float* P, float* G, const float* dh, double router_scale = 1.0);

  // MoE router losses of the last forward (0 for a dense model), as Llama::aux_loss,
  // balance_loss_sum and z_loss_sum: Σ over MoE layers of moe_aux_coef·L_aux + moe_z_coef·L_z,
  // and the unscaled sums. Read from the device (synchronizes the stream).
  StatusOr<double> aux_loss();
  Status router_loss_sums(double& balance_sum, double& z_sum);

  // Training precision of the linear layers' GEMMs, as Llama::set_precision (default fp32): the
  // recipe's emulation on the device (precision_cuda.h), the same GemmSites as the CPU model
  // (the LM head in bf16 under every low-precision recipe, nvfp4's tail blocks in bf16, MoE
  // experts by the recipe, the router in fp32). Call gemm().begin_step(step) before each
  // training step's forward.
  void set_precision(Precision p, uint64_t seed) { gemm_.configure(p, seed); }
  CudaPrecisionGemm& gemm() { return gemm_; }

  // Logits (B·T, V) of the last forward on the device (valid until backward / next forward).
  const float* logits() const { return logits_; }

 private:
  struct LayerOffsets {
    size_t ln1, qkv, o, ln2, gu, down;
  };
  struct LayerActs {  // views into acts_, shapes as in llama.h's LayerActs
    float *x, *ln1, *rstd1, *qkv, *att, *atty, *h, *ln2, *rstd2, *gu, *swi;
  };

  // Activation-gradient views into grads_ for the current shape (as backward lays them out).
  struct GradViews {
    float *dres, *dln, *datty, *dqkv, *dgu, *dswi;
  };

  CudaLlama(const ModelConfig& cfg, kernels::cuda::Context& ctx);
  Status ensure_shape(int B, int T);
  GradViews grad_views();
  // Embedding, blocks and final norm of forward() (targets may be null): leaves lnf_.
  Status forward_trunk(const float* P, const int32_t* tokens, const int32_t* targets, int B,
                       int T);
  // From dlnf (in grad_views().dln) down: final norm, blocks L-1 .. 0, embedding lookup.
  Status backward_trunk(const float* P, float* G, double router_scale);
  // GEMM k (0 qkv, 1 o, 2 gate|up, 3 down) of layer l; l = layers is the LM head (Llama::site).
  GemmSite site(int l, int k) const;
  MoeSites moe_sites(int l) const;

  ModelConfig cfg_;
  kernels::cuda::Context& ctx_;
  ParamLayout layout_;
  size_t off_embed_ = 0, off_norm_ = 0;
  std::vector<LayerOffsets> off_;

  int B_ = 0, T_ = 0;
  size_t acts_cap_ = 0, grads_cap_ = 0, tok_cap_ = 0;
  kernels::cuda::DeviceBuffer<float> acts_;   // every forward activation, one allocation
  kernels::cuda::DeviceBuffer<float> grads_;  // activation gradients
  kernels::cuda::DeviceBuffer<int32_t> tok_;  // tokens (N) | targets (N)
  std::vector<LayerActs> la_;
  float *out_ = nullptr, *lnf_ = nullptr, *rstdf_ = nullptr, *scratch_ = nullptr;
  float *logits_ = nullptr, *losses_ = nullptr;
  std::vector<int32_t> host_targets_;   // (N) for loss_sum's mask
  std::unique_ptr<CudaMoeBlocks> moe_;  // null for a dense model
  CudaPrecisionGemm gemm_;
  bool have_targets_ = false;
  bool have_forward_ = false;  // a forward (or forward_hidden) ran with this shape
  int64_t num_targets_ = 0;
};

// Host <-> device copies on ctx's stream (ordered with the ops). h2d returns once the host
// buffer may be reused; d2h synchronizes the stream.
Status h2d(kernels::cuda::Context& ctx, void* dst, const void* src, size_t bytes);
Status d2h(kernels::cuda::Context& ctx, void* dst, const void* src, size_t bytes);

}  // namespace atl::algorithms::cuda
