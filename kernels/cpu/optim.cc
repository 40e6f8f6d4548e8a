// Optimizer pieces on flat fp32 buffers: AdamW, Muon (Newton-Schulz), global gradient norm,
// clipping, LR schedule.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec_math.h"

namespace atl::kernels::cpu {

// PyTorch torch.optim.AdamW (foreach=False, amsgrad=False, maximize=False), operation by
// operation as torch 1.13 / 2.x _single_tensor_adamw runs it on fp32 tensors:
//   p *= f32(1 − lr·wd)
//   m  = fma(g, f32(1 − β1), m·f32(β1))            (mul_ then add_(alpha): a vector fmadd)
//   v  = fma(f32(1 − β2)·g, g, v·f32(β2))          (mul_ then addcmul_, which GCC contracts)
//   p += (f32(−lr / (1 − β1^t)) · m) / (sqrt(v) / f32(sqrt(1 − β2^t)) + f32(eps))
// Scalars are formed in double, as Python does, then rounded to fp32 as PyTorch's kernels do.
// Checked against Debian's torch 1.13 on 10 steps: m and v bitwise equal, p to rounding.
void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const AdamWParams& hp,
                  int64_t step) {
  const double t = double(step);
  const double bc1 = 1.0 - std::pow(double(hp.beta1), t);
  const double bc2 = 1.0 - std::pow(double(hp.beta2), t);
  const float decay = float(1.0 - double(hp.lr) * double(hp.weight_decay));
  const float b1 = float(hp.beta1), omb1 = float(1.0 - double(hp.beta1));
  const float b2 = float(hp.beta2), omb2 = float(1.0 - double(hp.beta2));
  const float neg_step = float(-(double(hp.lr) / bc1));
  const float bc2_sqrt = float(std::sqrt(bc2));
  const float eps = float(hp.eps);
  const long long nn = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static) if (detail::worth_threads(double(n) * 8))
  for (long long i = 0; i < nn; ++i) {
    const float gi = g[i];
    // p·decay is rounded on its own, as torch's separate mul_ does. A compiler that contracts
    // (GCC does for C++ wherever FMA exists, e.g. -march=native) may otherwise fuse it with the
    // final add into one fma, or not, as its tuning decides: the bits would depend on the build,
    // and neither torch's nor the CUDA op's (which rounds twice) could be matched bitwise. The
    // volatile is the barrier; the loop is not vectorized anyway (sqrt, division, fma calls).
    volatile float pi_rounded = p[i] * decay;
    const float pi = pi_rounded;
    const float mi = std::fma(gi, omb1, m[i] * b1);
    const float vi = std::fma(omb2 * gi, gi, v[i] * b2);
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + (neg_step * mi) / denom;
  }
}

void newton_schulz_orthogonalize(float* x, int rows, int cols, int steps,
                                 std::vector<float>& scratch) {
  const bool transposed = rows > cols;
  const int R = transposed ? cols : rows, C = transposed ? rows : cols;  // R <= C
  const size_t rc = size_t(R) * C, rr = size_t(R) * R;
  scratch.resize(2 * rc + 2 * rr);
  float* X = scratch.data();  // (R, C)
  float* Y = X + rc;          // (R, C): the previous X
  float* A = Y + rc;          // (R, R)
  float* B = A + rr;          // (R, R)
  double sum_sq = 0.0;  // in order: one thread, so the same bits for any thread count
  for (size_t i = 0; i < rc; ++i) sum_sq += double(x[i]) * double(x[i]);
  const float inv_norm = float(1.0 / (std::sqrt(sum_sq) + 1e-7));
  if (transposed) {
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) X[size_t(j) * rows + i] = x[size_t(i) * cols + j] * inv_norm;
  } else {
    for (size_t i = 0; i < rc; ++i) X[i] = x[i] * inv_norm;
  }
  constexpr float a = 3.4445f, b = -4.7750f, c = 2.0315f;
  for (int it = 0; it < steps; ++it) {
    detail::gemm_tiled(CblasNoTrans, CblasTrans, R, R, C, 1.0f, X, C, X, C, 0.0f, A, R);
    std::copy(A, A + rr, B);
    detail::gemm_tiled(CblasNoTrans, CblasNoTrans, R, R, R, c, A, R, A, R, b, B, R);
    std::copy(X, X + rc, Y);
    detail::gemm_tiled(CblasNoTrans, CblasNoTrans, R, C, R, 1.0f, B, R, Y, C, a, X, C);
  }
  if (transposed) {
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) x[size_t(i) * cols + j] = X[size_t(j) * rows + i];
  } else {
    std::copy(X, X + rc, x);
  }
}

