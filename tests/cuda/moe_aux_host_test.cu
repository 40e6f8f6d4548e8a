// The router-loss formulas of the CUDA kernels (kernels/cuda/moe_aux_blocks.cuh), run on the
// HOST against the CPU ops (kernels/cpu/moe_ops.h moe_aux_loss_*, moe_z_loss_*), softmax and
// sigmoid routers. Runs on every machine (no GPU needed); tests/cuda/moe_aux_test.cc checks the
// kernels themselves (with their block reductions) on a GPU. Tolerances: losses rtol 1e-13 (the
// sums over tokens are split into the kernels' 256 chunks here, one reordering of double
// additions); gradients rtol 1e-6 (the CPU build may fuse a multiply-add the twin rounds twice:
// a double ulp before the rounding to float).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kernels/cpu/moe_ops.h"
#include "kernels/cuda/moe_aux_blocks.cuh"

namespace atl::kernels::cuda {
namespace {

namespace cpu = atl::kernels::cpu;
namespace ax = atl::kernels::cuda::moe_aux;
using testing::close;
using testing::randn;

TEST(MoeAuxHostTest, FormulasMatchTheCpuOps) {
  const int cases[][3] = {{1000, 24, 3}, {37, 64, 8}, {300, 4, 1}, {1, 3, 2}};
  for (const auto& c : cases) {
    const int N = c[0], E = c[1], K = c[2];
    for (const bool sigmoid : {false, true}) {
      SCOPED_TRACE("N=" + std::to_string(N) + " E=" + std::to_string(E) +
                   (sigmoid ? " sigmoid" : " softmax"));
      const cpu::MoeScore fn = sigmoid ? cpu::MoeScore::kSigmoid : cpu::MoeScore::kSoftmax;
      const size_t NE = size_t(N) * E;
      const auto logits = randn(NE, 3u + uint32_t(N), 1.5f);
      std::vector<float> scores(NE), w(size_t(N) * K);
      std::vector<int32_t> idx(size_t(N) * K);
      cpu::moe_scores_forward(scores.data(), logits.data(), N, E, fn);
      cpu::moe_topk_forward(idx.data(), w.data(), scores.data(), N, E, K, true);
      cpu::MoePlan plan;
      cpu::moe_plan(plan, idx.data(), N, E, K);

      // Balance loss: the kernels' chunks (256 threads), chunk sums added in order.
      std::vector<double> inv(static_cast<size_t>(N)), psum(static_cast<size_t>(E));
      for (int n = 0; n < N; ++n)
        inv[size_t(n)] = ax::inv_row_norm(&scores[size_t(n) * E], E, sigmoid);
      const int chunk = (N + 255) / 256;
      for (int e = 0; e < E; ++e) {
        double s = 0;
        for (int n0 = 0; n0 < N; n0 += chunk)
          s += ax::prob_sum(scores.data(), inv.data(), n0, std::min(N, n0 + chunk), E, e);
        psum[size_t(e)] = s;
      }
      const double aux = cpu::moe_aux_loss_forward(scores.data(), plan, fn);
      EXPECT_NEAR(ax::balance_loss(psum.data(), plan.offsets.data(), N, E, K), aux, 1e-13 * aux);

      // z-loss.
      double zs = 0;
      for (int n = 0; n < N; ++n) {
        const double lse = ax::row_lse(&logits[size_t(n) * E], E);
        zs += lse * lse;
      }
      const double z = cpu::moe_z_loss_forward(logits.data(), N, E);
      EXPECT_NEAR(zs / N, z, 1e-13 * z);

      // Backward rows, accumulating into the same random gradients.
      std::vector<float> dsc = randn(NE, 8, 1e-3f), dlg = randn(NE, 9, 1e-3f);
      std::vector<float> tdsc = dsc, tdlg = dlg;
      cpu::moe_aux_loss_backward(dsc.data(), scores.data(), plan, fn, 0.3);
      cpu::moe_z_loss_backward(dlg.data(), logits.data(), N, E, 0.02);
      for (int n = 0; n < N; ++n) {
        ax::balance_backward_row(&tdsc[size_t(n) * E], &scores[size_t(n) * E], plan.offsets.data(),
                                 N, E, K, sigmoid, 0.3);
        ax::z_backward_row(&tdlg[size_t(n) * E], &logits[size_t(n) * E], N, E, 0.02);
      }
      EXPECT_TRUE(close(tdsc, dsc, 1e-6, 1e-12)) << "balance loss gradient";
      EXPECT_TRUE(close(tdlg, dlg, 1e-6, 1e-12)) << "z-loss gradient";
    }
  }
}

}  // namespace
}  // namespace atl::kernels::cuda
