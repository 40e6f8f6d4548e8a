// Causal multi-head self-attention, materialized (B, H, T, T) probabilities.
//
// Per (batch, head), queries are processed in blocks of kQueryBlock rows; a block only meets the
// keys at or before its last row, so the upper triangle is (mostly) never computed. The block
// products are OpenBLAS GEMMs reading q, k, v where they lie inside qkv (leading dimension 3C).
// Threads split the (batch, head) pairs, which own disjoint parts of every output, and OpenBLAS
// runs single-threaded inside. Every sum runs in a fixed order: identical bits for any thread
// count. Pairs are handed out dynamically: which thread computes a pair does not change its
// bits, and a thread paused by the OS on a busy machine does not hold the others up.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec_math.h"

namespace atl::kernels::cpu {

namespace {
constexpr int kQueryBlock = 64;
using detail::gemm;

// Softmax in place over row[0, n); row[n, len) is set to 0 (masked future positions).
template <typename T>
void causal_softmax_row(T* row, int n, int len) {
  T mx = row[0];
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < n; ++j) mx = std::max(mx, row[j]);
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    const T e = detail::exp_vec(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  const T inv = T(1) / sum;
#pragma omp simd
  for (int j = 0; j < n; ++j) row[j] *= inv;
  std::fill(row + n, row + len, T(0));
}
}  // namespace

// qkv (B, T, 3C) = q | k | v, C = H·D ; out (B, T, C) ; att (B, H, T, T).
// att[b,h,t,:] = softmax_j≤t(q_t·k_j / sqrt(D)), zeros for j > t ; out_t = Σ_j att[t,j] v_j.
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int H, int D) {
  const int C = H * D, C3 = 3 * C;
  const T scale = T(1) / std::sqrt(T(D));
  const bool par = B * H > 1 && detail::worth_threads(double(B) * H * T_ * T_ * D);
  detail::OpenBlasSingleThread blas_guard;
#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (int bh = 0; bh < B * H; ++bh) {
    const int b = bh / H, h = bh % H;
    const T* q = qkv + size_t(b) * T_ * C3 + size_t(h) * D;
    const T* k = q + C;
    const T* v = q + 2 * C;
    T* o = out + size_t(b) * T_ * C + size_t(h) * D;
    T* a = att + size_t(bh) * T_ * T_;
    for (int r0 = 0; r0 < T_; r0 += kQueryBlock) {
      const int M = std::min(kQueryBlock, T_ - r0);
      const int nk = r0 + M;  // keys 0 .. nk-1 are visible to some row of this block
      T* ab = a + size_t(r0) * T_;
      gemm(CblasNoTrans, CblasTrans, M, nk, D, scale, q + size_t(r0) * C3, C3, k, C3, T(0), ab, T_);
      for (int i = 0; i < M; ++i) causal_softmax_row(ab + size_t(i) * T_, r0 + i + 1, T_);
      gemm(CblasNoTrans, CblasNoTrans, M, D, nk, T(1), ab, T_, v, C3, T(0), o + size_t(r0) * C, C);
    }
  }
}

// With P = att, dP = dO·Vᵀ, dS = P ⊙ (dP − rowsum(P ⊙ dP)):
// dQ += scale·dS·K ; dK += scale·dSᵀ·Q ; dV += Pᵀ·dO. dqkv (B, T, 3C) accumulates.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int T_, int H,
                        int D) {
  const int C = H * D, C3 = 3 * C;
  const T scale = T(1) / std::sqrt(T(D));
  const bool par = B * H > 1 && detail::worth_threads(double(B) * H * T_ * T_ * D);
  detail::OpenBlasSingleThread blas_guard;
#pragma omp parallel if (par)
  {
    std::vector<T> ds(size_t(std::min(kQueryBlock, T_)) * T_);  // dS block (M, nk), ld nk
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * H; ++bh) {
      const int b = bh / H, h = bh % H;
      const size_t base = size_t(b) * T_ * C3 + size_t(h) * D;
      const T* q = qkv + base;
      const T* k = q + C;
      const T* v = q + 2 * C;
      T* dq = dqkv + base;
      T* dk = dq + C;
      T* dv = dq + 2 * C;
      const T* dO = dout + size_t(b) * T_ * C + size_t(h) * D;
      const T* a = att + size_t(bh) * T_ * T_;
      for (int r0 = 0; r0 < T_; r0 += kQueryBlock) {
        const int M = std::min(kQueryBlock, T_ - r0);
        const int nk = r0 + M;
        const T* P = a + size_t(r0) * T_;
        const T* dOb = dO + size_t(r0) * C;
        T* S = ds.data();
        gemm(CblasNoTrans, CblasTrans, M, nk, D, T(1), dOb, C, v, C3, T(0), S, nk);
        for (int i = 0; i < M; ++i) {
          const int n = r0 + i + 1;
          const T* p = P + size_t(i) * T_;
          T* s = S + size_t(i) * nk;
          T dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int j = 0; j < n; ++j) dot += p[j] * s[j];
#pragma omp simd
          for (int j = 0; j < n; ++j) s[j] = p[j] * (s[j] - dot);
          std::fill(s + n, s + nk, T(0));
        }
        gemm(CblasNoTrans, CblasNoTrans, M, D, nk, scale, S, nk, k, C3, T(1), dq + size_t(r0) * C3,
             C3);
        gemm(CblasTrans, CblasNoTrans, nk, D, M, scale, S, nk, q + size_t(r0) * C3, C3, T(1), dk,
             C3);
        gemm(CblasTrans, CblasNoTrans, nk, D, M, T(1), P, T_, dOb, C, T(1), dv, C3);
      }
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, const float*, int, int,
                                        int, int);
template void attention_backward<double>(double*, const double*, const double*, const double*, int,
                                         int, int, int);

}  // namespace atl::kernels::cpu
