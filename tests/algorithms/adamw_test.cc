// AdamW over a ParamSet: PyTorch semantics, decay only on >= 2-D views.
#include "algorithms/optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/ops.h"

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

// optimizer = kMuon: the transformer blocks' matrices take Muon's step (momentum in m, v left
// at 0); the embedding, a gain and a 3-D tensor take AdamW's, exactly as with kAdamW.
TEST(AdamW, MuonUpdatesOnlyTheBlocksMatrices) {
  ParamLayout L;
  L.add("model.embed_tokens.weight", {8, 6});
  L.add("model.layers.0.input_layernorm.weight", {6});
  L.add("model.layers.0.mlp.up_proj.weight", {10, 6});
  L.add("model.layers.0.self_attn.o_proj.weight", {6, 6});
  L.add("model.layers.0.mlp.experts.weight", {2, 3, 6});
  ParamSet p(L), g(L);
  for (size_t i = 0; i < p.numel(); ++i) {
    p.data()[i] = 0.01f * float(i % 17) - 0.05f;
    g.data()[i] = 0.003f * float((i * 7) % 23) - 0.03f;
  }
  AdamWConfig adam_cfg, muon_cfg;
  muon_cfg.optimizer = InnerOptimizer::kMuon;
  muon_cfg.muon_momentum = 0.9;
  AdamW adam(L, adam_cfg), muon(L, muon_cfg);
  ParamSet pa = p, pm = p;
  for (int s = 0; s < 3; ++s) {
    adam.step(pa, g, 0.01);
    muon.step(pm, g, 0.01);
  }
  for (const auto& v : L.views()) {
    const bool by_muon = AdamW::muon_view(v);
    EXPECT_EQ(by_muon, v.name.find("_proj") != std::string::npos) << v.name;
    if (!by_muon) {
      EXPECT_EQ(std::memcmp(pa.data() + v.offset, pm.data() + v.offset, 4 * v.numel()), 0)
          << v.name << ": not AdamW's bits";
      continue;
    }
    // The same three steps by the kernel directly.
    std::vector<float> w(p.data() + v.offset, p.data() + v.offset + v.numel());
    std::vector<float> m(v.numel(), 0.0f);
    kernels::cpu::MuonScratch scratch;
    kernels::cpu::MuonParams hp;
    hp.lr = 0.01;
    hp.momentum = 0.9;
    hp.weight_decay = muon_cfg.weight_decay;
    for (int s = 0; s < 3; ++s)
      kernels::cpu::muon_update(w.data(), g.data() + v.offset, m.data(), int(v.shape[0]),
                                int(v.shape[1]), hp, scratch);
    EXPECT_EQ(std::memcmp(w.data(), pm.data() + v.offset, 4 * v.numel()), 0) << v.name;
    EXPECT_EQ(std::memcmp(m.data(), muon.m().data() + v.offset, 4 * v.numel()), 0) << v.name;
    for (size_t i = 0; i < v.numel(); ++i) ASSERT_EQ(muon.v().data()[v.offset + i], 0.0f) << v.name;
    EXPECT_NE(std::memcmp(pa.data() + v.offset, pm.data() + v.offset, 4 * v.numel()), 0) << v.name;
  }
}

TEST(AdamW, ParsesInnerOptimizerNames) {
  EXPECT_EQ(*parse_inner_optimizer(""), InnerOptimizer::kAdamW);
  EXPECT_EQ(*parse_inner_optimizer("adamw"), InnerOptimizer::kAdamW);
  EXPECT_EQ(*parse_inner_optimizer("muon"), InnerOptimizer::kMuon);
  const auto bad = parse_inner_optimizer("sgd");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"adamw\" or \"muon\""), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace atl::algorithms
