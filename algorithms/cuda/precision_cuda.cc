#include "algorithms/cuda/precision_cuda.h"

#include "kernels/cuda/ops.h"
#include "kernels/cuda/quantize.h"
#include "kernels/formats/convert.h"
#include "kernels/formats/scalar.h"

namespace atl::algorithms::cuda {

namespace kc = atl::kernels::cuda;
namespace fmt = atl::kernels::formats;

namespace {

using Fmt = OperandFormat;

// Grows b to n elements. Kernels queued on ctx may still read the old buffer: drain first.
template <typename T>
StatusOr<T*> grow(kc::Context& ctx, kc::DeviceBuffer<T>& b, size_t n) {
  n = n == 0 ? 1 : n;
  if (b.size() < n) {
    ATOLL_RETURN_IF_ERROR(ctx.synchronize());
    b = kc::DeviceBuffer<T>();
    ATOLL_ASSIGN_OR_RETURN(b, kc::DeviceBuffer<T>::alloc(n));
  }
  return b.data();
}

}  // namespace

void CudaPrecisionGemm::configure(Precision p, uint64_t seed) {
  precision_ = p;
  seed_ = seed;
  hadamard_signs(seed, signs_.s);
}

Status CudaPrecisionGemm::quantize_rows(const float* m, int rows, int cols, Operand role,
                                        GemmSite site, float* out, uint64_t first_index) {
  const size_t n = size_t(rows) * cols;
  if (n == 0) return Status::Ok();
  const Fmt f = operand_format(precision_, role, site.high_precision);
  switch (f) {
    case Fmt::kCopy:
      if (m == out) return Status::Ok();
      return kc::check_cuda(
          cudaMemcpyAsync(out, m, n * sizeof(float), cudaMemcpyDeviceToDevice, ctx_.stream()),
          "cudaMemcpyAsync (operand copy)");
    case Fmt::kBf16: {
      ATOLL_ASSIGN_OR_RETURN(uint16_t * h, grow(ctx_, h16_, n));
      ATOLL_RETURN_IF_ERROR(
          kc::quantize(ctx_, kc::ScalarFormat::kBf16, m, h, n, fmt::Overflow::kSaturate));
      return kc::dequantize(ctx_, kc::ScalarFormat::kBf16, h, out, n);
    }
    case Fmt::kE4M3T:
    case Fmt::kE5M2T: {
      ATOLL_ASSIGN_OR_RETURN(const fmt::AbsMax am, kc::abs_max(ctx_, m, n));  // synchronizes
      if (f == Fmt::kE5M2T) {
        const float inv = fmt::current_inv_scale(am.amax, fmt::kE5M2Max);
        return kc::qdq_e5m2_scaled(ctx_, m, out, n, inv, 1.0f / inv);
      }
      const float inv = fmt::current_inv_scale(am.amax, fmt::kE4M3Max);
      ATOLL_ASSIGN_OR_RETURN(uint8_t * q, grow(ctx_, u8_, n));
      ATOLL_RETURN_IF_ERROR(kc::quantize_e4m3_scaled(ctx_, m, inv, q, n));
      return kc::dequantize_e4m3_scaled(ctx_, q, 1.0f / inv, out, n);
    }
    case Fmt::kMx8: {
      // Blocks of 32 along each row. Rows that are whole blocks: one call for the matrix
      // (the same blocks); otherwise one per row (a row's last block is partial).
      const size_t nb = fmt::mx_num_blocks(size_t(cols));
      ATOLL_ASSIGN_OR_RETURN(fmt::BlockMxfp8 * blk, grow(ctx_, mx_, nb * size_t(rows)));
      if (cols % 32 == 0) {
        ATOLL_RETURN_IF_ERROR(kc::quantize_mxfp8(ctx_, m, n, blk));
        return kc::dequantize_mxfp8(ctx_, blk, out, n);
      }
      for (int r = 0; r < rows; ++r) {
        const size_t off = size_t(r) * cols;
        ATOLL_RETURN_IF_ERROR(kc::quantize_mxfp8(ctx_, m + off, size_t(cols), blk + r * nb));
        ATOLL_RETURN_IF_ERROR(kc::dequantize_mxfp8(ctx_, blk + r * nb, out + off, size_t(cols)));
      }
      return Status::Ok();
    }
    case Fmt::kNv:
    case Fmt::kNvSr: {
      // One tensor scale for the whole operand; 1x16 blocks along each row, scale rounded up;
      // dY stochastically rounded, element (r, c) drawing counter first_index + r·cols + c.
      ATOLL_ASSIGN_OR_RETURN(const float ts, kc::nvfp4_tensor_scale(ctx_, m, n));
      const size_t nb = fmt::nvfp4_num_blocks(size_t(cols));
      ATOLL_ASSIGN_OR_RETURN(fmt::BlockNvfp4 * blk, grow(ctx_, nv_, nb * size_t(rows)));
      kc::SrKey key{seed_, rounding_stream(step_, site, role), first_index};
      const kc::SrKey* sr = f == Fmt::kNvSr ? &key : nullptr;
      if (cols % 16 == 0) {
        ATOLL_RETURN_IF_ERROR(
            kc::quantize_nvfp4(ctx_, m, n, ts, blk, fmt::NvfpScaleRounding::kUp, sr));
        return kc::dequantize_nvfp4(ctx_, blk, ts, out, n);
      }
      for (int r = 0; r < rows; ++r) {
        const size_t off = size_t(r) * cols;
        key.first_index = first_index + off;
        ATOLL_RETURN_IF_ERROR(kc::quantize_nvfp4(ctx_, m + off, size_t(cols), ts, blk + r * nb,
                                                 fmt::NvfpScaleRounding::kUp, sr));
        ATOLL_RETURN_IF_ERROR(
            kc::dequantize_nvfp4(ctx_, blk + r * nb, ts, out + off, size_t(cols)));
      }
      return Status::Ok();
    }
    case Fmt::kNv2d: {
      ATOLL_ASSIGN_OR_RETURN(const float ts, kc::nvfp4_tensor_scale(ctx_, m, n));
      return kc::qdq_nvfp4_2d(ctx_, m, out, rows, cols, ts);
    }
  }
  return Status::Ok();
}

Status CudaPrecisionGemm::quantize_operand(const float* m, int rows, int cols, Operand role,
                                           GemmSite site, float* out, uint64_t first_index) {
  const Fmt f = operand_format(precision_, role, site.high_precision);
  const bool hadamard = hadamard_operand(precision_, role, site.high_precision);
  const bool blocked = f == Fmt::kMx8 || f == Fmt::kNv || f == Fmt::kNvSr;
  const size_t n = size_t(rows) * cols;
  if (n == 0) return Status::Ok();
  const float* src = m;
  if (hadamard) {
    ATOLL_RETURN_IF_ERROR(kc::check_cuda(
        cudaMemcpyAsync(out, m, n * sizeof(float), cudaMemcpyDeviceToDevice, ctx_.stream()),
        "cudaMemcpyAsync (operand copy)"));
    ATOLL_RETURN_IF_ERROR(kc::hadamard16_rows(ctx_, out, rows, cols, signs_));
    src = out;
  }
  if (!blocked || !reduces_over_rows(role))
    return quantize_rows(src, rows, cols, role, site, out, first_index);
  ATOLL_ASSIGN_OR_RETURN(float* t, grow(ctx_, t_, n));
  ATOLL_ASSIGN_OR_RETURN(float* u, grow(ctx_, u_, n));
  ATOLL_RETURN_IF_ERROR(kc::transpose(ctx_, t, src, rows, cols));  // reduction axis contiguous
  ATOLL_RETURN_IF_ERROR(quantize_rows(t, cols, rows, role, site, u, first_index));
  return kc::transpose(ctx_, out, u, cols, rows);
}

Status CudaPrecisionGemm::forward(float* out, const float* x, const float* w, int N, int IC, int OC,
                                  GemmSite site) {
  if (!active()) return kc::matmul_forward(ctx_, out, x, w, N, IC, OC);
  if (N == 0 || OC == 0) return Status::Ok();
  ATOLL_ASSIGN_OR_RETURN(float* xq, grow(ctx_, a_, size_t(N) * IC));
  ATOLL_ASSIGN_OR_RETURN(float* wq, grow(ctx_, b_, size_t(OC) * IC));
  ATOLL_RETURN_IF_ERROR(quantize_operand(x, N, IC, Operand::kFwdX, site, xq));
  ATOLL_RETURN_IF_ERROR(quantize_operand(w, OC, IC, Operand::kFwdW, site, wq));
  return kc::matmul_forward(ctx_, out, xq, wq, N, IC, OC);
}

Status CudaPrecisionGemm::backward(float* dx, float* dw, const float* dy, const float* x,
                                   const float* w, int N, int IC, int OC, GemmSite site) {
  if (!active()) return kc::matmul_backward(ctx_, dx, dw, dy, x, w, N, IC, OC);
  if (N == 0 || OC == 0 || IC == 0) return Status::Ok();
  ATOLL_ASSIGN_OR_RETURN(float* gq, grow(ctx_, a_, size_t(N) * OC));
  if (dx != nullptr) {
    ATOLL_ASSIGN_OR_RETURN(float* wq, grow(ctx_, b_, size_t(OC) * IC));
    ATOLL_RETURN_IF_ERROR(quantize_operand(dy, N, OC, Operand::kDgradDy, site, gq));
    ATOLL_RETURN_IF_ERROR(quantize_operand(w, OC, IC, Operand::kDgradW, site, wq));
    ATOLL_RETURN_IF_ERROR(kc::matmul_backward(ctx_, dx, nullptr, gq, nullptr, wq, N, IC, OC));
  }
  if (dw != nullptr) {
    ATOLL_ASSIGN_OR_RETURN(float* xq, grow(ctx_, b_, size_t(N) * IC));
    ATOLL_RETURN_IF_ERROR(quantize_operand(dy, N, OC, Operand::kWgradDy, site, gq));
    ATOLL_RETURN_IF_ERROR(quantize_operand(x, N, IC, Operand::kWgradX, site, xq));
    ATOLL_RETURN_IF_ERROR(kc::matmul_backward(ctx_, nullptr, dw, gq, xq, nullptr, N, IC, OC));
  }
  return Status::Ok();
}

Status CudaPrecisionGemm::grouped_forward(float* out, const float* x, const float* w,
                                          size_t w_stride, const kc::MoeDevicePlan& plan, int IC,
                                          int OC, GemmSite site) {
  if (!active()) return kc::moe_grouped_matmul_forward(ctx_, out, x, w, w_stride, plan, IC, OC);
  const size_t M = size_t(plan.N) * plan.K, wsz = size_t(OC) * IC;
  if (M == 0 || OC == 0) return Status::Ok();
  if (plan.host_offsets.size() != size_t(plan.E) + 1)
    return FailedPrecondition("grouped GEMM: the plan has not been built");
  // xq (M, IC): each group quantized on its own rows; wq (E, OC·IC): the experts with tokens.
  ATOLL_ASSIGN_OR_RETURN(float* xq, grow(ctx_, a_, M * IC));
  ATOLL_ASSIGN_OR_RETURN(float* wq, grow(ctx_, gw_, size_t(plan.E) * wsz));
  for (int e = 0; e < plan.E; ++e) {
    const int r0 = plan.host_offsets[size_t(e)], rows = plan.host_offsets[size_t(e) + 1] - r0;
    if (rows == 0) continue;
    ATOLL_RETURN_IF_ERROR(quantize_operand(x + size_t(r0) * IC, rows, IC, Operand::kFwdX, site,
                                           xq + size_t(r0) * IC, uint64_t(r0) * IC));
    ATOLL_RETURN_IF_ERROR(quantize_operand(w + size_t(e) * w_stride, OC, IC, Operand::kFwdW, site,
                                           wq + size_t(e) * wsz));
  }
  return kc::moe_grouped_matmul_forward(ctx_, out, xq, wq, wsz, plan, IC, OC);
}

Status CudaPrecisionGemm::grouped_backward(float* dx, float* dw, const float* dy, const float* x,
                                           const float* w, size_t w_stride,
                                           const kc::MoeDevicePlan& plan, int IC, int OC,
                                           GemmSite site) {
  if (!active())
    return kc::moe_grouped_matmul_backward(ctx_, dx, dw, dy, x, w, w_stride, plan, IC, OC);
  const size_t M = size_t(plan.N) * plan.K, wsz = size_t(OC) * IC;
  if (M == 0 || OC == 0 || IC == 0) return Status::Ok();
  if (plan.host_offsets.size() != size_t(plan.E) + 1)
    return FailedPrecondition("grouped GEMM: the plan has not been built");
  ATOLL_ASSIGN_OR_RETURN(float* gq, grow(ctx_, a_, M * OC));
  if (dx != nullptr) {  // dgrad: dx_e += q(dY_e) (rows, OC) · q(W_e) (OC, IC)
    ATOLL_ASSIGN_OR_RETURN(float* wq, grow(ctx_, gw_, size_t(plan.E) * wsz));
    for (int e = 0; e < plan.E; ++e) {
      const int r0 = plan.host_offsets[size_t(e)], rows = plan.host_offsets[size_t(e) + 1] - r0;
      if (rows == 0) continue;
      ATOLL_RETURN_IF_ERROR(quantize_operand(dy + size_t(r0) * OC, rows, OC, Operand::kDgradDy,
                                             site, gq + size_t(r0) * OC, uint64_t(r0) * OC));
      ATOLL_RETURN_IF_ERROR(quantize_operand(w + size_t(e) * w_stride, OC, IC, Operand::kDgradW,
                                             site, wq + size_t(e) * wsz));
    }
    ATOLL_RETURN_IF_ERROR(
        kc::moe_grouped_matmul_backward(ctx_, dx, nullptr, gq, x, wq, wsz, plan, IC, OC));
  }
  if (dw != nullptr) {  // wgrad: dW_e += q(dY_e)ᵀ · q(x_e), both reduced over the group's tokens
    ATOLL_ASSIGN_OR_RETURN(float* xq, grow(ctx_, b_, M * IC));
    for (int e = 0; e < plan.E; ++e) {
      const int r0 = plan.host_offsets[size_t(e)], rows = plan.host_offsets[size_t(e) + 1] - r0;
      if (rows == 0) continue;
      ATOLL_RETURN_IF_ERROR(quantize_operand(dy + size_t(r0) * OC, rows, OC, Operand::kWgradDy,
                                             site, gq + size_t(r0) * OC, uint64_t(r0) * OC));
      ATOLL_RETURN_IF_ERROR(quantize_operand(x + size_t(r0) * IC, rows, IC, Operand::kWgradX, site,
                                             xq + size_t(r0) * IC, uint64_t(r0) * IC));
    }
    ATOLL_RETURN_IF_ERROR(
        kc::moe_grouped_matmul_backward(ctx_, nullptr, dw, gq, xq, w, w_stride, plan, IC, OC));
  }
  return Status::Ok();
}

}  // namespace atl::algorithms::cuda
