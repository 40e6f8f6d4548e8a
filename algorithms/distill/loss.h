// The distillation loss, fused with the student's LM head and tiled over rows × vocabulary
// shards, so that no N×V buffer of logits ever exists (docs/distill.md has the derivation).
//
//   Loss = α·τ²·KL(softmax(z_t/τ) ‖ softmax(z_s/τ)) + (1 − α)·CE(z_s, y)
//
// averaged over the rows whose target y is not −1 (rows with y = −1 count in neither term), with
// z_s = h·Wᵀ: h (N, C) the student's final hidden states (the output of the final RMSNorm), W
// (V, C) its LM head (for Atoll's Llama the tied embedding). The teacher's logits z_t come either
// in full, one tile at a time (TeacherLogits), or as top-k ids and logits plus the log-sum-exp of
// the rest (TopKTargets, see topk.h for what that approximates).
//
// Tiling: rows in windows of R, the vocabulary in S shards [v0, v1) (sizes ⌊V/S⌋ or ⌈V/S⌉, S
// need not divide V). For each window:
//   pass 1, each shard: z_s tile (R, Vs) = h[rows]·W[v0:v1]ᵀ (one GEMM), the teacher's tile,
//           then per row the online log-sum-exp merge (running max and rescaled sums) of
//           LSE(z_s), LSE(z_s/τ), LSE(z_t/τ) and E_pt[(z_t − z_s)/τ]; the tile is dropped.
//   the row losses follow from the merged statistics;
//   pass 2 (only when gradients are asked for), each shard: the tile is computed again (unless
//           S = 1: it is still there), turned into dz in place, then
//           dh[rows] += dz·W[v0:v1] and dW[v0:v1] += dzᵀ·h[rows] (two GEMMs), and dropped.
// Extra memory: two tiles of R × ⌈V/S⌉ values (student and teacher logits) plus O(R) row states
// (and O(R·k) for top-k): O(R·V/S), against N×V for every materialized logits buffer of the
// unfused loss. The price is one more student GEMM (and one more teacher tile) per tile when
// S > 1: 4 GEMMs of N·V·C instead of 3.
//
// Exactness: every quantity is the full-vocabulary one; only the summation order differs (tests
// check 1e-6 relative in double, 1e-5 in float against the plain loss in reference.h).
// Deterministic for any thread count: GEMMs and row passes of the op table, windows and shards in
// a fixed order, the mean summed in row order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/core/status.h"
#include "kernels/cpu/distill_ops.h"

namespace atl::algorithms::distill {

struct LossConfig {
  double alpha = 0.5;  // weight of the KL term, in [0, 1]: 0 = plain cross-entropy
  double tau = 1.0;  // temperature, > 0 (the KL term is scaled by τ² so its gradient keeps scale)
  int rows = 256;    // R, rows per tile (clamped to N)
  int shards = 4;    // S, vocabulary shards (clamped to V)
};

// One line naming the first bad field, or OK.
Status validate(const LossConfig& cfg);

// Vocabulary shard s of S over V: [⌊s·V/S⌋, ⌊(s+1)·V/S⌋). Every id lies in exactly one shard;
// sizes differ by at most one.
struct VocabRange {
  int v0, v1;
};
VocabRange shard_range(int V, int S, int s);

// Means over the valid rows (target ≥ 0).
struct LossStats {
  double loss = 0;   // α·τ²·kl + (1 − α)·ce
  double kl = 0;     // KL(pt ‖ q), nats, not scaled by τ² (top-k: the bucketed KL, topk.h)
  double ce = 0;     // cross-entropy of the student at temperature 1, nats
  int64_t rows = 0;  // number of valid rows
};

// Full teacher logits, delivered one tile at a time: a wire decoder holding the shards it
// received, or a teacher model computing its head tile by tile (HeadTeacherLogits). tile() is
// called for every (window, shard) in pass 1 and again in pass 2 when S > 1.
template <typename T>
class TeacherLogits {
 public:
  virtual ~TeacherLogits() = default;
  // out (r1 − r0, v1 − v0), row stride ld: z_t of rows [r0, r1) over vocabulary ids [v0, v1).
  virtual void tile(int r0, int r1, int v0, int v1, T* out, int ld) = 0;
};

// Over a materialized (N, V) buffer (tests, and the unfused baseline).
template <typename T>
class DenseTeacherLogits final : public TeacherLogits<T> {
 public:
  DenseTeacherLogits(const T* logits, int V) : z_(logits), V_(V) {}
  void tile(int r0, int r1, int v0, int v1, T* out, int ld) override;

