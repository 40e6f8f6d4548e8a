// Dense GEMMs through cuBLASLt (host code only). Row-major Atoll tensors are column-major
// transposes for cuBLAS: x (N, IC) row-major is xᵀ (IC, N) column-major. So
//   forward  out (N, OC) = x · wᵀ        ⇔ outᵀ (OC, N) = (wᵀ)ᵀ·xᵀ : A = w  (T), B = x    (N)
//   backward dx (N, IC) += dout · w      ⇔ dxᵀ (IC, N)  = wᵀ·doutᵀ  : A = w  (N), B = dout (N)
//            dw (OC, IC) += doutᵀ · x    ⇔ dwᵀ (IC, OC) = xᵀ·dout   : A = x  (N), B = dout (T)
// The forward is the "TN" layout cuBLASLt's FP8 kernels require. fp32 uses CUBLAS_COMPUTE_32F
// (no TF32: the fp32 recipe is fp32). cuBLASLt with a fixed workspace and the same heuristic
// choice is bitwise reproducible run to run on one GPU model (cuBLAS's documented guarantee).
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cuda/cublaslt_library.h"
#include "kernels/cuda/lt_check.h"
#include "kernels/cuda/ops.h"

namespace atl::kernels::cuda {
namespace {

struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { (void)cublaslt().MatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* d) const { (void)cublaslt().MatrixLayoutDestroy(d); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* d) const {
    (void)cublaslt().MatmulPreferenceDestroy(d);
  }
};
using OpDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter>;
using Pref = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter>;

StatusOr<Layout> make_layout(cudaDataType_t type, int rows, int cols, int ld) {
  cublasLtMatrixLayout_t l = nullptr;
  ATOLL_CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&l, type, uint64_t(rows), uint64_t(cols), ld));
  return Layout(l);
}

struct Operand {
  const void* p;
  cudaDataType_t type;
  cublasOperation_t op;
  int ld;
  const float* scale;  // device pointer (FP8 only) or nullptr
};

// The largest power of two (<= 256) dividing p's address. cuBLASLt's heuristic assumes 256-byte
// aligned operands unless told otherwise, and may then pick a kernel that faults on an operand
// that starts mid-tensor (the MoE grouped GEMM's groups start at any row).
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

// D (m, n, column-major, ld ldd, fp32) = op(A) (m, k) · op(B) (k, n) + beta · D.
Status lt_matmul(Context& ctx, int m, int n, int k, const Operand& a, const Operand& b, float* d,
                 int ldd, float beta, const char* what) {
  cublasLtMatmulDesc_t raw = nullptr;
  ATOLL_CUBLAS_CHECK(cublaslt().MatmulDescCreate(&raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  OpDesc op(raw);
  ATOLL_CUBLAS_CHECK(
      cublaslt().MatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_TRANSA, &a.op, sizeof(a.op)));
  ATOLL_CUBLAS_CHECK(
      cublaslt().MatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_TRANSB, &b.op, sizeof(b.op)));
  if (a.scale != nullptr) {
    ATOLL_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(
        op.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a.scale, sizeof(a.scale)));
  }
  if (b.scale != nullptr) {
    ATOLL_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(
        op.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b.scale, sizeof(b.scale)));
  }
  // Stored shapes: a transposed operand is stored (k, m) instead of (m, k).
  const bool at = a.op == CUBLAS_OP_T, bt = b.op == CUBLAS_OP_T;
  ATOLL_ASSIGN_OR_RETURN(Layout la, make_layout(a.type, at ? k : m, at ? m : k, a.ld));
  ATOLL_ASSIGN_OR_RETURN(Layout lb, make_layout(b.type, bt ? n : k, bt ? k : n, b.ld));
  ATOLL_ASSIGN_OR_RETURN(Layout ld, make_layout(CUDA_R_32F, m, n, ldd));
  cublasLtMatmulPreference_t praw = nullptr;
  ATOLL_CUBLAS_CHECK(cublaslt().MatmulPreferenceCreate(&praw));
  Pref pref(praw);
  const uint64_t ws = ctx.lt_workspace_bytes();
  ATOLL_CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_a = alignment_of(a.p), al_b = alignment_of(b.p), al_d = alignment_of(d);
  ATOLL_CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  ATOLL_CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  ATOLL_CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d)));
  ATOLL_CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // No algorithm comes back as CUBLAS_STATUS_NOT_SUPPORTED or as found == 0: either way one line
  // with everything that decides it (shapes, types, transposes, operand alignments).
  const cublasStatus_t hs = cublaslt().MatmulAlgoGetHeuristic(
      ctx.lt(), op.get(), la.get(), lb.get(), ld.get(), ld.get(), pref.get(), 1, &result, &found);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
    return Internal(std::string(what) + ": cuBLASLt has no algorithm for m=" + std::to_string(m) +
                    " n=" + std::to_string(n) + " k=" + std::to_string(k) + " (A type " +
                    std::to_string(int(a.type)) + (at ? " T" : " N") + " ld " +
                    std::to_string(a.ld) + " align " + std::to_string(al_a) + ", B type " +
                    std::to_string(int(b.type)) + (bt ? " T" : " N") + " ld " +
                    std::to_string(b.ld) + " align " + std::to_string(al_b) + ", D align " +
                    std::to_string(al_d) + ") on this GPU" +
                    (hs != CUBLAS_STATUS_SUCCESS ? std::string(": ") + cublaslt().GetStatusName(hs)
                                                 : std::string()));
  }
  const float alpha = 1.0f;
  ATOLL_CUBLAS_CHECK(cublaslt().Matmul(ctx.lt(), op.get(), &alpha, a.p, la.get(), b.p, lb.get(), &beta,
                                    d, ld.get(), d, ld.get(), &result.algo, ctx.lt_workspace(),
                                    ctx.lt_workspace_bytes(), ctx.stream()));
  return Status::Ok();
}

