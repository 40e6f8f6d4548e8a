// Mixture-of-Experts ops (moe_ops.h): router scores, top-k, dropless permutation, grouped GEMM,
// weighted combine and the router's auxiliary losses. Threads split tokens (or experts' GEMM
// tiles); every sum runs in a fixed order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/cpu/moe_ops.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec_math.h"

namespace atl::kernels::cpu {

// ---- scores ------------------------------------------------------------------------------------

template <typename T>
void moe_scores_forward(T* scores, const T* logits, int N, int E, MoeScore fn) {
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * E * 16))
  for (int n = 0; n < N; ++n) {
    const T* l = logits + size_t(n) * E;
    T* s = scores + size_t(n) * E;
    if (fn == MoeScore::kSigmoid) {
      for (int e = 0; e < E; ++e) s[e] = T(1) / (T(1) + std::exp(-l[e]));
      continue;
    }
    T mx = l[0];
    for (int e = 1; e < E; ++e) mx = l[e] > mx ? l[e] : mx;
    T sum = 0;
    for (int e = 0; e < E; ++e) sum += s[e] = std::exp(l[e] - mx);
    const T inv = T(1) / sum;
    for (int e = 0; e < E; ++e) s[e] *= inv;
  }
}

// softmax: dl = s ⊙ (ds − <ds, s>) ; sigmoid: dl = ds · s·(1 − s).
template <typename T>
void moe_scores_backward(T* dlogits, const T* dscores, const T* scores, int N, int E, MoeScore fn) {
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * E * 8))
  for (int n = 0; n < N; ++n) {
    const T* ds = dscores + size_t(n) * E;
    const T* s = scores + size_t(n) * E;
    T* dl = dlogits + size_t(n) * E;
    if (fn == MoeScore::kSigmoid) {
      for (int e = 0; e < E; ++e) dl[e] += ds[e] * (s[e] * (T(1) - s[e]));
      continue;
    }
    T dot = 0;
    for (int e = 0; e < E; ++e) dot += ds[e] * s[e];
    for (int e = 0; e < E; ++e) dl[e] += s[e] * (ds[e] - dot);
  }
}

// ---- top-k -------------------------------------------------------------------------------------

template <typename T>
void moe_topk_forward(int32_t* idx, T* w, const T* scores, int N, int E, int K, bool renormalize) {
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * E * K))
  for (int n = 0; n < N; ++n) {
    const T* s = scores + size_t(n) * E;
    int32_t* id = idx + size_t(n) * K;
    T* wn = w + size_t(n) * K;
    // K selection passes over E. Ascending e with a strict '>' keeps the lower id on ties; an
    // expert already taken is skipped, by a bit per expert (a scan of the taken ids made large
    // E = K cost K²·E a token: 330 ms at E = K = 256).
    constexpr int kStackWords = 64;  // 4096 experts
    const int words = (E + 63) / 64;
    uint64_t stack_bits[kStackWords];
    std::vector<uint64_t> heap_bits;
    uint64_t* bits = stack_bits;
    if (words > kStackWords) {
      heap_bits.assign(size_t(words), 0);
      bits = heap_bits.data();
    } else {
      std::fill(bits, bits + words, uint64_t(0));
    }
    T sum = 0;
    for (int k = 0; k < K; ++k) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        if ((bits[e >> 6] >> (e & 63)) & 1u) continue;
        if (best < 0 || s[e] > s[best]) best = e;
      }
      id[k] = best;
      bits[best >> 6] |= uint64_t(1) << (best & 63);
      wn[k] = s[best];
      sum += s[best];
    }
    if (renormalize) {
      const T inv = T(1) / sum;
      for (int k = 0; k < K; ++k) wn[k] *= inv;
    }
  }
}

// renormalized: w_k = s_k / S, S = Σ_j s_j over the selected, so
//   ∂L/∂s_j = (dw_j − Σ_k dw_k · w_k) / S.
template <typename T>
void moe_topk_backward(T* dscores, const T* dw, const T* scores, const int32_t* idx, int N, int E,
                       int K, bool renormalize) {
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * K * 8))
  for (int n = 0; n < N; ++n) {
    const T* s = scores + size_t(n) * E;
    const int32_t* id = idx + size_t(n) * K;
    const T* d = dw + size_t(n) * K;
    T* ds = dscores + size_t(n) * E;
    if (!renormalize) {
      for (int k = 0; k < K; ++k) ds[id[k]] += d[k];
      continue;
    }
    T sum = 0;
    for (int k = 0; k < K; ++k) sum += s[id[k]];
    const T inv = T(1) / sum;
    T dot = 0;
    for (int k = 0; k < K; ++k) dot += d[k] * (s[id[k]] * inv);
    for (int k = 0; k < K; ++k) ds[id[k]] += (d[k] - dot) * inv;
  }
}

// ---- dropless routing plan ---------------------------------------------------------------------

