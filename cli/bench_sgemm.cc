// `atoll bench sgemm`: the machine's own single-precision GEMM rate (OpenBLAS), the yardstick
// for the training benchmark's "fraction of peak".
#include "cli/bench_common.h"

#include <cblas.h>

#include <chrono>
#include <vector>

#include "kernels/cpu/ops.h"

namespace atl::cli {

double measure_sgemm_gflops(int n, int threads, double min_seconds) {
  kernels::cpu::set_num_threads(threads);
  std::vector<float> a(static_cast<size_t>(n) * n), b(a.size()), c(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f;
    b[i] = static_cast<float>((i * 40503u) % 1000) * 1e-3f;
  }
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  };
  run();  // warm-up: page faults, thread pool start
  using clock = std::chrono::steady_clock;
  int iters = 0;
  auto t0 = clock::now();
  double elapsed = 0;
  do {
    run();
    ++iters;
    elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  } while (elapsed < min_seconds);
  return 2.0 * n * n * static_cast<double>(n) * iters / elapsed / 1e9;
}

}  // namespace atl::cli
