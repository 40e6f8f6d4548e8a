// The MoE grouped GEMM of the CUDA backend (moe_ops.h): one cuBLASLt GEMM per non-empty expert
// group, groups in expert order, through the dense matmul ops of matmul.cc (host code only). The
// group bounds come from the plan's host copy of its offsets.
#include <string>

#include "kernels/cuda/moe_ops.h"
#include "kernels/cuda/ops.h"

namespace atl::kernels::cuda {

namespace {
Status check_plan(const MoeDevicePlan& p, const char* op) {
  if (p.host_offsets.size() != size_t(p.E) + 1)
    return InvalidArgument(std::string(op) + ": the plan has not been built (call moe_plan first)");
  return Status::Ok();
}
}  // namespace

Status moe_grouped_matmul_forward(Context& ctx, float* out, const float* x, const float* w,
                                  size_t w_stride, const MoeDevicePlan& p, int IC, int OC) {
  ATOLL_RETURN_IF_ERROR(check_plan(p, "moe_grouped_matmul_forward"));
  for (int e = 0; e < p.E; ++e) {
    const int r0 = p.host_offsets[e], rows = p.host_offsets[e + 1] - r0;
    if (rows == 0) continue;
    ATOLL_RETURN_IF_ERROR(matmul_forward(ctx, out + size_t(r0) * OC, x + size_t(r0) * IC,
                                         w + size_t(e) * w_stride, rows, IC, OC));
  }
  return Status::Ok();
}

Status moe_grouped_matmul_backward(Context& ctx, float* dx, float* dw, const float* dout,
                                   const float* x, const float* w, size_t w_stride,
                                   const MoeDevicePlan& p, int IC, int OC) {
  ATOLL_RETURN_IF_ERROR(check_plan(p, "moe_grouped_matmul_backward"));
  for (int e = 0; e < p.E; ++e) {
    const int r0 = p.host_offsets[e], rows = p.host_offsets[e + 1] - r0;
    if (rows == 0) continue;
    ATOLL_RETURN_IF_ERROR(matmul_backward(ctx, dx ? dx + size_t(r0) * IC : nullptr,
                                          dw ? dw + size_t(e) * w_stride : nullptr,
                                          dout + size_t(r0) * OC, x ? x + size_t(r0) * IC : nullptr,
                                          w ? w + size_t(e) * w_stride : nullptr, rows, IC, OC));
  }
  return Status::Ok();
}

}  // namespace atl::kernels::cuda
