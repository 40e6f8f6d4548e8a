// Fused softmax + cross-entropy, AdamW, global gradient norm and clipping (CUDA op table).
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace atl::kernels::cuda {
namespace {

using detail::block_max;
using detail::block_sum;
using detail::blocks_for;
using detail::launch_status;

constexpr int kXentThreads = 1024;

// grid N, block kXentThreads. logits (N, V) → losses (N); dlogits (N, V) written, may alias.
// The target logit is read before the barrier inside block_max, and every later write to a row
// element reads only that element, so dlogits == logits is safe.
__global__ void softmax_xent_kernel(float* losses, float* dlogits, const float* logits,
                                    const int32_t* targets, int V, float dloss) {
  __shared__ float shm[32];
  const size_t off = size_t(blockIdx.x) * V;
  const float* x = logits + off;
  float* d = dlogits != nullptr ? dlogits + off : nullptr;
  const int32_t tgt = targets[blockIdx.x];
  if (tgt < 0 || tgt >= V) {  // ignored row (the block exits as a whole: no barrier skipped)
    if (threadIdx.x == 0) losses[blockIdx.x] = 0.0f;
    if (d != nullptr)
      for (int j = threadIdx.x; j < V; j += blockDim.x) d[j] = 0.0f;
    return;
  }
  const float xt = x[tgt];
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_max(mx, shm);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float e = expf(x[j] - mx);
    if (d != nullptr) d[j] = e;
    sum += e;
  }
  sum = block_sum(sum, shm);
  if (d != nullptr) {
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
      d[j] = dloss * (d[j] / sum - (j == tgt ? 1.0f : 0.0f));
    }
  }
  if (threadIdx.x == 0) losses[blockIdx.x] = (mx - xt) + logf(sum);
}

struct AdamWScalars {
  float decay, b1, omb1, b2, omb2, neg_step, bc2_sqrt, eps;
};

// Operation by operation as the CPU op (kernels/cpu/optim.cc), with the _rn intrinsics so nvcc
// cannot contract or reorder: the results are bitwise equal to the CPU's.
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, size_t n,
                             AdamWScalars s) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float gi = g[i];
    const float pi = __fmul_rn(p[i], s.decay);
    const float mi = __fmaf_rn(gi, s.omb1, __fmul_rn(m[i], s.b1));
    const float vi = __fmaf_rn(__fmul_rn(s.omb2, gi), gi, __fmul_rn(v[i], s.b2));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    m[i] = mi;
    v[i] = vi;
    p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(s.neg_step, mi), denom));
  }
}

constexpr size_t kNormBlock = 4096;  // elements per partial sum (as the CPU op)
constexpr int kNormThreads = 256;

// grid nblocks, block kNormThreads: partial[b] = Σ g² over block b, in double, fixed tree.
__global__ void norm_partial_kernel(double* partial, const float* g, size_t n) {
  __shared__ double shm[32];
  const size_t i0 = size_t(blockIdx.x) * kNormBlock;
  const size_t i1 = min(n, i0 + kNormBlock);
  double acc = 0.0;
  for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) acc += double(g[i]) * double(g[i]);
  acc = block_sum(acc, shm);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}
// grid 1, block 1024: out = sqrt(Σ partial), each thread summing a fixed stride in order.
__global__ void norm_final_kernel(double* out, const double* partial, size_t nblocks) {
  __shared__ double shm[32];
  double acc = 0.0;
  for (size_t i = threadIdx.x; i < nblocks; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, shm);
  if (threadIdx.x == 0) *out = sqrt(acc);
}

__global__ void scale_kernel(float* g, size_t n, float s) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) g[i] *= s;
}

}  // namespace

Status softmax_xent(Context& ctx, float* losses, float* dlogits, const float* logits,
                    const int32_t* targets, int N, int V, double dloss) {
  if (N < 0 || V <= 0) return InvalidArgument("softmax_xent: need N >= 0 and V > 0");
  if (N == 0) return Status::Ok();
  softmax_xent_kernel<<<N, kXentThreads, 0, ctx.stream()>>>(losses, dlogits, logits, targets, V,
                                                            float(dloss));
  return launch_status("softmax_xent_kernel");
}

Status adamw_update(Context& ctx, float* p, const float* g, float* m, float* v, size_t n,
                    const AdamWParams& hp, int64_t step) {
  if (step < 1)
    return InvalidArgument("adamw_update: step is 1-based, got " + std::to_string(step));
  if (n == 0) return Status::Ok();
  // Scalars formed in double and rounded once, exactly as kernels/cpu/optim.cc does.
  const double t = double(step);
  const double bc1 = 1.0 - std::pow(hp.beta1, t);
  const double bc2 = 1.0 - std::pow(hp.beta2, t);
  AdamWScalars s;
  s.decay = float(1.0 - hp.lr * hp.weight_decay);
  s.b1 = float(hp.beta1);
  s.omb1 = float(1.0 - hp.beta1);
  s.b2 = float(hp.beta2);
  s.omb2 = float(1.0 - hp.beta2);
  s.neg_step = float(-(hp.lr / bc1));
  s.bc2_sqrt = float(std::sqrt(bc2));
  s.eps = float(hp.eps);
  adamw_kernel<<<blocks_for(n, 256, 8192), 256, 0, ctx.stream()>>>(p, g, m, v, n, s);
  return launch_status("adamw_kernel");
}

Status global_norm(Context& ctx, double* norm_out, const float* g, size_t n) {
  const size_t nblocks = n == 0 ? 1 : (n + kNormBlock - 1) / kNormBlock;
  if (nblocks > 0x7fffffffu) return InvalidArgument("global_norm: buffer too large");
  ATOLL_ASSIGN_OR_RETURN(void* scratch, ctx.scratch(nblocks * sizeof(double)));
  double* partial = static_cast<double*>(scratch);
  norm_partial_kernel<<<unsigned(nblocks), kNormThreads, 0, ctx.stream()>>>(partial, g, n);
  ATOLL_RETURN_IF_ERROR(launch_status("norm_partial_kernel"));
  norm_final_kernel<<<1, 1024, 0, ctx.stream()>>>(norm_out, partial, nblocks);
  return launch_status("norm_final_kernel");
}

StatusOr<double> global_norm_host(Context& ctx, const float* g, size_t n) {
  // The result lives in the context's scratch right after global_norm's partials (it asks for
  // the first nblocks doubles of the same, already large enough, area): no device allocation
  // on the training step's path.
  const size_t nblocks = n == 0 ? 1 : (n + kNormBlock - 1) / kNormBlock;
  ATOLL_ASSIGN_OR_RETURN(void* scratch, ctx.scratch((nblocks + 1) * sizeof(double)));
  double* out = static_cast<double*>(scratch) + nblocks;
  ATOLL_RETURN_IF_ERROR(global_norm(ctx, out, g, n));
  double norm = 0.0;
  ATOLL_CUDA_CHECK(
      cudaMemcpyAsync(&norm, out, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream()));
  ATOLL_RETURN_IF_ERROR(ctx.synchronize());
  return norm;
}

StatusOr<float> clip_by_global_norm(Context& ctx, float* g, size_t n, double norm,
                                    double max_norm) {
  if (!(norm > max_norm)) return 1.0f;
  const float scale = float(max_norm / (norm + 1e-6));
  if (n > 0) {
    scale_kernel<<<blocks_for(n, 256, 8192), 256, 0, ctx.stream()>>>(g, n, scale);
    ATOLL_RETURN_IF_ERROR(launch_status("scale_kernel"));
  }
  return scale;
}

}  // namespace atl::kernels::cuda
