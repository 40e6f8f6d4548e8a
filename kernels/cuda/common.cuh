// Device-side pieces shared by the .cu files of kernels/cuda (nvcc only).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/core/status.h"
#include "kernels/cuda/runtime.h"

namespace atl::kernels::cuda::detail {

// Status of the launch just made (bad configuration, missing kernel image for this GPU).
inline Status launch_status(const char* kernel) {
  return check_cuda(cudaGetLastError(), (std::string("launching ") + kernel).c_str());
}

// Blocks for n items at `threads` per block, at most `cap`: only for kernels with a grid-stride
// loop, which cover any n with fewer blocks. A kernel with one thread per item and no such loop
// takes blocks_exact (capped only by the grid's x limit), or items past the cap are skipped.
inline unsigned blocks_for(size_t n, unsigned threads, unsigned cap = 65535u * 16u) {
  const size_t b = (n + threads - 1) / threads;
  return b == 0 ? 1u : (b > cap ? cap : static_cast<unsigned>(b));
}
inline unsigned blocks_exact(size_t n, unsigned threads) {
  return blocks_for(n, threads, 0x7fffffffu);
}

// Fixed-tree reductions: butterfly shuffles within a warp, then warp 0 reduces the per-warp
// values in the same fixed pattern. Same inputs and block size => same bits. Every thread of the
// block must call these (they use __syncthreads); `shm` holds >= 32 values.
template <typename T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <typename T>
__device__ inline T block_sum(T v, T* shm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // shm may still be read by a previous reduction
  if (lane == 0) shm[warp] = v;
  __syncthreads();
  T r = lane < nwarps ? shm[lane] : T(0);
  r = warp_sum(r);  // every warp computes the same value: no broadcast round needed
  return r;
}
__device__ inline float block_max(float v, float* shm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shm[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? shm[lane] : -INFINITY;
  return warp_max(r);
}

}  // namespace atl::kernels::cuda::detail
