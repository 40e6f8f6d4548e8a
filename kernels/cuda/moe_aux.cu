// The MoE router losses of the CUDA backend (moe_aux.h): load balance and z-loss, forward and
// backward, in double like the CPU ops (kernels/cpu/moe.cc). No atomics: per-token values are
// one thread each, sums over tokens are one block each with every thread summing a contiguous
// run of tokens in order and the fixed block tree of common.cuh on top. The per-token and
// per-expert formulas are moe_aux_blocks.cuh's (host-tested against the CPU ops); multiply-then-
// add steps round once each there, whatever nvcc would contract (the CPU build may fuse them or
// not, depending on the host's -march), so against the CPU the device agrees to double rounding
// (tests/cuda/moe_aux_test.cc).
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_aux.h"
#include "kernels/cuda/moe_aux_blocks.cuh"

namespace atl::kernels::cuda {
namespace {

using detail::block_sum;
using detail::blocks_exact;
using detail::launch_status;

constexpr unsigned kThreads = 256;

namespace ax = moe_aux;

// inv[n] = 1 / (row normalizer of the probabilities), one thread per token.
__global__ void k_aux_rownorm(double* inv, const float* scores, int N, int E, bool sigmoid) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  inv[n] = ax::inv_row_norm(scores + size_t(n) * E, E, sigmoid);
}

// psum[e] = Σ_n s[n, e] · inv[n]; block e, thread t the tokens [t·chunk, (t+1)·chunk), then the
// fixed block tree.
__global__ void k_aux_colsum(double* psum, const float* scores, const double* inv, int N, int E) {
  __shared__ double shm[32];
  const int e = blockIdx.x;
  const int chunk = (N + int(blockDim.x) - 1) / int(blockDim.x);
  const int n0 = min(N, int(threadIdx.x) * chunk), n1 = min(N, n0 + chunk);
  const double total = block_sum(ax::prob_sum(scores, inv, n0, n1, E, e), shm);
  if (threadIdx.x == 0) psum[e] = total;
}

__global__ void k_aux_final(double* loss, const double* psum, const int32_t* offsets, int N, int E,
                            int K) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *loss = ax::balance_loss(psum, offsets, N, E, K);
}

__global__ void k_aux_bwd(float* dscores, const float* scores, const int32_t* offsets, int N, int E,
                          int K, bool sigmoid, double dloss) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  ax::balance_backward_row(dscores + size_t(n) * E, scores + size_t(n) * E, offsets, N, E, K,
                           sigmoid, dloss);
}

__global__ void k_z_rows(double* sq, const float* logits, int N, int E) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const double lse = ax::row_lse(logits + size_t(n) * E, E);
  sq[n] = lse * lse;
}

// loss = (Σ_n sq[n]) / N, one block: thread t sums [t·chunk, (t+1)·chunk) in order, then the tree.
__global__ void k_z_sum(double* loss, const double* sq, int N) {
  __shared__ double shm[32];
  const int chunk = (N + int(blockDim.x) - 1) / int(blockDim.x);
  const int n0 = min(N, int(threadIdx.x) * chunk), n1 = min(N, n0 + chunk);
  double acc = 0.0;
  for (int n = n0; n < n1; ++n) acc = ax::d_add(acc, sq[n]);
  const double total = block_sum(acc, shm);
  if (threadIdx.x == 0) *loss = total / N;
}

__global__ void k_z_bwd(float* dlogits, const float* logits, int N, int E, double dloss) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  ax::z_backward_row(dlogits + size_t(n) * E, logits + size_t(n) * E, N, E, dloss);
}

Status check_sizes(const char* op, int N, int E) {
  if (N < 0 || E < 1)
    return InvalidArgument(std::string(op) + ": need N >= 0 and E >= 1, got N = " +
                           std::to_string(N) + ", E = " + std::to_string(E));
  return Status::Ok();
}

Status zero_loss(Context& ctx, double* loss) {
  return check_cuda(cudaMemsetAsync(loss, 0, sizeof(double), ctx.stream()),
                    "cudaMemsetAsync (router loss)");
}

}  // namespace

Status moe_aux_loss_forward(Context& ctx, double* loss, double* work, const float* scores,
                            const MoeDevicePlan& plan, MoeScore fn) {
  const int N = plan.N, E = plan.E, K = plan.K;
  ATOLL_RETURN_IF_ERROR(check_sizes("moe_aux_loss_forward", N, E));
  if (N == 0 || K == 0) return zero_loss(ctx, loss);
  double* inv = work;
  double* psum = work + N;
  k_aux_rownorm<<<blocks_exact(size_t(N), kThreads), kThreads, 0, ctx.stream()>>>(
      inv, scores, N, E, fn == MoeScore::kSigmoid);
  ATOLL_RETURN_IF_ERROR(launch_status("moe_aux_loss_forward (row norm)"));
  k_aux_colsum<<<unsigned(E), kThreads, 0, ctx.stream()>>>(psum, scores, inv, N, E);
  ATOLL_RETURN_IF_ERROR(launch_status("moe_aux_loss_forward (expert sums)"));
  k_aux_final<<<1, 1, 0, ctx.stream()>>>(loss, psum, plan.offsets.data(), N, E, K);
  return launch_status("moe_aux_loss_forward (loss)");
}

Status moe_aux_loss_backward(Context& ctx, float* dscores, const float* scores,
                             const MoeDevicePlan& plan, MoeScore fn, double dloss) {
  const int N = plan.N, E = plan.E, K = plan.K;
  ATOLL_RETURN_IF_ERROR(check_sizes("moe_aux_loss_backward", N, E));
  if (N == 0 || K == 0) return Status::Ok();
  k_aux_bwd<<<blocks_exact(size_t(N), kThreads), kThreads, 0, ctx.stream()>>>(
      dscores, scores, plan.offsets.data(), N, E, K, fn == MoeScore::kSigmoid, dloss);
  return launch_status("moe_aux_loss_backward");
}

Status moe_z_loss_forward(Context& ctx, double* loss, double* work, const float* logits, int N,
                          int E) {
  ATOLL_RETURN_IF_ERROR(check_sizes("moe_z_loss_forward", N, E));
  if (N == 0) return zero_loss(ctx, loss);
  k_z_rows<<<blocks_exact(size_t(N), kThreads), kThreads, 0, ctx.stream()>>>(work, logits, N, E);
  ATOLL_RETURN_IF_ERROR(launch_status("moe_z_loss_forward (rows)"));
  k_z_sum<<<1, kThreads, 0, ctx.stream()>>>(loss, work, N);
  return launch_status("moe_z_loss_forward (sum)");
}

Status moe_z_loss_backward(Context& ctx, float* dlogits, const float* logits, int N, int E,
                           double dloss) {
  ATOLL_RETURN_IF_ERROR(check_sizes("moe_z_loss_backward", N, E));
  if (N == 0) return Status::Ok();
  k_z_bwd<<<blocks_exact(size_t(N), kThreads), kThreads, 0, ctx.stream()>>>(dlogits, logits, N, E,
                                                                            dloss);
  return launch_status("moe_z_loss_backward");
}

}  // namespace atl::kernels::cuda
