// Linear layer without bias through OpenBLAS GEMM. Weights are (OC, IC) as in PyTorch.
// Threaded over fixed output tiles (see blas.h): results do not depend on the thread count.
#include "kernels/cpu/blas.h"
#include "kernels/cpu/ops.h"

namespace atl::kernels::cpu {

using detail::gemm_tiled;

// out (N, OC) = x (N, IC) · w (OC, IC)ᵀ
template <typename T>
void matmul_forward(T* out, const T* x, const T* w, int N, int IC, int OC) {
  if (N == 0 || OC == 0) return;
  gemm_tiled(CblasNoTrans, CblasTrans, N, OC, IC, T(1), x, IC, w, IC, T(0), out, OC);
}

// dx (N, IC) += dout (N, OC) · w (OC, IC) ; dw (OC, IC) += doutᵀ · x (N, IC)
template <typename T>
void matmul_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, int N, int IC, int OC) {
  if (N == 0 || OC == 0 || IC == 0) return;
  if (dx != nullptr) {
    gemm_tiled(CblasNoTrans, CblasNoTrans, N, IC, OC, T(1), dout, OC, w, IC, T(1), dx, IC);
  }
  if (dw != nullptr) {
    gemm_tiled(CblasTrans, CblasNoTrans, OC, IC, N, T(1), dout, OC, x, IC, T(1), dw, IC);
  }
}

template void matmul_forward<float>(float*, const float*, const float*, int, int, int);
template void matmul_forward<double>(double*, const double*, const double*, int, int, int);
template void matmul_backward<float>(float*, float*, const float*, const float*, const float*, int,
                                     int, int);
template void matmul_backward<double>(double*, double*, const double*, const double*, const double*,
                                      int, int, int);

}  // namespace atl::kernels::cpu
