// The machine's own single-precision GEMM rate: the yardstick of the training benchmark's
// "fraction of peak".
#pragma once

namespace atl::measure {

// GFLOP/s of an n×n×n sgemm (OpenBLAS with `threads` threads, 0 = all cores, on one square
// product): the fastest of the products run in at least min_seconds, after a warm-up product.
// Leaves OpenBLAS single-threaded again (the op table threads GEMMs itself).
double sgemm_gflops(int n, int threads, double min_seconds);

}  // namespace atl::measure
