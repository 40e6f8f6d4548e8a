#include "kernels/cuda/cublaslt_library.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace atl::kernels::cuda {

namespace {

#define ATOLL_STRINGIFY_VALUE(x) #x
#define ATOLL_STRINGIFY(x) ATOLL_STRINGIFY_VALUE(x)
constexpr const char* kSoname = "libcublasLt.so." ATOLL_STRINGIFY(CUBLAS_VER_MAJOR);

struct Loaded {
  CublasLt table{};
  Status status = Status::Ok();
};

// `fn` resolved from `lib` into `slot`; false (and a reason in `why`) when it is missing.
template <typename Fn>
bool resolve(void* lib, const char* name, Fn& slot, std::string& why) {
  slot = reinterpret_cast<Fn>(dlsym(lib, name));
  if (slot != nullptr) return true;
  why = std::string("it has no ") + name;
  return false;
}

Loaded load_once() {
  Loaded out;
  void* lib = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
  std::string first_error = lib == nullptr ? dlerror() : "";
#ifdef ATOLL_CUDA_LIBRARY_DIR
  if (lib == nullptr) {
    const std::string path = std::string(ATOLL_CUDA_LIBRARY_DIR) + "/" + kSoname;
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
#endif
  if (lib == nullptr) {
    out.status = Unavailable(std::string("CUDA: cannot load ") + kSoname + " (" + first_error +
                             "): install the CUDA toolkit's cuBLASLt " +
                             ATOLL_STRINGIFY(CUBLAS_VER_MAJOR) +
                             " or put its directory on LD_LIBRARY_PATH");
    return out;
  }
  CublasLt& t = out.table;
  std::string why;
  const bool all = resolve(lib, "cublasLtCreate", t.Create, why) &&
                   resolve(lib, "cublasLtDestroy", t.Destroy, why) &&
                   resolve(lib, "cublasLtGetStatusName", t.GetStatusName, why) &&
                   resolve(lib, "cublasLtGetStatusString", t.GetStatusString, why) &&
                   resolve(lib, "cublasLtMatmulDescCreate", t.MatmulDescCreate, why) &&
                   resolve(lib, "cublasLtMatmulDescDestroy", t.MatmulDescDestroy, why) &&
                   resolve(lib, "cublasLtMatmulDescSetAttribute", t.MatmulDescSetAttribute, why) &&
                   resolve(lib, "cublasLtMatrixLayoutCreate", t.MatrixLayoutCreate, why) &&
                   resolve(lib, "cublasLtMatrixLayoutDestroy", t.MatrixLayoutDestroy, why) &&
                   resolve(lib, "cublasLtMatmulPreferenceCreate", t.MatmulPreferenceCreate, why) &&
                   resolve(lib, "cublasLtMatmulPreferenceDestroy", t.MatmulPreferenceDestroy,
                           why) &&
                   resolve(lib, "cublasLtMatmulPreferenceSetAttribute",
                           t.MatmulPreferenceSetAttribute, why) &&
                   resolve(lib, "cublasLtMatmulAlgoGetHeuristic", t.MatmulAlgoGetHeuristic, why) &&
                   resolve(lib, "cublasLtMatmul", t.Matmul, why);
  // The library stays loaded for the process's life (its handles outlive any one context).
  if (!all) out.status = Unavailable(std::string("CUDA: ") + kSoname + " cannot be used: " + why);
  return out;
}

const Loaded& loaded() {
  static const Loaded once = load_once();
  return once;
}

}  // namespace

StatusOr<const CublasLt*> load_cublaslt() {
  const Loaded& l = loaded();
  if (!l.status.ok()) return l.status;
  return &l.table;
}

const CublasLt& cublaslt() {
  const Loaded& l = loaded();
  if (!l.status.ok()) {
    std::fprintf(stderr, "atoll: internal error: cuBLASLt used before it was loaded: %s\n",
                 l.status.to_string().c_str());
    std::abort();
  }
  return l.table;
}

bool cublaslt_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libcublasLt.so") != std::string::npos) return true;
  return false;
}

}  // namespace atl::kernels::cuda
