// Low-precision training GEMMs: each recipe and GEMM role against an explicit quantize /
// dequantize + fp32 GEMM built from kernels/formats, fp32 bitwise unchanged, determinism (seed,
// threads), unbiased stochastic rounding, orthogonal Hadamard transform, training runs.
#include "algorithms/model/precision.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/philox.h"
#include "kernels/cpu/ops.h"
#include "kernels/formats/convert.h"
#include "kernels/formats/mx.h"
#include "kernels/formats/nvfp4.h"
#include "kernels/formats/scalar.h"
#include "tests/algorithms/precision_reference.h"

namespace atl::algorithms {
namespace {

namespace f = atl::kernels::formats;
namespace ops = atl::kernels::cpu;

using namespace precision_ref;  // NOLINT: the reference quantizers

constexpr Precision kRecipes[] = {Precision::kFp32, Precision::kBf16, Precision::kFp8,
                                  Precision::kMxfp8, Precision::kNvfp4};

TEST(Precision, WrapperEqualsExplicitQuantizeDequantizeGemm) {
  // Odd sizes: row tails of every block size, a Hadamard tail of 50 % 16 = 2 tokens.
  const int N = 50, IC = 72, OC = 40;
  const Mat x = random_mat(N, IC, 1), w = random_mat(OC, IC, 2, 0.05),
            dy = random_mat(N, OC, 3, 1e-3);
  for (Precision p : kRecipes)
    for (bool high : {false, true}) {
      SCOPED_TRACE(std::string(precision_name(p)) + (high ? " high" : ""));
      PrecisionGemm g;
      g.configure(p, 77);
      g.begin_step(5);
      const GemmSite site{3, high};
      // forward
      Mat out(N * OC), want(N * OC);
      g.forward(out.data(), x.data(), w.data(), N, IC, OC, site);
      const Mat xq = reference(g, p, x, N, IC, Operand::kFwdX, site);
      const Mat wq = reference(g, p, w, OC, IC, Operand::kFwdW, site);
      ops::matmul_forward(want.data(), xq.data(), wq.data(), N, IC, OC);
      EXPECT_TRUE(same_bits(out, want));
      if (p != Precision::kFp32) {
        EXPECT_FALSE(same_bits(xq, x));  // something was quantized
      }
      // dgrad and wgrad, accumulating onto nonzero outputs
      Mat dx = random_mat(N, IC, 4), dw = random_mat(OC, IC, 5);
      Mat dx_want = dx, dw_want = dw;
      g.backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), N, IC, OC, site);
      const Mat dq = reference(g, p, dy, N, OC, Operand::kDgradDy, site);
      const Mat wq2 = reference(g, p, w, OC, IC, Operand::kDgradW, site);
      const Mat gq = reference(g, p, dy, N, OC, Operand::kWgradDy, site);
      const Mat xq2 = reference(g, p, x, N, IC, Operand::kWgradX, site);
      ops::matmul_backward(dx_want.data(), static_cast<float*>(nullptr), dq.data(),
                           static_cast<const float*>(nullptr), wq2.data(), N, IC, OC);
      ops::matmul_backward(static_cast<float*>(nullptr), dw_want.data(), gq.data(), xq2.data(),
                           static_cast<const float*>(nullptr), N, IC, OC);
      EXPECT_TRUE(same_bits(dx, dx_want));
      EXPECT_TRUE(same_bits(dw, dw_want));
      // The 16x16 weight tiles make forward and dgrad see the same quantized W.
      if (p == Precision::kNvfp4 && !high) {
        EXPECT_TRUE(same_bits(wq, wq2));
      }
    }
}

TEST(Precision, Fp32IsBitwiseTheFp32Gemm) {
  const int N = 33, IC = 20, OC = 17;
  const Mat x = random_mat(N, IC, 1), w = random_mat(OC, IC, 2), dy = random_mat(N, OC, 3);
  PrecisionGemm g;  // default recipe: fp32
  Mat out(N * OC), want(N * OC);
  g.forward(out.data(), x.data(), w.data(), N, IC, OC, GemmSite{1, true});
  ops::matmul_forward(want.data(), x.data(), w.data(), N, IC, OC);
  EXPECT_TRUE(same_bits(out, want));
  Mat dx(N * IC, 0.5f), dw(OC * IC, 0.25f), dx2 = dx, dw2 = dw;
  g.backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), N, IC, OC, GemmSite{1, true});
  ops::matmul_backward(dx2.data(), dw2.data(), dy.data(), x.data(), w.data(), N, IC, OC);
  EXPECT_TRUE(same_bits(dx, dx2));
  EXPECT_TRUE(same_bits(dw, dw2));
}

TEST(Precision, StochasticRoundingIsUnbiased) {
  // The nvfp4 gradient operand, averaged over many steps (each step draws fresh bits), converges
  // to the fp32 gradient; nearest rounding (the activation) has a fixed error that does not.
  const int N = 16, OC = 32;
  const Mat dy = random_mat(N, OC, 9);
  PrecisionGemm g;
  g.configure(Precision::kNvfp4, 3);
  const int draws = 4000;
  std::vector<double> mean(dy.size(), 0.0);
  Mat q(dy.size());
  for (int s = 0; s < draws; ++s) {
    g.begin_step(s);
    g.quantize_operand(dy.data(), N, OC, Operand::kDgradDy, GemmSite{0, false}, q.data());
    for (size_t i = 0; i < q.size(); ++i) mean[i] += q[i] / draws;
  }
  const float ts = f::nvfp4_tensor_scale(dy);
  double worst = 0, rne_err = 0;
  g.quantize_operand(dy.data(), N, OC, Operand::kFwdX, GemmSite{0, false}, q.data());
  for (size_t i = 0; i < dy.size(); ++i) {
    worst = std::max(worst, std::fabs(mean[i] - dy[i]));
    rne_err = std::max(rne_err, std::fabs(static_cast<double>(q[i]) - dy[i]));
  }
  // One E2M1 step at the top of a block is 2 * block_scale * ts <= 2 * amax / 6 ... the standard
  // error of the mean over 4000 draws is below 1/60 of a step; allow 1/20 of the largest step.
  const double step = 2.0 * 448.0 * ts;
  EXPECT_LT(worst, step / 20) << "step " << step;
  EXPECT_GT(rne_err, worst * 2);  // rounding to nearest is visibly biased on the same data
}

