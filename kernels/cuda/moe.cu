// MoE kernels of the CUDA backend (moe_ops.h): router scores, top-k, the dropless plan, gather,
// combine and their backwards. Every kernel is fp32 and has one owner per output element: no
// atomics, sums in a fixed order. Row-wise ops (scores, top-k) give each token one thread and
// run the CPU op's loops in the CPU op's order: E and K are small, and it keeps them exact where
// the CPU op is exact (top-k, the plan, gather).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_ops.h"
#include "kernels/cuda/moe_rows.cuh"

namespace atl::kernels::cuda {
namespace {

using detail::blocks_for;
using detail::launch_status;

constexpr unsigned kThreads = 256;
constexpr int kChunk = 256;  // pairs per chunk of the plan's counting sort

__global__ void k_scores_fwd(float* scores, const float* logits, int N, int E, bool sigmoid) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float* l = logits + size_t(n) * E;
  float* s = scores + size_t(n) * E;
  if (sigmoid) {
    for (int e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + expf(-l[e]));
    return;
  }
  float mx = l[0];
  for (int e = 1; e < E; ++e) mx = l[e] > mx ? l[e] : mx;
  float sum = 0.0f;
  for (int e = 0; e < E; ++e) sum += s[e] = expf(l[e] - mx);
  const float inv = 1.0f / sum;
  for (int e = 0; e < E; ++e) s[e] *= inv;
}

__global__ void k_scores_bwd(float* dl, const float* dsc, const float* sc, int N, int E,
                             bool sigmoid) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float* ds = dsc + size_t(n) * E;
  const float* s = sc + size_t(n) * E;
  float* d = dl + size_t(n) * E;
  if (sigmoid) {
    for (int e = 0; e < E; ++e) d[e] += ds[e] * (s[e] * (1.0f - s[e]));
    return;
  }
  float dot = 0.0f;
  for (int e = 0; e < E; ++e) dot += ds[e] * s[e];
  for (int e = 0; e < E; ++e) d[e] += s[e] * (ds[e] - dot);
}

// One thread per token: rows::topk_row (moe_rows.cuh, shared with its host twin test).
__global__ void k_topk_fwd(int32_t* idx, float* w, const float* scores, int N, int E, int K,
                           bool renorm) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  rows::topk_row(scores + size_t(n) * E, E, K, renorm, idx + size_t(n) * K, w + size_t(n) * K);
}

__global__ void k_topk_bwd(float* dscores, const float* dw, const float* scores, const int32_t* idx,
                           int N, int E, int K, bool renorm) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float* s = scores + size_t(n) * E;
  const int32_t* id = idx + size_t(n) * K;
  const float* d = dw + size_t(n) * K;
  float* ds = dscores + size_t(n) * E;
  if (!renorm) {
    for (int k = 0; k < K; ++k) ds[id[k]] += d[k];
    return;
  }
  float sum = 0.0f;
  for (int k = 0; k < K; ++k) sum += s[id[k]];
  const float inv = 1.0f / sum;
  float dot = 0.0f;
  for (int k = 0; k < K; ++k) dot += d[k] * (s[id[k]] * inv);
  for (int k = 0; k < K; ++k) ds[id[k]] += (d[k] - dot) * inv;
}

// ---- plan: counts (chunks, E) per chunk of kChunk pairs; flag[0] = 1 + the first bad id seen
// by the lowest chunk holding one (each chunk writes its own flag slot: no race).
__global__ void k_plan_count(int32_t* counts, int32_t* bad, const int32_t* idx, int M, int E,
                             int chunks) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= chunks) return;
  int32_t* c = counts + size_t(ch) * E;
  for (int e = 0; e < E; ++e) c[e] = 0;
  bad[ch] = 0;
  const int end = int(min(static_cast<long long>(M), (ch + 1LL) * kChunk));
  for (int i = ch * kChunk; i < end; ++i) {
    const int e = idx[i];
    if (e < 0 || e >= E) {
      if (bad[ch] == 0) {
        bad[ch] = 1;
        bad[chunks + ch] = e;
      }
      continue;
    }
    ++c[e];
  }
}

