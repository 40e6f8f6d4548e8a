// The op table, CPU backend: the reference numerics of Atoll (llm.c style).
//
// Conventions shared by every op (and by the CUDA backend, which implements the same table):
// - Row-major. N = number of rows (tokens, B*T), C = channels.
// - Linear weights are stored as PyTorch stores them: W (OC, IC); y = x · Wᵀ.
// - *_backward ops ACCUMULATE (+=) into every gradient they produce (dx, dw, ...), so residual
//   branches and tied weights just add up. Callers zero gradient buffers once per step.
// - Every op is a template instantiated for float (training) and double (finite-difference
//   gradient checks in double precision).
// - Deterministic: results do not depend on the number of threads. Threading splits over
//   independent outputs; reductions run in a fixed order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace atl::kernels::cpu {

// Threads used by every op (OpenMP; GEMMs are split into fixed tiles, each a single-threaded
// OpenBLAS call, so OpenBLAS's own thread count is set to 1). 0 = all cores.
void set_num_threads(int n);
int num_threads();

// ---- embedding: out (N, C) = table[tokens[n]] ; table (V, C)
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* table, int N, int V, int C);
// dtable (V, C) += scatter of dout (N, C)
template <typename T>
void embedding_backward(T* dtable, const T* dout, const int32_t* tokens, int N, int V, int C);

// ---- RMSNorm: out (N, C) = x * rstd * w, rstd (N) = 1/sqrt(mean(x²) + eps)
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int N, int C, double eps);
template <typename T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd, int N,
                      int C);

// ---- matmul (OpenBLAS gemm): out (N, OC) = x (N, IC) · w (OC, IC)ᵀ
template <typename T>
void matmul_forward(T* out, const T* x, const T* w, int N, int IC, int OC);
// dx (N, IC) += dout · w ; dw (OC, IC) += doutᵀ · x. Either may be nullptr (skipped).
template <typename T>
void matmul_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, int N, int IC, int OC);

// ---- RoPE, in place on x (B, T, H, D) viewed with row stride `row_stride` elements per token
// (so q and k inside a fused qkv buffer (B, T, 3C) can be rotated where they are).
// Rotates adjacent pairs (x[2i], x[2i+1]) of each head by angle pos * base^(-2i/D).
template <typename T>
void rope_forward(T* x, int B, int T_, int H, int D, int row_stride, double base);
// Backward is the inverse rotation of the gradient, in place.
template <typename T>
void rope_backward(T* dx, int B, int T_, int H, int D, int row_stride, double base);

// ---- causal multi-head attention.
// qkv (B, T, 3C) with q | k | v along the last axis, C = H * D; RoPE already applied.
// out (B, T, C); att (B, H, T, T) keeps the softmax probabilities for backward.
// scale = 1/sqrt(D).
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int H, int D);
// dqkv (B, T, 3C) += ; needs the forward's qkv and att.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int T_, int H,
                        int D);

// ---- grouped-query attention (Hugging Face repeat_kv). qkv (N, (H + 2·KV)·D) = q | k | v with H
// query heads and KV key/value heads (H % KV == 0); query head h reads KV head h / (H / KV).
// full (N, 3·H·D) = q | k | v with every KV head repeated H / KV times: the layout
// attention_forward takes.
template <typename T>
void repeat_kv_forward(T* full, const T* qkv, int N, int H, int KV, int D);
// dqkv (N, (H + 2·KV)·D) += dfull (N, 3·H·D) folded back: dq copied, dk and dv of each KV head
// summed over the H / KV query heads that read it, in head order.
template <typename T>
void repeat_kv_backward(T* dqkv, const T* dfull, int N, int H, int KV, int D);

// ---- bias of a linear layer: out (N, OC) += b (OC) on every row.
template <typename T>
void bias_forward(T* out, const T* b, int N, int OC);
// db (OC) += Σ_n dout (n, ·), rows summed in order (deterministic).
template <typename T>
void bias_backward(T* db, const T* dout, int N, int OC);

