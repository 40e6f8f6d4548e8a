// AdamW against the textbook formula in double, the LR schedule at known points, global norm
// and clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/ops.h"

namespace atl::kernels::cpu::testing {
namespace {

TEST(AdamW, MatchesDoubleFormulaWithWeightDecay) {
  const size_t n = 1000;
  AdamWParams hp;
  hp.lr = 1e-2;
  hp.beta1 = 0.9;
  hp.beta2 = 0.95;
  hp.eps = 1e-8;
  hp.weight_decay = 0.1;
  auto p0 = random_vec<float>(n, 70);
  std::vector<float> p = p0, m(n, 0.f), v(n, 0.f);
  std::vector<double> pd = cast_vec<double>(p0), md(n, 0.0), vd(n, 0.0);
  for (int step = 1; step <= 5; ++step) {
    auto g = random_vec<float>(n, 100 + step, -2.0, 2.0);
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp, step);
    const double bc1 = 1 - std::pow(hp.beta1, step), bc2 = 1 - std::pow(hp.beta2, step);
    for (size_t i = 0; i < n; ++i) {
      pd[i] *= 1 - hp.lr * hp.weight_decay;
      md[i] = hp.beta1 * md[i] + (1 - hp.beta1) * g[i];
      vd[i] = hp.beta2 * vd[i] + (1 - hp.beta2) * double(g[i]) * g[i];
      pd[i] -= hp.lr * (md[i] / bc1) / (std::sqrt(vd[i] / bc2) + hp.eps);
    }
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(p[i], pd[i], 1e-6 * (1 + std::abs(pd[i]))) << "step " << step << " i " << i;
      ASSERT_NEAR(m[i], md[i], 1e-6 * (1 + std::abs(md[i])));
      ASSERT_NEAR(v[i], vd[i], 1e-6 * (1 + std::abs(vd[i])));
    }
  }
  // The first step moves every weight by about lr (Adam's normalized step), beyond decay.
  std::vector<float> q = p0, mq(n, 0.f), vq(n, 0.f);
  auto g = random_vec<float>(n, 99, 0.5, 1.0);
  adamw_update(q.data(), g.data(), mq.data(), vq.data(), n, hp, 1);
  for (size_t i = 0; i < n; ++i) {
    const double decayed = p0[i] * (1 - hp.lr * hp.weight_decay);
    ASSERT_NEAR(decayed - q[i], hp.lr, 1e-6);
  }
}

TEST(AdamW, ZeroGradientOnlyDecays) {
  const size_t n = 10;
  AdamWParams hp;
  hp.lr = 0.5;
  hp.weight_decay = 0.2;
  std::vector<float> p(n, 2.0f), g(n, 0.f), m(n, 0.f), v(n, 0.f);
  adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp, 1);
  for (float x : p) EXPECT_FLOAT_EQ(x, 2.0f * 0.9f);
}

TEST(LrSchedule, WarmupThenCosine) {
  const double mx = 1e-3, mn = 1e-4;
  EXPECT_DOUBLE_EQ(lr_schedule(0, 10, 110, mx, mn), 1e-4);  // (0+1)/10 · max
  EXPECT_DOUBLE_EQ(lr_schedule(4, 10, 110, mx, mn), 5e-4);
  EXPECT_DOUBLE_EQ(lr_schedule(9, 10, 110, mx, mn), 1e-3);
  EXPECT_DOUBLE_EQ(lr_schedule(10, 10, 110, mx, mn), 1e-3);      // cosine starts at max
  EXPECT_NEAR(lr_schedule(60, 10, 110, mx, mn), 5.5e-4, 1e-15);  // halfway
  EXPECT_NEAR(lr_schedule(35, 10, 110, mx, mn),
              mn + 0.5 * (mx - mn) * (1 + std::cos(std::numbers::pi * 0.25)), 1e-15);
  EXPECT_DOUBLE_EQ(lr_schedule(110, 10, 110, mx, mn), mn);
  EXPECT_DOUBLE_EQ(lr_schedule(500, 10, 110, mx, mn), mn);
  EXPECT_DOUBLE_EQ(lr_schedule(0, 0, 100, mx, mn), mx);  // no warmup
  // Monotone: up during warmup, down after.
  for (int s = 1; s < 10; ++s)
    EXPECT_GT(lr_schedule(s, 10, 110, mx, mn), lr_schedule(s - 1, 10, 110, mx, mn));
  for (int s = 11; s <= 110; ++s)
    EXPECT_LT(lr_schedule(s, 10, 110, mx, mn), lr_schedule(s - 1, 10, 110, mx, mn));
}

TEST(GlobalNorm, ValuesAndClip) {
  std::vector<float> g = {3.f, 4.f};
  EXPECT_DOUBLE_EQ(global_norm(g.data(), g.size()), 5.0);
  EXPECT_EQ(global_norm(g.data(), 0), 0.0);
  const size_t n = 1'000'003;
  auto big = random_vec<float>(n, 80);
  double ref = 0;
  for (float x : big) ref += double(x) * x;
  ref = std::sqrt(ref);
  const double norm = global_norm(big.data(), n);
  EXPECT_NEAR(norm, ref, 1e-12 * ref);
  // Clip to 1: every element scaled by max/(norm + 1e-6), the new norm is just under 1.
  auto clipped = big;
  const float s = clip_by_global_norm(clipped.data(), n, norm, 1.0);
  EXPECT_FLOAT_EQ(s, float(1.0 / (norm + 1e-6)));
  for (size_t i = 0; i < n; i += 9973) ASSERT_EQ(clipped[i], big[i] * s);
  EXPECT_NEAR(global_norm(clipped.data(), n), 1.0, 1e-5);
  // Below the threshold: untouched.
  auto same = big;
  EXPECT_EQ(clip_by_global_norm(same.data(), n, norm, norm * 2), 1.0f);
  EXPECT_TRUE(same_bits(same, big));
}

}  // namespace
}  // namespace atl::kernels::cpu::testing
