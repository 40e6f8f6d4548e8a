// PrecisionGemm's grouped GEMMs: the MoE experts' gate|up and down GEMMs under a precision recipe
// (precision.h). Each non-empty expert group is quantized as one GEMM's operands (per-group
// tensor scales, per-group wgrad blocks), then the unchanged fp32 grouped GEMM of
// kernels/cpu/moe.cc multiplies the dequantized values, so the result is exactly
// "quantize each group's operands with the format code, dequantize, fp32 GEMM per group".
#include <cstdint>

#include "algorithms/model/precision.h"
#include "kernels/cpu/moe_ops.h"

namespace atl::algorithms {

namespace ops = atl::kernels::cpu;

namespace {

template <typename T>
T* grow_to(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

void PrecisionGemm::grouped_forward(float* out, const float* x, const float* w, size_t w_stride,
                                    const ops::MoePlan& plan, int IC, int OC, GemmSite site) {
  if (!active()) {
    ops::moe_grouped_matmul_forward(out, x, w, w_stride, plan, IC, OC);
    return;
  }
  const size_t M = size_t(plan.N) * plan.K, wsz = size_t(OC) * IC;
  if (M == 0 || OC == 0) return;
  // xq (M, IC): each group quantized on its own rows; wq (E, OC·IC): the weights of the experts
  // that received tokens (the grouped GEMM skips the others, whose slots stay unread).
  float* xq = grow_to(a_, M * IC);
  float* wq = grow_to(gw_, size_t(plan.E) * wsz);
  for (int e = 0; e < plan.E; ++e) {
    const int r0 = plan.offsets[e], rows = plan.offsets[e + 1] - r0;
    if (rows == 0) continue;
    quantize_operand(x + size_t(r0) * IC, rows, IC, Operand::kFwdX, site, xq + size_t(r0) * IC,
                     uint64_t(r0) * IC);
    quantize_operand(w + size_t(e) * w_stride, OC, IC, Operand::kFwdW, site, wq + size_t(e) * wsz);
  }
  ops::moe_grouped_matmul_forward(out, xq, wq, wsz, plan, IC, OC);
}

void PrecisionGemm::grouped_backward(float* dx, float* dw, const float* dy, const float* x,
                                     const float* w, size_t w_stride, const ops::MoePlan& plan,
                                     int IC, int OC, GemmSite site) {
  if (!active()) {
    ops::moe_grouped_matmul_backward(dx, dw, dy, x, w, w_stride, plan, IC, OC);
    return;
  }
  const size_t M = size_t(plan.N) * plan.K, wsz = size_t(OC) * IC;
  if (M == 0 || OC == 0 || IC == 0) return;
  float* gq = grow_to(a_, M * OC);
  if (dx != nullptr) {  // dgrad: dx_e += q(dY_e) (rows, OC) · q(W_e) (OC, IC)
    float* wq = grow_to(gw_, size_t(plan.E) * wsz);
    for (int e = 0; e < plan.E; ++e) {
      const int r0 = plan.offsets[e], rows = plan.offsets[e + 1] - r0;
      if (rows == 0) continue;
      quantize_operand(dy + size_t(r0) * OC, rows, OC, Operand::kDgradDy, site,
                       gq + size_t(r0) * OC, uint64_t(r0) * OC);
      quantize_operand(w + size_t(e) * w_stride, OC, IC, Operand::kDgradW, site,
                       wq + size_t(e) * wsz);
    }
    // x is not read without dw; the real pointer is passed only to keep the arithmetic defined.
    ops::moe_grouped_matmul_backward(dx, static_cast<float*>(nullptr), gq, x, wq, wsz, plan, IC,
                                     OC);
  }
  if (dw != nullptr) {  // wgrad: dW_e += q(dY_e)ᵀ · q(x_e), both reduced over the group's tokens
    float* xq = grow_to(b_, M * IC);
    for (int e = 0; e < plan.E; ++e) {
      const int r0 = plan.offsets[e], rows = plan.offsets[e + 1] - r0;
      if (rows == 0) continue;
      quantize_operand(dy + size_t(r0) * OC, rows, OC, Operand::kWgradDy, site,
                       gq + size_t(r0) * OC, uint64_t(r0) * OC);
      quantize_operand(x + size_t(r0) * IC, rows, IC, Operand::kWgradX, site, xq + size_t(r0) * IC,
                       uint64_t(r0) * IC);
    }
    // dw keeps the caller's stride; w is not read without dx.
    ops::moe_grouped_matmul_backward(static_cast<float*>(nullptr), dw, gq, xq, w, w_stride, plan,
                                     IC, OC);
  }
}

}  // namespace atl::algorithms