// One block. counts become each (chunk, expert)'s first row; offsets (E + 1) written.
__global__ void k_plan_scan(int32_t* counts, int32_t* offsets, int E, int chunks) {
  extern __shared__ int32_t total[];  // (E)
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t run = 0;
    for (int ch = 0; ch < chunks; ++ch) {
      const int32_t t = counts[size_t(ch) * E + e];
      counts[size_t(ch) * E + e] = run;
      run += t;
    }
    total[e] = run;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // exclusive scan over the experts, in order
    int32_t run = 0;
    for (int e = 0; e < E; ++e) {
      const int32_t t = total[e];
      total[e] = run;
      offsets[e] = run;
      run += t;
    }
    offsets[E] = run;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    for (int ch = 0; ch < chunks; ++ch) counts[size_t(ch) * E + e] += total[e];
}

__global__ void k_plan_scatter(int32_t* row_token, int32_t* slot, int32_t* next, const int32_t* idx,
                               int M, int E, int K, int chunks) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= chunks) return;
  int32_t* nx = next + size_t(ch) * E;
  const int end = int(min(static_cast<long long>(M), (ch + 1LL) * kChunk));
  for (int i = ch * kChunk; i < end; ++i) {  // pair order = (token, k) order: stable
    const int e = idx[i];
    if (e < 0 || e >= E) continue;  // reported by the host from k_plan_count's flags
    const int32_t r = nx[e]++;
    row_token[r] = i / K;
    slot[i] = r;
  }
}

__global__ void k_gather_fwd(float* xp, const float* x, const int32_t* row_token, size_t total,
                             int C) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / C, c = i % C;
    xp[i] = x[size_t(row_token[r]) * C + c];
  }
}

__global__ void k_gather_bwd(float* dx, const float* dxp, const int32_t* slot, size_t total, int K,
                             int C) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t n = i / C, c = i % C;
    float d = dx[i];
    for (int k = 0; k < K; ++k) d += dxp[size_t(slot[n * K + k]) * C + c];
    dx[i] = d;
  }
}

__global__ void k_combine_fwd(float* out, const float* yp, const float* w, const int32_t* slot,
                              size_t total, int K, int C) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t n = i / C, c = i % C;
    float o = 0.0f;
    for (int k = 0; k < K; ++k) o += w[n * K + k] * yp[size_t(slot[n * K + k]) * C + c];
    out[i] = o;
  }
}

// dyp rows: one thread per element of the (M, C) routed rows, pair p = n·K + k.
__global__ void k_combine_bwd_dyp(float* dyp, const float* dout, const float* w,
                                  const int32_t* slot, size_t total, int K, int C) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t p = i / C, c = i % C, n = p / K;
    dyp[size_t(slot[p]) * C + c] += w[p] * dout[n * C + c];
  }
}

// dw: one warp per pair; lane j sums c = j, j + 32, ... in order, then a butterfly over lanes.
__global__ void k_combine_bwd_dw(float* dw, const float* dout, const float* yp, const int32_t* slot,
                                 int M, int K, int C) {
  const int lane = threadIdx.x & 31, warps = int(gridDim.x * blockDim.x) >> 5;
  // Whole warps step together (blockDim is a multiple of 32), so the shuffles see all lanes.
  for (int pr = int((blockIdx.x * blockDim.x + threadIdx.x) >> 5); pr < M; pr += warps) {
    const float* d = dout + size_t(pr / K) * C;
    const float* y = yp + size_t(slot[pr]) * C;
    float acc = 0.0f;
    for (int c = lane; c < C; c += 32) acc += d[c] * y[c];
    acc = detail::warp_sum(acc);
    if (lane == 0) dw[pr] += acc;
  }
}

Status check_shape(const char* op, long long a, long long b, long long c) {
  if (a < 0 || b < 0 || c < 0)
    return InvalidArgument(std::string(op) + ": negative size (" + std::to_string(a) + ", " +
                           std::to_string(b) + ", " + std::to_string(c) + ")");
  return Status::Ok();
}

}  // namespace

