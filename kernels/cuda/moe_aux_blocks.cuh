// Per-token and per-expert pieces of the router-loss kernels (moe_aux.cu), __host__ __device__:
// the kernels run them on the GPU, and tests/cuda/moe_aux_host_test.cu runs the very same
// functions on the host against the CPU ops (kernels/cpu/moe_ops.h moe_aux_loss_* and
// moe_z_loss_*), so the formulas are checked on any machine. Doubles throughout; a product added
// to a sum is rounded on its own (no FMA) on both sides (host code must be built with
// -ffp-contract=off).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace atl::kernels::cuda::moe_aux {

#define ATL_AUX_HD __host__ __device__ inline

#if defined(__CUDA_ARCH__)
ATL_AUX_HD double d_add(double a, double b) {
  return __dadd_rn(a, b);
}
ATL_AUX_HD double d_mul(double a, double b) {
  return __dmul_rn(a, b);
}
#else
ATL_AUX_HD double d_add(double a, double b) {
  return a + b;
}
ATL_AUX_HD double d_mul(double a, double b) {
  return a * b;
}
#endif

// 1 / (row normalizer of the balance loss's probabilities): 1 for softmax scores, 1 / Σ_e s[e]
// (increasing e) for sigmoid scores (the CPU's prob_norm).
ATL_AUX_HD double inv_row_norm(const float* s, int E, bool sigmoid) {
  if (!sigmoid) return 1.0;
  double S = 0.0;
  for (int e = 0; e < E; ++e) S = d_add(S, double(s[e]));
  return 1.0 / S;
}

// Σ_{n in [n0, n1)} s[n, e] · inv[n], n increasing.
ATL_AUX_HD double prob_sum(const float* scores, const double* inv, int n0, int n1, int E, int e) {
  double acc = 0.0;
  for (int n = n0; n < n1; ++n) acc = d_add(acc, d_mul(double(scores[size_t(n) * E + e]), inv[n]));
  return acc;
}

// L_aux = E · Σ_e f_e · (psum_e / N), f_e = (offsets[e+1] − offsets[e]) / (N·K), e increasing.
ATL_AUX_HD double balance_loss(const double* psum, const int32_t* offsets, int N, int E, int K) {
  const double inv = 1.0 / (double(N) * K);
  double l = 0.0;
  for (int e = 0; e < E; ++e) {
    const double f = double(offsets[e + 1] - offsets[e]) * inv;
    l = d_add(l, d_mul(f, psum[e] / N));
  }
  return E * l;
}

// Token row: ds (E) += dloss · ∂L_aux/∂s. g_e = dloss · E · f_e / N; softmax: ds += g; sigmoid
// (p = s / S): ds_j += (g_j − Σ_e g_e · p_e) / S.
ATL_AUX_HD void balance_backward_row(float* ds, const float* s, const int32_t* offsets, int N,
                                     int E, int K, bool sigmoid, double dloss) {
  const double inv = 1.0 / (double(N) * K);
  auto g = [&](int e) {
    const double f = double(offsets[e + 1] - offsets[e]) * inv;
    return dloss * E * f / N;
  };
  if (!sigmoid) {
    for (int e = 0; e < E; ++e) ds[e] += float(g(e));
    return;
  }
  double S = 0.0;
  for (int e = 0; e < E; ++e) S = d_add(S, double(s[e]));
  double dot = 0.0;
  for (int e = 0; e < E; ++e) dot = d_add(dot, d_mul(g(e), double(s[e]) / S));
  for (int e = 0; e < E; ++e) ds[e] += float((g(e) - dot) / S);
}

// logsumexp of one row in double (the CPU's row_lse: max, then Σ exp in increasing e).
ATL_AUX_HD double row_lse(const float* l, int E) {
  double mx = l[0];
  for (int e = 1; e < E; ++e) mx = double(l[e]) > mx ? double(l[e]) : mx;
  double sum = 0.0;
  for (int e = 0; e < E; ++e) sum = d_add(sum, exp(double(l[e]) - mx));
  return mx + log(sum);
}

// Token row: dl (E) += dloss · (2/N) · lse · softmax(l).
ATL_AUX_HD void z_backward_row(float* dl, const float* l, int N, int E, double dloss) {
  const double lse = row_lse(l, E);
  const double scale = dloss * 2.0 * lse / N;
  for (int e = 0; e < E; ++e) dl[e] += float(scale * exp(double(l[e]) - lse));
}

#undef ATL_AUX_HD

}  // namespace atl::kernels::cuda::moe_aux
