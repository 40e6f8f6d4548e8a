// Elementwise ops: SwiGLU gate, the residual add and clearing a buffer.
#include <cstddef>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec_math.h"

namespace atl::kernels::cpu {

// gu (N, 2F) = gate | up per row ; out (N, F) = silu(gate) · up, silu(g) = g / (1 + e^-g)
// (PyTorch's formula).
template <typename T>
void swiglu_forward(T* out, const T* gu, int N, int F) {
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * F * 8))
  for (int n = 0; n < N; ++n) {
    const T* g = gu + size_t(n) * 2 * F;
    const T* u = g + F;
    T* o = out + size_t(n) * F;
#pragma omp simd
    for (int f = 0; f < F; ++f) o[f] = (g[f] / (T(1) + detail::exp_vec(-g[f]))) * u[f];
  }
}

// With s = sigmoid(g): dgate += dout · up · s·(1 + g·(1 − s)) ; dup += dout · g·s.
template <typename T>
void swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F) {
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * F * 8))
  for (int n = 0; n < N; ++n) {
    const T* g = gu + size_t(n) * 2 * F;
    const T* u = g + F;
    const T* d = dout + size_t(n) * F;
    T* dg = dgu + size_t(n) * 2 * F;
    T* du = dg + F;
#pragma omp simd
    for (int f = 0; f < F; ++f) {
      const T s = T(1) / (T(1) + detail::exp_vec(-g[f]));
      dg[f] += d[f] * u[f] * (s * (T(1) + g[f] * (T(1) - s)));
      du[f] += d[f] * (g[f] * s);
    }
  }
}

// out (n) = a + b ; out may alias a or b.
template <typename T>
void add_forward(T* out, const T* a, const T* b, size_t n) {
  const long long nn = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static) if (detail::worth_threads(double(n) * 4))
  for (long long i = 0; i < nn; ++i) out[i] = a[i] + b[i];
}

// out (n) = 0. Threads clear contiguous ranges (a serial memset of the (N, 2F) SwiGLU gradient
// would leave the other threads idle).
template <typename T>
void zero_fill(T* out, size_t n) {
  const long long nn = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static) if (detail::worth_threads(double(n) * 4))
  for (long long i = 0; i < nn; ++i) out[i] = T(0);
}

template void swiglu_forward<float>(float*, const float*, int, int);
template void swiglu_forward<double>(double*, const double*, int, int);
template void swiglu_backward<float>(float*, const float*, const float*, int, int);
template void swiglu_backward<double>(double*, const double*, const double*, int, int);
template void add_forward<float>(float*, const float*, const float*, size_t);
template void add_forward<double>(double*, const double*, const double*, size_t);
template void zero_fill<float>(float*, size_t);
template void zero_fill<double>(double*, size_t);

}  // namespace atl::kernels::cpu
