// The MoE ops of the CUDA backend (kernels/cuda/moe_ops.h) against the CPU ops on random inputs
// (ggml's test-backend-ops pattern), plus run-to-run bitwise reproducibility. Skips without a
// GPU. Tolerances:
// - top-k, the plan, gather (forward and backward): bitwise. Same comparisons, same integer
//   counting sort, the same additions in the same order.
// - scores: rtol 1e-5. expf (CUDA, <= 2 ulp) against std::exp, then one sum over E <= 64 terms
//   in the same order; a few ulp of each term, well under 1e-5 relative.
// - combine forward / dyp, top-k and scores backward: rtol 1e-5, atol 1e-6. The same operations
//   in the same order; only FMA contraction may differ (nvcc contracts a·b + c, the host
//   compiler may or may not), one rounding per term.
// - combine dw (a dot product over C in another order: 32 strided partial sums and a butterfly):
//   atol 1e-5·sqrt(C) with unit-variance inputs, the size of float rounding over C terms.
// - grouped GEMM: the dense matmul test's tolerance (cuBLASLt fp32 sums in its own order over
//   IC or N terms): rtol 1e-4, atol 1e-4.
#include <cmath>
#include <random>
#include <string>

#include "cuda/cuda_test_util.h"
#include "kernels/cpu/moe_ops.h"
#include "kernels/cuda/moe_ops.h"
#include "kernels/cuda/ops.h"

