// Thread control for the CPU backend: OpenMP (non-GEMM ops) and OpenBLAS (GEMMs).
#include <cblas.h>
#include <omp.h>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec_math.h"

namespace atl::kernels::cpu {

// OpenBLAS stays single-threaded: the ops split GEMMs over OpenMP themselves (see blas.h), which
// keeps results independent of the thread count and leaves one thread pool on the cores.
void set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(1);
}

int num_threads() {
  return omp_get_max_threads();
}

namespace detail {
OpenBlasSingleThread::OpenBlasSingleThread() : prev_(openblas_get_num_threads()) {
  if (prev_ != 1) openblas_set_num_threads(1);
}
OpenBlasSingleThread::~OpenBlasSingleThread() {
  if (prev_ != 1) openblas_set_num_threads(prev_);
}
}  // namespace detail

}  // namespace atl::kernels::cpu
