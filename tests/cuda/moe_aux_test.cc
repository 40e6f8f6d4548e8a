// The MoE router losses on the device (kernels/cuda/moe_aux.h) against the CPU ops
// (kernels/cpu/moe_ops.h, moe_aux_loss_* and moe_z_loss_*), softmax and sigmoid routers, on
// router scores and plans made by the CPU ops from random logits. Skips without a GPU.
// Tolerances:
// - loss values (double): rtol 1e-12. Both sum the same double terms, the device in a fixed
//   tree instead of token order (a few ulps of double over <= 1000 terms), and the z-loss uses
//   the device's double exp/log (<= 2 ulp each) against the host's.
// - gradients (float): rtol 1e-5, atol 1e-9. The same double arithmetic rounded once to float
//   and added to the same float; the result differs by at most an ulp of float or two.
#include "kernels/cuda/moe_aux.h"

#include <cmath>
#include <string>

#include "cuda/cuda_test_util.h"
#include "kernels/cpu/moe_ops.h"
#include "kernels/cuda/moe_ops.h"

namespace atl::kernels::cuda {
namespace {

namespace cpu = atl::kernels::cpu;
using testing::close;
using testing::CudaTest;
using testing::randn;

using MoeAuxTest = CudaTest;

struct Case {
  int N, E, K;
};

// Downloads one device double.
double read_double(Context& ctx, const DeviceBuffer<double>& d, size_t i = 0) {
  double v = 0;
  EXPECT_TRUE(ctx.synchronize().ok());
  std::vector<double> h(d.size());
  EXPECT_TRUE(d.download(h.data(), h.size()).ok());
  v = h[i];
  return v;
}

TEST_F(MoeAuxTest, LossesAndGradientsMatchTheCpuOps) {
  // Several chunks per thread (N = 1000 > 256), E past a warp, K = E (every expert every token),
  // a single token.
  const Case cases[] = {{1000, 24, 3}, {37, 64, 8}, {300, 4, 1}, {5, 6, 6}, {1, 3, 2}};
  for (const Case& c : cases) {
    for (MoeScore fn : {MoeScore::kSoftmax, MoeScore::kSigmoid}) {
      SCOPED_TRACE("N=" + std::to_string(c.N) + " E=" + std::to_string(c.E) + " K=" +
                   std::to_string(c.K) + (fn == MoeScore::kSigmoid ? " sigmoid" : " softmax"));
      const size_t NE = size_t(c.N) * c.E;
      const auto logits = randn(NE, 11 + c.N, 1.5f);
      std::vector<float> scores(NE), w(size_t(c.N) * c.K);
      std::vector<int32_t> idx(size_t(c.N) * c.K);
      cpu::moe_scores_forward(scores.data(), logits.data(), c.N, c.E, fn);
      cpu::moe_topk_forward(idx.data(), w.data(), scores.data(), c.N, c.E, c.K, true);
      cpu::MoePlan plan;
      cpu::moe_plan(plan, idx.data(), c.N, c.E, c.K);

      auto d_logits = to_device(logits), d_scores = to_device(scores);
      auto d_idx = to_device(idx);
      MoeDevicePlan dplan;
      ASSERT_OK(moe_plan(ctx(), dplan, d_idx.data(), c.N, c.E, c.K));
      auto d_loss = to_device(std::vector<double>(2, -1.0));
      auto d_work = to_device(std::vector<double>(moe_aux_work_size(c.N, c.E), 0.0));

      // Forward: the loss values.
      const double aux = cpu::moe_aux_loss_forward(scores.data(), plan, fn);
      const double z = cpu::moe_z_loss_forward(logits.data(), c.N, c.E);
      ASSERT_OK(
          moe_aux_loss_forward(ctx(), d_loss.data(), d_work.data(), d_scores.data(), dplan, fn));
      ASSERT_OK(
          moe_z_loss_forward(ctx(), d_loss.data() + 1, d_work.data(), d_logits.data(), c.N, c.E));
      const double g_aux = read_double(ctx(), d_loss, 0), g_z = read_double(ctx(), d_loss, 1);
      EXPECT_NEAR(g_aux, aux, 1e-12 * std::abs(aux)) << "balance loss";
      EXPECT_NEAR(g_z, z, 1e-12 * std::abs(z)) << "z-loss";
      EXPECT_GT(aux, 0.0);
      EXPECT_GT(z, 0.0);
      // Run to run: the same bits.
      ASSERT_OK(
          moe_aux_loss_forward(ctx(), d_loss.data(), d_work.data(), d_scores.data(), dplan, fn));
      ASSERT_OK(
          moe_z_loss_forward(ctx(), d_loss.data() + 1, d_work.data(), d_logits.data(), c.N, c.E));
      EXPECT_EQ(read_double(ctx(), d_loss, 0), g_aux);
      EXPECT_EQ(read_double(ctx(), d_loss, 1), g_z);

      // Backward, accumulating into small random gradients (coefficients as the model's).
      std::vector<float> dsc = randn(NE, 21, 1e-3f), dlg = randn(NE, 22, 1e-3f);
      auto d_dsc = to_device(dsc), d_dlg = to_device(dlg);
      cpu::moe_aux_loss_backward(dsc.data(), scores.data(), plan, fn, 0.25);
      cpu::moe_z_loss_backward(dlg.data(), logits.data(), c.N, c.E, 0.125);
      ASSERT_OK(moe_aux_loss_backward(ctx(), d_dsc.data(), d_scores.data(), dplan, fn, 0.25));
      ASSERT_OK(moe_z_loss_backward(ctx(), d_dlg.data(), d_logits.data(), c.N, c.E, 0.125));
      EXPECT_TRUE(close(to_host(d_dsc, NE), dsc, 1e-5, 1e-9)) << "balance loss gradient";
      EXPECT_TRUE(close(to_host(d_dlg, NE), dlg, 1e-5, 1e-9)) << "z-loss gradient";
    }
  }
}

TEST_F(MoeAuxTest, NoTokensGiveZeroLossesAndBadSizesOneLine) {
  MoeDevicePlan dplan;
  auto d_idx = to_device(std::vector<int32_t>(1, 0));
  ASSERT_OK(moe_plan(ctx(), dplan, d_idx.data(), 0, 4, 2));
  auto d_loss = to_device(std::vector<double>(2, -1.0));
  auto d_work = to_device(std::vector<double>(8, 0.0));
  auto d_f = to_device(std::vector<float>(4, 0.0f));
  ASSERT_OK(moe_aux_loss_forward(ctx(), d_loss.data(), d_work.data(), d_f.data(), dplan,
                                 MoeScore::kSoftmax));
  ASSERT_OK(moe_z_loss_forward(ctx(), d_loss.data() + 1, d_work.data(), d_f.data(), 0, 4));
  EXPECT_EQ(read_double(ctx(), d_loss, 0), 0.0);
  EXPECT_EQ(read_double(ctx(), d_loss, 1), 0.0);
  const Status s = moe_z_loss_forward(ctx(), d_loss.data(), d_work.data(), d_f.data(), 3, 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("E >= 1"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace atl::kernels::cuda