 private:
  const T* z_;  // (N, V)
  int V_;
};

// The teacher's own LM head, one tile at a time: z_t tile = h_t[r0:r1] · W_t[v0:v1]ᵀ with h_t
// (N, Ct) the teacher's final hidden states and W_t (V, Ct) its head; Ct may differ from the
// student's C (a larger teacher), V may not (one tokenizer).
template <typename T>
class HeadTeacherLogits final : public TeacherLogits<T> {
 public:
  HeadTeacherLogits(const T* h, const T* W, int Ct) : h_(h), W_(W), Ct_(Ct) {}
  void tile(int r0, int r1, int v0, int v1, T* out, int ld) override;

 private:
  const T* h_;  // (N, Ct)
  const T* W_;  // (V, Ct)
  int Ct_;
};

// Top-k teacher targets for N rows (what the top-k wire codec carries; build with topk.h).
template <typename T>
struct TopKTargets {
  int k = 0;                     // ids per row, 1 ≤ k ≤ V
  const int32_t* ids = nullptr;  // (N, k) distinct ids per row, any order
  const T* logits = nullptr;     // (N, k) raw teacher logits z_t at those ids (not divided by τ)
  const T* tail_lse = nullptr;  // (N) log Σ_{j ∉ ids} e^(z_t,j / τ), at the loss's τ; −inf when
                                // the row has no tail (k = V)
};

// Checks untrusted top-k targets (e.g. decoded from the network): k in [1, V], ids in [0, V) and
// distinct per row, logits finite, tail_lse finite or −inf (−inf required when k = V).
template <typename T>
Status validate_topk(const TopKTargets<T>& t, int N, int V);

// The fused loss. Holds the tile buffers (reused across calls); not thread-safe (one per
// training thread). Templates for float (training) and double (exactness tests).
template <typename T>
class FusedDistillLoss {
 public:
  // cfg must pass validate() (aborts otherwise: configs are validated at load time).
  explicit FusedDistillLoss(const LossConfig& cfg);

  const LossConfig& config() const { return cfg_; }

  // h (N, C), W (V, C), targets (N) in [0, V) or −1. teacher may be null when α = 0.
  // dh (N, C) and dW (V, C) receive the gradient of dloss·Loss, ACCUMULATED (+=) like the op
  // table's backward ops; either may be null, both null = forward only (no pass 2).
  // row_loss (N), if given, gets each row's α·τ²·KL + (1 − α)·CE (0 for ignored rows).
  // Errors (bad shapes, targets out of range, a missing teacher) come back as a Status.
  StatusOr<LossStats> run(const T* h, const T* W, int N, int C, int V, const int32_t* targets,
                          TeacherLogits<T>* teacher, T* dh, T* dW, double dloss = 1.0,
                          T* row_loss = nullptr);

  // The same loss with top-k teacher targets (KL replaced by its bucketed form, topk.h).
  StatusOr<LossStats> run_topk(const T* h, const T* W, int N, int C, int V, const int32_t* targets,
                               const TopKTargets<T>& teacher, T* dh, T* dW, double dloss = 1.0,
                               T* row_loss = nullptr);

  // Extra memory a call with these shapes holds, in bytes (tile buffers and row states): the
  // O(R·V/S) of the header comment, computed, not measured.
  size_t workspace_bytes(int N, int V, bool with_teacher_tile, int k = 0) const;

 private:
  StatusOr<LossStats> run_impl(const T* h, const T* W, int N, int C, int V, const int32_t* targets,
                               TeacherLogits<T>* full, const TopKTargets<T>* topk, T* dh, T* dW,
                               double dloss, T* row_loss);

  LossConfig cfg_;
  std::vector<T> zs_, zt_;                            // (R, ⌈V/S⌉) student / teacher tile
  std::vector<kernels::cpu::DistillRowState> state_;  // (R)
  std::vector<kernels::cpu::DistillRowFinal> fin_;    // (R)
  std::vector<double> pk_;                            // (R, k) top-k teacher probabilities
  std::vector<double> row_kconst_;                    // (R, 3) top-k: Σ p·log p, P_K, P_tail
};

extern template class FusedDistillLoss<float>;
extern template class FusedDistillLoss<double>;

}  // namespace atl::algorithms::distill