namespace atl::kernels::cuda {
namespace {

namespace cpu = atl::kernels::cpu;
using testing::close;
using testing::CudaTest;
using testing::randn;
using testing::same_bits;

using MoeTest = CudaTest;

// Scores with exact ties (values drawn from 8 levels) so the lower-id rule decides often.
std::vector<float> tied_scores(int N, int E, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<float> s(size_t(N) * E);
  for (auto& v : s) v = float(g() % 8) / 8.0f + 0.0625f;
  return s;
}

// A CPU plan and the same plan on the device, from the CPU top-k of random scores.
struct Routed {
  std::vector<int32_t> idx;
  std::vector<float> w;
  cpu::MoePlan plan;
};
Routed route(int N, int E, int K, uint32_t seed) {
  Routed r;
  const auto s = tied_scores(N, E, seed);
  r.idx.resize(size_t(N) * K);
  r.w.resize(size_t(N) * K);
  cpu::moe_topk_forward(r.idx.data(), r.w.data(), s.data(), N, E, K, true);
  cpu::moe_plan(r.plan, r.idx.data(), N, E, K);
  return r;
}

TEST_F(MoeTest, ScoresMatchCpu) {
  const int N = 300, E = 24;
  const auto logits = randn(size_t(N) * E, 1, 2.0f), dsc = randn(size_t(N) * E, 2);
  for (MoeScore fn : {MoeScore::kSoftmax, MoeScore::kSigmoid}) {
    std::vector<float> sc(size_t(N) * E), dl = randn(size_t(N) * E, 3);
    auto d_l = to_device(logits), d_ds = to_device(dsc), d_s = to_device(sc), d_dl = to_device(dl);
    cpu::moe_scores_forward(sc.data(), logits.data(), N, E, fn);
    cpu::moe_scores_backward(dl.data(), dsc.data(), sc.data(), N, E, fn);
    ASSERT_OK(moe_scores_forward(ctx(), d_s.data(), d_l.data(), N, E, fn));
    EXPECT_TRUE(close(to_host(d_s, sc.size()), sc, 1e-5, 1e-7));
    ASSERT_OK(d_s.upload(sc.data(), sc.size()));  // the backward from the CPU's scores
    ASSERT_OK(moe_scores_backward(ctx(), d_dl.data(), d_ds.data(), d_s.data(), N, E, fn));
    EXPECT_TRUE(close(to_host(d_dl, dl.size()), dl, 1e-5, 1e-6));
  }
}

TEST_F(MoeTest, TopkIsBitwiseTheCpuOpWithTiesToTheLowerId) {
  const int N = 500;
  for (int E : {8, 100}) {  // E = 100: past the CPU op's 64-bit "taken" mask
    for (int K : {1, 2, 5}) {
      for (bool renorm : {true, false}) {
        SCOPED_TRACE("E=" + std::to_string(E) + " K=" + std::to_string(K));
        const auto s = tied_scores(N, E, 4 + K);
        std::vector<int32_t> idx(size_t(N) * K);
        std::vector<float> w(size_t(N) * K);
        cpu::moe_topk_forward(idx.data(), w.data(), s.data(), N, E, K, renorm);
        auto d_s = to_device(s);
        auto d_idx = to_device(std::vector<int32_t>(idx.size(), -7));
        auto d_w = to_device(std::vector<float>(w.size()));
        ASSERT_OK(moe_topk_forward(ctx(), d_idx.data(), d_w.data(), d_s.data(), N, E, K, renorm));
        EXPECT_EQ(to_host(d_idx, idx.size()), idx);
        EXPECT_TRUE(same_bits(to_host(d_w, w.size()), w));
        // backward
        const auto dw = randn(w.size(), 5);
        std::vector<float> ds = randn(s.size(), 6);
        auto d_dw = to_device(dw), d_ds = to_device(ds);
        cpu::moe_topk_backward(ds.data(), dw.data(), s.data(), idx.data(), N, E, K, renorm);
        ASSERT_OK(moe_topk_backward(ctx(), d_ds.data(), d_dw.data(), d_s.data(), d_idx.data(), N, E,
                                    K, renorm));
        EXPECT_TRUE(close(to_host(d_ds, ds.size()), ds, 1e-5, 1e-6));
      }
    }
  }
  // NaN scores (a diverged router): the same picks as the CPU, every id in [0, E).
  {
    const int E = 8, K = 3;
    auto s = tied_scores(N, E, 40);
    for (int n = 0; n < N; n += 7) s[size_t(n) * E + size_t(n % E)] = std::nanf("");
    for (int e = 0; e < E; ++e) s[size_t(3) * E + size_t(e)] = std::nanf("");  // a NaN row
    std::vector<int32_t> idx(size_t(N) * K);
    std::vector<float> w(size_t(N) * K);
    cpu::moe_topk_forward(idx.data(), w.data(), s.data(), N, E, K, true);
    auto d_s = to_device(s);
    auto d_idx = to_device(std::vector<int32_t>(idx.size(), -7));
    auto d_w = to_device(std::vector<float>(w.size()));
    ASSERT_OK(moe_topk_forward(ctx(), d_idx.data(), d_w.data(), d_s.data(), N, E, K, true));
    EXPECT_EQ(to_host(d_idx, idx.size()), idx);
    EXPECT_TRUE(same_bits(to_host(d_w, w.size()), w, /*nan_any=*/true));
  }
  auto d_s = to_device(std::vector<float>(8));
  auto d_i = to_device(std::vector<int32_t>(8));
  EXPECT_FALSE(moe_topk_forward(ctx(), d_i.data(), d_s.data(), d_s.data(), 1, 4, 5, true).ok());
}

TEST_F(MoeTest, PlanIsTheCpuPlanAndRejectsBadIds) {
  // N·K = 1400 pairs: several 256-pair chunks; E = 9 with expert 4 never chosen (empty group).
  const int N = 700, E = 9, K = 2;
  std::mt19937 g(7);
  std::vector<int32_t> idx(size_t(N) * K);
  for (int n = 0; n < N; ++n) {
    const int a = int(g() % 8), b = (a + 1 + int(g() % 7)) % 8;  // two distinct of 0..7
    idx[size_t(n) * K] = a < 4 ? a : a + 1;
    idx[size_t(n) * K + 1] = b < 4 ? b : b + 1;
  }
  cpu::MoePlan want;
  cpu::moe_plan(want, idx.data(), N, E, K);
  ASSERT_EQ(want.offsets[4], want.offsets[5]);
  auto d_idx = to_device(idx);
  MoeDevicePlan p;
  ASSERT_OK(moe_plan(ctx(), p, d_idx.data(), N, E, K));
  EXPECT_EQ(p.host_offsets, want.offsets);
  EXPECT_EQ(to_host(p.offsets, want.offsets.size()), want.offsets);
  EXPECT_EQ(to_host(p.row_token, want.row_token.size()), want.row_token);
  EXPECT_EQ(to_host(p.slot, want.slot.size()), want.slot);
  idx[999] = 9;
  auto d_bad = to_device(idx);
  const Status st = moe_plan(ctx(), p, d_bad.data(), N, E, K);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("expert id 9"), std::string::npos) << st.message();
}

TEST_F(MoeTest, GatherAndCombineMatchCpu) {
  const int N = 333, E = 6, K = 3, C = 70;
  const Routed r = route(N, E, K, 8);
  const size_t M = size_t(N) * K;
  const auto x = randn(size_t(N) * C, 9), dxp = randn(M * C, 10), yp = randn(M * C, 11),
             dout = randn(size_t(N) * C, 12);
  std::vector<float> xp(M * C), dx = randn(size_t(N) * C, 13), out(size_t(N) * C),
                                dyp = randn(M * C, 14), dw = randn(M, 15);
  auto d_idx = to_device(r.idx);
  MoeDevicePlan p;
  ASSERT_OK(moe_plan(ctx(), p, d_idx.data(), N, E, K));
  auto d_x = to_device(x), d_xp = to_device(xp), d_dxp = to_device(dxp), d_dx = to_device(dx);
  auto d_yp = to_device(yp), d_w = to_device(r.w), d_out = to_device(out), d_dout = to_device(dout);
  auto d_dyp = to_device(dyp), d_dw = to_device(dw);
  cpu::moe_gather_forward(xp.data(), x.data(), r.plan, C);
  cpu::moe_gather_backward(dx.data(), dxp.data(), r.plan, C);
  cpu::moe_combine_forward(out.data(), yp.data(), r.w.data(), r.plan, C);
  cpu::moe_combine_backward(dyp.data(), dw.data(), dout.data(), yp.data(), r.w.data(), r.plan, C);
  ASSERT_OK(moe_gather_forward(ctx(), d_xp.data(), d_x.data(), p, C));
  ASSERT_OK(moe_gather_backward(ctx(), d_dx.data(), d_dxp.data(), p, C));
  ASSERT_OK(moe_combine_forward(ctx(), d_out.data(), d_yp.data(), d_w.data(), p, C));
  ASSERT_OK(moe_combine_backward(ctx(), d_dyp.data(), d_dw.data(), d_dout.data(), d_yp.data(),
                                 d_w.data(), p, C));
  EXPECT_TRUE(same_bits(to_host(d_xp, xp.size()), xp));
  EXPECT_TRUE(same_bits(to_host(d_dx, dx.size()), dx));
  EXPECT_TRUE(close(to_host(d_out, out.size()), out, 1e-5, 1e-6));
  EXPECT_TRUE(close(to_host(d_dyp, dyp.size()), dyp, 1e-5, 1e-6));
  EXPECT_TRUE(close(to_host(d_dw, dw.size()), dw, 0.0, 1e-5 * std::sqrt(double(C))));
}

TEST_F(MoeTest, GroupedMatmulMatchesCpuWithAnEmptyGroup) {
  const int N = 90, E = 5, K = 2, IC = 48, OC = 40;
  Routed r = route(N, E, K, 16);
  for (auto& e : r.idx) e = e == 3 ? 4 : e;  // expert 3 empty (a token may now pick 4 twice)
  cpu::moe_plan(r.plan, r.idx.data(), N, E, K);
  ASSERT_EQ(r.plan.offsets[3], r.plan.offsets[4]);
  const size_t M = size_t(N) * K, stride = size_t(OC) * IC + 16;
  const auto x = randn(M * IC, 17), w = randn(E * stride, 18, 0.1f), dout = randn(M * OC, 19);
  std::vector<float> out(M * OC), dx = randn(M * IC, 20), dw = randn(E * stride, 21);
  auto d_idx = to_device(r.idx);
  MoeDevicePlan p;
  ASSERT_OK(moe_plan(ctx(), p, d_idx.data(), N, E, K));
  auto d_x = to_device(x), d_w = to_device(w), d_dout = to_device(dout), d_out = to_device(out);
  auto d_dx = to_device(dx), d_dw = to_device(dw);
  cpu::moe_grouped_matmul_forward(out.data(), x.data(), w.data(), stride, r.plan, IC, OC);
  cpu::moe_grouped_matmul_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), stride,
                                   r.plan, IC, OC);
  ASSERT_OK(
      moe_grouped_matmul_forward(ctx(), d_out.data(), d_x.data(), d_w.data(), stride, p, IC, OC));
  ASSERT_OK(moe_grouped_matmul_backward(ctx(), d_dx.data(), d_dw.data(), d_dout.data(), d_x.data(),
                                        d_w.data(), stride, p, IC, OC));
  EXPECT_TRUE(close(to_host(d_out, out.size()), out, 1e-4, 1e-4));
  EXPECT_TRUE(close(to_host(d_dx, dx.size()), dx, 1e-4, 1e-4));
  EXPECT_TRUE(close(to_host(d_dw, dw.size()), dw, 1e-4, 1e-4));  // padding untouched too
  MoeDevicePlan unbuilt;
  EXPECT_FALSE(moe_grouped_matmul_forward(ctx(), d_out.data(), d_x.data(), d_w.data(), stride,
                                          unbuilt, IC, OC)
                   .ok());
}

