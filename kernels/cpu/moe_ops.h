// Mixture-of-Experts ops of the CPU op table (same conventions as ops.h: row-major, float and
// double, *_backward ACCUMULATE, bitwise identical for any thread count).
//
// Notation: N tokens, C channels, E experts, K experts per token (top-k), M = N·K routed rows,
// F expert hidden size. An MoE FFN layer runs, in order (docs/moe.md):
//   logits (N, E)  = x · Wrᵀ                                  matmul_forward (router)
//   scores (N, E)  = softmax(logits) or sigmoid(logits)       moe_scores_forward
//   idx, w (N, K)  = top-k of scores, w renormalized          moe_topk_forward
//   plan           = per-expert contiguous groups             moe_plan (no gradient)
//   xp (M, C)      = x rows gathered in plan order            moe_gather_forward
//   gu (M, 2F)     = grouped GEMM, expert e's rows · W_gu,eᵀ  moe_grouped_matmul_forward
//   swi (M, F)     = silu(gate)·up                            swiglu_forward
//   yp (M, C)      = grouped GEMM with W_down,e               moe_grouped_matmul_forward
//   out (N, C)     = Σ_k w[n,k] · yp[slot(n,k)]               moe_combine_forward
// plus the auxiliary losses on the router: load balance (moe_aux_loss_*) and z-loss
// (moe_z_loss_*).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace atl::kernels::cpu {

enum class MoeScore { kSoftmax, kSigmoid };

// scores (N, E) = softmax over each row of logits, or the elementwise sigmoid.
template <typename T>
void moe_scores_forward(T* scores, const T* logits, int N, int E, MoeScore fn);
// dlogits (N, E) += dscores through the score function (needs the forward's scores).
template <typename T>
void moe_scores_backward(T* dlogits, const T* dscores, const T* scores, int N, int E, MoeScore fn);

// Top-k per row: idx (N, K) the K largest scores in decreasing order, ties broken by the lower
// expert id (a total order, so the choice never depends on threads or on the sort). w (N, K) the
// selected scores divided by their sum over the K (renormalize = true: Mixtral for softmax,
// DeepSeek-V3 for sigmoid) or the selected scores themselves (renormalize = false).
template <typename T>
void moe_topk_forward(int32_t* idx, T* w, const T* scores, int N, int E, int K, bool renormalize);
// dscores (N, E) += the gradient of w with respect to the scores (selection is piecewise
// constant: no gradient through idx). Needs the forward's scores and idx.
template <typename T>
void moe_topk_backward(T* dscores, const T* dw, const T* scores, const int32_t* idx, int N, int E,
                       int K, bool renormalize);

// Dropless routing plan from idx (N, K): the M = N·K (token, k) pairs sorted by expert, stable
// by token inside an expert (so expert e's rows are its tokens in increasing order).
struct MoePlan {
  int N = 0, E = 0, K = 0;
  std::vector<int32_t> offsets;    // (E + 1): expert e owns rows [offsets[e], offsets[e + 1])
  std::vector<int32_t> row_token;  // (M): token of each routed row
  std::vector<int32_t> slot;       // (N·K): row of pair (n, k) = slot[n·K + k]
};
// Counting sort, O(N·K + E). Aborts on an expert id outside [0, E) (a programming error).
void moe_plan(MoePlan& plan, const int32_t* idx, int N, int E, int K);

// xp (M, C) = x[row_token[r]] for every routed row r.
template <typename T>
void moe_gather_forward(T* xp, const T* x, const MoePlan& plan, int C);
// dx (N, C) += Σ over token n's K rows of dxp (summed in k order: deterministic, no atomics).
template <typename T>
void moe_gather_backward(T* dx, const T* dxp, const MoePlan& plan, int C);

// Grouped GEMM over the plan's groups: for every expert e, rows [offsets[e], offsets[e+1]) of
// out (M, OC) = those rows of x (M, IC) · W_eᵀ, W_e = w + e·w_stride an (OC, IC) matrix. Empty
// groups are skipped. Each group is one tiled GEMM (blas.h), groups run in expert order.
template <typename T>
void moe_grouped_matmul_forward(T* out, const T* x, const T* w, size_t w_stride,
                                const MoePlan& plan, int IC, int OC);
// dx (M, IC) += dout · W_e ; dW_e += doutᵀ · x per group (either may be nullptr).
template <typename T>
void moe_grouped_matmul_backward(T* dx, T* dw, const T* dout, const T* x, const T* w,
                                 size_t w_stride, const MoePlan& plan, int IC, int OC);

// out (N, C) = Σ_k w[n, k] · yp[slot(n, k)] (written, k in order).
template <typename T>
void moe_combine_forward(T* out, const T* yp, const T* w, const MoePlan& plan, int C);
// dyp[slot(n, k)] += w[n, k] · dout[n] ; dw[n, k] += <dout[n], yp[slot(n, k)]>.
// Either gradient may be nullptr.
template <typename T>
void moe_combine_backward(T* dyp, T* dw, const T* dout, const T* yp, const T* w,
                          const MoePlan& plan, int C);

