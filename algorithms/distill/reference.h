// The plain, unfused distillation loss: every (N, V) logits buffer materialized, log-softmax
// rows written out, KL and cross-entropy summed in double. The truth the fused loss (loss.h) is
// tested against, and the unfused baseline of `atoll bench distill-loss`.
//
// Extra memory: the student logits (N, V), turned into their gradient in place, plus the
// teacher's (N, V) that the caller materializes, plus three V-long double rows per thread.
#pragma once

#include <cstdint>

#include "algorithms/distill/loss.h"

namespace atl::algorithms::distill {

// Same contract as FusedDistillLoss::run (cfg.rows and cfg.shards are ignored), with the teacher
// logits zt (N, V) given in full (may be null when α = 0). dh, dW accumulate; either may be null.
// Shapes and targets must be valid (aborts otherwise: this is test and bench code).
template <typename T>
LossStats reference_loss(const LossConfig& cfg, const T* h, const T* W, int N, int C, int V,
                         const int32_t* targets, const T* zt, T* dh, T* dW, double dloss = 1.0,
                         T* row_loss = nullptr);

// The top-k loss of topk.h written out in full: the completed teacher distribution (pt on the k
// ids, P_tail·q_j/Q_tail on the tail) materialized per row, Q_tail summed over the tail ids.
template <typename T>
LossStats reference_topk_loss(const LossConfig& cfg, const T* h, const T* W, int N, int C, int V,
                              const int32_t* targets, const TopKTargets<T>& topk, T* dh, T* dW,
                              double dloss = 1.0, T* row_loss = nullptr);

}  // namespace atl::algorithms::distill
