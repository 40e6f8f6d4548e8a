// The CPU MoE FFN layer (kernels/cpu/moe_ops.h) against a dense SwiGLU FFN of equal active FLOPs:
// what `atoll bench moe` reports. The dense FFN has hidden size K·Fe, so each token runs the same
// expert GEMM work; the MoE layer adds the router GEMM (E·C per token), the permutation, the
// combine and the router losses.
#pragma once

namespace atl::measure {

struct MoeShape {
  int experts = 0;        // E
  int top_k = 0;          // K
  int expert_hidden = 0;  // Fe
};

struct MoeTiming {
  double moe_fwd_ms = 0, moe_bwd_ms = 0;      // fastest forward, fastest backward
  double dense_fwd_ms = 0, dense_bwd_ms = 0;
  int dense_hidden = 0;                       // K·Fe
  double moe_gflops = 0, dense_gflops = 0;    // active training FLOPs per pass / time
  int largest_group = 0;  // rows of the most loaded expert in the timed passes (of N·K)
  int reps = 0;           // passes timed per variant
};

// Forward + backward time of both layers on `tokens` rows of width `dim` (random inputs and
// weights, fixed seeds), on the kernel threads already set. Each variant is the fastest of
// repeated passes over at least min_seconds (at least 3), the MoE and dense passes alternating
// so both see the same load; gradients are zeroed outside the timed region.
MoeTiming time_moe_against_dense(int tokens, int dim, const MoeShape& shape, double min_seconds);

}  // namespace atl::measure
