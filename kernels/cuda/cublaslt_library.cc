#include "kernels/cuda/cublaslt_library.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "kernels/cuda/shared_library.h"

namespace atl::kernels::cuda {

namespace {

#define ATOLL_STRINGIFY_VALUE(x) #x
#define ATOLL_STRINGIFY(x) ATOLL_STRINGIFY_VALUE(x)
constexpr const char* kSoname = "libcublasLt.so." ATOLL_STRINGIFY(CUBLAS_VER_MAJOR);

struct Loaded {
  CublasLt table{};
  Status status = Status::Ok();
};

Loaded load_once() {
  Loaded out;
  std::string first_error;
#ifdef ATOLL_CUDA_LIBRARY_DIR
  void* lib = open_shared_library(kSoname, ATOLL_CUDA_LIBRARY_DIR, &first_error);
#else
  void* lib = open_shared_library(kSoname, nullptr, &first_error);
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
  const bool all =
      resolve_symbol(lib, "cublasLtCreate", t.Create, &why) &&
      resolve_symbol(lib, "cublasLtDestroy", t.Destroy, &why) &&
      resolve_symbol(lib, "cublasLtGetStatusName", t.GetStatusName, &why) &&
      resolve_symbol(lib, "cublasLtGetStatusString", t.GetStatusString, &why) &&
      resolve_symbol(lib, "cublasLtMatmulDescCreate", t.MatmulDescCreate, &why) &&
      resolve_symbol(lib, "cublasLtMatmulDescDestroy", t.MatmulDescDestroy, &why) &&
      resolve_symbol(lib, "cublasLtMatmulDescSetAttribute", t.MatmulDescSetAttribute, &why) &&
      resolve_symbol(lib, "cublasLtMatrixLayoutCreate", t.MatrixLayoutCreate, &why) &&
      resolve_symbol(lib, "cublasLtMatrixLayoutDestroy", t.MatrixLayoutDestroy, &why) &&
      resolve_symbol(lib, "cublasLtMatmulPreferenceCreate", t.MatmulPreferenceCreate, &why) &&
      resolve_symbol(lib, "cublasLtMatmulPreferenceDestroy", t.MatmulPreferenceDestroy, &why) &&
      resolve_symbol(lib, "cublasLtMatmulPreferenceSetAttribute", t.MatmulPreferenceSetAttribute,
                     &why) &&
      resolve_symbol(lib, "cublasLtMatmulAlgoGetHeuristic", t.MatmulAlgoGetHeuristic, &why) &&
      resolve_symbol(lib, "cublasLtMatmul", t.Matmul, &why);
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
