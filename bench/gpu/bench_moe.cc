// MoE layer forward + backward on the GPU (kernels/cuda/moe_ops.h and the dense ops) against a
// dense SwiGLU FFN of equal active FLOPs: the MoE layer's token passes through K experts of
// hidden F, the dense FFN has hidden K·F, so both do 3·2·N·C·K·F FLOPs in the forward (plus the
// router's 2·N·C·E for the MoE layer). The router losses are not part of the GPU path yet.
#include "bench/gpu/bench_moe.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/cuda/moe_ops.h"
#include "kernels/cuda/ops.h"

namespace atl::bench {

namespace cu = atl::kernels::cuda;

namespace {

#define MOE_CHECK(expr) die_if_error((expr), "bench_cuda: " #expr)

template <typename T>
cu::DeviceBuffer<T> buffer(size_t n) {
  auto b = cu::DeviceBuffer<T>::alloc(n);
  die_if_error(b.status(), "bench_cuda: alloc");
  return std::move(b).value();
}

// Uniform(-a, a) values from a fixed LCG (same inputs every run).
cu::DeviceBuffer<float> filled(size_t n, float a, uint32_t seed) {
  std::vector<float> h(n);
  uint32_t r = seed;
  for (auto& v : h) {
    r = r * 1664525u + 1013904223u;
    v = a * (float(r >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
  auto b = buffer<float>(n);
  MOE_CHECK(b.upload(h.data(), n));
  return b;
}

// Mean milliseconds of fn over reps runs after one warm-up, between two stream events. The plan
// synchronizes the stream inside the MoE step (group sizes to the host); the stream's idle time
// while the host catches up falls between the events, so it is counted, as it should be.
template <typename Fn>
double time_ms(cu::Context& ctx, int reps, Fn fn) {
  fn();
  MOE_CHECK(ctx.synchronize());
  cudaEvent_t a, b;
  MOE_CHECK(cu::check_cuda(cudaEventCreate(&a), "cudaEventCreate"));
  MOE_CHECK(cu::check_cuda(cudaEventCreate(&b), "cudaEventCreate"));
  MOE_CHECK(cu::check_cuda(cudaEventRecord(a, ctx.stream()), "cudaEventRecord"));
  for (int i = 0; i < reps; ++i) fn();
  MOE_CHECK(cu::check_cuda(cudaEventRecord(b, ctx.stream()), "cudaEventRecord"));
  MOE_CHECK(cu::check_cuda(cudaEventSynchronize(b), "cudaEventSynchronize"));
  float ms = 0;
  MOE_CHECK(cu::check_cuda(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime"));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return double(ms) / reps;
}

}  // namespace

std::string bench_moe_layer(cu::Context& ctx, bool quick) {
  const int N = quick ? 2048 : 8192, C = 1024, E = 16, K = 2, F = 1024, H = K * F;
  const size_t M = size_t(N) * K, stride = size_t(3) * F * C;
  // MoE weights and activations.
  auto x = filled(size_t(N) * C, 1.0f, 1), dout = filled(size_t(N) * C, 1.0f, 2);
  auto router = filled(size_t(E) * C, 0.05f, 3), experts = filled(E * stride, 0.03f, 4);
  auto logits = buffer<float>(size_t(N) * E), scores = buffer<float>(size_t(N) * E);
  auto idx = buffer<int32_t>(M);
  auto w = buffer<float>(M), dw = buffer<float>(M);
  auto xp = buffer<float>(M * C), gu = buffer<float>(M * 2 * F), swi = buffer<float>(M * F);
  auto yp = buffer<float>(M * C), out = buffer<float>(size_t(N) * C);
  auto dyp = buffer<float>(M * C), dswi = buffer<float>(M * F), dgu = buffer<float>(M * 2 * F);
  auto dxp = buffer<float>(M * C), dx = buffer<float>(size_t(N) * C);
  auto dsc = buffer<float>(size_t(N) * E), dlg = buffer<float>(size_t(N) * E);
  auto drouter = buffer<float>(size_t(E) * C), dexperts = buffer<float>(E * stride);
  cu::MoeDevicePlan plan;
  const float* W = experts.data();
  const size_t down = size_t(2) * F * C;

  auto moe_step = [&] {
    // forward
    MOE_CHECK(cu::matmul_forward(ctx, logits.data(), x.data(), router.data(), N, C, E));
    MOE_CHECK(
        cu::moe_scores_forward(ctx, scores.data(), logits.data(), N, E, cu::MoeScore::kSoftmax));
    MOE_CHECK(cu::moe_topk_forward(ctx, idx.data(), w.data(), scores.data(), N, E, K, true));
    MOE_CHECK(cu::moe_plan(ctx, plan, idx.data(), N, E, K));
    MOE_CHECK(cu::moe_gather_forward(ctx, xp.data(), x.data(), plan, C));
    MOE_CHECK(cu::moe_grouped_matmul_forward(ctx, gu.data(), xp.data(), W, stride, plan, C, 2 * F));
    MOE_CHECK(cu::swiglu_forward(ctx, swi.data(), gu.data(), int(M), F));
    MOE_CHECK(
        cu::moe_grouped_matmul_forward(ctx, yp.data(), swi.data(), W + down, stride, plan, F, C));
    MOE_CHECK(cu::moe_combine_forward(ctx, out.data(), yp.data(), w.data(), plan, C));
    // backward
    MOE_CHECK(cu::zero_fill(ctx, dyp.data(), M * C));
    MOE_CHECK(cu::zero_fill(ctx, dw.data(), M));
    MOE_CHECK(cu::moe_combine_backward(ctx, dyp.data(), dw.data(), dout.data(), yp.data(), w.data(),
                                       plan, C));
    MOE_CHECK(cu::zero_fill(ctx, dswi.data(), M * F));
    MOE_CHECK(cu::moe_grouped_matmul_backward(ctx, dswi.data(), dexperts.data() + down, dyp.data(),
                                              swi.data(), W + down, stride, plan, F, C));
    MOE_CHECK(cu::zero_fill(ctx, dgu.data(), M * 2 * F));
    MOE_CHECK(cu::swiglu_backward(ctx, dgu.data(), dswi.data(), gu.data(), int(M), F));
    MOE_CHECK(cu::zero_fill(ctx, dxp.data(), M * C));
    MOE_CHECK(cu::moe_grouped_matmul_backward(ctx, dxp.data(), dexperts.data(), dgu.data(),
                                              xp.data(), W, stride, plan, C, 2 * F));
    MOE_CHECK(cu::zero_fill(ctx, dx.data(), size_t(N) * C));
    MOE_CHECK(cu::moe_gather_backward(ctx, dx.data(), dxp.data(), plan, C));
    MOE_CHECK(cu::zero_fill(ctx, dsc.data(), size_t(N) * E));
    MOE_CHECK(cu::moe_topk_backward(ctx, dsc.data(), dw.data(), scores.data(), idx.data(), N, E, K,
                                    true));
    MOE_CHECK(cu::zero_fill(ctx, dlg.data(), size_t(N) * E));
    MOE_CHECK(cu::moe_scores_backward(ctx, dlg.data(), dsc.data(), scores.data(), N, E,
                                      cu::MoeScore::kSoftmax));
    MOE_CHECK(cu::matmul_backward(ctx, dx.data(), drouter.data(), dlg.data(), x.data(),
                                  router.data(), N, C, E));
  };

  // Dense SwiGLU FFN of hidden H = K·F: gate|up (2H, C), down (C, H).
  auto wgu = filled(size_t(2) * H * C, 0.03f, 5), wdown = filled(size_t(C) * H, 0.03f, 6);
  auto dwgu = buffer<float>(size_t(2) * H * C), dwdown = buffer<float>(size_t(C) * H);
  auto hgu = buffer<float>(size_t(N) * 2 * H), hswi = buffer<float>(size_t(N) * H);
  auto dhgu = buffer<float>(size_t(N) * 2 * H), dhswi = buffer<float>(size_t(N) * H);
  auto dense_step = [&] {
    MOE_CHECK(cu::matmul_forward(ctx, hgu.data(), x.data(), wgu.data(), N, C, 2 * H));
    MOE_CHECK(cu::swiglu_forward(ctx, hswi.data(), hgu.data(), N, H));
    MOE_CHECK(cu::matmul_forward(ctx, out.data(), hswi.data(), wdown.data(), N, H, C));
    MOE_CHECK(cu::zero_fill(ctx, dhswi.data(), size_t(N) * H));
    MOE_CHECK(cu::matmul_backward(ctx, dhswi.data(), dwdown.data(), dout.data(), hswi.data(),
                                  wdown.data(), N, H, C));
    MOE_CHECK(cu::zero_fill(ctx, dhgu.data(), size_t(N) * 2 * H));
    MOE_CHECK(cu::swiglu_backward(ctx, dhgu.data(), dhswi.data(), hgu.data(), N, H));
    MOE_CHECK(cu::zero_fill(ctx, dx.data(), size_t(N) * C));
    MOE_CHECK(cu::matmul_backward(ctx, dx.data(), dwgu.data(), dhgu.data(), x.data(), wgu.data(), N,
                                  C, 2 * H));
  };

  const int reps = quick ? 3 : 10;
  const double moe_ms = time_ms(ctx, reps, moe_step);
  const double dense_ms = time_ms(ctx, reps, dense_step);
  // Forward + backward FLOPs of the expert / dense GEMMs (3 GEMMs · 2 · N·C·H, backward twice).
  const double flop = 3.0 * 3 * 2 * double(N) * C * H;
  int largest = 0;  // rows of the busiest expert (balance of the random router)
  for (size_t e = 0; e + 1 < plan.host_offsets.size(); ++e)
    largest = std::max(largest, plan.host_offsets[e + 1] - plan.host_offsets[e]);
  char buf[600];
  std::snprintf(
      buf, sizeof(buf),
      "{\"tokens\": %d, \"C\": %d, \"E\": %d, \"K\": %d, \"F\": %d, \"dense_hidden\": %d, "
      "\"moe_ms\": %.3f, \"dense_ms\": %.3f, \"moe_vs_dense\": %.3f, "
      "\"moe_tflops\": %.2f, \"dense_tflops\": %.2f, \"largest_group\": %d}",
      N, C, E, K, F, H, moe_ms, dense_ms, moe_ms / dense_ms, flop / moe_ms / 1e9,
      flop / dense_ms / 1e9, largest);
  return buf;
}

}  // namespace atl::bench
