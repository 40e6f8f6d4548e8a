// cuBLASLt status -> Status (internal to kernels/cuda; needs cublasLt.h).
#pragma once

#include <cublasLt.h>

#include "kernels/core/status.h"

namespace atl::kernels::cuda {
Status check_cublas(cublasStatus_t st, const char* what);
}  // namespace atl::kernels::cuda
#define ATOLL_CUBLAS_CHECK(call) \
  ATOLL_RETURN_IF_ERROR(::atl::kernels::cuda::check_cublas((call), #call))
