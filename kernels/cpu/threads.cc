// Thread control for the CPU backend: OpenMP (non-GEMM ops) and OpenBLAS (GEMMs).
#include <cblas.h>
#include <omp.h>

#include <fstream>
#include <string>

#include "kernels/cpu/backend_info.h"
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

std::string backend_description() {
  std::string cpu = "unknown";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    if (const size_t colon = line.find(':'); colon != std::string::npos)
      cpu = line.substr(line.find_first_not_of(' ', colon + 1));
    break;
  }
  const char* isa =
#if defined(__AVX512F__)
      "AVX-512";
#elif defined(__AVX2__)
      "AVX2";
#elif defined(__AVX__)
      "AVX";
#else
      "SSE2";
#endif
  return "cpu " + cpu + "; OpenBLAS kernels " + openblas_get_corename() + "; compiled for " + isa;
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
