// A naive per-token MoE FFN in plain double loops (no plan, no permutation, no GEMM library):
// the reference the permuted, grouped path of moe_ffn_forward/backward must equal. Same weight
// layout and semantics as moe_ops.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/moe_ops.h"

namespace atl::kernels::cpu::testing {

struct NaiveMoeGrads {
  std::vector<double> dx, drouter, dexperts, dsgu, dsdown;
};

struct NaiveMoeResult {
  std::vector<double> out;  // (N, C)
  double aux = 0, z = 0;
  NaiveMoeGrads g;
};

// y = W (OC, IC) · v (IC)
inline std::vector<double> naive_mv(const double* W, const std::vector<double>& v, int OC, int IC) {
  std::vector<double> y(OC, 0.0);
  for (int o = 0; o < OC; ++o)
    for (int i = 0; i < IC; ++i) y[o] += W[size_t(o) * IC + i] * v[i];
  return y;
}

// dv (IC) += Wᵀ · dy ; dW (OC, IC) += dy ⊗ v
inline void naive_mv_back(std::vector<double>& dv, double* dW, const double* W,
                          const std::vector<double>& v, const std::vector<double>& dy, int OC,
                          int IC) {
  for (int o = 0; o < OC; ++o)
    for (int i = 0; i < IC; ++i) {
      dv[i] += W[size_t(o) * IC + i] * dy[o];
      dW[size_t(o) * IC + i] += dy[o] * v[i];
    }
}

// SwiGLU expert on one token: gate (F, C) | up (F, C) at gu, down (C, F). Returns y (C); with
// dy, accumulates dx and the weight gradients.
inline std::vector<double> naive_expert(const double* gu, const double* down,
                                        const std::vector<double>& x, int C, int F,
                                        const std::vector<double>* dy = nullptr,
                                        std::vector<double>* dx = nullptr, double* dgu = nullptr,
                                        double* ddown = nullptr) {
  const std::vector<double> h = naive_mv(gu, x, F, C), u = naive_mv(gu + size_t(F) * C, x, F, C);
  std::vector<double> a(F), sg(F);
  for (int f = 0; f < F; ++f) {
    sg[f] = 1.0 / (1.0 + std::exp(-h[f]));
    a[f] = h[f] * sg[f] * u[f];
  }
  std::vector<double> y = naive_mv(down, a, C, F);
  if (dy != nullptr) {
    std::vector<double> da(F, 0.0), dh(F), du(F);
    naive_mv_back(da, ddown, down, a, *dy, C, F);
    for (int f = 0; f < F; ++f) {
      dh[f] = da[f] * u[f] * sg[f] * (1.0 + h[f] * (1.0 - sg[f]));
      du[f] = da[f] * h[f] * sg[f];
    }
    naive_mv_back(*dx, dgu, gu, x, dh, F, C);
    naive_mv_back(*dx, dgu + size_t(F) * C, gu + size_t(F) * C, x, du, F, C);
  }
  return y;
}

// Forward and backward (for <dout, out> + aux_coef·aux + z_coef·z), token by token.
inline NaiveMoeResult naive_moe(const std::vector<double>& x, const std::vector<double>& router,
                                const std::vector<double>& experts, const std::vector<double>& sgu,
                                const std::vector<double>& sdown, const std::vector<double>& dout,
                                int N, const MoeFfnShape& s, double aux_coef, double z_coef) {
  const int C = s.C, E = s.E, K = s.K, F = s.F, Fs = s.Fs;
  const size_t stride = size_t(3) * F * C;
  NaiveMoeResult r;
  r.out.assign(size_t(N) * C, 0.0);
  r.g.dx.assign(x.size(), 0.0);
  r.g.drouter.assign(router.size(), 0.0);
  r.g.dexperts.assign(experts.size(), 0.0);
  r.g.dsgu.assign(sgu.size(), 0.0);
  r.g.dsdown.assign(sdown.size(), 0.0);
  std::vector<std::vector<double>> logits(N), scores(N);
  std::vector<std::vector<int>> sel(N);
  std::vector<double> count(E, 0.0);
  for (int n = 0; n < N; ++n) {
    std::vector<double> xn(x.begin() + size_t(n) * C, x.begin() + size_t(n + 1) * C);
    logits[n] = naive_mv(router.data(), xn, E, C);
    scores[n].resize(E);
    double mx = *std::max_element(logits[n].begin(), logits[n].end()), z = 0;
    for (int e = 0; e < E; ++e) z += std::exp(logits[n][e] - mx);
    for (int e = 0; e < E; ++e)
      scores[n][e] = s.score == MoeScore::kSoftmax ? std::exp(logits[n][e] - mx) / z
                                                   : 1.0 / (1.0 + std::exp(-logits[n][e]));
    const double lse = mx + std::log(z);
    r.z += lse * lse / N;
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return scores[n][a] > scores[n][b]; });
    sel[n].assign(order.begin(), order.begin() + K);
    for (int e : sel[n]) count[e] += 1;
  }
  // Balance loss: E · Σ_e f_e · P_e.
  std::vector<double> P(E, 0.0);
  for (int n = 0; n < N; ++n) {
    double S = s.score == MoeScore::kSoftmax ? 1.0 : 0.0;
    if (s.score == MoeScore::kSigmoid)
      for (int e = 0; e < E; ++e) S += scores[n][e];
    for (int e = 0; e < E; ++e) P[e] += scores[n][e] / S / N;
  }
  for (int e = 0; e < E; ++e) r.aux += E * (count[e] / (double(N) * K)) * P[e];

  for (int n = 0; n < N; ++n) {
    std::vector<double> xn(x.begin() + size_t(n) * C, x.begin() + size_t(n + 1) * C);
    std::vector<double> dn(dout.begin() + size_t(n) * C, dout.begin() + size_t(n + 1) * C);
    std::vector<double> dxn(C, 0.0);
    double ssum = 0;
    for (int e : sel[n]) ssum += scores[n][e];
    std::vector<double> w(K), dw(K, 0.0);
    for (int k = 0; k < K; ++k) w[k] = scores[n][sel[n][k]] / (s.renormalize ? ssum : 1.0);
    for (int k = 0; k < K; ++k) {
      const int e = sel[n][k];
      const double* gu = experts.data() + e * stride;
      const double* dw_ = gu + size_t(2) * F * C;
      std::vector<double> dy(dn);
      for (double& v : dy) v *= w[k];
      std::vector<double> y =
          naive_expert(gu, dw_, xn, C, F, &dy, &dxn, r.g.dexperts.data() + e * stride,
                       r.g.dexperts.data() + e * stride + size_t(2) * F * C);
      for (int c = 0; c < C; ++c) {
        r.out[size_t(n) * C + c] += w[k] * y[c];
        dw[k] += dn[c] * y[c];
      }
    }
    if (Fs > 0) {
      std::vector<double> y = naive_expert(sgu.data(), sdown.data(), xn, C, Fs, &dn, &dxn,
                                           r.g.dsgu.data(), r.g.dsdown.data());
      for (int c = 0; c < C; ++c) r.out[size_t(n) * C + c] += y[c];
    }
    // dscores: combine weights, then the balance loss.
    std::vector<double> ds(E, 0.0);
    double dot = 0;
    for (int k = 0; k < K; ++k) dot += dw[k] * w[k];
    for (int k = 0; k < K; ++k) ds[sel[n][k]] += s.renormalize ? (dw[k] - dot) / ssum : dw[k];
    std::vector<double> g(E);
    for (int e = 0; e < E; ++e) g[e] = aux_coef * E * (count[e] / (double(N) * K)) / N;
    if (s.score == MoeScore::kSoftmax) {
      for (int e = 0; e < E; ++e) ds[e] += g[e];
    } else {
      double S = 0, gd = 0;
      for (int e = 0; e < E; ++e) S += scores[n][e];
      for (int e = 0; e < E; ++e) gd += g[e] * scores[n][e] / S;
      for (int e = 0; e < E; ++e) ds[e] += (g[e] - gd) / S;
    }
    // dlogits: through the score function, plus the z-loss.
    std::vector<double> dl(E);
    double sd = 0;
    for (int e = 0; e < E; ++e) sd += ds[e] * scores[n][e];
    double mx = *std::max_element(logits[n].begin(), logits[n].end()), z = 0;
    for (int e = 0; e < E; ++e) z += std::exp(logits[n][e] - mx);
    const double lse = mx + std::log(z);
    for (int e = 0; e < E; ++e) {
      const double sc = scores[n][e];
      dl[e] = s.score == MoeScore::kSoftmax ? sc * (ds[e] - sd) : ds[e] * sc * (1 - sc);
      dl[e] += z_coef * 2.0 * lse * std::exp(logits[n][e] - lse) / N;
    }
    naive_mv_back(dxn, r.g.drouter.data(), router.data(), xn, dl, E, C);
    std::copy(dxn.begin(), dxn.end(), r.g.dx.begin() + size_t(n) * C);
  }
  return r;
}

}  // namespace atl::kernels::cpu::testing