void muon_update(float* p, const float* g, float* m, int rows, int cols, const MuonParams& hp,
                 MuonScratch& scratch) {
  const size_t n = size_t(rows) * cols;
  // torch.lerp(start, end, w): start + w·(end − start) for w < 0.5, end − (end − start)·(1 − w)
  // otherwise.
  const float w_m = float(1.0 - hp.momentum), beta = float(hp.momentum);
  std::vector<float>& update = scratch.update;
  update.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float mi = w_m < 0.5f ? m[i] + w_m * (g[i] - m[i]) : g[i] - (g[i] - m[i]) * (1.0f - w_m);
    m[i] = mi;
    update[i] = beta < 0.5f ? g[i] + beta * (mi - g[i]) : mi - (mi - g[i]) * (1.0f - beta);
  }
  newton_schulz_orthogonalize(update.data(), rows, cols, hp.ns_steps, scratch.iteration);
  const float decay = float(1.0 - hp.lr * hp.weight_decay);
  const float neg_step = float(-hp.lr * 0.2 * std::sqrt(double(rows > cols ? rows : cols)));
  for (size_t i = 0; i < n; ++i) {
    volatile float decayed = p[i] * decay;  // rounded on its own, as AdamW's (above)
    p[i] = std::fma(neg_step, update[i], float(decayed));
  }
}

// Fixed 4096-element blocks, each summed in double in a fixed order; partial sums are then added
// block by block. Threads split blocks, so the result does not depend on the thread count.
double global_norm(const float* g, size_t n) {
  constexpr size_t kBlock = 4096;
  const long long nblocks = static_cast<long long>((n + kBlock - 1) / kBlock);
  std::vector<double> partial(static_cast<size_t>(nblocks), 0.0);
#pragma omp parallel for schedule(static) if (detail::worth_threads(double(n)))
  for (long long blk = 0; blk < nblocks; ++blk) {
    const size_t i0 = size_t(blk) * kBlock;
    const size_t i1 = i0 + kBlock < n ? i0 + kBlock : n;
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (size_t i = i0; i < i1; ++i) acc += double(g[i]) * double(g[i]);
    partial[size_t(blk)] = acc;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return std::sqrt(total);
}

// torch.nn.utils.clip_grad_norm_ factor: max_norm / (norm + 1e-6), applied only when it shrinks.
float clip_by_global_norm(float* g, size_t n, double norm, double max_norm) {
  if (!(norm > max_norm)) return 1.0f;
  const float scale = float(max_norm / (norm + 1e-6));
  const long long nn = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static) if (detail::worth_threads(double(n)))
  for (long long i = 0; i < nn; ++i) g[i] *= scale;
  return scale;
}

// step (0-based) < warmup: max_lr · (step + 1) / warmup, so the first step already moves and
// step warmup−1 uses max_lr. Then cosine from max_lr (at step = warmup) to min_lr (at
// step = total_steps); min_lr from there on. warmup <= 0 means no warmup; total_steps <= warmup
// means no decay phase (min_lr after warmup).
double lr_schedule(int64_t step, int64_t warmup, int64_t total_steps, double max_lr,
                   double min_lr) {
  if (step < 0) step = 0;
  if (warmup > 0 && step < warmup) return max_lr * double(step + 1) / double(warmup);
  const int64_t start = warmup > 0 ? warmup : 0;
  const int64_t span = total_steps - start;
  if (span <= 0 || step >= total_steps) return min_lr;
  const double progress = double(step - start) / double(span);
  return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace atl::kernels::cpu