Status moe_scores_forward(Context& ctx, float* scores, const float* logits, int N, int E,
                          MoeScore fn) {
  ATOLL_RETURN_IF_ERROR(check_shape("moe_scores_forward", N, E, 0));
  if (N == 0 || E == 0) return Status::Ok();
  k_scores_fwd<<<detail::blocks_exact(N, kThreads), kThreads, 0, ctx.stream()>>>(
      scores, logits, N, E, fn == MoeScore::kSigmoid);
  return launch_status("moe_scores_forward");
}

Status moe_scores_backward(Context& ctx, float* dlogits, const float* dscores, const float* scores,
                           int N, int E, MoeScore fn) {
  ATOLL_RETURN_IF_ERROR(check_shape("moe_scores_backward", N, E, 0));
  if (N == 0 || E == 0) return Status::Ok();
  k_scores_bwd<<<detail::blocks_exact(N, kThreads), kThreads, 0, ctx.stream()>>>(
      dlogits, dscores, scores, N, E, fn == MoeScore::kSigmoid);
  return launch_status("moe_scores_backward");
}

Status moe_topk_forward(Context& ctx, int32_t* idx, float* w, const float* scores, int N, int E,
                        int K, bool renormalize) {
  if (K < 1 || K > E)
    return InvalidArgument("moe_topk_forward: K must be in [1, E = " + std::to_string(E) +
                           "], got " + std::to_string(K));
  if (N <= 0) return check_shape("moe_topk_forward", N, E, K);
  k_topk_fwd<<<detail::blocks_exact(N, kThreads), kThreads, 0, ctx.stream()>>>(idx, w, scores, N, E,
                                                                               K, renormalize);
  return launch_status("moe_topk_forward");
}

Status moe_topk_backward(Context& ctx, float* dscores, const float* dw, const float* scores,
                         const int32_t* idx, int N, int E, int K, bool renormalize) {
  ATOLL_RETURN_IF_ERROR(check_shape("moe_topk_backward", N, E, K));
  if (N == 0 || K == 0) return Status::Ok();
  k_topk_bwd<<<detail::blocks_exact(N, kThreads), kThreads, 0, ctx.stream()>>>(
      dscores, dw, scores, idx, N, E, K, renormalize);
  return launch_status("moe_topk_backward");
}

