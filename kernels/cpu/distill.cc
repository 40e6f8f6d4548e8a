// Tile kernels of the fused distillation loss (see distill_ops.h for the definitions).
// Each row's work is a few vectorized passes over its Vs columns; rows are independent and
// shared out over threads statically, and every sum runs in one fixed order, so the results do
// not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/distill_ops.h"
#include "kernels/cpu/vec_math.h"

namespace atl::kernels::cpu {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Online log-sum-exp merge of a tile's (max, Σ e^(x − max)) into a row's running pair.
inline void merge_lse(double& m, double& s, double m_tile, double s_tile) {
  if (m_tile == kNegInf) return;  // empty tile (every logit −inf): nothing to add
  const double mn = std::max(m, m_tile);
  s = s * std::exp(m - mn) + s_tile * std::exp(m_tile - mn);
  m = mn;
}

template <typename T>
T row_max(const T* x, int n) {
  T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < n; ++j) mx = std::max(mx, x[j]);
  return mx;
}

// Σ e^(x_j·scale − shift). x·scale ≤ shift when shift = max(x)·scale (scale > 0 preserves order
// under rounding), so no term overflows.
template <typename T>
T sum_exp(const T* x, int n, T scale, T shift) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int j = 0; j < n; ++j) s += detail::exp_vec(x[j] * scale - shift);
  return s;
}

}  // namespace

void distill_rows_init(DistillRowState* rows, int R) {
  for (int r = 0; r < R; ++r) rows[r] = {kNegInf, 0, kNegInf, 0, kNegInf, 0, 0, 0, 0, 0};
}

// zs, zt (R, Vs) with row stride ld; columns are vocabulary ids v0 .. v0 + Vs − 1.
template <typename T>
void distill_tile_stats(DistillRowState* rows, const T* zs, const T* zt, int R, int Vs, int ld,
                        int v0, const int32_t* targets, const DistillTerms& terms) {
  const T inv_tau = T(1.0 / terms.tau);
  // τ = 1 with both terms: LSE(z_s/τ) = LSE(z_s), summed once and copied.
  const bool share = terms.ce && terms.kl && terms.tau == 1.0;
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(R) * Vs * 8))
  for (int r = 0; r < R; ++r) {
    const int32_t y = targets[r];
    if (y < 0) continue;
    DistillRowState& st = rows[r];
    const T* x = zs + size_t(r) * ld;
    if (y >= v0 && y < v0 + Vs) st.zy = double(x[y - v0]);
    const T mx = row_max(x, Vs);
    if (terms.ce) merge_lse(st.m1, st.s1, double(mx), double(sum_exp(x, Vs, T(1), mx)));
    if (share) {
      st.mq = st.m1;
      st.sq = st.s1;
    } else if (terms.kl) {
      const T mq = mx * inv_tau;
      merge_lse(st.mq, st.sq, double(mq), double(sum_exp(x, Vs, inv_tau, mq)));
    }
    if (!terms.kl) continue;
    const T* t = zt + size_t(r) * ld;
    const T mt = row_max(t, Vs) * inv_tau;
    if (double(mt) == kNegInf) continue;
    T s = 0, a = 0;
#pragma omp simd reduction(+ : s, a)
    for (int j = 0; j < Vs; ++j) {
      const T e = detail::exp_vec(t[j] * inv_tau - mt);
      s += e;
      a += e * (t[j] - x[j]);
    }
    // Merge (s, a) together: both carry the factor e^(−mt).
    const double mn = std::max(st.mt, double(mt));
    const double f_old = std::exp(st.mt - mn), f_new = std::exp(double(mt) - mn);
    st.st = st.st * f_old + double(s) * f_new;
    st.at = st.at * f_old + double(a) * (1.0 / terms.tau) * f_new;
    st.mt = mn;
  }
}

