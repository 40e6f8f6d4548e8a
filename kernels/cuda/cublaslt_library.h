// cuBLASLt, loaded on first use (dlopen) instead of linked into every binary: the library's
// constructors cost each process that links it 0.3-0.8 s and about 210 MB of resident memory at
// start (a bare `int main(){}` linked against libcublasLt.so.13: 0.78 s, 211 MB), whether it
// ever touches a GPU or not, and every Atoll process (CLI, coordinator, CPU nodes, each test)
// is one. Internal to kernels/cuda: needs cublasLt.h.
#pragma once

#include <cublasLt.h>

#include "kernels/core/status.h"

namespace atl::kernels::cuda {

// The cuBLASLt functions Atoll calls, resolved from libcublasLt.so.<CUBLAS_VER_MAJOR> (the
// version of the headers it was built with), each with the C function's exact type.
struct CublasLt {
  decltype(&::cublasLtCreate) Create;
  decltype(&::cublasLtDestroy) Destroy;
  decltype(&::cublasLtGetStatusName) GetStatusName;
  decltype(&::cublasLtGetStatusString) GetStatusString;
  decltype(&::cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&::cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&::cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&::cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&::cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
  decltype(&::cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&::cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&::cublasLtMatmul) Matmul;
};

// Loads the library once (thread-safe; later calls return the same table or the same error):
// by its soname through the usual search (LD_LIBRARY_PATH, the binary's run path, the loader's
// cache), then from the toolkit directory the build used. UNAVAILABLE, one line naming the file
// and the loader's reason, when it cannot be loaded or lacks a function.
StatusOr<const CublasLt*> load_cublaslt();

// The table, for code that runs only after load_cublaslt() succeeded (a Context exists).
const CublasLt& cublaslt();

// Whether this process has libcublasLt mapped (/proc/self/maps): the tests check that nothing
// loads it before a CUDA context is made.
bool cublaslt_mapped();

}  // namespace atl::kernels::cuda
