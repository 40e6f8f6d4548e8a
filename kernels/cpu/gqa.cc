// Grouped-query attention's repeat_kv and the bias of a linear layer (ops.h). Both are pure data
// movement / sums; threads split over rows (forward) or output columns (bias backward), every
// reduction runs in a fixed order, so results do not depend on the thread count.
#include <cstddef>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec_math.h"

namespace atl::kernels::cpu {

template <typename T>
void repeat_kv_forward(T* full, const T* qkv, int N, int H, int KV, int D) {
  const size_t C = size_t(H) * D, Ckv = size_t(KV) * D, in_row = C + 2 * Ckv, out_row = 3 * C;
  const int group = H / KV;
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * 3 * C))
  for (int n = 0; n < N; ++n) {
    const T* src = qkv + size_t(n) * in_row;
    T* dst = full + size_t(n) * out_row;
    for (size_t i = 0; i < C; ++i) dst[i] = src[i];  // q as is
    for (int part = 0; part < 2; ++part) {           // k, then v
      const T* s = src + C + size_t(part) * Ckv;
      T* d = dst + C + size_t(part) * C;
      for (int h = 0; h < H; ++h) {
        const T* head = s + size_t(h / group) * D;
        for (int j = 0; j < D; ++j) d[size_t(h) * D + j] = head[j];
      }
    }
  }
}

template <typename T>
void repeat_kv_backward(T* dqkv, const T* dfull, int N, int H, int KV, int D) {
  const size_t C = size_t(H) * D, Ckv = size_t(KV) * D, out_row = C + 2 * Ckv, in_row = 3 * C;
  const int group = H / KV;
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * 3 * C))
  for (int n = 0; n < N; ++n) {
    const T* src = dfull + size_t(n) * in_row;
    T* dst = dqkv + size_t(n) * out_row;
    for (size_t i = 0; i < C; ++i) dst[i] += src[i];
    for (int part = 0; part < 2; ++part) {
      const T* s = src + C + size_t(part) * C;
      T* d = dst + C + size_t(part) * Ckv;
      for (int kv = 0; kv < KV; ++kv)
        for (int j = 0; j < D; ++j) {
          T acc = T(0);  // the group's query heads in order
          for (int g = 0; g < group; ++g) acc += s[size_t(kv * group + g) * D + j];
          d[size_t(kv) * D + j] += acc;
        }
    }
  }
}

template <typename T>
void bias_forward(T* out, const T* b, int N, int OC) {
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * OC))
  for (int n = 0; n < N; ++n) {
    T* o = out + size_t(n) * OC;
#pragma omp simd
    for (int j = 0; j < OC; ++j) o[j] += b[j];
  }
}

template <typename T>
void bias_backward(T* db, const T* dout, int N, int OC) {
  // Blocks of columns per thread; within a column the rows are summed in order.
  constexpr int kCols = 64;
  const int blocks = (OC + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(N) * OC))
  for (int blk = 0; blk < blocks; ++blk) {
    const int j0 = blk * kCols, j1 = j0 + kCols < OC ? j0 + kCols : OC;
    T acc[kCols] = {};
    for (int n = 0; n < N; ++n) {
      const T* d = dout + size_t(n) * OC;
      for (int j = j0; j < j1; ++j) acc[j - j0] += d[j];
    }
    for (int j = j0; j < j1; ++j) db[j] += acc[j - j0];
  }
}

template void repeat_kv_forward<float>(float*, const float*, int, int, int, int);
template void repeat_kv_forward<double>(double*, const double*, int, int, int, int);
template void repeat_kv_backward<float>(float*, const float*, int, int, int, int);
template void repeat_kv_backward<double>(double*, const double*, int, int, int, int);
template void bias_forward<float>(float*, const float*, int, int);
template void bias_forward<double>(double*, const double*, int, int);
template void bias_backward<float>(float*, const float*, int, int);
template void bias_backward<double>(double*, const double*, int, int);

}  // namespace atl::kernels::cpu
