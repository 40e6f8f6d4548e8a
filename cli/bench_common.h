#pragma once

namespace atl::cli {

// GFLOP/s of an n×n×n sgemm with `threads` threads, timed for at least min_seconds.
double measure_sgemm_gflops(int n, int threads, double min_seconds);

}  // namespace atl::cli
