// The MoE router losses on the device: the load-balancing loss and the router z-loss of
// kernels/cpu/moe_ops.h (moe_aux_loss_*, moe_z_loss_*), same definitions, computed in double as
// the CPU ops are. Plain C++ header (no nvcc needed to call these).
//
// Conventions as kernels/cuda/moe_ops.h: device pointers, ops enqueue on ctx.stream(),
// *_backward ACCUMULATE, no atomics: every sum has a fixed order (the same bits run to run on one
// GPU model). The loss values stay on the device (one double each) until the caller reads them,
// so a training step needs no extra synchronization for them.
#pragma once

#include <cstddef>

#include "kernels/core/status.h"
#include "kernels/cuda/moe_ops.h"
#include "kernels/cuda/runtime.h"

namespace atl::kernels::cuda {

// Doubles of `work` the forward ops below need for N tokens and E experts.
inline size_t moe_aux_work_size(int N, int E) {
  return size_t(N) + size_t(E) + 1;
}

// loss (device, 1 double) = L_aux = E · Σ_e f_e · P_e over the plan's N tokens, f_e from the
// plan's group sizes (device offsets), P_e = (1/N) Σ_n p[n, e], p the softmax scores or the
// sigmoid scores over their row sum. scores (N, E) as given to moe_topk_forward. work: at least
// moe_aux_work_size(N, E) doubles (scratch). P_e: one block per expert, every thread a contiguous
// run of tokens in order, then the fixed block tree. 0 when N = 0.
Status moe_aux_loss_forward(Context& ctx, double* loss, double* work, const float* scores,
                            const MoeDevicePlan& plan, MoeScore fn);
// dscores (N, E) += dloss · ∂L_aux/∂scores (f_e taken as constant, as the CPU op): one thread
// per token, the CPU op's loops in its order.
Status moe_aux_loss_backward(Context& ctx, float* dscores, const float* scores,
                             const MoeDevicePlan& plan, MoeScore fn, double dloss);

// loss (device, 1 double) = L_z = (1/N) Σ_n logsumexp(logits[n, :])², logsumexp in double per
// token (one thread each), the sum over tokens one block in a fixed order. work: at least N
// doubles. 0 when N = 0.
Status moe_z_loss_forward(Context& ctx, double* loss, double* work, const float* logits, int N,
                          int E);
// dlogits (N, E) += dloss · (2/N) · lse_n · softmax(logits[n, :]), one thread per token.
Status moe_z_loss_backward(Context& ctx, float* dlogits, const float* logits, int N, int E,
                           double dloss);

}  // namespace atl::kernels::cuda