// Load-balancing loss (Switch Transformer / GShard form), over the N tokens:
//   L_aux = E · Σ_e f_e · P_e
//   f_e = (number of (token, k) pairs routed to e) / (N·K)       fraction of the assignments
//   P_e = (1/N) Σ_n p[n, e]                                      mean router probability
// p = the softmax scores (softmax routing) or the sigmoid scores normalized over each row,
// p[n, e] = s[n, e] / Σ_e' s[n, e'] (sigmoid routing, DeepSeek-V3's affinity normalization).
// Perfect balance with uniform probabilities gives 1 for any K. f_e is a count (not
// differentiable): its gradient is taken as 0, as in every reference implementation.
template <typename T>
double moe_aux_loss_forward(const T* scores, const MoePlan& plan, MoeScore fn);
// dscores (N, E) += dloss · ∂L_aux/∂scores.
template <typename T>
void moe_aux_loss_backward(T* dscores, const T* scores, const MoePlan& plan, MoeScore fn,
                           double dloss);

// Router z-loss (ST-MoE): L_z = (1/N) Σ_n logsumexp(logits[n, :])².
template <typename T>
double moe_z_loss_forward(const T* logits, int N, int E);
// dlogits (N, E) += dloss · (2/N) · lse_n · softmax(logits[n, :]).
template <typename T>
void moe_z_loss_backward(T* dlogits, const T* logits, int N, int E, double dloss);

// ---- the whole MoE FFN layer, composed of the ops above (the model calls this) -----------------
struct MoeFfnShape {
  int C = 0;   // model channels
  int E = 0;   // routed experts
  int K = 0;   // experts per token, 1 <= K <= E
  int F = 0;   // routed expert hidden size
  int Fs = 0;  // shared expert hidden size (0 = no shared expert)
  MoeScore score = MoeScore::kSoftmax;
  bool renormalize = true;  // top-k weights divided by their sum
};

// Activations of one forward, kept for its backward, and the backward's scratch. Grows to the
// largest N seen; one per MoE layer.
template <typename T>
struct MoeFfnWork {
  int N = 0;
  MoePlan plan;
  std::vector<int32_t> idx;                          // (N, K)
  std::vector<T> logits, scores, w;                  // (N, E) (N, E) (N, K)
  std::vector<T> xp, gu, swi, yp;                    // (M, C) (M, 2F) (M, F) (M, C)
  std::vector<T> sgu, sswi, sy;                      // (N, 2Fs) (N, Fs) (N, C)
  std::vector<T> dyp, dswi, dgu, dxp, dw, dsc, dlg;  // backward scratch
  double aux_loss = 0, z_loss = 0;                   // of the last forward
};

// The expert GEMMs of the layer, replaceable so a low-precision recipe can quantize their
// operands (algorithms/model/precision.h implements one; docs/precision.md). Same argument
// conventions as matmul_forward/backward and moe_grouped_matmul_forward/backward (backward
// ACCUMULATES; dx or dw may be nullptr). `which` names the weight: 0 = gate|up (2F or 2Fs, C),
// 1 = down (C, F or Fs). The router GEMM is not among them: it always runs the fp32 op.
// nullptr in moe_ffn_forward/backward means those fp32 ops (the same bits as before the hook).
template <typename T>
class MoeExpertGemms {
 public:
  virtual ~MoeExpertGemms() = default;
  // Shared expert, every token: out (N, OC) = x (N, IC) · W (OC, IC)ᵀ.
  virtual void dense_forward(T* out, const T* x, const T* w, int N, int IC, int OC, int which) = 0;
  virtual void dense_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, int N, int IC,
                              int OC, int which) = 0;
  // Routed experts over the plan's groups (moe_grouped_matmul_forward/backward).
  virtual void grouped_forward(T* out, const T* x, const T* w, size_t w_stride, const MoePlan& plan,
                               int IC, int OC, int which) = 0;
  virtual void grouped_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, size_t w_stride,
                                const MoePlan& plan, int IC, int OC, int which) = 0;
};

// Weights (PyTorch (OC, IC) each):
//   router (E, C)
//   experts: E blocks of 3·F·C elements, block e = gate_proj (F, C) | up_proj (F, C) |
//            down_proj (C, F)   (the gate|up rows adjacent: one (2F, C) GEMM per group)
//   shared_gu (2Fs, C) = gate_proj | up_proj, shared_down (C, Fs); nullptr when Fs = 0.
// out (N, C) = Σ_k w[n,k]·expert_idx[n,k](x[n]) + shared(x[n]), expert(x) = down(silu(gate·x)⊙up·x)
// Also sets ws.aux_loss and ws.z_loss (not scaled by any coefficient).
template <typename T>
void moe_ffn_forward(MoeFfnWork<T>& ws, T* out, const T* x, const T* router, const T* experts,
                     const T* shared_gu, const T* shared_down, int N, const MoeFfnShape& s,
                     MoeExpertGemms<T>* gemms = nullptr);
// Backward of the last forward for the loss  <dout, out> + aux_coef·L_aux + z_coef·L_z:
// dx (N, C) and every weight gradient ACCUMULATE (+=); gradients of absent shared weights are
// not touched (pass nullptr).
template <typename T>
void moe_ffn_backward(MoeFfnWork<T>& ws, T* dx, T* drouter, T* dexperts, T* dshared_gu,
                      T* dshared_down, const T* dout, const T* x, const T* router, const T* experts,
                      const T* shared_gu, const T* shared_down, const MoeFfnShape& s,
                      double aux_coef, double z_coef, MoeExpertGemms<T>* gemms = nullptr);

}  // namespace atl::kernels::cpu