template <typename T>
void distill_tile_grad(T* zs, const T* zt, int R, int Vs, int ld, int v0, const int32_t* targets,
                       const DistillRowFinal* fin, double alpha, const DistillTerms& terms) {
  const T inv_tau = T(1.0 / terms.tau);
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(R) * Vs * 8))
  for (int r = 0; r < R; ++r) {
    T* x = zs + size_t(r) * ld;
    const int32_t y = targets[r];
    if (y < 0 || fin[r].w == 0.0) {
      std::fill(x, x + Vs, T(0));
      continue;
    }
    const DistillRowFinal& f = fin[r];
    const T a1 = terms.ce ? T(f.w * (1.0 - alpha)) : T(0);      // cross-entropy weight
    const T a2 = terms.kl ? T(f.w * alpha * terms.tau) : T(0);  // KL weight (α·τ²/τ)
    const T l1 = T(f.lse1), lq = T(f.lseq), lt = T(f.lset);
    if (terms.ce && !terms.kl) {
#pragma omp simd
      for (int j = 0; j < Vs; ++j) x[j] = a1 * detail::exp_vec(x[j] - l1);
    } else if (!terms.ce) {
      const T* t = zt + size_t(r) * ld;
#pragma omp simd
      for (int j = 0; j < Vs; ++j)
        x[j] = a2 * (detail::exp_vec(x[j] * inv_tau - lq) - detail::exp_vec(t[j] * inv_tau - lt));
    } else {
      const T* t = zt + size_t(r) * ld;
#pragma omp simd
      for (int j = 0; j < Vs; ++j)
        x[j] = a1 * detail::exp_vec(x[j] - l1) +
               a2 * (detail::exp_vec(x[j] * inv_tau - lq) - detail::exp_vec(t[j] * inv_tau - lt));
    }
    if (terms.ce && y >= v0 && y < v0 + Vs) x[y - v0] -= a1;
  }
}

template <typename T>
void distill_topk_tile_stats(DistillRowState* rows, const T* zs, int R, int Vs, int ld, int v0,
                             const int32_t* targets, const int32_t* ids, const double* pk, int k,
                             const DistillTerms& terms) {
  const T inv_tau = T(1.0 / terms.tau);
#pragma omp parallel if (detail::worth_threads(double(R) * Vs * 8))
  {
    // mask (Vs): 1 on tail columns, 0 on the row's top-k columns (reset after each row).
    std::vector<T> mask(static_cast<size_t>(Vs), T(1));
#pragma omp for schedule(static)
    for (int r = 0; r < R; ++r) {
      const int32_t y = targets[r];
      if (y < 0) continue;
      DistillRowState& st = rows[r];
      const T* x = zs + size_t(r) * ld;
      if (y >= v0 && y < v0 + Vs) st.zy = double(x[y - v0]);
      const T mx = row_max(x, Vs);
      if (terms.ce) merge_lse(st.m1, st.s1, double(mx), double(sum_exp(x, Vs, T(1), mx)));
      if (!terms.kl) continue;
      const int32_t* id = ids + size_t(r) * k;
      const double* p = pk + size_t(r) * k;
      double zk = 0;
      for (int i = 0; i < k; ++i) {
        const int c = id[i] - v0;
        if (c < 0 || c >= Vs) continue;
        mask[c] = T(0);
        zk += p[i] * double(x[c]);
      }
      st.zk += zk / terms.tau;
      const T mq = mx * inv_tau;
      T s = 0, tail = 0;
#pragma omp simd reduction(+ : s, tail)
      for (int j = 0; j < Vs; ++j) {
        const T e = detail::exp_vec(x[j] * inv_tau - mq);
        s += e;
        tail += e * mask[j];
      }
      // sq and tail share one scale, so they merge with the same factors.
      const double mn = std::max(st.mq, double(mq));
      const double f_old = std::exp(st.mq - mn), f_new = std::exp(double(mq) - mn);
      st.sq = st.sq * f_old + double(s) * f_new;
      st.tail = st.tail * f_old + double(tail) * f_new;
      st.mq = mn;
      for (int i = 0; i < k; ++i) {
        const int c = id[i] - v0;
        if (c >= 0 && c < Vs) mask[c] = T(1);
      }
    }
  }
}

