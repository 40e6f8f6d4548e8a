// AdamW over a ParamSet: PyTorch semantics, decay only on >= 2-D views.
#include "algorithms/optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>

namespace atl::algorithms {
namespace {

TEST(AdamW, MatchesClosedFormAndDecaysOnlyMatrices) {
  ParamLayout L;
  L.add("w", {2, 2});
  L.add("g", {2});
  L.add("w2", {1, 3});
  ParamSet p(L), g(L);
  for (size_t i = 0; i < p.numel(); ++i) {
    p.data()[i] = 1.0f;
    g.data()[i] = (i % 2) ? 0.5f : -0.25f;
  }
  AdamWConfig cfg;
  cfg.weight_decay = 0.1f;
  AdamW opt(L, cfg);
  opt.step(p, g, 0.01f);
  EXPECT_EQ(opt.step_count(), 1);
  // Step 1: m̂ = g, v̂ = g², update = lr * g / (|g| + eps) ≈ lr * sign(g); decay lr*wd*p first.
  for (const auto& v : L.views()) {
    const float wd = v.shape.size() >= 2 ? 0.1f : 0.0f;
    for (size_t i = 0; i < v.numel(); ++i) {
      const size_t k = v.offset + i;
      const double gi = g.data()[k];
      const double expect = 1.0 * (1.0 - 0.01 * wd) - 0.01 * gi / (std::fabs(gi) + 1e-8);
      EXPECT_NEAR(p.data()[k], expect, 1e-6) << v.name << "[" << i << "]";
      EXPECT_NEAR(opt.m().data()[k], 0.1 * gi, 1e-7);
      EXPECT_NEAR(opt.v().data()[k], 0.05 * gi * gi, 1e-7);
    }
  }
  opt.reset();
  EXPECT_EQ(opt.step_count(), 0);
  EXPECT_EQ(opt.m().data()[0], 0.0f);
}

}  // namespace
}  // namespace atl::algorithms
