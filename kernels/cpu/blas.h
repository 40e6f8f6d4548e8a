// Internal: GEMM for float and double (row-major cblas), and a threaded GEMM whose result does
// not depend on the thread count.
//
// Why not OpenBLAS's own threads: OpenBLAS 0.3.21 blocks the reduction dimension differently
// when threaded (e.g. K = 520 gives different bits with 1 and 2 threads), so the op table runs
// OpenBLAS single-threaded and splits each product itself into fixed tiles of the output, one
// single-threaded GEMM per tile, tiles shared out by OpenMP. The tiling depends only on the
// shapes. One thread pool (OpenMP) also means no contention between two spinning pools.
#pragma once

#include <cblas.h>

#include "kernels/cpu/vec_math.h"

namespace atl::kernels::cpu::detail {

inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                 const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, double alpha,
                 const double* A, int lda, const double* B, int ldb, double beta, double* C,
                 int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Width of the output tiles along a split extent: about kTargetTiles tiles, a multiple of 32
// rows or columns (whole vector registers in the OpenBLAS micro-kernels), at least 64. Depends
// on the extent only, never on the thread count. Wide tiles matter: every tile is a separate
// OpenBLAS call that packs its whole other operand again, so 64-wide tiles of a (2048, 768) ·
// (768, 256) product pack the weights 32 times (about 10% slower than 256-wide tiles); eight
// tiles still share out evenly over 1, 2, 4 or 8 threads.
inline int gemm_tile_width(int extent) {
  constexpr int kTargetTiles = 8, kQuantum = 32, kMinTile = 64;
  int w = (extent + kTargetTiles - 1) / kTargetTiles;
  w = (w + kQuantum - 1) / kQuantum * kQuantum;
  return w < kMinTile ? kMinTile : w;
}

// C (M, N) = alpha · op(A) · op(B) + beta · C, row-major, threaded over fixed tiles of the larger
// of M and N (products under 2^18 multiply-adds run as one call). Each tile is one
// single-threaded GEMM over the full K, so every output element is summed in the same order
// whatever the thread count; tiles are handed out dynamically (a thread that the OS pauses on a
// busy machine does not hold the others up).
template <typename T>
void gemm_tiled(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, T alpha, const T* A,
                int lda, const T* B, int ldb, T beta, T* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  OpenBlasSingleThread blas_guard;
  const bool split_rows = M >= N;
  const int extent = split_rows ? M : N;
  const int tile = gemm_tile_width(extent);
  const int ntiles = (double(M) * N * K < double(1 << 18)) ? 1 : (extent + tile - 1) / tile;
  if (ntiles == 1) {
    gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int t = 0; t < ntiles; ++t) {
    const int i0 = t * tile;
    const int len = i0 + tile <= extent ? tile : extent - i0;
    if (split_rows) {
      // Rows i0.. of op(A) and C. op(A) row i is A + i·lda (NoTrans) or column i of A (Trans).
      const T* Ai = ta == CblasNoTrans ? A + size_t(i0) * lda : A + i0;
      gemm(ta, tb, len, N, K, alpha, Ai, lda, B, ldb, beta, C + size_t(i0) * ldc, ldc);
    } else {
      // Columns i0.. of op(B) and C. op(B) column j is column j of B (NoTrans) or row j (Trans).
      const T* Bj = tb == CblasNoTrans ? B + i0 : B + size_t(i0) * ldb;
      gemm(ta, tb, M, len, K, alpha, A, lda, Bj, ldb, beta, C + i0, ldc);
    }
  }
}

}  // namespace atl::kernels::cpu::detail
