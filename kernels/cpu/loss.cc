// Fused softmax + cross-entropy over the vocabulary (one pass family per row, no (N, V)
// probability buffer besides the optional gradient, which may overwrite the logits).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec_math.h"

namespace atl::kernels::cpu {

// logits (N, V) ; targets (N) in [0, V) or -1 ; losses (N) = logsumexp(row) − row[target]
// (0 for ignored rows). dlogits (N, V), if given, = dloss · (softmax(row) − onehot(target)),
// 0 for ignored rows; it may alias logits: each row's target logit is read before the row is
// overwritten, and every later write reads only the same element.
template <typename T>
void softmax_xent(T* losses, T* dlogits, const T* logits, const int32_t* targets, int N, int V,
                  double dloss) {
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * V * 8))
  for (int n = 0; n < N; ++n) {
    const T* x = logits + size_t(n) * V;
    T* d = dlogits != nullptr ? dlogits + size_t(n) * V : nullptr;
    const int32_t tgt = targets[n];
    if (tgt < 0) {
      losses[n] = T(0);
      if (d != nullptr) std::fill(d, d + V, T(0));
      continue;
    }
    const T xt = x[tgt];
    T mx = x[0];
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V; ++j) mx = std::max(mx, x[j]);
    T sum = 0;
    if (d != nullptr) {
      // Keep e^(x − max) in the gradient row (safe when d == x: same element).
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < V; ++j) {
        const T e = detail::exp_vec(x[j] - mx);
        d[j] = e;
        sum += e;
      }
      const T dl = T(dloss);
#pragma omp simd
      for (int j = 0; j < V; ++j) d[j] = dl * (d[j] / sum - (j == tgt ? T(1) : T(0)));
    } else {
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < V; ++j) sum += detail::exp_vec(x[j] - mx);
    }
    losses[n] = (mx - xt) + std::log(sum);
  }
}

template void softmax_xent<float>(float*, float*, const float*, const int32_t*, int, int, double);
template void softmax_xent<double>(double*, double*, const double*, const int32_t*, int, int,
                                   double);

}  // namespace atl::kernels::cpu
