// Top-k teacher targets: per row the k largest teacher logits (ids and values) plus the
// log-sum-exp of all the others, the "tail". What the top-k wire codec carries: k·(4 + 2..4)
// bytes plus one number per token instead of V logits.
//
// What the loss then computes (FusedDistillLoss::run_topk) — the KL over a coarser partition of
// the vocabulary: the k ids one by one, and the tail as one bucket,
//   KL_k = Σ_{j∈K} pt_j·log(pt_j / q_j) + P_tail·log(P_tail / Q_tail),
//   P_tail = Σ_{j∉K} pt_j (exact, from tail_lse),  Q_tail = Σ_{j∉K} q_j (exact, from the student).
// The teacher's probabilities on the k ids and its tail mass are exact; what is lost is only how
// the teacher spreads its tail mass inside the tail. KL_k is the full KL with the teacher's
// within-tail distribution replaced by the student's:
//   KL − KL_k = P_tail · KL(pt|tail ‖ q|tail) ≥ 0,
// so the top-k loss never exceeds the full one, the bias shrinks as k grows (each extra id
// refines the partition), and it vanishes at k = V. Its gradient is the full-KL gradient against
// the "completed" teacher distribution pt_j on K and P_tail·q_j/Q_tail on the tail.
// Measured on realistic logits in tests/algorithms/distill_loss_test.cc (docs/distill.md).
#pragma once

#include <cstdint>

#include "algorithms/distill/loss.h"

namespace atl::algorithms::distill {

// Builds top-k targets from full teacher logits delivered tile by tile (the teacher never holds
// its N×V logits either): windows of `rows` rows, `shards` vocabulary shards; per row a running
// candidate set of k and an online log-sum-exp of everything pushed out of it. Extra memory
// O(rows·(V/shards + k)).
// Outputs: ids (N, k) and logits (N, k) sorted by decreasing logit (ties: lower id first),
// tail_lse (N) = log Σ_{j∉ids} e^(z_t,j/τ) in double before rounding to T, −inf when k = V.
// k must be in [1, V] (aborts otherwise: a programming error).
template <typename T>
void build_topk(TeacherLogits<T>& teacher, int N, int V, int k, double tau, int rows, int shards,
                int32_t* ids, T* logits, T* tail_lse);

}  // namespace atl::algorithms::distill