void moe_plan(MoePlan& p, const int32_t* idx, int N, int E, int K) {
  p.N = N;
  p.E = E;
  p.K = K;
  const size_t M = size_t(N) * K;
  p.offsets.assign(size_t(E) + 1, 0);
  p.row_token.resize(M);
  p.slot.resize(M);
  for (size_t i = 0; i < M; ++i) {
    ATOLL_CHECK(idx[i] >= 0 && idx[i] < E,
                "moe_plan: expert id " + std::to_string(idx[i]) + " out of range");
    ++p.offsets[size_t(idx[i]) + 1];
  }
  for (int e = 0; e < E; ++e) p.offsets[e + 1] += p.offsets[e];
  // Counting sort in token order: stable, so each group lists its tokens in increasing order.
  std::vector<int32_t> next(p.offsets.begin(), p.offsets.end() - 1);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      const int32_t r = next[idx[size_t(n) * K + k]]++;
      p.row_token[r] = n;
      p.slot[size_t(n) * K + k] = r;
    }
}

// ---- gather / scatter --------------------------------------------------------------------------

template <typename T>
void moe_gather_forward(T* xp, const T* x, const MoePlan& p, int C) {
  const int M = p.N * p.K;
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(M) * C))
  for (int r = 0; r < M; ++r) {
    const T* src = x + size_t(p.row_token[r]) * C;
    T* dst = xp + size_t(r) * C;
    for (int c = 0; c < C; ++c) dst[c] = src[c];
  }
}

template <typename T>
void moe_gather_backward(T* dx, const T* dxp, const MoePlan& p, int C) {
  const int N = p.N, K = p.K;
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * K * C))
  for (int n = 0; n < N; ++n) {
    T* d = dx + size_t(n) * C;
    for (int k = 0; k < K; ++k) {
      const T* src = dxp + size_t(p.slot[size_t(n) * K + k]) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) d[c] += src[c];
    }
  }
}

// ---- grouped GEMM ------------------------------------------------------------------------------

template <typename T>
void moe_grouped_matmul_forward(T* out, const T* x, const T* w, size_t w_stride, const MoePlan& p,
                                int IC, int OC) {
  for (int e = 0; e < p.E; ++e) {
    const int r0 = p.offsets[e], rows = p.offsets[e + 1] - r0;
    if (rows == 0) continue;
    matmul_forward(out + size_t(r0) * OC, x + size_t(r0) * IC, w + size_t(e) * w_stride, rows, IC,
                   OC);
  }
}

template <typename T>
void moe_grouped_matmul_backward(T* dx, T* dw, const T* dout, const T* x, const T* w,
                                 size_t w_stride, const MoePlan& p, int IC, int OC) {
  for (int e = 0; e < p.E; ++e) {
    const int r0 = p.offsets[e], rows = p.offsets[e + 1] - r0;
    if (rows == 0) continue;
    matmul_backward(dx ? dx + size_t(r0) * IC : nullptr, dw ? dw + size_t(e) * w_stride : nullptr,
                    dout + size_t(r0) * OC, x + size_t(r0) * IC, w + size_t(e) * w_stride, rows, IC,
                    OC);
  }
}

// ---- combine -----------------------------------------------------------------------------------

template <typename T>
void moe_combine_forward(T* out, const T* yp, const T* w, const MoePlan& p, int C) {
  const int N = p.N, K = p.K;
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * K * C * 2))
  for (int n = 0; n < N; ++n) {
    T* o = out + size_t(n) * C;
    for (int c = 0; c < C; ++c) o[c] = T(0);
    for (int k = 0; k < K; ++k) {
      const T wk = w[size_t(n) * K + k];
      const T* y = yp + size_t(p.slot[size_t(n) * K + k]) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] += wk * y[c];
    }
  }
}

template <typename T>
void moe_combine_backward(T* dyp, T* dw, const T* dout, const T* yp, const T* w, const MoePlan& p,
                          int C) {
  const int N = p.N, K = p.K;
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * K * C * 4))
  for (int n = 0; n < N; ++n) {
    const T* d = dout + size_t(n) * C;
    for (int k = 0; k < K; ++k) {
      const size_t r = size_t(p.slot[size_t(n) * K + k]);
      const T* y = yp + r * C;
      if (dw != nullptr) {
        T acc = 0;
        for (int c = 0; c < C; ++c) acc += d[c] * y[c];
        dw[size_t(n) * K + k] += acc;
      }
      if (dyp != nullptr) {
        const T wk = w[size_t(n) * K + k];
        T* dy = dyp + r * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) dy[c] += wk * d[c];
      }
    }
  }
}

// ---- auxiliary losses --------------------------------------------------------------------------

namespace {
// Row normalizer of the probabilities the balance loss uses: 1 for softmax scores (they already
// sum to 1), Σ_e s[n, e] for sigmoid scores. In double.
template <typename T>
double prob_norm(const T* s, int E, MoeScore fn) {
  if (fn == MoeScore::kSoftmax) return 1.0;
  double sum = 0;
  for (int e = 0; e < E; ++e) sum += s[e];
  return sum;
}
// f_e = assignments to e / (N·K), from the plan's group sizes.
std::vector<double> expert_fraction(const MoePlan& p) {
  std::vector<double> f(p.E);
  const double inv = 1.0 / (double(p.N) * p.K);
  for (int e = 0; e < p.E; ++e) f[e] = double(p.offsets[e + 1] - p.offsets[e]) * inv;
  return f;
}
}  // namespace

