// Kernels of precision_emu.h. The per-element and per-tile work is precision_emu_blocks.cuh's
// (host-tested against the CPU code it mirrors); the transpose only moves floats.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/precision_emu.h"
#include "kernels/cuda/precision_emu_blocks.cuh"

namespace atl::kernels::cuda {
namespace {

using detail::blocks_exact;
using detail::blocks_for;
using detail::launch_status;

constexpr unsigned kThreads = 256;
constexpr int kTile = 32;

// 32x32 tiles through shared memory (the +1 column avoids bank conflicts).
__global__ void k_transpose(float* out, const float* in, int rows, int cols) {
  __shared__ float t[kTile][kTile + 1];
  const int c0 = blockIdx.x * kTile, r0 = blockIdx.y * kTile;
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) t[i][threadIdx.x] = in[size_t(r) * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int c = c0 + i, r = r0 + threadIdx.x;  // out row c, column r
    if (r < rows && c < cols) out[size_t(c) * rows + r] = t[threadIdx.x][i];
  }
}

// One thread per (group of 16 rows, column).
__global__ void k_hadamard(float* m, int groups, int cols, HadamardSigns signs) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(groups) * cols) return;
  const size_t g = i / size_t(cols), c = i % size_t(cols);
  emu::hadamard16_column(m + g * 16 * size_t(cols) + c, size_t(cols), signs.s);
}

__global__ void k_qdq_e5m2(const float* in, float* out, size_t n, float inv, float scale) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = emu::qdq_e5m2_scaled(in[i], inv, scale);
}

// One thread per 16x16 tile.
__global__ void k_qdq_nvfp4_2d(const float* in, float* out, int rows, int cols, float ts) {
  const int nb = (cols + 15) / 16, bands = (rows + 15) / 16;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nb * bands) return;
  emu::qdq_nvfp4_tile(in, out, rows, cols, (i / nb) * 16, (i % nb) * 16, ts);
}

Status check_dims(const char* op, long long rows, long long cols) {
  if (rows < 0 || cols < 0)
    return InvalidArgument(std::string(op) + ": negative size (" + std::to_string(rows) + ", " +
                           std::to_string(cols) + ")");
  return Status::Ok();
}

}  // namespace

Status transpose(Context& ctx, float* out, const float* in, int rows, int cols) {
  ATOLL_RETURN_IF_ERROR(check_dims("transpose", rows, cols));
  if (rows == 0 || cols == 0) return Status::Ok();
  const dim3 grid(unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile));
  if (grid.y > 65535u) return InvalidArgument("transpose: too many rows for one grid");
  k_transpose<<<grid, dim3(kTile, 8), 0, ctx.stream()>>>(out, in, rows, cols);
  return launch_status("transpose");
}

Status hadamard16_rows(Context& ctx, float* m, int rows, int cols, const HadamardSigns& signs) {
  ATOLL_RETURN_IF_ERROR(check_dims("hadamard16_rows", rows, cols));
  const size_t total = size_t(rows / 16) * size_t(cols);
  if (total == 0) return Status::Ok();
  if (total > size_t(kThreads) * 65535u * 16u)
    return InvalidArgument("hadamard16_rows: matrix too large for one launch");
  k_hadamard<<<blocks_exact(total, kThreads), kThreads, 0, ctx.stream()>>>(m, rows / 16, cols,
                                                                           signs);
  return launch_status("hadamard16_rows");
}

Status qdq_e5m2_scaled(Context& ctx, const float* in, float* out, size_t n, float inv_scale,
                       float scale) {
  if (n == 0) return Status::Ok();
  k_qdq_e5m2<<<blocks_for(n, kThreads, 4096), kThreads, 0, ctx.stream()>>>(in, out, n, inv_scale,
                                                                           scale);
  return launch_status("qdq_e5m2_scaled");
}

Status qdq_nvfp4_2d(Context& ctx, const float* in, float* out, int rows, int cols,
                    float tensor_scale) {
  ATOLL_RETURN_IF_ERROR(check_dims("qdq_nvfp4_2d", rows, cols));
  const size_t tiles = size_t((rows + 15) / 16) * size_t((cols + 15) / 16);
  if (tiles == 0) return Status::Ok();
  if (tiles > size_t(INT32_MAX)) return InvalidArgument("qdq_nvfp4_2d: too many tiles");
  k_qdq_nvfp4_2d<<<blocks_exact(tiles, 128), 128, 0, ctx.stream()>>>(in, out, rows, cols,
                                                                     tensor_scale);
  return launch_status("qdq_nvfp4_2d");
}

}  // namespace atl::kernels::cuda
