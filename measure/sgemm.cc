#include "measure/sgemm.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/ops.h"
#include "measure/timing.h"

namespace atl::measure {

double sgemm_gflops(int n, int threads, double min_seconds) {
  kernels::cpu::set_num_threads(threads);
  // The op table keeps OpenBLAS single-threaded (it threads GEMMs itself); the yardstick is
  // OpenBLAS's own threaded sgemm on all the threads the training step gets.
  openblas_set_num_threads(kernels::cpu::num_threads());
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
  // The fastest of the timed products: the machine's peak, even when other work on a shared
  // machine slows some of them down (which keeps the training step's fraction of it honest).
  const auto start = Clock::now();
  double best = 1e30;
  do {
    const auto t0 = Clock::now();
    run();
    best = std::min(best, seconds_since(t0));
  } while (seconds_since(start) < min_seconds);
  openblas_set_num_threads(1);
  return 2.0 * n * n * static_cast<double>(n) / best / 1e9;
}

}  // namespace atl::measure
