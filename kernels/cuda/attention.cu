// Causal multi-head attention with materialized (B, H, T, T) probabilities, as the CPU op.
// Simple row kernels (one thread block per query row and head); every sum runs in a fixed order
// and no output element is written by two blocks, so the backward needs no atomics: dQ is owned
// by query rows, dK and dV by key rows (which read the dS column written by the first kernel).
// O(T²·D) reads without tiling: a correct reference for the GPU path, not a flash kernel.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace atl::kernels::cuda {
namespace {

using detail::block_max;
using detail::block_sum;
using detail::launch_status;

constexpr int kRowThreads = 256;

// grid (T, B·H), block kRowThreads, dynamic shared D floats (q_t).
// att[b,h,t,j] = softmax_{j≤t}(scale · q_t·k_j), 0 for j > t.
__global__ void att_scores_kernel(float* att, const float* qkv, int T, int H, int D, float scale) {
  extern __shared__ float q_sh[];
  __shared__ float red[32];
  const int t = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H;
  const int C = H * D, C3 = 3 * C;
  const float* q = qkv + (size_t(b) * T + t) * C3 + size_t(h) * D;
  const float* kbase = qkv + size_t(b) * T * C3 + C + size_t(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) q_sh[d] = q[d];
  __syncthreads();
  float* row = att + (size_t(bh) * T + t) * T;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) {
    const float* k = kbase + size_t(j) * C3;
    float s = 0.0f;
    for (int d = 0; d < D; ++d) s += q_sh[d] * k[d];
    s *= scale;
    row[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = block_max(mx, red);
  float sum = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) {
    const float e = expf(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  sum = block_sum(sum, red);
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= t ? row[j] * inv : 0.0f;
}

// grid (T, B·H), block ≥ D: out[b,t,h,d] = Σ_{j≤t} att[t,j] · v[j,d].
__global__ void att_out_kernel(float* out, const float* att, const float* qkv, int T, int H,
                               int D) {
  const int t = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H, d = threadIdx.x;
  if (d >= D) return;
  const int C = H * D, C3 = 3 * C;
  const float* row = att + (size_t(bh) * T + t) * T;
  const float* v = qkv + size_t(b) * T * C3 + 2 * C + size_t(h) * D + d;
  float acc = 0.0f;
  for (int j = 0; j <= t; ++j) acc += row[j] * v[size_t(j) * C3];
  out[(size_t(b) * T + t) * C + size_t(h) * D + d] = acc;
}

// grid (T, B·H), block kRowThreads, dynamic shared D floats (dO_t).
// dS[t,j] = P[t,j]·(dP[t,j] − Σ_i P[t,i]·dP[t,i]) with dP[t,j] = dO_t·v_j, for j ≤ t.
__global__ void att_ds_kernel(float* ds, const float* dout, const float* qkv, const float* att,
                              int T, int H, int D) {
  extern __shared__ float do_sh[];
  __shared__ float red[32];
  const int t = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H;
  const int C = H * D, C3 = 3 * C;
  const float* dO = dout + (size_t(b) * T + t) * C + size_t(h) * D;
  const float* vbase = qkv + size_t(b) * T * C3 + 2 * C + size_t(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) do_sh[d] = dO[d];
  __syncthreads();
  const float* p = att + (size_t(bh) * T + t) * T;
  float* s = ds + (size_t(bh) * T + t) * T;
  float dot = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) {
    const float* v = vbase + size_t(j) * C3;
    float dp = 0.0f;
    for (int d = 0; d < D; ++d) dp += do_sh[d] * v[d];
    s[j] = dp;
    dot += p[j] * dp;
  }
  dot = block_sum(dot, red);
  for (int j = threadIdx.x; j <= t; j += blockDim.x) s[j] = p[j] * (s[j] - dot);
}

// grid (T, B·H), block ≥ D: dq[t,d] += scale · Σ_{j≤t} dS[t,j] · k[j,d].
__global__ void att_dq_kernel(float* dqkv, const float* ds, const float* qkv, int T, int H, int D,
                              float scale) {
  const int t = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H, d = threadIdx.x;
  if (d >= D) return;
  const int C = H * D, C3 = 3 * C;
  const float* s = ds + (size_t(bh) * T + t) * T;
  const float* k = qkv + size_t(b) * T * C3 + C + size_t(h) * D + d;
  float acc = 0.0f;
  for (int j = 0; j <= t; ++j) acc += s[j] * k[size_t(j) * C3];
  dqkv[(size_t(b) * T + t) * C3 + size_t(h) * D + d] += scale * acc;
}

// grid (T, B·H) over key rows j, block ≥ D:
// dk[j,d] += scale · Σ_{t≥j} dS[t,j] · q[t,d] ; dv[j,d] += Σ_{t≥j} P[t,j] · dO[t,d].
__global__ void att_dkv_kernel(float* dqkv, const float* ds, const float* att, const float* dout,
                               const float* qkv, int T, int H, int D, float scale) {
  const int j = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H, d = threadIdx.x;
  if (d >= D) return;
  const int C = H * D, C3 = 3 * C;
  const size_t col = size_t(bh) * T * T + j;
  const float* q = qkv + size_t(b) * T * C3 + size_t(h) * D + d;
  const float* dO = dout + size_t(b) * T * C + size_t(h) * D + d;
  float ak = 0.0f, av = 0.0f;
  for (int t = j; t < T; ++t) {
    ak += ds[col + size_t(t) * T] * q[size_t(t) * C3];
    av += att[col + size_t(t) * T] * dO[size_t(t) * C];
  }
  float* dk = dqkv + (size_t(b) * T + j) * C3 + C + size_t(h) * D + d;
  dk[0] += scale * ak;
  dk[C] += av;  // dv sits C after dk
}

Status check(const char* op, int B, int T, int H, int D) {
  if (B < 0 || T < 0 || H < 0 || D <= 0 || D > 1024 || size_t(B) * H > 65535) {
    return InvalidArgument(std::string(op) + ": need B, T, H >= 0, 0 < D <= 1024, B*H <= 65535 " +
                           "(got B=" + std::to_string(B) + " T=" + std::to_string(T) +
                           " H=" + std::to_string(H) + " D=" + std::to_string(D) + ")");
  }
  return Status::Ok();
}

unsigned d_threads(int D) {
  return unsigned((D + 31) / 32 * 32);
}

}  // namespace

Status attention_forward(Context& ctx, float* out, float* att, const float* qkv, int B, int T,
                         int H, int D) {
  ATOLL_RETURN_IF_ERROR(check("attention_forward", B, T, H, D));
  if (B * H == 0 || T == 0) return Status::Ok();
  const float scale = 1.0f / std::sqrt(float(D));
  const dim3 grid(T, B * H);
  att_scores_kernel<<<grid, kRowThreads, D * sizeof(float), ctx.stream()>>>(att, qkv, T, H, D,
                                                                            scale);
  ATOLL_RETURN_IF_ERROR(launch_status("att_scores_kernel"));
  att_out_kernel<<<grid, d_threads(D), 0, ctx.stream()>>>(out, att, qkv, T, H, D);
  return launch_status("att_out_kernel");
}

Status attention_backward(Context& ctx, float* dqkv, const float* dout, const float* qkv,
                          const float* att, int B, int T, int H, int D) {
  ATOLL_RETURN_IF_ERROR(check("attention_backward", B, T, H, D));
  if (B * H == 0 || T == 0) return Status::Ok();
  const float scale = 1.0f / std::sqrt(float(D));
  ATOLL_ASSIGN_OR_RETURN(void* scratch, ctx.scratch(size_t(B) * H * T * T * sizeof(float)));
  float* ds = static_cast<float*>(scratch);
  const dim3 grid(T, B * H);
  att_ds_kernel<<<grid, kRowThreads, D * sizeof(float), ctx.stream()>>>(ds, dout, qkv, att, T, H,
                                                                        D);
  ATOLL_RETURN_IF_ERROR(launch_status("att_ds_kernel"));
  att_dq_kernel<<<grid, d_threads(D), 0, ctx.stream()>>>(dqkv, ds, qkv, T, H, D, scale);
  ATOLL_RETURN_IF_ERROR(launch_status("att_dq_kernel"));
  att_dkv_kernel<<<grid, d_threads(D), 0, ctx.stream()>>>(dqkv, ds, att, dout, qkv, T, H, D, scale);
  return launch_status("att_dkv_kernel");
}

}  // namespace atl::kernels::cuda
