// Row and element ops of the CUDA op table: embedding, RMSNorm, RoPE, SwiGLU, add, zero_fill.
// Shapes as in ops.h. One thread block per row for row reductions; no atomics anywhere.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace atl::kernels::cuda {
namespace {

using detail::block_sum;
using detail::blocks_for;
using detail::launch_status;

// ---- embedding ---------------------------------------------------------------------------------
// grid N, block 128: out[n, :] = table[tokens[n], :] (zero row for an out-of-range token).
__global__ void embedding_fwd_kernel(float* out, const int32_t* tokens, const float* table, int V,
                                     int C) {
  const int n = blockIdx.x;
  const int32_t t = tokens[n];
  float* o = out + size_t(n) * C;
  const bool ok = t >= 0 && t < V;
  const float* src = table + size_t(ok ? t : 0) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = ok ? src[c] : 0.0f;
}

__global__ void iota_kernel(int32_t* v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = i;
}

// grid N (one block per sorted position), block 128. The block at the first position of a run
// of equal token ids owns that vocabulary row: dtable[v, c] += dout[pos, c] for the run's
// positions in increasing order (stable sort), exactly the CPU op's sequence of additions.
__global__ void embedding_bwd_kernel(float* dtable, const float* dout, const int32_t* keys,
                                     const int32_t* pos, int N, int V, int C) {
  const int i = blockIdx.x;
  const int32_t v = keys[i];
  if ((i > 0 && keys[i - 1] == v) || v < 0 || v >= V) return;
  int end = i + 1;
  while (end < N && keys[end] == v) ++end;
  float* dst = dtable + size_t(v) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = dst[c];
    for (int j = i; j < end; ++j) acc += dout[size_t(pos[j]) * C + c];
    dst[c] = acc;
  }
}

// ---- RMSNorm
// -------------------------------------------------------------------------------------
constexpr int kRowThreads = 256;

// grid N, block kRowThreads.
__global__ void rmsnorm_fwd_kernel(float* out, float* rstd, const float* x, const float* w, int C,
                                   float eps) {
  __shared__ float shm[32];
  const float* xr = x + size_t(blockIdx.x) * C;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) ss = fmaf(xr[c], xr[c], ss);
  ss = block_sum(ss, shm);
  const float r = 1.0f / sqrtf(ss / float(C) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  float* yr = out + size_t(blockIdx.x) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) yr[c] = __fmul_rn(xr[c], r) * w[c];
}

// dx: grid N, block kRowThreads. dx += r·(g⊙w) − (r³/C)·x·Σ(g⊙w⊙x).
__global__ void rmsnorm_bwd_dx_kernel(float* dx, const float* dout, const float* x, const float* w,
                                      const float* rstd, int C) {
  __shared__ float shm[32];
  const size_t off = size_t(blockIdx.x) * C;
  const float r = rstd[blockIdx.x];
  float dot = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) dot += dout[off + c] * w[c] * x[off + c];
  dot = block_sum(dot, shm);
  const float k = r * r * r * dot / float(C);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    dx[off + c] += r * (dout[off + c] * w[c]) - k * x[off + c];
  }
}

constexpr int kDwChunk = 256;  // rows per partial sum of dw

// grid (ceil(C/128), nchunks), block 128: partial[chunk, c] = Σ_{rows of chunk} dout·(x·r).
__global__ void rmsnorm_bwd_dw_partial(float* partial, const float* dout, const float* x,
                                       const float* rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int n0 = blockIdx.y * kDwChunk;
  const int n1 = min(N, n0 + kDwChunk);
  float acc = 0.0f;
  for (int n = n0; n < n1; ++n) acc += dout[size_t(n) * C + c] * (x[size_t(n) * C + c] * rstd[n]);
  partial[size_t(blockIdx.y) * C + c] = acc;
}
// grid ceil(C/128): dw[c] += Σ_chunk partial[chunk, c] in chunk order.
__global__ void rmsnorm_bwd_dw_final(float* dw, const float* partial, int nchunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.0f;
  for (int k = 0; k < nchunks; ++k) acc += partial[size_t(k) * C + c];
  dw[c] += acc;
}