template <typename T>
void distill_topk_tile_grad(T* zs, int R, int Vs, int ld, int v0, const int32_t* targets,
                            const int32_t* ids, const double* pk, int k, const DistillRowFinal* fin,
                            double alpha, const DistillTerms& terms) {
  const T inv_tau = T(1.0 / terms.tau);
#pragma omp parallel if (detail::worth_threads(double(R) * Vs * 8))
  {
    std::vector<T> zk(static_cast<size_t>(k));  // the row's student logits at its top-k ids
#pragma omp for schedule(static)
    for (int r = 0; r < R; ++r) {
      T* x = zs + size_t(r) * ld;
      const int32_t y = targets[r];
      if (y < 0 || fin[r].w == 0.0) {
        std::fill(x, x + Vs, T(0));
        continue;
      }
      const DistillRowFinal& f = fin[r];
      const int32_t* id = ids + size_t(r) * k;
      const double* p = pk + size_t(r) * k;
      if (terms.kl)
        for (int i = 0; i < k; ++i) {
          const int c = id[i] - v0;
          if (c >= 0 && c < Vs) zk[i] = x[c];  // read before the row is overwritten
        }
      const T a1 = terms.ce ? T(f.w * (1.0 - alpha)) : T(0);
      const double a2d = terms.kl ? f.w * alpha * terms.tau : 0.0;
      // Off the top-k, the completed teacher distribution is c·q, so the KL gradient is
      // a2·(1 − c)·q; the top-k columns are corrected below to a2·(q − pt).
      const T a2t = T(a2d * (1.0 - f.c));
      const T l1 = T(f.lse1), lq = T(f.lseq);
      if (!terms.kl) {
#pragma omp simd
        for (int j = 0; j < Vs; ++j) x[j] = a1 * detail::exp_vec(x[j] - l1);
      } else if (!terms.ce) {
#pragma omp simd
        for (int j = 0; j < Vs; ++j) x[j] = a2t * detail::exp_vec(x[j] * inv_tau - lq);
      } else {
#pragma omp simd
        for (int j = 0; j < Vs; ++j)
          x[j] = a1 * detail::exp_vec(x[j] - l1) + a2t * detail::exp_vec(x[j] * inv_tau - lq);
      }
      if (terms.kl)
        for (int i = 0; i < k; ++i) {
          const int c = id[i] - v0;
          if (c < 0 || c >= Vs) continue;
          const double q = std::exp(double(zk[i]) / terms.tau - f.lseq);
          x[c] += T(a2d * (f.c * q - p[i]));
        }
      if (terms.ce && y >= v0 && y < v0 + Vs) x[y - v0] -= a1;
    }
  }
}

#define ATOLL_DISTILL_INSTANTIATE(T)                                                              \
  template void distill_tile_stats<T>(DistillRowState*, const T*, const T*, int, int, int, int,   \
                                      const int32_t*, const DistillTerms&);                       \
  template void distill_tile_grad<T>(T*, const T*, int, int, int, int, const int32_t*,            \
                                     const DistillRowFinal*, double, const DistillTerms&);        \
  template void distill_topk_tile_stats<T>(DistillRowState*, const T*, int, int, int, int,        \
                                           const int32_t*, const int32_t*, const double*, int,    \
                                           const DistillTerms&);                                  \
  template void distill_topk_tile_grad<T>(T*, int, int, int, int, const int32_t*, const int32_t*, \
                                          const double*, int, const DistillRowFinal*, double,     \
                                          const DistillTerms&);
ATOLL_DISTILL_INSTANTIATE(float)
ATOLL_DISTILL_INSTANTIATE(double)
#undef ATOLL_DISTILL_INSTANTIATE

}  // namespace atl::kernels::cpu
