// Per-token top-k selection of the MoE router, __host__ __device__: the k_topk_fwd kernel of
// moe.cu runs it on the GPU (one thread per token), and tests/cuda/moe_host_test.cu runs the very
// same function on the host against the CPU op (kernels/cpu/moe.cc), so the selection rule is
// checked bit for bit on a machine without a GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace atl::kernels::cuda::rows {

// One token: s (E) scores -> id (K) experts, wn (K) weights. The CPU op's selection, step for
// step: pass k takes the largest score among the experts not yet taken (ascending e with a
// strict '>', so the lower id wins ties), "taken" being a scan of the ids already written
// (K is small). The same picks as the CPU for every input, NaN scores included: a NaN never wins
// a comparison, so a pass always takes some untaken expert and every id stays in [0, E) (an
// "after the previous pick" rule finds no candidate once a NaN was picked). K <= E required.
// wn = the picked scores, times 1/Σ of them (sum in k order) when renorm.
__host__ __device__ inline void topk_row(const float* s, int E, int K, bool renorm, int32_t* id,
                                         float* wn) {
  float sum = 0.0f;
  for (int k = 0; k < K; ++k) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      bool taken = false;
      for (int j = 0; j < k; ++j) taken |= id[j] == e;
      if (taken) continue;
      if (best < 0 || s[e] > s[best]) best = e;
    }
    id[k] = best;
    wn[k] = s[best];
    sum += s[best];
  }
  if (renorm) {
    const float inv = 1.0f / sum;
    for (int k = 0; k < K; ++k) wn[k] *= inv;
  }
}

}  // namespace atl::kernels::cuda::rows
