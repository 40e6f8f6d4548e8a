// Tile kernels of the fused distillation loss (CPU backend). The driver that tiles the problem
// into R rows × one vocabulary shard, runs the LM-head GEMMs and merges the shards lives in
// algorithms/distill/loss.h; these are the per-tile elementwise passes a GPU backend would fuse
// into its own kernel.
//
// Notation (per row, one token position): z_s student logits, z_t teacher logits (both over the
// whole vocabulary V, seen one shard of columns at a time), τ the temperature, y the target id.
//   p  = softmax(z_s)        (cross-entropy side, temperature 1)
//   q  = softmax(z_s / τ)    (KL side, student)
//   pt = softmax(z_t / τ)    (KL side, teacher)
// Each pass reads a tile of logits (R, Vs) whose columns are vocabulary ids [v0, v0 + Vs), row
// stride ld. Rows whose target is −1 are skipped (no statistics, zero gradient).
//
// Same conventions as ops.h: templates for float and double, deterministic for any number of
// threads (threads split rows; every row's sums run in a fixed order).
#pragma once

#include <cstddef>
#include <cstdint>

namespace atl::kernels::cpu {

// Running state of one row, merged shard after shard with the online log-sum-exp rule
//   m' = max(m, m_tile),  s' = s·e^(m − m') + s_tile·e^(m_tile − m').
// Kept in double: a merge costs O(1) per row and tile, so the tile sums (in T) are the only
// place float rounding enters.
struct DistillRowState {
  double m1, s1;  // z_s:      running max, Σ e^(z_s − m1)                 -> LSE(z_s)
  double mq, sq;  // z_s / τ:  running max, Σ e^(z_s/τ − mq)               -> LSE(z_s/τ)
  double mt, st, at;  // z_t / τ:  running max, Σ e^(z_t/τ − mt), Σ e^(z_t/τ − mt)·(z_t − z_s)/τ
  double tail;  // top-k:    Σ_{j ∉ K} e^(z_s/τ − mq) (same scale as sq)
  double zk;    // top-k:    Σ_{j ∈ K} pt_j · z_s,j / τ
  double zy;    // z_s[y], set when y's shard passes
};
// Sets every row to the empty state (maxima −inf, sums 0).
void distill_rows_init(DistillRowState* rows, int R);

// Which terms a pass computes (α = 0 needs no teacher, α = 1 no cross-entropy; τ = 1 makes
// q = p, so LSE(z_s/τ) is copied from LSE(z_s) instead of summed again).
struct DistillTerms {
  bool ce;  // α < 1
  bool kl;  // α > 0
  double tau;
};

// ---- full teacher logits -----------------------------------------------------------------
// Folds one tile into the row states. zs (R, Vs) student logits, zt (R, Vs) teacher logits (may
// be nullptr when !terms.kl); targets (R).
template <typename T>
void distill_tile_stats(DistillRowState* rows, const T* zs, const T* zt, int R, int Vs, int ld,
                        int v0, const int32_t* targets, const DistillTerms& terms);

// Final per-row quantities the gradient pass needs (from the merged states).
struct DistillRowFinal {
  double lse1;  // LSE(z_s)
  double lseq;  // LSE(z_s / τ)
  double lset;  // LSE(z_t / τ) (full teacher logits only)
  double w;     // gradient weight of the row: dloss / (number of valid rows); 0 when ignored
  double c;     // top-k only: P_tail / Q_tail, the factor that spreads the teacher's tail mass
                // over the tail in proportion to the student (0 when there is no tail mass)
};

// Gradient of the loss with respect to one tile of student logits, written over zs (in place):
//   dz_j = w·[(1−α)(p_j − [j = y]) + α·τ·(q_j − pt_j)]
// (α·τ² · d KL/dz = α·τ·(q − pt): the 1/τ of z_s/τ cancels one τ).
template <typename T>
void distill_tile_grad(T* zs, const T* zt, int R, int Vs, int ld, int v0, const int32_t* targets,
                       const DistillRowFinal* fin, double alpha, const DistillTerms& terms);

// ---- top-k teacher targets ---------------------------------------------------------------
// ids (R, k) distinct teacher ids per row, pk (R, k) their teacher probabilities pt_j (double,
// from the k logits and the tail log-sum-exp). Besides LSE(z_s) and LSE(z_s/τ), accumulates the
// student's tail sum Σ_{j∉K} (exactly: the K columns are masked out, never subtracted, so a tiny
// tail keeps its relative precision) and Σ_{j∈K} pt_j·z_s,j/τ.
template <typename T>
void distill_topk_tile_stats(DistillRowState* rows, const T* zs, int R, int Vs, int ld, int v0,
                             const int32_t* targets, const int32_t* ids, const double* pk, int k,
                             const DistillTerms& terms);

// Gradient for the top-k representation, written over zs: as distill_tile_grad with the
// completed teacher distribution pt_j for j ∈ K and c·q_j for j ∉ K.
template <typename T>
void distill_topk_tile_grad(T* zs, int R, int Vs, int ld, int v0, const int32_t* targets,
                            const int32_t* ids, const double* pk, int k, const DistillRowFinal* fin,
                            double alpha, const DistillTerms& terms);

}  // namespace atl::kernels::cpu
