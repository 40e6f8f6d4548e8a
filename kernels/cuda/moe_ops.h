// Mixture-of-Experts ops of the CUDA backend: the ops of kernels/cpu/moe_ops.h on device
// pointers, fp32, same shapes, layouts and semantics (the CPU op is the truth; tests/cuda
// compares each against it). Plain C++ header: no nvcc needed to call these.
//
// Conventions as kernels/cuda/ops.h: device pointers, ops enqueue on ctx.stream(), *_backward
// ACCUMULATE, no float atomics (every sum has a fixed order, so results are bitwise the same run
// to run on one GPU model). Notation as the CPU header: N tokens, E experts, K per token,
// M = N·K routed rows, C channels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/core/status.h"
#include "kernels/cpu/moe_ops.h"
#include "kernels/cuda/runtime.h"

namespace atl::kernels::cuda {

using MoeScore = atl::kernels::cpu::MoeScore;

// scores (N, E) = softmax of each row of logits, or the elementwise sigmoid. One thread per row,
// the CPU op's loop order (max, then Σ exp in increasing e); expf instead of std::exp.
Status moe_scores_forward(Context& ctx, float* scores, const float* logits, int N, int E,
                          MoeScore fn);
// dlogits (N, E) += dscores through the score function.
Status moe_scores_backward(Context& ctx, float* dlogits, const float* dscores, const float* scores,
                           int N, int E, MoeScore fn);

// Top-k per row, the CPU op's total order: larger score first, equal scores to the lower expert
// id. Pass k picks the largest score among the experts not yet picked, as the CPU op does, so
// the picks equal the CPU's for any scores, NaN included, and any E. Bitwise equal to the CPU op
// for the same scores (comparisons are exact; w = s · (1/Σ s) with the sum in k order).
Status moe_topk_forward(Context& ctx, int32_t* idx, float* w, const float* scores, int N, int E,
                        int K, bool renormalize);
// dscores (N, E) += ∂w/∂scores · dw (no gradient through idx).
Status moe_topk_backward(Context& ctx, float* dscores, const float* dw, const float* scores,
                         const int32_t* idx, int N, int E, int K, bool renormalize);

// The dropless routing plan on the device: the M (token, k) pairs sorted by expert, stable by
// pair index (= by token), exactly the CPU moe_plan's order. offsets also live on the host:
// the grouped GEMM loops over the groups there.
struct MoeDevicePlan {
  int N = 0, E = 0, K = 0;
  DeviceBuffer<int32_t> offsets;      // (E + 1)
  DeviceBuffer<int32_t> row_token;    // (M)
  DeviceBuffer<int32_t> slot;         // (M): row of pair (n, k) = slot[n·K + k]
  DeviceBuffer<int32_t> work;         // chunk counts and the range flag (grown as needed)
  std::vector<int32_t> host_offsets;  // (E + 1), copied after the build
};
// Stable counting sort in fixed chunks of pairs: per-chunk counts, a scan in (expert, chunk)
// order, then each chunk scatters its pairs in order. No atomics. Synchronizes the stream once
// (offsets to the host). An expert id outside [0, E) gives InvalidArgument naming it.
Status moe_plan(Context& ctx, MoeDevicePlan& plan, const int32_t* idx, int N, int E, int K);

// xp (M, C) = x[row_token[r]] ; dx (N, C) += Σ_k dxp[slot(n, k)] in k order (bitwise the CPU op).
Status moe_gather_forward(Context& ctx, float* xp, const float* x, const MoeDevicePlan& plan,
                          int C);
Status moe_gather_backward(Context& ctx, float* dx, const float* dxp, const MoeDevicePlan& plan,
                           int C);

// Grouped GEMM: one cuBLASLt GEMM (kernels/cuda matmul_*) per non-empty group, in expert order;
// W_e = w + e·w_stride an (OC, IC) matrix. Semantics of the CPU moe_grouped_matmul_*.
Status moe_grouped_matmul_forward(Context& ctx, float* out, const float* x, const float* w,
                                  size_t w_stride, const MoeDevicePlan& plan, int IC, int OC);
Status moe_grouped_matmul_backward(Context& ctx, float* dx, float* dw, const float* dout,
                                   const float* x, const float* w, size_t w_stride,
                                   const MoeDevicePlan& plan, int IC, int OC);

// out (N, C) = Σ_k w[n, k] · yp[slot(n, k)], k in order (written).
Status moe_combine_forward(Context& ctx, float* out, const float* yp, const float* w,
                           const MoeDevicePlan& plan, int C);
// dyp[slot(n, k)] += w[n, k] · dout[n] (every row has one owner: no conflicts);
// dw[n, k] += <dout[n], yp[slot(n, k)]>, one warp per pair, fixed butterfly tree.
// Either gradient may be nullptr.
Status moe_combine_backward(Context& ctx, float* dyp, float* dw, const float* dout, const float* yp,
                            const float* w, const MoeDevicePlan& plan, int C);

}  // namespace atl::kernels::cuda
