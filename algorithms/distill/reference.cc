#include "algorithms/distill/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/cpu/ops.h"

namespace atl::algorithms::distill {

namespace ops = atl::kernels::cpu;

namespace {

// out (V) = log_softmax(x / tau), in double.
template <typename T>
void log_softmax(double* out, const T* x, int V, double tau) {
  double m = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < V; ++j) m = std::max(m, double(x[j]) / tau);
  double s = 0.0;
  for (int j = 0; j < V; ++j) s += std::exp(double(x[j]) / tau - m);
  const double lse = m + std::log(s);
  for (int j = 0; j < V; ++j) out[j] = double(x[j]) / tau - lse;
}

// Shared driver: logits, per-row loss and dlogits (given a per-row teacher routine), backward.
// row_fn(r, z (V), ls1, lsq, dz_kl (V) out) -> KL of the row; fills dz_kl with q − p̃ (the KL
// gradient with respect to z/τ).
template <typename T, typename RowFn>
LossStats run_reference(const LossConfig& cfg, const T* h, const T* W, int N, int C, int V,
                        const int32_t* targets, T* dh, T* dW, double dloss, T* row_loss,
                        RowFn row_fn) {
  if (!validate(cfg).ok() || N < 0 || C <= 0 || V <= 0)
    internal_error("reference_loss: bad config or shape");
  const double alpha = cfg.alpha, tau = cfg.tau;
  std::vector<T> z(size_t(N) * V);  // (N, V) student logits, then their gradient
  ops::matmul_forward(z.data(), h, W, N, C, V);
  int64_t valid = 0;
  for (int r = 0; r < N; ++r) valid += targets[r] >= 0;
  const double w = valid ? dloss / double(valid) : 0.0;
  std::vector<double> ce(N, 0.0), kl(N, 0.0);
#pragma omp parallel
  {
    std::vector<double> ls1(V), lsq(V), dkl(V);
#pragma omp for schedule(static)
    for (int r = 0; r < N; ++r) {
      T* zr = z.data() + size_t(r) * V;
      const int32_t y = targets[r];
      if (y < 0) {
        std::fill(zr, zr + V, T(0));
        continue;
      }
      log_softmax(ls1.data(), zr, V, 1.0);
      log_softmax(lsq.data(), zr, V, tau);
      ce[r] = -ls1[y];
      if (alpha > 0) kl[r] = row_fn(r, zr, lsq.data(), dkl.data());
      for (int j = 0; j < V; ++j) {
        double g = (1.0 - alpha) * (std::exp(ls1[j]) - (j == y ? 1.0 : 0.0));
        if (alpha > 0) g += alpha * tau * dkl[j];
        zr[j] = T(w * g);
      }
    }
  }
  LossStats out;
  out.rows = valid;
  double sk = 0, sc = 0;
  for (int r = 0; r < N; ++r) {
    sk += kl[r];
    sc += ce[r];
    if (row_loss != nullptr) row_loss[r] = T(alpha * tau * tau * kl[r] + (1.0 - alpha) * ce[r]);
  }
  if (valid) {
    out.kl = sk / double(valid);
    out.ce = sc / double(valid);
    out.loss = alpha * tau * tau * out.kl + (1.0 - alpha) * out.ce;
  }
  if (dh != nullptr || dW != nullptr) ops::matmul_backward(dh, dW, z.data(), h, W, N, C, V);
  return out;
}

}  // namespace

template <typename T>
LossStats reference_loss(const LossConfig& cfg, const T* h, const T* W, int N, int C, int V,
                         const int32_t* targets, const T* zt, T* dh, T* dW, double dloss,
                         T* row_loss) {
  const double tau = cfg.tau;
  auto row = [&](int r, const T* /*zs*/, const double* lsq, double* dkl) {
    std::vector<double> lst(V);
    log_softmax(lst.data(), zt + size_t(r) * V, V, tau);
    double kl = 0.0;
    for (int j = 0; j < V; ++j) {
      const double pt = std::exp(lst[j]);
      kl += pt * (lst[j] - lsq[j]);
      dkl[j] = std::exp(lsq[j]) - pt;
    }
    return kl;
  };
  return run_reference(cfg, h, W, N, C, V, targets, dh, dW, dloss, row_loss, row);
}

template <typename T>
LossStats reference_topk_loss(const LossConfig& cfg, const T* h, const T* W, int N, int C, int V,
                              const int32_t* targets, const TopKTargets<T>& topk, T* dh, T* dW,
                              double dloss, T* row_loss) {
  const double tau = cfg.tau;
  const int k = topk.k;
  auto row = [&](int r, const T* /*zs*/, const double* lsq, double* dkl) {
    const int32_t* id = topk.ids + size_t(r) * k;
    const T* zk = topk.logits + size_t(r) * k;
    // Teacher: LSE_t over the k logits and the tail bucket.
    double lse = double(topk.tail_lse[r]);
    for (int i = 0; i < k; ++i) {
      const double a = double(zk[i]) / tau;
      const double m = std::max(lse, a);
      lse = m + std::log(std::exp(lse - m) + std::exp(a - m));
    }
    std::vector<char> in_k(V, 0);
    for (int i = 0; i < k; ++i) in_k[id[i]] = 1;
    double q_tail = 0.0;
    for (int j = 0; j < V; ++j)
      if (!in_k[j]) q_tail += std::exp(lsq[j]);
    const double tl = double(topk.tail_lse[r]);
    const double p_tail = std::isinf(tl) ? 0.0 : std::exp(tl - lse);
    double kl = p_tail > 0 ? p_tail * std::log(p_tail / q_tail) : 0.0;
    // Completed teacher distribution p̃: pt on K, P_tail·q/Q_tail on the tail.
    for (int j = 0; j < V; ++j) {
      const double q = std::exp(lsq[j]);
      dkl[j] = q - (p_tail > 0 ? p_tail * q / q_tail : 0.0);
    }
    for (int i = 0; i < k; ++i) {
      const double lp = double(zk[i]) / tau - lse;
      const double pt = std::exp(lp);
      kl += pt * (lp - lsq[id[i]]);
      dkl[id[i]] = std::exp(lsq[id[i]]) - pt;
    }
    return kl;
  };
  return run_reference(cfg, h, W, N, C, V, targets, dh, dW, dloss, row_loss, row);
}

template LossStats reference_loss<float>(const LossConfig&, const float*, const float*, int, int,
                                         int, const int32_t*, const float*, float*, float*, double,
                                         float*);
template LossStats reference_loss<double>(const LossConfig&, const double*, const double*, int, int,
                                          int, const int32_t*, const double*, double*, double*,
                                          double, double*);
template LossStats reference_topk_loss<float>(const LossConfig&, const float*, const float*, int,
                                              int, int, const int32_t*, const TopKTargets<float>&,
                                              float*, float*, double, float*);
template LossStats reference_topk_loss<double>(const LossConfig&, const double*, const double*, int,
                                               int, int, const int32_t*, const TopKTargets<double>&,
                                               double*, double*, double, double*);

}  // namespace atl::algorithms::distill
