// Thread control for the CPU backend: OpenMP (non-GEMM ops) and OpenBLAS (GEMMs).
#include <cblas.h>
#include <omp.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <unordered_set>

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

std::string cpuinfo_field(const std::string& key) {
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) return "";
    const size_t start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

std::string backend_description() {
  std::string cpu = cpuinfo_field("model name");
  if (cpu.empty()) cpu = "unknown";
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

std::string feature_blas_kernels(const std::string& flags) {
  std::unordered_set<std::string> has;
  std::istringstream words(flags);
  for (std::string w; words >> w;) has.insert(w);
  const auto all = [&has](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (!has.count(n)) return false;
    return true;
  };
  // The kernels' own requirements: SkylakeX's use AVX-512 F/CD/BW/DQ/VL, Cooperlake's add BF16.
  const bool avx512 = all({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"});
  if (avx512 && has.count("avx512_bf16")) return "Cooperlake";
  if (avx512) return "SkylakeX";
  if (all({"avx2", "fma"})) return "Haswell";
  if (has.count("avx")) return "SandyBridge";
  return "";
}

void use_feature_blas_kernels(char** argv) {
  // The user's choice (or ours, after the exec below); set but empty counts as unset.
  if (const char* set = std::getenv("OPENBLAS_CORETYPE"); set != nullptr && *set != '\0') return;
  if (strcasecmp(openblas_get_corename(), "prescott") != 0) return;  // OpenBLAS knows the CPU
  const std::string kernels = feature_blas_kernels(cpuinfo_field("flags"));
  if (kernels.empty()) return;  // a CPU for which Prescott is right
  ::setenv("OPENBLAS_CORETYPE", kernels.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  std::fprintf(stderr,
               "atoll: OpenBLAS chose its generic kernels for this CPU and restarting with "
               "OPENBLAS_CORETYPE=%s failed (%s); going on with the generic ones (set "
               "OPENBLAS_CORETYPE=%s yourself to train faster)\n",
               kernels.c_str(), std::strerror(errno), kernels.c_str());
  ::unsetenv("OPENBLAS_CORETYPE");
}

Status fit_blas_threads_to_address_limit(char** argv) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return Status::Ok();
  // What the process maps now (VmSize, kB): libraries, stacks, the heap so far.
  uint64_t mapped = 0;
  {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmSize:", 0) == 0)
        mapped = std::strtoull(line.c_str() + 7, nullptr, 10) << 10;
  }
  const uint64_t need_one = mapped + kAddressReserveBytes + kOpenBlasBufferBytes;
  if (limit.rlim_cur < need_one)
    return FailedPrecondition(
        "the address-space limit (ulimit -v) is " + std::to_string(limit.rlim_cur >> 20) +
        " MB, but this process maps " + std::to_string(mapped >> 20) +
        " MB before it starts and its BLAS needs " + std::to_string(kOpenBlasBufferBytes >> 20) +
        " MB per thread: raise it to at least " + std::to_string((need_one >> 20) + 1) +
        " MB (ulimit -v " + std::to_string(((need_one >> 20) + 1) << 10) + "), or remove it");
  if (const char* set = std::getenv("OPENBLAS_NUM_THREADS"); set != nullptr && *set != '\0')
    return Status::Ok();
  const int fit =
      static_cast<int>((limit.rlim_cur - mapped - kAddressReserveBytes) / kOpenBlasBufferBytes);
  const int threads = openblas_get_num_threads();
  if (threads <= fit) return Status::Ok();
  std::fprintf(stderr,
               "atoll: the address-space limit (ulimit -v) is %llu MB; OpenBLAS keeps a %zu MB "
               "buffer per thread, so it runs %d of its %d threads\n",
               static_cast<unsigned long long>(limit.rlim_cur >> 20), kOpenBlasBufferBytes >> 20,
               fit, threads);
  ::setenv("OPENBLAS_NUM_THREADS", std::to_string(fit).c_str(), 1);
  ::execv("/proc/self/exe", argv);
  ::unsetenv("OPENBLAS_NUM_THREADS");  // the exec failed: go on as before
  return Status::Ok();
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
