#include "algorithms/distill/loss.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/core/check.h"
#include "kernels/cpu/ops.h"

namespace atl::algorithms::distill {

namespace ops = atl::kernels::cpu;
using ops::DistillRowFinal;
using ops::DistillRowState;
using ops::DistillTerms;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double log_add_exp(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double m = std::max(a, b);
  return m + std::log(std::exp(a - m) + std::exp(b - m));
}

}  // namespace

Status validate(const LossConfig& c) {
  if (!(c.alpha >= 0.0 && c.alpha <= 1.0))
    return InvalidArgument("distill alpha must be in [0, 1], got " + std::to_string(c.alpha));
  if (!(c.tau > 0.0) || !std::isfinite(c.tau))
    return InvalidArgument("distill tau (temperature) must be a finite number > 0, got " +
                           std::to_string(c.tau));
  if (c.rows <= 0)
    return InvalidArgument("distill rows per tile must be positive, got " + std::to_string(c.rows));
  if (c.shards <= 0)
    return InvalidArgument("distill vocabulary shards must be positive, got " +
                           std::to_string(c.shards));
  return Status::Ok();
}

VocabRange shard_range(int V, int S, int s) {
  return {static_cast<int>(int64_t(s) * V / S), static_cast<int>(int64_t(s + 1) * V / S)};
}

template <typename T>
void DenseTeacherLogits<T>::tile(int r0, int r1, int v0, int v1, T* out, int ld) {
  for (int r = r0; r < r1; ++r)
    std::copy(z_ + size_t(r) * V_ + v0, z_ + size_t(r) * V_ + v1, out + size_t(r - r0) * ld);
}

template <typename T>
void HeadTeacherLogits<T>::tile(int r0, int r1, int v0, int v1, T* out, int ld) {
  // The op table's matmul writes a contiguous (rows, v1 − v0) block.
  ATOLL_CHECK(ld == v1 - v0, "HeadTeacherLogits needs ld == v1 - v0");
  ops::matmul_forward(out, h_ + size_t(r0) * Ct_, W_ + size_t(v0) * Ct_, r1 - r0, Ct_, v1 - v0);
}

template <typename T>
Status validate_topk(const TopKTargets<T>& t, int N, int V) {
  if (t.k < 1 || t.k > V)
    return InvalidArgument("top-k: k must be in [1, " + std::to_string(V) + "], got " +
                           std::to_string(t.k));
  if (N > 0 && (t.ids == nullptr || t.logits == nullptr || t.tail_lse == nullptr))
    return InvalidArgument("top-k: ids, logits and tail_lse are required");
  std::vector<uint8_t> seen(static_cast<size_t>(V), 0);
  for (int r = 0; r < N; ++r) {
    const int32_t* id = t.ids + size_t(r) * t.k;
    const T* z = t.logits + size_t(r) * t.k;
    Status bad = Status::Ok();
    for (int i = 0; i < t.k && bad.ok(); ++i) {
      if (id[i] < 0 || id[i] >= V)
        bad = InvalidArgument("top-k: row " + std::to_string(r) + " has id " +
                              std::to_string(id[i]) + " outside [0, " + std::to_string(V) + ")");
      else if (seen[id[i]])
        bad = InvalidArgument("top-k: row " + std::to_string(r) + " repeats id " +
                              std::to_string(id[i]));
      else if (!std::isfinite(double(z[i])))
        bad = InvalidArgument("top-k: row " + std::to_string(r) + " has a non-finite logit");
      else
        seen[id[i]] = 1;
    }
    for (int i = 0; i < t.k; ++i)
      if (id[i] >= 0 && id[i] < V) seen[id[i]] = 0;
    if (!bad.ok()) return bad;
    const double tl = double(t.tail_lse[r]);
    if (std::isnan(tl) || tl == std::numeric_limits<double>::infinity())
      return InvalidArgument("top-k: row " + std::to_string(r) + " has tail_lse " +
                             std::to_string(tl) + " (must be finite or -inf)");
    if (t.k == V && tl != kNegInf)
      return InvalidArgument("top-k: k = V leaves no tail, but row " + std::to_string(r) +
                             " has a finite tail_lse");
  }
  return Status::Ok();
}

template <typename T>
FusedDistillLoss<T>::FusedDistillLoss(const LossConfig& cfg) : cfg_(cfg) {
  if (Status st = validate(cfg); !st.ok()) internal_error("FusedDistillLoss: " + st.message());
}

template <typename T>
size_t FusedDistillLoss<T>::workspace_bytes(int N, int V, bool with_teacher_tile, int k) const {
  const size_t R = static_cast<size_t>(std::max(1, std::min(cfg_.rows, N)));
  const int S = std::min(cfg_.shards, V);
  const size_t vs_max = static_cast<size_t>((V + S - 1) / S);
  size_t b = R * vs_max * sizeof(T) * (with_teacher_tile ? 2 : 1);
  b += R * (sizeof(DistillRowState) + sizeof(DistillRowFinal));
  if (k > 0) b += R * static_cast<size_t>(k) * sizeof(double) + R * 3 * sizeof(double);
  return b;
}

