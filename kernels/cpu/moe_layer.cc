// The MoE FFN layer (moe_ops.h, moe_ffn_forward/backward): router, top-k, dropless permutation,
// grouped SwiGLU experts, weighted combine, optional shared expert and the router losses,
// composed from the MoE ops. Deterministic because every op it calls is. The expert GEMMs go
// through a MoeExpertGemms (the fp32 ops by default; a precision recipe's otherwise).
#include <algorithm>

#include "kernels/cpu/moe_ops.h"
#include "kernels/cpu/ops.h"

namespace atl::kernels::cpu {

namespace {
template <typename T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// The fp32 expert GEMMs: the plain ops (used when the caller passes no MoeExpertGemms).
template <typename T>
class PlainGemms final : public MoeExpertGemms<T> {
 public:
  void dense_forward(T* out, const T* x, const T* w, int N, int IC, int OC, int) override {
    matmul_forward(out, x, w, N, IC, OC);
  }
  void dense_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, int N, int IC, int OC,
                      int) override {
    matmul_backward(dx, dw, dy, x, w, N, IC, OC);
  }
  void grouped_forward(T* out, const T* x, const T* w, size_t w_stride, const MoePlan& plan, int IC,
                       int OC, int) override {
    moe_grouped_matmul_forward(out, x, w, w_stride, plan, IC, OC);
  }
  void grouped_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, size_t w_stride,
                        const MoePlan& plan, int IC, int OC, int) override {
    moe_grouped_matmul_backward(dx, dw, dy, x, w, w_stride, plan, IC, OC);
  }
};
}  // namespace

template <typename T>
void moe_ffn_forward(MoeFfnWork<T>& ws, T* out, const T* x, const T* router, const T* experts,
                     const T* shared_gu, const T* shared_down, int N, const MoeFfnShape& s,
                     MoeExpertGemms<T>* gemms) {
  PlainGemms<T> plain;
  MoeExpertGemms<T>& g = gemms ? *gemms : plain;
  const int C = s.C, E = s.E, K = s.K, F = s.F, Fs = s.Fs;
  const size_t M = size_t(N) * K, stride = size_t(3) * F * C;
  ws.N = N;
  grow(ws.logits, size_t(N) * E);
  grow(ws.scores, size_t(N) * E);
  grow(ws.idx, M);
  grow(ws.w, M);
  grow(ws.xp, M * C);
  grow(ws.gu, M * 2 * F);
  grow(ws.swi, M * F);
  grow(ws.yp, M * C);

  // Router: logits (N, E), scores, top-k and the plan.
  matmul_forward(ws.logits.data(), x, router, N, C, E);
  moe_scores_forward(ws.scores.data(), ws.logits.data(), N, E, s.score);
  moe_topk_forward(ws.idx.data(), ws.w.data(), ws.scores.data(), N, E, K, s.renormalize);
  moe_plan(ws.plan, ws.idx.data(), N, E, K);
  ws.aux_loss = moe_aux_loss_forward(ws.scores.data(), ws.plan, s.score);
  ws.z_loss = moe_z_loss_forward(ws.logits.data(), N, E);

  // Experts over their groups: xp (M, C) -> gu (M, 2F) -> swi (M, F) -> yp (M, C).
  moe_gather_forward(ws.xp.data(), x, ws.plan, C);
  g.grouped_forward(ws.gu.data(), ws.xp.data(), experts, stride, ws.plan, C, 2 * F, 0);
  swiglu_forward(ws.swi.data(), ws.gu.data(), int(M), F);
  g.grouped_forward(ws.yp.data(), ws.swi.data(), experts + size_t(2) * F * C, stride, ws.plan, F, C,
                    1);
  moe_combine_forward(out, ws.yp.data(), ws.w.data(), ws.plan, C);

  if (Fs > 0) {  // shared expert, every token: out += down(swiglu(x · W_guᵀ))
    grow(ws.sgu, size_t(N) * 2 * Fs);
    grow(ws.sswi, size_t(N) * Fs);
    grow(ws.sy, size_t(N) * C);
    g.dense_forward(ws.sgu.data(), x, shared_gu, N, C, 2 * Fs, 0);
    swiglu_forward(ws.sswi.data(), ws.sgu.data(), N, Fs);
    g.dense_forward(ws.sy.data(), ws.sswi.data(), shared_down, N, Fs, C, 1);
    add_forward(out, out, ws.sy.data(), size_t(N) * C);
  }
}