template <typename T>
double moe_aux_loss_forward(const T* scores, const MoePlan& p, MoeScore fn) {
  const int N = p.N, E = p.E;
  if (N == 0) return 0.0;
  const std::vector<double> f = expert_fraction(p);
  std::vector<double> P(E, 0.0);
  for (int n = 0; n < N; ++n) {  // serial, token order: deterministic
    const T* s = scores + size_t(n) * E;
    const double inv = 1.0 / prob_norm(s, E, fn);
    for (int e = 0; e < E; ++e) P[e] += double(s[e]) * inv;
  }
  double loss = 0;
  for (int e = 0; e < E; ++e) loss += f[e] * (P[e] / N);
  return E * loss;
}

// g_e = dloss · E · f_e / N = ∂L/∂p[n, e] for every n. Softmax: ds += g. Sigmoid, p = s / S_n:
// ds_j += (g_j − Σ_e g_e · p_e) / S_n.
template <typename T>
void moe_aux_loss_backward(T* dscores, const T* scores, const MoePlan& p, MoeScore fn,
                           double dloss) {
  const int N = p.N, E = p.E;
  if (N == 0) return;
  const std::vector<double> f = expert_fraction(p);
  std::vector<double> g(E);
  for (int e = 0; e < E; ++e) g[e] = dloss * E * f[e] / N;
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * E * 8))
  for (int n = 0; n < N; ++n) {
    const T* s = scores + size_t(n) * E;
    T* ds = dscores + size_t(n) * E;
    if (fn == MoeScore::kSoftmax) {
      for (int e = 0; e < E; ++e) ds[e] += T(g[e]);
      continue;
    }
    const double S = prob_norm(s, E, fn);
    double dot = 0;
    for (int e = 0; e < E; ++e) dot += g[e] * (double(s[e]) / S);
    for (int e = 0; e < E; ++e) ds[e] += T((g[e] - dot) / S);
  }
}

namespace {
template <typename T>
double row_lse(const T* l, int E) {
  double mx = l[0];
  for (int e = 1; e < E; ++e) mx = l[e] > mx ? double(l[e]) : mx;
  double sum = 0;
  for (int e = 0; e < E; ++e) sum += std::exp(double(l[e]) - mx);
  return mx + std::log(sum);
}
}  // namespace

template <typename T>
double moe_z_loss_forward(const T* logits, int N, int E) {
  if (N == 0) return 0.0;
  double sum = 0;
  for (int n = 0; n < N; ++n) {
    const double lse = row_lse(logits + size_t(n) * E, E);
    sum += lse * lse;
  }
  return sum / N;
}

template <typename T>
void moe_z_loss_backward(T* dlogits, const T* logits, int N, int E, double dloss) {
  if (N == 0) return;
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * E * 16))
  for (int n = 0; n < N; ++n) {
    const T* l = logits + size_t(n) * E;
    T* dl = dlogits + size_t(n) * E;
    const double lse = row_lse(l, E);
    const double scale = dloss * 2.0 * lse / N;
    for (int e = 0; e < E; ++e) dl[e] += T(scale * std::exp(double(l[e]) - lse));
  }
}

// ---- instantiations ----------------------------------------------------------------------------

#define ATOLL_MOE_INSTANTIATE(T)                                                                   \
  template void moe_scores_forward<T>(T*, const T*, int, int, MoeScore);                           \
  template void moe_scores_backward<T>(T*, const T*, const T*, int, int, MoeScore);                \
  template void moe_topk_forward<T>(int32_t*, T*, const T*, int, int, int, bool);                  \
  template void moe_topk_backward<T>(T*, const T*, const T*, const int32_t*, int, int, int, bool); \
  template void moe_gather_forward<T>(T*, const T*, const MoePlan&, int);                          \
  template void moe_gather_backward<T>(T*, const T*, const MoePlan&, int);                         \
  template void moe_grouped_matmul_forward<T>(T*, const T*, const T*, size_t, const MoePlan&, int, \
                                              int);                                                \
  template void moe_grouped_matmul_backward<T>(T*, T*, const T*, const T*, const T*, size_t,       \
                                               const MoePlan&, int, int);                          \
  template void moe_combine_forward<T>(T*, const T*, const T*, const MoePlan&, int);               \
  template void moe_combine_backward<T>(T*, T*, const T*, const T*, const T*, const MoePlan&,      \
                                        int);                                                      \
  template double moe_aux_loss_forward<T>(const T*, const MoePlan&, MoeScore);                     \
  template void moe_aux_loss_backward<T>(T*, const T*, const MoePlan&, MoeScore, double);          \
  template double moe_z_loss_forward<T>(const T*, int, int);                                       \
  template void moe_z_loss_backward<T>(T*, const T*, int, int, double);

ATOLL_MOE_INSTANTIATE(float)
ATOLL_MOE_INSTANTIATE(double)
#undef ATOLL_MOE_INSTANTIATE

}  // namespace atl::kernels::cpu