Status moe_plan(Context& ctx, MoeDevicePlan& p, const int32_t* idx, int N, int E, int K) {
  ATOLL_RETURN_IF_ERROR(check_shape("moe_plan", N, E, K));
  if (E < 1) return InvalidArgument("moe_plan: E must be >= 1, got " + std::to_string(E));
  const size_t M = size_t(N) * K;
  if (M > size_t(INT32_MAX)) return InvalidArgument("moe_plan: N·K exceeds 32-bit row indices");
  const int chunks = int((M + kChunk - 1) / kChunk);
  auto ensure = [](DeviceBuffer<int32_t>& b, size_t n) -> Status {
    n = n == 0 ? 1 : n;
    if (b.size() >= n) return Status::Ok();
    auto nb = DeviceBuffer<int32_t>::alloc(n);
    if (!nb.ok()) return nb.status();
    b = std::move(nb).value();
    return Status::Ok();
  };
  // work: counts (chunks, E), then the bad-id flags (chunks) and values (chunks).
  const size_t counts = size_t(chunks) * E;
  ATOLL_RETURN_IF_ERROR(ensure(p.offsets, size_t(E) + 1));
  ATOLL_RETURN_IF_ERROR(ensure(p.row_token, M));
  ATOLL_RETURN_IF_ERROR(ensure(p.slot, M));
  ATOLL_RETURN_IF_ERROR(ensure(p.work, counts + 2 * size_t(chunks)));
  p.N = N;
  p.E = E;
  p.K = K;
  p.host_offsets.assign(size_t(E) + 1, 0);
  if (M == 0) {
    ATOLL_CUDA_CHECK(
        cudaMemsetAsync(p.offsets.data(), 0, (size_t(E) + 1) * sizeof(int32_t), ctx.stream()));
    return Status::Ok();
  }
  int32_t* cnt = p.work.data();
  int32_t* bad = cnt + counts;
  const unsigned cb = blocks_for(size_t(chunks), 64);
  k_plan_count<<<cb, 64, 0, ctx.stream()>>>(cnt, bad, idx, int(M), E, chunks);
  ATOLL_RETURN_IF_ERROR(launch_status("moe_plan (count)"));
  k_plan_scan<<<1, 256, size_t(E) * sizeof(int32_t), ctx.stream()>>>(cnt, p.offsets.data(), E,
                                                                     chunks);
  ATOLL_RETURN_IF_ERROR(launch_status("moe_plan (scan)"));
  k_plan_scatter<<<cb, 64, 0, ctx.stream()>>>(p.row_token.data(), p.slot.data(), cnt, idx, int(M),
                                              E, K, chunks);
  ATOLL_RETURN_IF_ERROR(launch_status("moe_plan (scatter)"));
  // One synchronization: the group bounds and the range flags come back together.
  std::vector<int32_t> flags(2 * size_t(chunks));
  ATOLL_CUDA_CHECK(cudaMemcpyAsync(flags.data(), bad, flags.size() * sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, ctx.stream()));
  ATOLL_CUDA_CHECK(cudaMemcpyAsync(p.host_offsets.data(), p.offsets.data(),
                                   (size_t(E) + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                   ctx.stream()));
  ATOLL_RETURN_IF_ERROR(ctx.synchronize());
  for (int ch = 0; ch < chunks; ++ch) {
    if (flags[ch] != 0) {
      p.host_offsets.clear();  // unusable: the grouped GEMM refuses an unbuilt plan
      return InvalidArgument("moe_plan: expert id " + std::to_string(flags[chunks + ch]) +
                             " outside [0, E = " + std::to_string(E) + ")");
    }
  }
  return Status::Ok();
}

Status moe_gather_forward(Context& ctx, float* xp, const float* x, const MoeDevicePlan& p, int C) {
  const size_t total = size_t(p.N) * p.K * C;
  if (total == 0) return Status::Ok();
  k_gather_fwd<<<blocks_for(total, kThreads), kThreads, 0, ctx.stream()>>>(
      xp, x, p.row_token.data(), total, C);
  return launch_status("moe_gather_forward");
}

Status moe_gather_backward(Context& ctx, float* dx, const float* dxp, const MoeDevicePlan& p,
                           int C) {
  const size_t total = size_t(p.N) * C;
  if (total == 0) return Status::Ok();
  k_gather_bwd<<<blocks_for(total, kThreads), kThreads, 0, ctx.stream()>>>(dx, dxp, p.slot.data(),
                                                                           total, p.K, C);
  return launch_status("moe_gather_backward");
}

Status moe_combine_forward(Context& ctx, float* out, const float* yp, const float* w,
                           const MoeDevicePlan& p, int C) {
  const size_t total = size_t(p.N) * C;
  if (total == 0) return Status::Ok();
  k_combine_fwd<<<blocks_for(total, kThreads), kThreads, 0, ctx.stream()>>>(
      out, yp, w, p.slot.data(), total, p.K, C);
  return launch_status("moe_combine_forward");
}

Status moe_combine_backward(Context& ctx, float* dyp, float* dw, const float* dout, const float* yp,
                            const float* w, const MoeDevicePlan& p, int C) {
  const size_t M = size_t(p.N) * p.K;
  if (M == 0 || C == 0) return Status::Ok();
  if (dyp != nullptr) {
    k_combine_bwd_dyp<<<blocks_for(M * C, kThreads), kThreads, 0, ctx.stream()>>>(
        dyp, dout, w, p.slot.data(), M * C, p.K, C);
    ATOLL_RETURN_IF_ERROR(launch_status("moe_combine_backward (dyp)"));
  }
  if (dw != nullptr) {
    if (M > size_t(INT32_MAX) / 32)
      return InvalidArgument("moe_combine_backward: N·K too large for one warp per pair");
    k_combine_bwd_dw<<<blocks_for(M * 32, kThreads), kThreads, 0, ctx.stream()>>>(
        dw, dout, yp, p.slot.data(), int(M), p.K, C);
    ATOLL_RETURN_IF_ERROR(launch_status("moe_combine_backward (dw)"));
  }
  return Status::Ok();
}

}  // namespace atl::kernels::cuda