// The routed MoE layer composed of the device ops (as bench_moe.cc runs it) against the CPU
// layer moe_ffn_forward/backward without router losses: output, dx and every weight gradient.
// Tolerance 1e-4 (the grouped GEMMs' through three chained GEMMs). Random logits keep the K-th
// and (K+1)-th scores of every token far apart next to the ~1e-7 score difference, so both sides
// route identically (checked: idx equal).
TEST_F(MoeTest, RoutedLayerMatchesTheCpuLayer) {
  const int N = 256, C = 64, E = 8, K = 2, F = 32;
  const size_t M = size_t(N) * K, stride = size_t(3) * F * C, down = size_t(2) * F * C;
  const auto x = randn(size_t(N) * C, 30), router = randn(size_t(E) * C, 31, 0.3f),
             experts = randn(E * stride, 32, 0.1f), dout = randn(size_t(N) * C, 33);
  cpu::MoeFfnShape shape;
  shape.C = C, shape.E = E, shape.K = K, shape.F = F;
  cpu::MoeFfnWork<float> ws;
  std::vector<float> out(size_t(N) * C), dx(size_t(N) * C, 0.0f), dr(size_t(E) * C, 0.0f),
      de(E * stride, 0.0f);
  cpu::moe_ffn_forward<float>(ws, out.data(), x.data(), router.data(), experts.data(), nullptr,
                              nullptr, N, shape);
  cpu::moe_ffn_backward<float>(ws, dx.data(), dr.data(), de.data(), nullptr, nullptr, dout.data(),
                               x.data(), router.data(), experts.data(), nullptr, nullptr, shape,
                               0.0, 0.0);
  auto z = [&](size_t n) { return to_device(std::vector<float>(n, 0.0f)); };
  auto d_x = to_device(x), d_r = to_device(router), d_e = to_device(experts);
  auto d_dout = to_device(dout);
  auto lg = z(size_t(N) * E), sc = z(size_t(N) * E), w = z(M), xp = z(M * C), gu = z(M * 2 * F);
  auto swi = z(M * F), yp = z(M * C), o = z(size_t(N) * C), dyp = z(M * C), dw = z(M);
  auto dswi = z(M * F), dgu = z(M * 2 * F), dxp = z(M * C), ddx = z(size_t(N) * C);
  auto dsc = z(size_t(N) * E), dlg = z(size_t(N) * E), ddr = z(size_t(E) * C), dde = z(E * stride);
  auto idx = to_device(std::vector<int32_t>(M));
  const float* W = d_e.data();
  MoeDevicePlan p;
  ASSERT_OK(matmul_forward(ctx(), lg.data(), d_x.data(), d_r.data(), N, C, E));
  ASSERT_OK(moe_scores_forward(ctx(), sc.data(), lg.data(), N, E, MoeScore::kSoftmax));
  ASSERT_OK(moe_topk_forward(ctx(), idx.data(), w.data(), sc.data(), N, E, K, true));
  ASSERT_OK(moe_plan(ctx(), p, idx.data(), N, E, K));
  ASSERT_OK(moe_gather_forward(ctx(), xp.data(), d_x.data(), p, C));
  ASSERT_OK(moe_grouped_matmul_forward(ctx(), gu.data(), xp.data(), W, stride, p, C, 2 * F));
  ASSERT_OK(swiglu_forward(ctx(), swi.data(), gu.data(), int(M), F));
  ASSERT_OK(moe_grouped_matmul_forward(ctx(), yp.data(), swi.data(), W + down, stride, p, F, C));
  ASSERT_OK(moe_combine_forward(ctx(), o.data(), yp.data(), w.data(), p, C));
  ASSERT_OK(
      moe_combine_backward(ctx(), dyp.data(), dw.data(), d_dout.data(), yp.data(), w.data(), p, C));
  ASSERT_OK(moe_grouped_matmul_backward(ctx(), dswi.data(), dde.data() + down, dyp.data(),
                                        swi.data(), W + down, stride, p, F, C));
  ASSERT_OK(swiglu_backward(ctx(), dgu.data(), dswi.data(), gu.data(), int(M), F));
  ASSERT_OK(moe_grouped_matmul_backward(ctx(), dxp.data(), dde.data(), dgu.data(), xp.data(), W,
                                        stride, p, C, 2 * F));
  ASSERT_OK(moe_gather_backward(ctx(), ddx.data(), dxp.data(), p, C));
  ASSERT_OK(moe_topk_backward(ctx(), dsc.data(), dw.data(), sc.data(), idx.data(), N, E, K, true));
  ASSERT_OK(
      moe_scores_backward(ctx(), dlg.data(), dsc.data(), sc.data(), N, E, MoeScore::kSoftmax));
  ASSERT_OK(
      matmul_backward(ctx(), ddx.data(), ddr.data(), dlg.data(), d_x.data(), d_r.data(), N, C, E));
  ASSERT_EQ(to_host(idx, M), std::vector<int32_t>(ws.idx.begin(), ws.idx.begin() + M));
  EXPECT_TRUE(close(to_host(o, out.size()), out, 1e-4, 1e-4));
  EXPECT_TRUE(close(to_host(ddx, dx.size()), dx, 1e-4, 1e-4));
  EXPECT_TRUE(close(to_host(ddr, dr.size()), dr, 1e-4, 1e-4));
  EXPECT_TRUE(close(to_host(dde, de.size()), de, 1e-4, 1e-4));
}