template <typename T>
void moe_ffn_backward(MoeFfnWork<T>& ws, T* dx, T* drouter, T* dexperts, T* dshared_gu,
                      T* dshared_down, const T* dout, const T* x, const T* router, const T* experts,
                      const T* shared_gu, const T* shared_down, const MoeFfnShape& s,
                      double aux_coef, double z_coef, MoeExpertGemms<T>* gemms) {
  PlainGemms<T> plain;
  MoeExpertGemms<T>& g = gemms ? *gemms : plain;
  const int N = ws.N, C = s.C, E = s.E, K = s.K, F = s.F, Fs = s.Fs;
  const size_t M = size_t(N) * K, stride = size_t(3) * F * C, down_off = size_t(2) * F * C;
  grow(ws.dyp, M * C);
  grow(ws.dswi, M * F);
  grow(ws.dgu, M * 2 * F);
  grow(ws.dxp, M * C);
  grow(ws.dw, M);
  grow(ws.dsc, size_t(N) * E);
  grow(ws.dlg, size_t(N) * E);

  // Combine: dyp (M, C), dw (N, K).
  zero_fill(ws.dyp.data(), M * C);
  zero_fill(ws.dw.data(), M);
  moe_combine_backward(ws.dyp.data(), ws.dw.data(), dout, ws.yp.data(), ws.w.data(), ws.plan, C);
  // Experts, backwards through down, SwiGLU and gate|up; then back to token order.
  zero_fill(ws.dswi.data(), M * F);
  g.grouped_backward(ws.dswi.data(), dexperts + down_off, ws.dyp.data(), ws.swi.data(),
                     experts + down_off, stride, ws.plan, F, C, 1);
  zero_fill(ws.dgu.data(), M * 2 * F);
  swiglu_backward(ws.dgu.data(), ws.dswi.data(), ws.gu.data(), int(M), F);
  zero_fill(ws.dxp.data(), M * C);
  g.grouped_backward(ws.dxp.data(), dexperts, ws.dgu.data(), ws.xp.data(), experts, stride, ws.plan,
                     C, 2 * F, 0);
  moe_gather_backward(dx, ws.dxp.data(), ws.plan, C);

  // Router: dscores from the combine weights and the balance loss, dlogits from the scores and
  // the z-loss, then the router GEMM.
  zero_fill(ws.dsc.data(), size_t(N) * E);
  moe_topk_backward(ws.dsc.data(), ws.dw.data(), ws.scores.data(), ws.idx.data(), N, E, K,
                    s.renormalize);
  if (aux_coef != 0.0)
    moe_aux_loss_backward(ws.dsc.data(), ws.scores.data(), ws.plan, s.score, aux_coef);
  zero_fill(ws.dlg.data(), size_t(N) * E);
  moe_scores_backward(ws.dlg.data(), ws.dsc.data(), ws.scores.data(), N, E, s.score);
  if (z_coef != 0.0) moe_z_loss_backward(ws.dlg.data(), ws.logits.data(), N, E, z_coef);
  matmul_backward(dx, drouter, ws.dlg.data(), x, router, N, C, E);

  if (Fs > 0) {
    // Reuses the routed scratch (M >= N rows, F-wide buffers may be narrower than Fs: grow).
    grow(ws.dswi, size_t(N) * Fs);
    grow(ws.dgu, size_t(N) * 2 * Fs);
    zero_fill(ws.dswi.data(), size_t(N) * Fs);
    g.dense_backward(ws.dswi.data(), dshared_down, dout, ws.sswi.data(), shared_down, N, Fs, C, 1);
    zero_fill(ws.dgu.data(), size_t(N) * 2 * Fs);
    swiglu_backward(ws.dgu.data(), ws.dswi.data(), ws.sgu.data(), N, Fs);
    g.dense_backward(dx, dshared_gu, ws.dgu.data(), x, shared_gu, N, C, 2 * Fs, 0);
  }
}

template void moe_ffn_forward<float>(MoeFfnWork<float>&, float*, const float*, const float*,
                                     const float*, const float*, const float*, int,
                                     const MoeFfnShape&, MoeExpertGemms<float>*);
template void moe_ffn_forward<double>(MoeFfnWork<double>&, double*, const double*, const double*,
                                      const double*, const double*, const double*, int,
                                      const MoeFfnShape&, MoeExpertGemms<double>*);
template void moe_ffn_backward<float>(MoeFfnWork<float>&, float*, float*, float*, float*, float*,
                                      const float*, const float*, const float*, const float*,
                                      const float*, const float*, const MoeFfnShape&, double,
                                      double, MoeExpertGemms<float>*);
template void moe_ffn_backward<double>(MoeFfnWork<double>&, double*, double*, double*, double*,
                                       double*, const double*, const double*, const double*,
                                       const double*, const double*, const double*,
                                       const MoeFfnShape&, double, double, MoeExpertGemms<double>*);

}  // namespace atl::kernels::cpu