// ---- RoPE
// ------------------------------------------------------------------------------------------ One
// thread per (row, head, pair). sign +1 forward, -1 backward (inverse rotation).
__global__ void rope_kernel(float* x, int rows, int T, int H, int D, int row_stride, double base,
                            float sign) {
  const int half = D / 2;
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t total = size_t(rows) * H * half;
  if (idx >= total) return;
  const int i = int(idx % half);
  const int h = int((idx / half) % H);
  const int row = int(idx / (size_t(half) * H));
  const int t = row % T;
  const double a = double(t) * pow(base, -2.0 * i / D);
  const float c = float(cos(a));
  const float s = sign * float(sin(a));
  float* xh = x + size_t(row) * row_stride + size_t(h) * D;
  const float x0 = xh[2 * i], x1 = xh[2 * i + 1];
  xh[2 * i] = x0 * c - x1 * s;
  xh[2 * i + 1] = x0 * s + x1 * c;
}

// ---- SwiGLU, add
// -------------------------------------------------------------------------------------
__global__ void swiglu_fwd_kernel(float* out, const float* gu, int N, int F) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(N) * F) return;
  const size_t n = i / F, f = i % F;
  const float g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f];
  out[i] = (g / (1.0f + expf(-g))) * u;
}
__global__ void swiglu_bwd_kernel(float* dgu, const float* dout, const float* gu, int N, int F) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(N) * F) return;
  const size_t n = i / F, f = i % F;
  const size_t gi = n * 2 * F + f, ui = gi + F;
  const float g = gu[gi], u = gu[ui], d = dout[i];
  const float s = 1.0f / (1.0f + expf(-g));
  dgu[gi] += d * u * (s * (1.0f + g * (1.0f - s)));
  dgu[ui] += d * (g * s);
}
// 16-byte accesses for the bulk (when all three pointers are 16-byte aligned), scalar tail.
__global__ void add_kernel(float* out, const float* a, const float* b, size_t n, bool vec) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (vec) {
    const size_t n4 = n / 4;
    for (size_t k = i; k < n4; k += stride) {
      const float4 x = reinterpret_cast<const float4*>(a)[k];
      const float4 y = reinterpret_cast<const float4*>(b)[k];
      reinterpret_cast<float4*>(out)[k] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    done = n4 * 4;
  }
  for (size_t k = done + i; k < n; k += stride) out[k] = a[k] + b[k];
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

Status check_dims(const char* op, long long a, long long b) {
  if (a < 0 || b < 0) return InvalidArgument(std::string(op) + ": negative dimension");
  return Status::Ok();
}

}  // namespace

Status embedding_forward(Context& ctx, float* out, const int32_t* tokens, const float* table, int N,
                         int V, int C) {
  ATOLL_RETURN_IF_ERROR(check_dims("embedding_forward", N, C));
  if (N == 0 || C == 0) return Status::Ok();
  embedding_fwd_kernel<<<N, 128, 0, ctx.stream()>>>(out, tokens, table, V, C);
  return launch_status("embedding_fwd_kernel");
}

Status embedding_backward(Context& ctx, float* dtable, const float* dout, const int32_t* tokens,
                          int N, int V, int C) {
  ATOLL_RETURN_IF_ERROR(check_dims("embedding_backward", N, C));
  if (N == 0 || C == 0) return Status::Ok();
  // Scratch: sorted keys (N), positions in (N) and out (N), then CUB's temporary storage.
  size_t temp_bytes = 0;
  ATOLL_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tokens, static_cast<int32_t*>(nullptr),
                                      static_cast<const int32_t*>(nullptr),
                                      static_cast<int32_t*>(nullptr), N, 0, 32, ctx.stream()));
  const size_t ints = (size_t(3) * N + 63) / 64 * 64;  // keep the temp area 256-byte aligned
  ATOLL_ASSIGN_OR_RETURN(void* scratch, ctx.scratch(ints * sizeof(int32_t) + temp_bytes));
  int32_t* keys = static_cast<int32_t*>(scratch);
  int32_t* pos_in = keys + N;
  int32_t* pos = pos_in + N;
  void* temp = static_cast<int32_t*>(scratch) + ints;
  iota_kernel<<<detail::blocks_exact(N, 256), 256, 0, ctx.stream()>>>(pos_in, N);
  ATOLL_RETURN_IF_ERROR(launch_status("iota_kernel"));
  ATOLL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, keys,
                                                   static_cast<const int32_t*>(pos_in), pos, N, 0,
                                                   32, ctx.stream()));
  embedding_bwd_kernel<<<N, 128, 0, ctx.stream()>>>(dtable, dout, keys, pos, N, V, C);
  return launch_status("embedding_bwd_kernel");
}

Status rmsnorm_forward(Context& ctx, float* out, float* rstd, const float* x, const float* w, int N,
                       int C, double eps) {
  ATOLL_RETURN_IF_ERROR(check_dims("rmsnorm_forward", N, C));
  if (N == 0 || C == 0) return Status::Ok();
  rmsnorm_fwd_kernel<<<N, kRowThreads, 0, ctx.stream()>>>(out, rstd, x, w, C, float(eps));
  return launch_status("rmsnorm_fwd_kernel");
}