// The whole routed path twice on the same inputs: the same bits (no atomics anywhere).
TEST_F(MoeTest, RoutedPathIsBitwiseReproducible) {
  const int N = 512, E = 8, K = 2, C = 64;
  const auto logits = randn(size_t(N) * E, 22), x = randn(size_t(N) * C, 23),
             dout = randn(size_t(N) * C, 24);
  auto run = [&](std::vector<float>& out, std::vector<float>& dw) {
    auto d_l = to_device(logits), d_x = to_device(x), d_dout = to_device(dout);
    auto d_s = to_device(std::vector<float>(size_t(N) * E));
    auto d_idx = to_device(std::vector<int32_t>(size_t(N) * K));
    auto d_w = to_device(std::vector<float>(size_t(N) * K));
    auto d_xp = to_device(std::vector<float>(size_t(N) * K * C));
    auto d_out = to_device(std::vector<float>(size_t(N) * C));
    auto d_dw = to_device(std::vector<float>(size_t(N) * K));
    MoeDevicePlan p;
    ASSERT_OK(moe_scores_forward(ctx(), d_s.data(), d_l.data(), N, E, MoeScore::kSoftmax));
    ASSERT_OK(moe_topk_forward(ctx(), d_idx.data(), d_w.data(), d_s.data(), N, E, K, true));
    ASSERT_OK(moe_plan(ctx(), p, d_idx.data(), N, E, K));
    ASSERT_OK(moe_gather_forward(ctx(), d_xp.data(), d_x.data(), p, C));
    ASSERT_OK(moe_combine_forward(ctx(), d_out.data(), d_xp.data(), d_w.data(), p, C));
    ASSERT_OK(moe_combine_backward(ctx(), nullptr, d_dw.data(), d_dout.data(), d_xp.data(),
                                   d_w.data(), p, C));
    out = to_host(d_out, size_t(N) * C);
    dw = to_host(d_dw, size_t(N) * K);
  };
  std::vector<float> o1, o2, w1, w2;
  run(o1, w1);
  run(o2, w2);
  EXPECT_TRUE(same_bits(o1, o2));
  EXPECT_TRUE(same_bits(w1, w2));
}

}  // namespace
}  // namespace atl::kernels::cuda