Status check_shape(const char* op, int N, int IC, int OC) {
  if (N < 0 || IC < 0 || OC < 0) {
    return InvalidArgument(std::string(op) + ": negative dimension (N=" + std::to_string(N) +
                           " IC=" + std::to_string(IC) + " OC=" + std::to_string(OC) + ")");
  }
  return Status::Ok();
}

// out (N, OC) (= or +=) x (N, IC) · w (OC, IC)ᵀ for any operand type.
Status forward_any(Context& ctx, float* out, const void* x, cudaDataType_t xt, const float* xs,
                   const void* w, cudaDataType_t wt, const float* ws, int N, int IC, int OC,
                   bool accumulate, const char* what) {
  ATOLL_RETURN_IF_ERROR(check_shape(what, N, IC, OC));
  if (N == 0 || OC == 0) return Status::Ok();
  if (IC == 0) {  // empty product: out = 0 (or unchanged when accumulating)
    if (accumulate) return Status::Ok();
    return zero_fill(ctx, out, size_t(N) * OC);
  }
  const Operand a{w, wt, CUBLAS_OP_T, IC, ws};
  const Operand b{x, xt, CUBLAS_OP_N, IC, xs};
  return lt_matmul(ctx, OC, N, IC, a, b, out, OC, accumulate ? 1.0f : 0.0f, what);
}

}  // namespace

Status matmul_forward(Context& ctx, float* out, const float* x, const float* w, int N, int IC,
                      int OC) {
  return forward_any(ctx, out, x, CUDA_R_32F, nullptr, w, CUDA_R_32F, nullptr, N, IC, OC, false,
                     "matmul_forward");
}

Status matmul_backward(Context& ctx, float* dx, float* dw, const float* dout, const float* x,
                       const float* w, int N, int IC, int OC) {
  ATOLL_RETURN_IF_ERROR(check_shape("matmul_backward", N, IC, OC));
  if (N == 0 || OC == 0 || IC == 0) return Status::Ok();
  if (dx != nullptr) {
    const Operand a{w, CUDA_R_32F, CUBLAS_OP_N, IC, nullptr};
    const Operand b{dout, CUDA_R_32F, CUBLAS_OP_N, OC, nullptr};
    ATOLL_RETURN_IF_ERROR(lt_matmul(ctx, IC, N, OC, a, b, dx, IC, 1.0f, "matmul_backward (dx)"));
  }
  if (dw != nullptr) {
    const Operand a{x, CUDA_R_32F, CUBLAS_OP_N, IC, nullptr};
    const Operand b{dout, CUDA_R_32F, CUBLAS_OP_T, OC, nullptr};
    ATOLL_RETURN_IF_ERROR(lt_matmul(ctx, IC, OC, N, a, b, dw, IC, 1.0f, "matmul_backward (dw)"));
  }
  return Status::Ok();
}

Status matmul_bf16(Context& ctx, float* out, const uint16_t* x, const uint16_t* w, int N, int IC,
                   int OC, bool accumulate) {
  return forward_any(ctx, out, x, CUDA_R_16BF, nullptr, w, CUDA_R_16BF, nullptr, N, IC, OC,
                     accumulate, "matmul_bf16");
}

Status matmul_fp8(Context& ctx, float* out, const uint8_t* x, Fp8Format x_fmt, const float* x_scale,
                  const uint8_t* w, Fp8Format w_fmt, const float* w_scale, int N, int IC, int OC,
                  bool accumulate) {
  if (ctx.cc_major() * 10 + ctx.cc_minor() < 89) {
    return FailedPrecondition(
        "matmul_fp8 needs an FP8 GPU (compute capability 8.9 or newer); "
        "this one is " +
        std::to_string(ctx.cc_major()) + "." + std::to_string(ctx.cc_minor()) +
        ": use --precision bf16");
  }
  if (x_fmt == Fp8Format::kE5M2 && w_fmt == Fp8Format::kE5M2) {
    return InvalidArgument(
        "matmul_fp8: E5M2 x E5M2 is not supported by cuBLASLt; make one "
        "operand E4M3");
  }
  if (N % 16 != 0 || IC % 16 != 0 || OC % 16 != 0) {
    return InvalidArgument(
        "matmul_fp8: N, IC and OC must be multiples of 16 (got N=" + std::to_string(N) +
        " IC=" + std::to_string(IC) + " OC=" + std::to_string(OC) + ")");
  }
  if (x_scale == nullptr || w_scale == nullptr) {
    return InvalidArgument("matmul_fp8: x_scale and w_scale (device floats) are required");
  }
  const auto type = [](Fp8Format f) {
    return f == Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
  };
  return forward_any(ctx, out, x, type(x_fmt), x_scale, w, type(w_fmt), w_scale, N, IC, OC,
                     accumulate, "matmul_fp8");
}

}  // namespace atl::kernels::cuda