// ---- SwiGLU: gu (N, 2F) = gate | up ; out (N, F) = silu(gate) * up
template <typename T>
void swiglu_forward(T* out, const T* gu, int N, int F);
template <typename T>
void swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F);

// ---- residual: out (n) = a + b
template <typename T>
void add_forward(T* out, const T* a, const T* b, size_t n);
// ---- out (n) = 0, threaded (clears gradient buffers before *_backward ops accumulate into them)
template <typename T>
void zero_fill(T* out, size_t n);

// ---- fused softmax + cross-entropy over the vocabulary.
// logits (N, V); targets (N) in [0, V) or -1 (ignored). losses (N) = -log softmax[target]
// (0 for ignored rows).
// If dlogits != nullptr, writes (not accumulates) dlogits = dloss * (softmax - onehot) for each
// row (0 for ignored rows); dlogits may alias logits (in-place, saves N*V floats).
template <typename T>
void softmax_xent(T* losses, T* dlogits, const T* logits, const int32_t* targets, int N, int V,
                  double dloss);

// ---- optimizer pieces (fp32 only; master weights are fp32)
// Hyperparameters are double, like PyTorch's Python floats: bias corrections and step sizes
// are formed in double and rounded to fp32 once, so runs track torch.optim.AdamW closely.
struct AdamWParams {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled: p *= 1 - lr * wd
};
// PyTorch AdamW semantics. step is 1-based (bias correction uses it).
void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const AdamWParams& hp,
                  int64_t step);
// Muon (Keller Jordan's muon.py, 2024-25) for one 2-D weight of shape (rows, cols):
//   m = lerp(m, g, 1 − β)                      momentum
//   u = lerp(g, m, β)                          Nesterov
//   O = NS5(u)                                 ≈ U·Vᵀ of u = U·S·Vᵀ (Newton–Schulz, below)
//   p = p·(1 − lr·wd) − lr · 0.2·sqrt(max(rows, cols)) · O
// The 0.2·sqrt(max(rows, cols)) factor (Moonlight, Liu et al. 2025) gives the update about
// AdamW's RMS, so AdamW's lr and weight decay carry over. fp32 throughout (the reference runs
// the iteration in bf16); every GEMM is the op table's fixed-tile one, so the bits do not
// depend on the thread count.
struct MuonParams {
  double lr = 3e-4;
  double momentum = 0.95;     // β
  double weight_decay = 0.0;  // decoupled, as AdamW's
  int ns_steps = 5;
};
// The buffers of one Muon step, kept by the caller across steps (a fresh matrix-sized buffer
// each step would fault its pages in again): the update u, and the Newton–Schulz iteration's.
struct MuonScratch {
  std::vector<float> update;
  std::vector<float> iteration;
};
void muon_update(float* p, const float* g, float* m, int rows, int cols, const MuonParams& hp,
                 MuonScratch& scratch);
// In place, x (rows, cols) row-major: X = x / (‖x‖_F + 1e-7) (the wide orientation: rows ≤
// cols, transposed in and out otherwise), then `steps` times A = X·Xᵀ, B = b·A + c·A·A,
// X = a·X + B·X with (a, b, c) = (3.4445, −4.7750, 2.0315). The singular values of the
// result lie near [0.7, 1.2] (the quintic's fixed band), its singular vectors are x's.
// scratch is resized as needed (reused across calls).
void newton_schulz_orthogonalize(float* x, int rows, int cols, int steps,
                                 std::vector<float>& scratch);
// sqrt(sum g²), accumulated in double over fixed-size blocks: deterministic for any threads.
double global_norm(const float* g, size_t n);
// If norm > max_norm: g *= max_norm / (norm + 1e-6). Returns the scale applied (1 if none).
float clip_by_global_norm(float* g, size_t n, double norm, double max_norm);
// Linear warmup to max_lr over warmup steps (max_lr·(step+1)/warmup for step < warmup), then
// cosine decay from max_lr to min_lr at total_steps, min_lr after. step is 0-based.
double lr_schedule(int64_t step, int64_t warmup, int64_t total_steps, double max_lr, double min_lr);

}  // namespace atl::kernels::cpu
