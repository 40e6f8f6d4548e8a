// RMSNorm (Llama): out = x * rstd * w with rstd = 1/sqrt(mean(x²) + eps), per row.
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec_math.h"

namespace atl::kernels::cpu {

// x, out (N, C); w (C); rstd (N) saved for backward. Rows are independent: threads split rows.
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int N, int C, double eps) {
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * C))
  for (int n = 0; n < N; ++n) {
    const T* xr = x + size_t(n) * C;
    T* yr = out + size_t(n) * C;
    T ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += xr[c] * xr[c];
    // Same order as PyTorch's x * rsqrt(mean(x²) + eps) * w.
    const T r = T(1) / std::sqrt(ss / T(C) + T(eps));
    rstd[n] = r;
#pragma omp simd
    for (int c = 0; c < C; ++c) yr[c] = (xr[c] * r) * w[c];
  }
}

// With g = dout ⊙ w and r = rstd:  dx = r·g − (r³/C)·x·Σ(g⊙x) ;  dw = Σ_n dout ⊙ x·r.
// dx: threads split rows. dw: threads split channels (fixed 64-wide blocks) and each sums the
// rows in order into a local buffer, then adds once; same bits for any thread count.
template <typename T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd, int N,
                      int C) {
  const bool par = detail::worth_threads(double(N) * C);
  if (dx != nullptr) {
#pragma omp parallel for schedule(static) if (par)
    for (int n = 0; n < N; ++n) {
      const T* xr = x + size_t(n) * C;
      const T* gr = dout + size_t(n) * C;
      T* dxr = dx + size_t(n) * C;
      const T r = rstd[n];
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; ++c) dot += gr[c] * w[c] * xr[c];
      const T k = r * r * r * dot / T(C);
#pragma omp simd
      for (int c = 0; c < C; ++c) dxr[c] += r * (gr[c] * w[c]) - k * xr[c];
    }
  }
  if (dw != nullptr) {
    constexpr int kBlock = 64;
    const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (par)
    for (int blk = 0; blk < nblocks; ++blk) {
      const int c0 = blk * kBlock;
      const int len = c0 + kBlock < C ? kBlock : C - c0;
      T acc[kBlock] = {};
      for (int n = 0; n < N; ++n) {
        const T* xr = x + size_t(n) * C + c0;
        const T* gr = dout + size_t(n) * C + c0;
        const T r = rstd[n];
#pragma omp simd
        for (int c = 0; c < len; ++c) acc[c] += gr[c] * (xr[c] * r);
      }
      for (int c = 0; c < len; ++c) dw[c0 + c] += acc[c];
    }
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int, int, double);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int, int,
                                      double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int, int);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int, int);

}  // namespace atl::kernels::cpu
