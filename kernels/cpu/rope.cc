// Rotary position embedding on adjacent pairs (x[2i], x[2i+1]) of each head, angle
// pos · base^(-2i/D) (the original RoFormer / Meta Llama layout, not the "rotate half" layout).
// Angles and their cos/sin are computed in double and rounded once to T, so float and double
// runs see the most accurate table each precision can hold.
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec_math.h"

namespace atl::kernels::cpu {

namespace {

// cos/sin tables (T_, D/2).
template <typename T>
void rope_table(std::vector<T>& cs, std::vector<T>& sn, int T_, int D, double base) {
  const int half = D / 2;
  cs.resize(size_t(T_) * half);
  sn.resize(size_t(T_) * half);
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(base, -2.0 * i / D);
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(T_) * half * 8))
  for (int t = 0; t < T_; ++t) {
    for (int i = 0; i < half; ++i) {
      const double a = double(t) * inv_freq[i];
      cs[size_t(t) * half + i] = T(std::cos(a));
      sn[size_t(t) * half + i] = T(std::sin(a));
    }
  }
}

// x (B, T_, H, D) with row_stride elements between tokens. sign = +1 rotates by +angle
// (forward), -1 by -angle (backward: the transpose of a rotation is its inverse).
template <typename T>
void rope_apply(T* x, int B, int T_, int H, int D, int row_stride, double base, T sign) {
  std::vector<T> cs, sn;
  rope_table(cs, sn, T_, D, base);
  const int half = D / 2;
  const int rows = B * T_;
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(rows) * H * D))
  for (int row = 0; row < rows; ++row) {
    const int t = row % T_;
    const T* c = cs.data() + size_t(t) * half;
    const T* s = sn.data() + size_t(t) * half;
    for (int h = 0; h < H; ++h) {
      T* xh = x + size_t(row) * row_stride + size_t(h) * D;
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const T x0 = xh[2 * i], x1 = xh[2 * i + 1];
        const T si = sign * s[i];
        xh[2 * i] = x0 * c[i] - x1 * si;
        xh[2 * i + 1] = x0 * si + x1 * c[i];
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* x, int B, int T_, int H, int D, int row_stride, double base) {
  rope_apply(x, B, T_, H, D, row_stride, base, T(1));
}

template <typename T>
void rope_backward(T* dx, int B, int T_, int H, int D, int row_stride, double base) {
  rope_apply(dx, B, T_, H, D, row_stride, base, T(-1));
}

template void rope_forward<float>(float*, int, int, int, int, int, double);
template void rope_forward<double>(double*, int, int, int, int, int, double);
template void rope_backward<float>(float*, int, int, int, int, int, double);
template void rope_backward<double>(double*, int, int, int, int, int, double);

}  // namespace atl::kernels::cpu
