#include "algorithms/cuda/llama_cuda_moe.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "algorithms/cuda/llama_cuda.h"
#include "kernels/cuda/moe_aux.h"
#include "kernels/cuda/ops.h"

namespace atl::algorithms::cuda {

namespace kc = atl::kernels::cuda;

namespace {

// Grows b to n elements (at least 1) without keeping its contents.
template <typename T>
Status grow(kc::DeviceBuffer<T>& b, size_t n) {
  n = n == 0 ? 1 : n;
  if (b.size() >= n) return Status::Ok();
  b = kc::DeviceBuffer<T>();
  ATOLL_ASSIGN_OR_RETURN(b, kc::DeviceBuffer<T>::alloc(n));
  return Status::Ok();
}

}  // namespace

CudaMoeBlocks::CudaMoeBlocks(const ModelConfig& cfg, const ParamLayout& layout, kc::Context& ctx)
    : cfg_(cfg),
      ctx_(ctx),
      score_(cfg.moe_score == "sigmoid" ? kc::MoeScore::kSigmoid : kc::MoeScore::kSoftmax) {
  index_.assign(size_t(cfg.layers), -1);
  for (int l = 0; l < cfg.layers; ++l) {
    if (!is_moe_layer(cfg, l)) continue;
    auto at = [&](const std::string& s) {
      const ParamView* v = layout.find(moe_param_name(l, s));
      return v ? v->offset : size_t(0);
    };
    index_[size_t(l)] = static_cast<int>(off_.size());
    // Experts are adjacent in the layout (expert e's gate|up|down block at e·3·Fe·C).
    off_.push_back({at("gate.weight"), at("experts.0.gate_proj.weight"),
                    at("shared_expert.gate_proj.weight"), at("shared_expert.down_proj.weight")});
  }
  layers_.resize(off_.size());
}

Status CudaMoeBlocks::ensure(int N) {
  if (N <= cap_) return Status::Ok();
  const size_t C = size_t(cfg_.dim), E = size_t(cfg_.moe_experts), K = size_t(cfg_.moe_top_k),
               F = size_t(cfg_.moe_hidden), Fs = size_t(cfg_.moe_shared_hidden);
  const size_t n = size_t(N), M = n * K;
  // The kernels index rows and elements with 32-bit ints.
  const size_t widest = std::max({M * 2 * F, M * C, n * 2 * Fs, n * E});
  if (widest > size_t(INT32_MAX))
    return InvalidArgument("CUDA model: " + std::to_string(N) + " tokens per MoE layer are too " +
                           "many for 32-bit indexing: use a smaller batch");
  // Queued kernels may still read the buffers about to be freed.
  ATOLL_RETURN_IF_ERROR(ctx_.synchronize());
  for (Layer& a : layers_) {
    ATOLL_RETURN_IF_ERROR(grow(a.idx, M));
    ATOLL_RETURN_IF_ERROR(grow(a.logits, n * E));
    ATOLL_RETURN_IF_ERROR(grow(a.scores, n * E));
    ATOLL_RETURN_IF_ERROR(grow(a.w, M));
    ATOLL_RETURN_IF_ERROR(grow(a.xp, M * C));
    ATOLL_RETURN_IF_ERROR(grow(a.gu, M * 2 * F));
    ATOLL_RETURN_IF_ERROR(grow(a.swi, M * F));
    ATOLL_RETURN_IF_ERROR(grow(a.yp, M * C));
    if (Fs > 0) {
      ATOLL_RETURN_IF_ERROR(grow(a.sgu, n * 2 * Fs));
      ATOLL_RETURN_IF_ERROR(grow(a.sswi, n * Fs));
      ATOLL_RETURN_IF_ERROR(grow(a.sy, n * C));
    }
  }
  ATOLL_RETURN_IF_ERROR(grow(dyp_, M * C));
  ATOLL_RETURN_IF_ERROR(grow(dswi_, std::max(M * F, n * Fs)));
  ATOLL_RETURN_IF_ERROR(grow(dgu_, std::max(M * 2 * F, n * 2 * Fs)));
  ATOLL_RETURN_IF_ERROR(grow(dxp_, M * C));
  ATOLL_RETURN_IF_ERROR(grow(dw_, M));
  ATOLL_RETURN_IF_ERROR(grow(dsc_, n * E));
  ATOLL_RETURN_IF_ERROR(grow(dlg_, n * E));
  ATOLL_RETURN_IF_ERROR(grow(work_, kc::moe_aux_work_size(N, int(E))));
  ATOLL_RETURN_IF_ERROR(grow(losses_, 2 * layers_.size()));
  cap_ = N;
  return Status::Ok();
}

Status CudaMoeBlocks::forward(int layer, const float* P, const float* x, float* out, int N,
                              CudaPrecisionGemm& gemm, const MoeSites& sites) {
  const int li = index_[size_t(layer)];
  const Offsets& o = off_[size_t(li)];
  Layer& a = layers_[size_t(li)];
  if (N > cap_) return FailedPrecondition("CUDA MoE layer: forward before ensure()");
  const int C = cfg_.dim, E = cfg_.moe_experts, K = cfg_.moe_top_k, F = cfg_.moe_hidden,
            Fs = cfg_.moe_shared_hidden, M = N * K;
  const size_t stride = size_t(3) * F * C;
  const float* experts = P + o.experts;
  a.N = N;

  // Router: logits (N, E), scores, top-k (renormalized, as MoeBlocks) and the plan.
  ATOLL_RETURN_IF_ERROR(kc::matmul_forward(ctx_, a.logits.data(), x, P + o.router, N, C, E));
  ATOLL_RETURN_IF_ERROR(
      kc::moe_scores_forward(ctx_, a.scores.data(), a.logits.data(), N, E, score_));
  ATOLL_RETURN_IF_ERROR(kc::moe_topk_forward(ctx_, a.idx.data(), a.w.data(), a.scores.data(), N, E,
                                             K, /*renormalize=*/true));
  ATOLL_RETURN_IF_ERROR(kc::moe_plan(ctx_, a.plan, a.idx.data(), N, E, K));
  double* loss = losses_.data() + 2 * size_t(li);
  ATOLL_RETURN_IF_ERROR(
      kc::moe_aux_loss_forward(ctx_, loss, work_.data(), a.scores.data(), a.plan, score_));
  ATOLL_RETURN_IF_ERROR(
      kc::moe_z_loss_forward(ctx_, loss + 1, work_.data(), a.logits.data(), N, E));

  // Experts over their groups: xp (M, C) -> gu (M, 2F) -> swi (M, F) -> yp (M, C); the expert
  // GEMMs by the precision recipe.
  ATOLL_RETURN_IF_ERROR(kc::moe_gather_forward(ctx_, a.xp.data(), x, a.plan, C));
  ATOLL_RETURN_IF_ERROR(
      gemm.grouped_forward(a.gu.data(), a.xp.data(), experts, stride, a.plan, C, 2 * F, sites.gu));
  ATOLL_RETURN_IF_ERROR(kc::swiglu_forward(ctx_, a.swi.data(), a.gu.data(), M, F));
  ATOLL_RETURN_IF_ERROR(gemm.grouped_forward(a.yp.data(), a.swi.data(), experts + size_t(2) * F * C,
                                             stride, a.plan, F, C, sites.down));
  ATOLL_RETURN_IF_ERROR(kc::moe_combine_forward(ctx_, out, a.yp.data(), a.w.data(), a.plan, C));

  if (Fs > 0) {  // shared expert, every token: out += down(swiglu(x · W_guᵀ))
    ATOLL_RETURN_IF_ERROR(
        gemm.forward(a.sgu.data(), x, P + o.shared_gu, N, C, 2 * Fs, sites.shared_gu));
    ATOLL_RETURN_IF_ERROR(kc::swiglu_forward(ctx_, a.sswi.data(), a.sgu.data(), N, Fs));
    ATOLL_RETURN_IF_ERROR(
        gemm.forward(a.sy.data(), a.sswi.data(), P + o.shared_down, N, Fs, C, sites.shared_down));
    ATOLL_RETURN_IF_ERROR(kc::add_forward(ctx_, out, out, a.sy.data(), size_t(N) * C));
  }
  return Status::Ok();
}

Status CudaMoeBlocks::backward(int layer, const float* P, float* G, const float* x,
                               const float* dout, float* dx, double scale, CudaPrecisionGemm& gemm,
                               const MoeSites& sites) {
  const int li = index_[size_t(layer)];
  const Offsets& o = off_[size_t(li)];
  Layer& a = layers_[size_t(li)];
  const int N = a.N, C = cfg_.dim, E = cfg_.moe_experts, K = cfg_.moe_top_k, F = cfg_.moe_hidden,
            Fs = cfg_.moe_shared_hidden, M = N * K;
  const size_t stride = size_t(3) * F * C, down_off = size_t(2) * F * C;
  const float* experts = P + o.experts;
  float* dexperts = G + o.experts;
  const double aux_coef = cfg_.moe_aux_coef * scale, z_coef = cfg_.moe_z_coef * scale;
  auto zero = [&](float* p, size_t n) { return kc::zero_fill(ctx_, p, n); };

  // Combine: dyp (M, C), dw (N, K).
  ATOLL_RETURN_IF_ERROR(zero(dyp_.data(), size_t(M) * C));
  ATOLL_RETURN_IF_ERROR(zero(dw_.data(), size_t(M)));
  ATOLL_RETURN_IF_ERROR(kc::moe_combine_backward(ctx_, dyp_.data(), dw_.data(), dout, a.yp.data(),
                                                 a.w.data(), a.plan, C));
  // Experts, backwards through down, SwiGLU and gate|up; then back to token order.
  ATOLL_RETURN_IF_ERROR(zero(dswi_.data(), size_t(M) * F));
  ATOLL_RETURN_IF_ERROR(gemm.grouped_backward(dswi_.data(), dexperts + down_off, dyp_.data(),
                                              a.swi.data(), experts + down_off, stride, a.plan, F,
                                              C, sites.down));
  ATOLL_RETURN_IF_ERROR(zero(dgu_.data(), size_t(M) * 2 * F));
  ATOLL_RETURN_IF_ERROR(kc::swiglu_backward(ctx_, dgu_.data(), dswi_.data(), a.gu.data(), M, F));
  ATOLL_RETURN_IF_ERROR(zero(dxp_.data(), size_t(M) * C));
  ATOLL_RETURN_IF_ERROR(gemm.grouped_backward(dxp_.data(), dexperts, dgu_.data(), a.xp.data(),
                                              experts, stride, a.plan, C, 2 * F, sites.gu));
  ATOLL_RETURN_IF_ERROR(kc::moe_gather_backward(ctx_, dx, dxp_.data(), a.plan, C));

  // Router: dscores from the combine weights and the balance loss, dlogits from the scores and
  // the z-loss, then the router GEMM.
  ATOLL_RETURN_IF_ERROR(zero(dsc_.data(), size_t(N) * E));
  ATOLL_RETURN_IF_ERROR(kc::moe_topk_backward(ctx_, dsc_.data(), dw_.data(), a.scores.data(),
                                              a.idx.data(), N, E, K, /*renormalize=*/true));
  if (aux_coef != 0.0)
    ATOLL_RETURN_IF_ERROR(
        kc::moe_aux_loss_backward(ctx_, dsc_.data(), a.scores.data(), a.plan, score_, aux_coef));
  ATOLL_RETURN_IF_ERROR(zero(dlg_.data(), size_t(N) * E));
  ATOLL_RETURN_IF_ERROR(
      kc::moe_scores_backward(ctx_, dlg_.data(), dsc_.data(), a.scores.data(), N, E, score_));
  if (z_coef != 0.0)
    ATOLL_RETURN_IF_ERROR(
        kc::moe_z_loss_backward(ctx_, dlg_.data(), a.logits.data(), N, E, z_coef));
  ATOLL_RETURN_IF_ERROR(
      kc::matmul_backward(ctx_, dx, G + o.router, dlg_.data(), x, P + o.router, N, C, E));

  if (Fs > 0) {  // the routed scratch is reused (sized for both in ensure())
    ATOLL_RETURN_IF_ERROR(zero(dswi_.data(), size_t(N) * Fs));
    ATOLL_RETURN_IF_ERROR(gemm.backward(dswi_.data(), G + o.shared_down, dout, a.sswi.data(),
                                        P + o.shared_down, N, Fs, C, sites.shared_down));
    ATOLL_RETURN_IF_ERROR(zero(dgu_.data(), size_t(N) * 2 * Fs));
    ATOLL_RETURN_IF_ERROR(
        kc::swiglu_backward(ctx_, dgu_.data(), dswi_.data(), a.sgu.data(), N, Fs));
    ATOLL_RETURN_IF_ERROR(gemm.backward(dx, G + o.shared_gu, dgu_.data(), x, P + o.shared_gu, N, C,
                                        2 * Fs, sites.shared_gu));
  }
  return Status::Ok();
}

Status CudaMoeBlocks::loss_sums(double& aux_sum, double& z_sum) {
  aux_sum = z_sum = 0.0;
  if (layers_.empty() || cap_ == 0) return Status::Ok();
  std::vector<double> l(2 * layers_.size());
  ATOLL_RETURN_IF_ERROR(ctx_.make_current());
  ATOLL_RETURN_IF_ERROR(d2h(ctx_, l.data(), losses_.data(), l.size() * sizeof(double)));
  for (size_t i = 0; i < layers_.size(); ++i) {  // layer order, as MoeBlocks
    aux_sum += l[2 * i];
    z_sum += l[2 * i + 1];
  }
  return Status::Ok();
}

}  // namespace atl::algorithms::cuda