Status rmsnorm_backward(Context& ctx, float* dx, float* dw, const float* dout, const float* x,
                        const float* w, const float* rstd, int N, int C) {
  ATOLL_RETURN_IF_ERROR(check_dims("rmsnorm_backward", N, C));
  if (N == 0 || C == 0) return Status::Ok();
  if (dx != nullptr) {
    rmsnorm_bwd_dx_kernel<<<N, kRowThreads, 0, ctx.stream()>>>(dx, dout, x, w, rstd, C);
    ATOLL_RETURN_IF_ERROR(launch_status("rmsnorm_bwd_dx_kernel"));
  }
  if (dw != nullptr) {
    const int nchunks = (N + kDwChunk - 1) / kDwChunk;
    ATOLL_ASSIGN_OR_RETURN(void* scratch, ctx.scratch(size_t(nchunks) * C * sizeof(float)));
    float* partial = static_cast<float*>(scratch);
    const dim3 grid((C + 127) / 128, nchunks);
    rmsnorm_bwd_dw_partial<<<grid, 128, 0, ctx.stream()>>>(partial, dout, x, rstd, N, C);
    ATOLL_RETURN_IF_ERROR(launch_status("rmsnorm_bwd_dw_partial"));
    rmsnorm_bwd_dw_final<<<(C + 127) / 128, 128, 0, ctx.stream()>>>(dw, partial, nchunks, C);
    ATOLL_RETURN_IF_ERROR(launch_status("rmsnorm_bwd_dw_final"));
  }
  return Status::Ok();
}

static Status rope(Context& ctx, float* x, int B, int T, int H, int D, int row_stride, double base,
                   float sign) {
  if (B < 0 || T < 0 || H < 0 || D < 0 || D % 2 != 0) {
    return InvalidArgument("rope: dimensions must be non-negative and D even, got D = " +
                           std::to_string(D));
  }
  const size_t total = size_t(B) * T * H * (D / 2);
  if (total == 0) return Status::Ok();
  rope_kernel<<<blocks_for(total, 256, 0x7fffffffu), 256, 0, ctx.stream()>>>(
      x, B * T, T, H, D, row_stride, base, sign);
  return launch_status("rope_kernel");
}
Status rope_forward(Context& ctx, float* x, int B, int T, int H, int D, int row_stride,
                    double base) {
  return rope(ctx, x, B, T, H, D, row_stride, base, 1.0f);
}
Status rope_backward(Context& ctx, float* dx, int B, int T, int H, int D, int row_stride,
                     double base) {
  return rope(ctx, dx, B, T, H, D, row_stride, base, -1.0f);
}

Status swiglu_forward(Context& ctx, float* out, const float* gu, int N, int F) {
  ATOLL_RETURN_IF_ERROR(check_dims("swiglu_forward", N, F));
  const size_t total = size_t(N) * F;
  if (total == 0) return Status::Ok();
  swiglu_fwd_kernel<<<blocks_for(total, 256, 0x7fffffffu), 256, 0, ctx.stream()>>>(out, gu, N, F);
  return launch_status("swiglu_fwd_kernel");
}
Status swiglu_backward(Context& ctx, float* dgu, const float* dout, const float* gu, int N, int F) {
  ATOLL_RETURN_IF_ERROR(check_dims("swiglu_backward", N, F));
  const size_t total = size_t(N) * F;
  if (total == 0) return Status::Ok();
  swiglu_bwd_kernel<<<blocks_for(total, 256, 0x7fffffffu), 256, 0, ctx.stream()>>>(dgu, dout, gu, N,
                                                                                   F);
  return launch_status("swiglu_bwd_kernel");
}

Status add_forward(Context& ctx, float* out, const float* a, const float* b, size_t n) {
  if (n == 0) return Status::Ok();
  const bool vec = aligned16(out) && aligned16(a) && aligned16(b);
  add_kernel<<<blocks_for(n / 4 + 1, 256), 256, 0, ctx.stream()>>>(out, a, b, n, vec);
  return launch_status("add_kernel");
}

Status zero_fill(Context& ctx, float* out, size_t n) {
  if (n == 0) return Status::Ok();
  return check_cuda(cudaMemsetAsync(out, 0, n * sizeof(float), ctx.stream()), "cudaMemsetAsync");
}

}  // namespace atl::kernels::cuda
