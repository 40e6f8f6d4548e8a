// Token embedding lookup and its scatter-add backward.
#include <cstring>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec_math.h"

namespace atl::kernels::cpu {

// out (N, C) = table[tokens[n]]; table (V, C). Tokens must be in [0, V) (callers validate).
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* table, int N, int V, int C) {
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * C))
  for (int n = 0; n < N; ++n) {
    std::memcpy(out + size_t(n) * C, table + size_t(tokens[n]) * C, sizeof(T) * size_t(C));
  }
}

// dtable (V, C) += scatter of dout (N, C). Threads split the channels (fixed 64-wide blocks), and
// each thread walks the tokens in order, so repeated tokens add up in the same order for any
// thread count.
template <typename T>
void embedding_backward(T* dtable, const T* dout, const int32_t* tokens, int N, int V, int C) {
  constexpr int kBlock = 64;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * C))
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kBlock;
    const int c1 = c0 + kBlock < C ? c0 + kBlock : C;
    for (int n = 0; n < N; ++n) {
      T* dst = dtable + size_t(tokens[n]) * C;
      const T* src = dout + size_t(n) * C;
#pragma omp simd
      for (int c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, int, int, int);
template void embedding_forward<double>(double*, const int32_t*, const double*, int, int, int);
template void embedding_backward<float>(float*, const float*, const int32_t*, int, int, int);
template void embedding_backward<double>(double*, const double*, const int32_t*, int, int, int);

}  // namespace atl::kernels::cpu