template <typename T>
StatusOr<LossStats> FusedDistillLoss<T>::run(const T* h, const T* W, int N, int C, int V,
                                             const int32_t* targets, TeacherLogits<T>* teacher,
                                             T* dh, T* dW, double dloss, T* row_loss) {
  if (cfg_.alpha > 0 && teacher == nullptr)
    return InvalidArgument("distill loss: alpha > 0 needs teacher logits");
  return run_impl(h, W, N, C, V, targets, teacher, nullptr, dh, dW, dloss, row_loss);
}

template <typename T>
StatusOr<LossStats> FusedDistillLoss<T>::run_topk(const T* h, const T* W, int N, int C, int V,
                                                  const int32_t* targets,
                                                  const TopKTargets<T>& teacher, T* dh, T* dW,
                                                  double dloss, T* row_loss) {
  if (cfg_.alpha > 0) ATOLL_RETURN_IF_ERROR(validate_topk(teacher, N, V));
  return run_impl(h, W, N, C, V, targets, nullptr, &teacher, dh, dW, dloss, row_loss);
}

template <typename T>
StatusOr<LossStats> FusedDistillLoss<T>::run_impl(const T* h, const T* W, int N, int C, int V,
                                                  const int32_t* targets, TeacherLogits<T>* full,
                                                  const TopKTargets<T>* topk, T* dh, T* dW,
                                                  double dloss, T* row_loss) {
  if (N < 0 || C <= 0 || V <= 0)
    return InvalidArgument("distill loss: bad shape N=" + std::to_string(N) +
                           " C=" + std::to_string(C) + " V=" + std::to_string(V));
  int64_t valid = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] < -1 || targets[i] >= V)
      return InvalidArgument("distill loss: target " + std::to_string(targets[i]) + " at row " +
                             std::to_string(i) + " is outside [-1, " + std::to_string(V) + ")");
    valid += targets[i] >= 0;
  }
  if (row_loss != nullptr) std::fill(row_loss, row_loss + N, T(0));
  LossStats out;
  out.rows = valid;
  if (valid == 0) return out;  // no row counts: loss 0, nothing to add to the gradients

  const double alpha = cfg_.alpha, tau = cfg_.tau;
  // The cross-entropy is always measured (students report it), but its gradient is only formed
  // when α < 1.
  const DistillTerms terms{true, alpha > 0.0, tau};
  const DistillTerms grad_terms{alpha<1.0, alpha> 0.0, tau};
  const bool grad = dh != nullptr || dW != nullptr;
  const int R = std::min(cfg_.rows, N), S = std::min(cfg_.shards, V);
  const int vs_max = (V + S - 1) / S;
  const bool teacher_tile = full != nullptr && terms.kl;
  const bool use_topk = topk != nullptr && terms.kl;
  const int k = use_topk ? topk->k : 0;
  // Grow-only buffers: O(R·V/S) (+ O(R·k) for top-k).
  const size_t tile = size_t(R) * vs_max;
  if (zs_.size() < tile) zs_.resize(tile);
  if (teacher_tile && zt_.size() < tile) zt_.resize(tile);
  if (state_.size() < size_t(R)) state_.resize(R);
  if (fin_.size() < size_t(R)) fin_.resize(R);
  if (use_topk) {
    if (pk_.size() < size_t(R) * k) pk_.resize(size_t(R) * k);
    if (row_kconst_.size() < size_t(R) * 3) row_kconst_.resize(size_t(R) * 3);
  }
  T* zs = zs_.data();
  T* zt = teacher_tile ? zt_.data() : nullptr;
  const double w = dloss / static_cast<double>(valid);
  double sum_kl = 0.0, sum_ce = 0.0;

  for (int r0 = 0; r0 < N; r0 += R) {
    const int Rr = std::min(R, N - r0);
    const T* hr = h + size_t(r0) * C;
    const int32_t* yr = targets + r0;
    ops::distill_rows_init(state_.data(), Rr);
    const int32_t* ids = use_topk ? topk->ids + size_t(r0) * k : nullptr;
    if (use_topk) {
      // Teacher probabilities of the window's top-k ids: LSE_t = log(Σ_K e^(z/τ) + e^tail).
      for (int r = 0; r < Rr; ++r) {
        const T* z = topk->logits + size_t(r0 + r) * k;
        const double tail = double(topk->tail_lse[r0 + r]);
        double m = kNegInf;
        for (int i = 0; i < k; ++i) m = std::max(m, double(z[i]) / tau);
        double s = 0.0;
        for (int i = 0; i < k; ++i) s += std::exp(double(z[i]) / tau - m);
        const double lset = log_add_exp(m + std::log(s), tail);
        double* p = pk_.data() + size_t(r) * k;
        double plogp = 0.0, pK = 0.0;
        for (int i = 0; i < k; ++i) {
          const double lp = double(z[i]) / tau - lset;
          p[i] = std::exp(lp);
          pK += p[i];
          plogp += p[i] * lp;
        }
        double* kc = row_kconst_.data() + size_t(r) * 3;
        kc[0] = plogp;
        kc[1] = pK;
        kc[2] = tail == kNegInf ? 0.0 : std::exp(tail - lset);  // P_tail
      }
    }
    auto student_tile = [&](VocabRange vr) {
      ops::matmul_forward(zs, hr, W + size_t(vr.v0) * C, Rr, C, vr.v1 - vr.v0);  // (Rr, Vs)
    };
    // Pass 1: statistics, shard by shard.
    for (int s = 0; s < S; ++s) {
      const VocabRange vr = shard_range(V, S, s);
      const int Vs = vr.v1 - vr.v0;
      student_tile(vr);
      if (use_topk) {
        ops::distill_topk_tile_stats(state_.data(), zs, Rr, Vs, Vs, vr.v0, yr, ids, pk_.data(), k,
                                     terms);
      } else {
        if (teacher_tile) full->tile(r0, r0 + Rr, vr.v0, vr.v1, zt, Vs);
        ops::distill_tile_stats(state_.data(), zs, zt, Rr, Vs, Vs, vr.v0, yr, terms);
      }
    }
    // Row losses from the merged statistics (row order: deterministic sums).
    for (int r = 0; r < Rr; ++r) {
      DistillRowFinal& f = fin_[r];
      f = {0, 0, 0, 0, 0};
      if (yr[r] < 0) continue;
      const DistillRowState& st = state_[r];
      double kl = 0.0;
      f.lse1 = st.m1 + std::log(st.s1);
      const double ce = f.lse1 - st.zy;
      if (terms.kl) {
        f.lseq = st.mq + std::log(st.sq);
        if (use_topk) {
          // Σ_K pt·(log pt − log q) + P_tail·(log P_tail − log Q_tail),
          // log q_j = z_j/τ − LSE_q, log Q_tail = log(tail) + m_q − LSE_q.
          const double* kc = row_kconst_.data() + size_t(r) * 3;
          const double p_tail = kc[2];
          kl = kc[0] - st.zk + kc[1] * f.lseq;
          if (p_tail > 0.0) {
            const double log_q_tail = std::log(st.tail) + st.mq - f.lseq;
            kl += p_tail * (std::log(p_tail) - log_q_tail);
            f.c = st.tail > 0.0 ? std::exp(std::log(p_tail) - log_q_tail) : 0.0;
          }
        } else {
          // KL = E_pt[(z_t − z_s)/τ] − LSE_t + LSE_q.
          f.lset = st.mt + std::log(st.st);
          kl = st.at / st.st - f.lset + f.lseq;
        }
      }
      f.w = w;
      sum_ce += ce;
      sum_kl += kl;
      if (row_loss != nullptr) row_loss[r0 + r] = T(alpha * tau * tau * kl + (1.0 - alpha) * ce);
    }
    if (!grad) continue;
    // Pass 2: gradients, shard by shard. With S = 1 the tiles of pass 1 are still in place.
    for (int s = 0; s < S; ++s) {
      const VocabRange vr = shard_range(V, S, s);
      const int Vs = vr.v1 - vr.v0;
      if (S > 1) {
        student_tile(vr);
        if (teacher_tile) full->tile(r0, r0 + Rr, vr.v0, vr.v1, zt, Vs);
      }
      if (use_topk)
        ops::distill_topk_tile_grad(zs, Rr, Vs, Vs, vr.v0, yr, ids, pk_.data(), k, fin_.data(),
                                    alpha, grad_terms);
      else
        ops::distill_tile_grad(zs, zt, Rr, Vs, Vs, vr.v0, yr, fin_.data(), alpha, grad_terms);
      // dh[rows] (Rr, C) += dz · W[v0:v1] ; dW[v0:v1] (Vs, C) += dzᵀ · h[rows]
      ops::matmul_backward(dh != nullptr ? dh + size_t(r0) * C : nullptr,
                           dW != nullptr ? dW + size_t(vr.v0) * C : nullptr, zs, hr,
                           W + size_t(vr.v0) * C, Rr, C, Vs);
    }
  }
  out.kl = sum_kl / static_cast<double>(valid);
  out.ce = sum_ce / static_cast<double>(valid);
  out.loss = alpha * tau * tau * out.kl + (1.0 - alpha) * out.ce;
  return out;
}

template class DenseTeacherLogits<float>;
template class DenseTeacherLogits<double>;
template class HeadTeacherLogits<float>;
template class HeadTeacherLogits<double>;
template Status validate_topk<float>(const TopKTargets<float>&, int, int);
template Status validate_topk<double>(const TopKTargets<double>&, int, int);
template class FusedDistillLoss<float>;
template class FusedDistillLoss<double>;

}  // namespace atl::algorithms::distill
