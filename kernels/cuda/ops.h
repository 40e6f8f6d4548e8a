// The op table, CUDA backend (namespace atl::kernels::cuda): the ops of kernels/cpu/ops.h on
// device pointers, fp32, with the same shapes, layouts and semantics (the CPU op is the truth;
// tests/cuda compares every op against it). Plain C++ header: no nvcc needed to call these.
//
// Conventions (in addition to kernels/cpu/ops.h):
// - Every pointer is device memory. Every op enqueues on ctx.stream() and returns without
//   synchronizing; the Status reports launch / argument errors (an asynchronous fault shows up at
//   the next synchronize).
// - *_backward ops ACCUMULATE (+=) into their gradients, like the CPU ops.
// - Deterministic: no float atomics anywhere; every reduction has a fixed order and a fixed
//   tree, so the same inputs give the same bits run after run on the same GPU model.
//   Results are close to, not bitwise equal to, the CPU ops (different summation order and
//   exp/log implementations), except where noted.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/core/status.h"
#include "kernels/cuda/runtime.h"

namespace atl::kernels::cuda {

// ---- embedding: out (N, C) = table[tokens[n]] ; table (V, C). Tokens outside [0, V) give a
// zero row (forward) and are skipped (backward).
Status embedding_forward(Context& ctx, float* out, const int32_t* tokens, const float* table, int N,
                         int V, int C);
// dtable (V, C) += scatter of dout (N, C). No atomics: the token ids are sorted (stable radix
// sort, positions kept), then each vocabulary row that occurs is owned by one thread block,
// which adds its dout rows in increasing position order — the CPU op's order, so the result is
// bitwise equal to it.
Status embedding_backward(Context& ctx, float* dtable, const float* dout, const int32_t* tokens,
                          int N, int V, int C);

// ---- RMSNorm: out (N, C) = x * rstd * w ; rstd (N) = 1/sqrt(mean(x²) + eps)
Status rmsnorm_forward(Context& ctx, float* out, float* rstd, const float* x, const float* w, int N,
                       int C, double eps);
// dx (N, C) += ; dw (C) += (fixed 256-row chunks, partials summed in chunk order). Either may be
// nullptr.
Status rmsnorm_backward(Context& ctx, float* dx, float* dw, const float* dout, const float* x,
                        const float* w, const float* rstd, int N, int C);

// ---- matmul through cuBLASLt, fp32 compute (no TF32): out (N, OC) = x (N, IC) · w (OC, IC)ᵀ
Status matmul_forward(Context& ctx, float* out, const float* x, const float* w, int N, int IC,
                      int OC);
// dx (N, IC) += dout · w ; dw (OC, IC) += doutᵀ · x. Either may be nullptr.
Status matmul_backward(Context& ctx, float* dx, float* dw, const float* dout, const float* x,
                       const float* w, int N, int IC, int OC);
// Low-precision GEMM entry points of the precision recipes, fp32 accumulation and fp32 output:
// out (N, OC) (= or +=, accumulate) x (N, IC) · w (OC, IC)ᵀ with x, w as bf16 codes.
Status matmul_bf16(Context& ctx, float* out, const uint16_t* x, const uint16_t* w, int N, int IC,
                   int OC, bool accumulate);
// FP8 (sm_89+; built for sm_90a): x and w are E4M3 or E5M2 codes (not both E5M2: cuBLASLt has
// no E5M2×E5M2 kernel), decoded as code · scale with per-tensor scales read from device memory
// (x_scale, w_scale: one float each), so out = x_scale · w_scale · (x_codes · w_codesᵀ).
// N, IC, OC must be multiples of 16 (cuBLASLt's FP8 alignment rules).
enum class Fp8Format : uint8_t { kE4M3, kE5M2 };
Status matmul_fp8(Context& ctx, float* out, const uint8_t* x, Fp8Format x_fmt, const float* x_scale,
                  const uint8_t* w, Fp8Format w_fmt, const float* w_scale, int N, int IC, int OC,
                  bool accumulate);

// ---- RoPE in place on x (B, T, H, D) with a row stride (elements per token); adjacent pairs,
// angle pos · base^(-2i/D), cos/sin computed in double and rounded once (as on the CPU).
Status rope_forward(Context& ctx, float* x, int B, int T, int H, int D, int row_stride,
                    double base);
Status rope_backward(Context& ctx, float* dx, int B, int T, int H, int D, int row_stride,
                     double base);

// ---- causal attention: qkv (B, T, 3C) → out (B, T, C), att (B, H, T, T) probabilities (zero
// above the diagonal); scale 1/sqrt(D). D <= 1024, B·H <= 65535.
Status attention_forward(Context& ctx, float* out, float* att, const float* qkv, int B, int T,
                         int H, int D);
// dqkv (B, T, 3C) += ; uses B·H·T·T floats of ctx scratch for dS.
Status attention_backward(Context& ctx, float* dqkv, const float* dout, const float* qkv,
                          const float* att, int B, int T, int H, int D);

// ---- SwiGLU: gu (N, 2F) = gate | up → out (N, F) = silu(gate) · up ; dgu (N, 2F) +=
Status swiglu_forward(Context& ctx, float* out, const float* gu, int N, int F);
Status swiglu_backward(Context& ctx, float* dgu, const float* dout, const float* gu, int N, int F);

// ---- out (n) = a + b (may alias) ; out (n) = 0
Status add_forward(Context& ctx, float* out, const float* a, const float* b, size_t n);
Status zero_fill(Context& ctx, float* out, size_t n);

// ---- fused softmax + cross-entropy: logits (N, V), targets (N) (-1 = ignored) → losses (N);
// dlogits (N, V) written (not accumulated) = dloss·(softmax − onehot), may alias logits, may be
// nullptr. One thread block per row.
Status softmax_xent(Context& ctx, float* losses, float* dlogits, const float* logits,
                    const int32_t* targets, int N, int V, double dloss);

// ---- optimizer pieces on flat fp32 buffers (same hyperparameters as the CPU op).
struct AdamWParams {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
};
// torch.optim.AdamW, operation by operation as the CPU op (explicit fma, no contraction):
// bitwise equal to the CPU op.
Status adamw_update(Context& ctx, float* p, const float* g, float* m, float* v, size_t n,
                    const AdamWParams& hp, int64_t step);
// norm_out (1 double, device) = sqrt(Σ g²): fixed 4096-element blocks summed in double by a
// fixed tree, then the block partials by a second fixed tree. Deterministic; equal to the CPU
// op within double rounding.
Status global_norm(Context& ctx, double* norm_out, const float* g, size_t n);
// Convenience: global_norm + copy to the host (synchronizes the stream).
StatusOr<double> global_norm_host(Context& ctx, const float* g, size_t n);
// If norm > max_norm: g *= max_norm / (norm + 1e-6) (scale formed on the host as on the CPU).
// Returns the scale applied (1 if none).
StatusOr<float> clip_by_global_norm(Context& ctx, float* g, size_t n, double norm, double max_norm);

}  // namespace atl::kernels::cuda