TEST(Precision, HadamardIsOrthogonal) {
  PrecisionGemm g;
  g.configure(Precision::kNvfp4, 12);
  // H itself: the transform of the identity, columns of H; HᵀH = I.
  Mat id(16 * 16, 0.0f);
  for (int i = 0; i < 16; ++i) id[i * 16 + i] = 1.0f;
  g.hadamard_rows(id.data(), 16, 16);
  int negatives = 0;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      double dot = 0;
      for (int k = 0; k < 16; ++k) dot += id[k * 16 + i] * id[k * 16 + j];
      EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-6);
      EXPECT_EQ(std::fabs(id[i * 16 + j]), 0.25f);
      negatives += id[i * 16 + j] < 0;
    }
  EXPECT_GT(negatives, 0);
  // Applied to both wgrad operands, dYᵀ·x is unchanged (to float tolerance); a tail of rows is
  // left alone.
  const int N = 37, IC = 24, OC = 20;
  Mat x = random_mat(N, IC, 1), dy = random_mat(N, OC, 2);
  Mat dw(OC * IC, 0.0f), dw_h(OC * IC, 0.0f);
  ops::matmul_backward(static_cast<float*>(nullptr), dw.data(), dy.data(), x.data(),
                       static_cast<const float*>(nullptr), N, IC, OC);
  Mat xh = x, dyh = dy;
  g.hadamard_rows(xh.data(), N, IC);
  g.hadamard_rows(dyh.data(), N, OC);
  EXPECT_FALSE(same_bits(xh, x));
  for (int r = 32; r < N; ++r)
    for (int c = 0; c < IC; ++c) EXPECT_EQ(xh[r * IC + c], x[r * IC + c]);
  ops::matmul_backward(static_cast<float*>(nullptr), dw_h.data(), dyh.data(), xh.data(),
                       static_cast<const float*>(nullptr), N, IC, OC);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw_h[i], dw[i], 1e-4) << i;
}

TEST(Precision, ParseNamesTheAcceptedValues) {
  for (Precision p : kRecipes) EXPECT_EQ(*parse_precision(precision_name(p)), p);
  auto bad = parse_precision("fp16");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"fp16\""), std::string::npos);
  EXPECT_NE(bad.status().message().find("nvfp4"), std::string::npos);
  EXPECT_EQ(nvfp4_bf16_tail_layers(1), 1);
  EXPECT_EQ(nvfp4_bf16_tail_layers(4), 1);
  EXPECT_EQ(nvfp4_bf16_tail_layers(32), 4);
}

// ---- Training with each recipe ----------------------------------------------------------------
ModelConfig tiny() {
  ModelConfig c;
  c.vocab = 64;
  c.dim = 32;
  c.layers = 2;
  c.heads = 2;
  c.ffn_hidden = 64;
  c.seq_len = 32;
  return c;
}

// Params after `steps` inner steps of recipe p, with the given seed and thread count.
ParamSet train(Precision p, uint64_t seed, int threads, int steps, float* last_loss) {
  std::vector<float> losses;
  ParamSet params = train_recipe(tiny(), p, seed, threads, steps, &losses);
  if (last_loss && !losses.empty()) *last_loss = losses.back();
  return params;
}

bool same_params(const ParamSet& a, const ParamSet& b) {
  return std::memcmp(a.data(), b.data(), a.numel() * sizeof(float)) == 0;
}

TEST(Precision, TrainingIsDeterministicAcrossSeedsAndThreads) {
  const ParamSet fp32 = train(Precision::kFp32, 1, 1, 4, nullptr);
  for (Precision p : {Precision::kFp8, Precision::kNvfp4}) {
    SCOPED_TRACE(precision_name(p));
    const ParamSet a = train(p, 1, 1, 4, nullptr);
    const ParamSet b = train(p, 1, 2, 4, nullptr);
    EXPECT_TRUE(same_params(a, b));      // 1 vs 2 threads, same bits
    EXPECT_FALSE(same_params(a, fp32));  // the recipe changed the numerics
    if (p == Precision::kNvfp4) {
      const ParamSet c = train(p, 2, 1, 4, nullptr);
      EXPECT_FALSE(same_params(a, c));  // another seed, other stochastic rounding
    }
  }
}

TEST(Precision, EveryRecipeLearns) {
  for (Precision p : kRecipes) {
    SCOPED_TRACE(precision_name(p));
    float first = 0, last = 0;
    train(p, 1, 1, 1, &first);
    train(p, 1, 1, 30, &last);
    EXPECT_TRUE(std::isfinite(last));
    EXPECT_LT(last, first * 0.8f) << first << " -> " << last;
  }
}

}  // namespace
}  // namespace atl::algorithms
