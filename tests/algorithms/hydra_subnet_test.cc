// Subnetwork training: the masked model equals the full model with the removed units' outputs
// zeroed; only trained elements get gradients and optimizer state; counted FLOPs drop (a
// budget-0.25 site <= 0.3 of the full model); masked aggregation is exact.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "algorithms/hydra/aggregate.h"
#include "algorithms/hydra/cost.h"
#include "algorithms/hydra/select.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/subnet.h"
#include "algorithms/optim/masked_adamw.h"
#include "kernels/core/philox.h"
#include "tests/algorithms/hydra_test_util.h"

namespace atl::algorithms {
namespace {

ModelConfig small() { return hydra::small_subnet_model(); }

void tokens(const ModelConfig& c, int B, int T, std::vector<int32_t>& in,
            std::vector<int32_t>& tg) {
  Philox r(21, 4);
  in.resize(static_cast<size_t>(B) * T);
  tg.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<int32_t>(r.below(2 * i, c.vocab));
    tg[i] = static_cast<int32_t>(r.below(2 * i + 1, c.vocab));
  }
}

// Layer 0 frozen (heads 0,2 and block 1 kept), layers 1-2 trained with some units removed.
Subnet partial(const ModelConfig& c) {
  Subnet s = full_subnet(c, 3, true);
  s.layers[0].train = false;
  s.layers[0].heads = {1, 0, 1, 0};
  s.layers[0].ffn_blocks = {0, 1, 0};
  s.layers[1].heads = {0, 1, 1, 0};
  s.layers[1].ffn_blocks = {1, 0, 1};
  s.layers[2].heads = {1, 1, 0, 1};
  s.layers[2].ffn_blocks = {0, 0, 1};
  return s;
}

// θ with the o_proj columns of removed heads and down_proj columns of removed blocks set to 0:
// the full model then computes exactly what the subnetwork computes.
ParamSet zero_removed(const ParamSet& p, const ModelConfig& c, const Subnet& s) {
  ParamSet z = p;
  const size_t C = c.dim, D = C / c.heads, F = c.ffn_hidden, Fb = F / s.ffn_blocks;
  for (int l = 0; l < c.layers; ++l) {
    float* o = z.ptr("model.layers." + std::to_string(l) + ".self_attn.o_proj.weight");
    float* d = z.ptr("model.layers." + std::to_string(l) + ".mlp.down_proj.weight");
    for (size_t r = 0; r < C; ++r) {
      for (size_t h = 0; h < static_cast<size_t>(c.heads); ++h)
        if (!s.layers[l].heads[h])
          for (size_t j = 0; j < D; ++j) o[r * C + h * D + j] = 0;
      for (size_t b = 0; b < static_cast<size_t>(s.ffn_blocks); ++b)
        if (!s.layers[l].ffn_blocks[b])
          for (size_t j = 0; j < Fb; ++j) d[r * F + b * Fb + j] = 0;
    }
  }
  return z;
}

// Under grouped-query attention Hydra's head unit is a KV group (one per KV head); biases and an
// untied head are part of the model the subnetwork views. MoE layers have no FFN units yet:
// refused when the subnet is validated against the model, one line.
// The Hydra benchmark's model (bench/hydra): C = 64, 4 layers, 4 heads, F = 192, V = 256, T = 64.
ModelConfig hydra_bench_model() {
  ModelConfig c;
  c.vocab = 256;
  c.dim = 64;
  c.layers = 4;
  c.heads = 4;
  c.ffn_hidden = 192;
  c.seq_len = 64;
  return c;
}

TEST(SubnetLlama, HeadUnitsAreKvGroupsAndMoeIsRefusedWithOneLine) {
  ModelConfig c = small();
  c.kv_heads = c.heads / 2;
  c.attention_bias = true;
  c.tie_word_embeddings = false;
  const Subnet s = full_subnet(c, 2, true);
  ASSERT_EQ(s.layers[0].heads.size(), 2u);
  EXPECT_TRUE(validate(s, c).ok()) << validate(s, c).message();
  const Status per_query_head = validate(full_subnet(small(), 2, true), c);
  ASSERT_FALSE(per_query_head.ok());
  EXPECT_NE(per_query_head.message().find("(one per KV head)"), std::string::npos)
      << per_query_head.message();
  c = small();
  c.moe_experts = 4;
  c.moe_hidden = 16;
  ASSERT_TRUE(validate(c).ok());
  const Status moe = validate(full_subnet(c, 2, true), c);
  ASSERT_FALSE(moe.ok());
  EXPECT_NE(moe.message().find("Hydra's subnetworks need dense FFNs"), std::string::npos)
      << moe.message();
}

TEST(SubnetLlama, FullSubnetEqualsTheModelBitwise) {
  const ModelConfig c = small();
  ParamSet p(make_layout(c));
  init_params(p, c, 1);
  std::vector<int32_t> in, tg;
  tokens(c, 2, 12, in, tg);
  Llama full(c);
  Llama sub(c);
  ASSERT_TRUE(sub.set_subnet(full_subnet(c, 3, true)).ok());
  EXPECT_EQ(full.forward(p, in.data(), tg.data(), 2, 12),
            sub.forward(p, in.data(), tg.data(), 2, 12));
}

TEST(SubnetLlama, EqualsFullModelWithRemovedUnitsZeroed) {
  const ModelConfig c = small();
  ParamSet p(make_layout(c));
  init_params(p, c, 2);
  for (float& x : p.vec()) x *= 4.0f;  // larger signals, larger gradients
  const Subnet s = partial(c);
  std::vector<int32_t> in, tg;
  tokens(c, 2, 12, in, tg);
  const ParamSet z = zero_removed(p, c, s);
  Llama full(c);
  const float lf = full.forward(z, in.data(), tg.data(), 2, 12);
  ParamSet gf(p.layout());
  full.backward(z, gf);
  Llama sub(c);
  ASSERT_TRUE(sub.set_subnet(s).ok());
  const float ls = sub.forward(p, in.data(), tg.data(), 2, 12);
  ParamSet gs(p.layout());
  for (float& g : gs.vec()) g = 7.0f;  // untrained elements must stay exactly as they are
  sub.backward(p, gs);
  EXPECT_NEAR(lf, ls, 1e-5f * std::fabs(lf));
  const std::vector<uint8_t> m = trainable_mask(s, c);
  size_t trained = 0;
  double maxdiff = 0, maxg = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    if (!m[i]) {
      ASSERT_EQ(gs.data()[i], 7.0f) << "untrained element " << i << " got a gradient";
      continue;
    }
    ++trained;
    maxdiff = std::max(maxdiff, std::fabs(double(gs.data()[i]) - 7.0 - gf.data()[i]));
    maxg = std::max(maxg, std::fabs(double(gf.data()[i])));
  }
  EXPECT_GT(maxg, 1e-4);
  EXPECT_LT(maxdiff, 1e-5 + 1e-4 * maxg) << "max |g| " << maxg;
  EXPECT_GT(trained, 0u);
  EXPECT_EQ(trained, trainable_indices(s, c).size());
  // Counted FLOPs equal the cost model exactly.
  hydra::CostModel cm{c, 3, 12};
  EXPECT_EQ((sub.last_forward_flops() + sub.last_backward_flops()) / 24.0,
            static_cast<double>(hydra::subnet_flops_per_token(cm, s)));
}

TEST(SubnetLlama, MaskedAdamWHoldsStateOnlyForTrainedElements) {
  const ModelConfig c = small();
  ParamSet p(make_layout(c));
  init_params(p, c, 3);
  const Subnet s = partial(c);
  const auto idx = trainable_indices(s, c);
  MaskedAdamW opt(p.layout(), idx, AdamWConfig{});
  EXPECT_EQ(opt.state_bytes(), idx.size() * 8);
  EXPECT_LT(idx.size() * 2, static_cast<size_t>(count_params(c)));
  ParamSet g(p.layout());
  for (size_t i = 0; i < g.numel(); ++i) g.data()[i] = 0.01f * static_cast<float>(i % 7);
  const ParamSet before = p;
  opt.step(p, g, 1e-2);
  const auto m = trainable_mask(s, c);
  size_t changed = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    if (!m[i]) {
      ASSERT_EQ(p.data()[i], before.data()[i]) << i;
    }
    changed += p.data()[i] != before.data()[i];
  }
  EXPECT_GT(changed, idx.size() / 2);
}

TEST(SubnetLlama, QuarterBudgetSiteCountsAtMostThirtyPercentOfTheFlops) {
  const ModelConfig c = hydra_bench_model();
  hydra::CostModel cm{c, 4, 64};
  std::vector<hydra::SiteInput> sites;
  const double budgets[] = {1.0, 0.5, 0.25, 0.25};
  Philox r(8, 8);
  for (int k = 0; k < 4; ++k) {
    // Not "s" + std::to_string(k): GCC 12's -Wrestrict misfires on that operator+ at -O3.
    const std::string id = std::string("s").append(std::to_string(k));
    hydra::SiteInput in{id, budgets[k], hydra::empty_scores(c, 4)};
    for (size_t i = 0; i < in.scores.head.size(); ++i)
      in.scores.head[i] = r.uniform_double(k * 100 + i);
    for (size_t i = 0; i < in.scores.ffn.size(); ++i)
      in.scores.ffn[i] = r.uniform_double(k * 100 + 50 + i);
    sites.push_back(in);
  }
  auto sel = hydra::select_subnetworks(cm, sites, {});
  ASSERT_TRUE(sel.ok()) << sel.status().message();
  ParamSet p(make_layout(c));
  init_params(p, c, 4);
  const int B = 2, T = 64;
  std::vector<int32_t> in, tg;
  tokens(c, B, T, in, tg);
  Llama sub(c);
  ASSERT_TRUE(sub.set_subnet(sel->sites[2].subnet).ok());
  sub.forward(p, in.data(), tg.data(), B, T);
  ParamSet g(p.layout());
  sub.backward(p, g);
  const double counted = sub.last_forward_flops() + sub.last_backward_flops();
  const double full = flops_per_token(c, T) * B * T;
  EXPECT_LE(counted / full, 0.3) << to_string(sel->sites[2].subnet);
  EXPECT_LE(counted / full, 0.25 + 1e-9);
  EXPECT_GT(sub.last_backward_flops(), 0.0) << "the quarter site still trains something";
  // The full subnet (trained everywhere, embedding frozen) counts at most the full formula.
  ASSERT_TRUE(sub.set_subnet(full_subnet(c, 4, true)).ok());
  sub.forward(p, in.data(), tg.data(), B, T);
  sub.backward(p, g);
  EXPECT_LE(sub.last_forward_flops() + sub.last_backward_flops(), full);
  EXPECT_GT(sub.last_forward_flops() + sub.last_backward_flops(), 0.9 * full);
}

TEST(HydraAggregate, MaskedRuleIsExactIncludingUnheldElements) {
  // 6 elements; a holds {0,1,3}, b holds {1,3,4}, c holds {3}; nobody holds 2 and 5.
  const std::vector<uint32_t> ia = {0, 1, 3}, ib = {1, 3, 4}, ic = {3};
  const std::vector<float> va = {1.0f, 2.0f, 3.0f}, vb = {4.0f, 5.0f, 6.0f}, vc = {-9.0f};
  std::vector<hydra::MaskedUpdate> ups = {
      {"a", 100, ia, va}, {"b", 300, ib, vb}, {"c", 600, ic, vc}};
  std::vector<float> d(6);
  std::vector<uint32_t> held(6);
  ASSERT_TRUE(hydra::aggregate_masked(ups, d, held).ok());
  EXPECT_EQ(held, (std::vector<uint32_t>{1, 2, 0, 3, 1, 0}));
  EXPECT_EQ(d[0], 1.0f);
  EXPECT_EQ(d[1], static_cast<float>((100 * 2.0 + 300 * 4.0) / 400.0));
  EXPECT_EQ(d[2], 0.0f);
  EXPECT_EQ(d[3], static_cast<float>((100 * 3.0 + 300 * 5.0 + 600 * -9.0) / 1000.0));
  EXPECT_EQ(d[4], 6.0f);
  std::vector<float> theta = {1, 1, 1, 1, 1, 1}, mom = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  OuterNesterovOptions o{0.7f, 0.9f};
  ASSERT_TRUE(hydra::masked_outer_step(o, theta, mom, d, held, false).ok());
  EXPECT_EQ(theta[2], 1.0f);  // nobody holds 2 and 5: θ and momentum untouched
  EXPECT_EQ(mom[2], 0.5f);
  EXPECT_EQ(theta[5], 1.0f);
  EXPECT_EQ(mom[5], 0.5f);
  for (int j : {0, 1, 3, 4}) {
    const float m = 0.9f * 0.5f + d[j];
    EXPECT_EQ(mom[j], m);
    EXPECT_EQ(theta[j], 1.0f + -0.7f * (d[j] + 0.9f * m));
  }
  // Without the look-ahead (diloco.final_look_ahead = false, the last round): the same buffer,
  // θ moved by −lr·Δ on held elements only.
  std::vector<float> plain = {1, 1, 1, 1, 1, 1}, plain_mom = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  ASSERT_TRUE(hydra::masked_outer_step(o, plain, plain_mom, d, held, false, false).ok());
  EXPECT_EQ(plain_mom, mom);
  EXPECT_EQ(plain[2], 1.0f);
  EXPECT_EQ(plain[5], 1.0f);
  for (int j : {0, 1, 3, 4}) EXPECT_EQ(plain[j], 1.0f + -0.7f * d[j]);
  // Unsorted or malformed updates are refused with one line.
  std::vector<hydra::MaskedUpdate> bad = {ups[1], ups[0]};
  EXPECT_FALSE(hydra::aggregate_masked(bad, d, held).ok());
  const std::vector<uint32_t> dup = {1, 1};
  const std::vector<float> two = {1, 2};
  EXPECT_FALSE(hydra::aggregate_masked({{"a", 1, dup, two}}, d, held).ok());
  const std::vector<uint32_t> oob = {9};
  EXPECT_FALSE(hydra::aggregate_masked({{"a", 1, oob, vc}}, d, held).ok());
}

TEST(HydraAggregate, ForwardSharePowerZeroKeepsTheTokenWeightsBitForBit) {
  // Random updates over 64 elements; the same updates with forward shares in (0, 1] and p = 0
  // must give exactly the Δ of the token weights alone (the default before p existed).
  const size_t n = 64;
  const Philox rng(21, 0);
  uint64_t c = 0;
  std::vector<std::vector<uint32_t>> idx(4);
  std::vector<std::vector<float>> val(4);
  const double shares[] = {1.0, 0.73, 0.41, 0.1};
  std::vector<hydra::MaskedUpdate> plain, shared;
  for (int k = 0; k < 4; ++k) {
    for (uint32_t j = 0; j < n; ++j)
      if (rng.uniform_double(c++) < 0.6) {
        idx[k].push_back(j);
        val[k].push_back(static_cast<float>(rng.uniform_double(c++) * 2 - 1) * 1e-3f);
      }
    const std::string id(1, static_cast<char>('a' + k));
    plain.push_back({id, 1000 + 337 * static_cast<uint64_t>(k), idx[k], val[k]});
    shared.push_back(plain.back());
    shared.back().forward_share = shares[k];
  }
  std::vector<float> d_plain(n), d_shared(n);
  std::vector<uint32_t> h_plain(n), h_shared(n);
  ASSERT_TRUE(hydra::aggregate_masked(plain, d_plain, h_plain).ok());
  ASSERT_TRUE(hydra::aggregate_masked(shared, d_shared, h_shared, 0.0).ok());
  EXPECT_EQ(h_plain, h_shared);
  for (size_t j = 0; j < n; ++j)
    EXPECT_EQ(std::bit_cast<uint32_t>(d_plain[j]), std::bit_cast<uint32_t>(d_shared[j])) << j;
  for (const auto& u : shared)
    EXPECT_EQ(hydra::aggregation_weight(u, 0.0), static_cast<double>(u.tokens));
  // With p = 2 the same updates give another Δ (the shares matter).
  ASSERT_TRUE(hydra::aggregate_masked(shared, d_shared, h_shared, 2.0).ok());
  EXPECT_NE(d_plain, d_shared);
}

TEST(HydraAggregate, ForwardSharePowerTwoWeighsTokensTimesShareSquared) {
  // The elements of MaskedRuleIsExactIncludingUnheldElements; forward shares 1, 0.5, 0.25 and
  // p = 2: weights 100·1 = 100, 300·0.25 = 75, 600·0.0625 = 37.5.
  //   Δ[1] = (100·2 + 75·4) / 175 = 500 / 175
  //   Δ[3] = (100·3 + 75·5 + 37.5·(−9)) / 212.5 = 337.5 / 212.5
  const std::vector<uint32_t> ia = {0, 1, 3}, ib = {1, 3, 4}, ic = {3};
  const std::vector<float> va = {1.0f, 2.0f, 3.0f}, vb = {4.0f, 5.0f, 6.0f}, vc = {-9.0f};
  std::vector<hydra::MaskedUpdate> ups = {
      {"a", 100, ia, va, 1.0}, {"b", 300, ib, vb, 0.5}, {"c", 600, ic, vc, 0.25}};
  std::vector<float> d(6);
  std::vector<uint32_t> held(6);
  ASSERT_TRUE(hydra::aggregate_masked(ups, d, held, 2.0).ok());
  EXPECT_EQ(held, (std::vector<uint32_t>{1, 2, 0, 3, 1, 0}));
  EXPECT_EQ(d[0], 1.0f);
  EXPECT_EQ(d[1], static_cast<float>(500.0 / 175.0));
  EXPECT_EQ(d[2], 0.0f);
  EXPECT_EQ(d[3], static_cast<float>(337.5 / 212.5));
  EXPECT_EQ(d[4], 6.0f);
  EXPECT_EQ(hydra::aggregation_weight(ups[2], 2.0), 37.5);
  // The mean robust aggregator is the same rule.
  std::vector<float> d_robust(6);
  ASSERT_TRUE(hydra::aggregate_masked_robust(ups, {}, d_robust, held, 2.0).ok());
  EXPECT_EQ(d_robust, d);
  // p outside [0, 8] or not finite, and a share outside (0, 1], are refused with one line.
  for (double p : {-1.0, 8.5, std::nan("")}) {
    const Status st = hydra::aggregate_masked(ups, d, held, p);
    EXPECT_FALSE(st.ok()) << p;
    EXPECT_NE(st.message().find("forward share power"), std::string::npos) << st.message();
  }
  for (double share : {0.0, 1.5}) {
    auto bad = ups;
    bad[1].forward_share = share;
    const Status st = hydra::aggregate_masked(bad, d, held, 2.0);
    EXPECT_FALSE(st.ok()) << share;
    EXPECT_NE(st.message().find("forward share"), std::string::npos) << st.message();
  }
}

TEST(HydraCost, ForwardShareIsTheKeptUnitsShareOfTheForwardFlops) {
  // The benchmark's model: C = 64, H = 4 (D = 16, no grouped-query attention), F = 192 in G = 4
  // blocks, V = 256, T = 64, L = 4. Per token: a_head = 8·16·64 + 4·64·16 = 12288,
  // a_block = 6·48·64 = 18432, a_lm = 2·256·64 = 32768; a layer 4·12288 + 4·18432 = 122880,
  // the model 4·122880 + 32768 = 524288.
  const ModelConfig c = hydra_bench_model();
  const hydra::CostModel cm{c, 4, 64};
  EXPECT_EQ(hydra::forward_share(cm, full_subnet(c, 4, true)), 1.0);
  EXPECT_EQ(hydra::forward_share(cm, full_subnet(c, 4, false)), 1.0);  // frozen still runs
  // Two heads and one block kept in every layer: 4·(2·12288 + 18432) + 32768 = 204800.
  Subnet s = full_subnet(c, 4, false);
  for (auto& l : s.layers) {
    l.heads = {1, 0, 1, 0};
    l.ffn_blocks = {0, 0, 1, 0};
  }
  s.layers[3].train = true;
  ASSERT_TRUE(validate(s, c).ok());
  EXPECT_EQ(hydra::forward_share(cm, s), 204800.0 / 524288.0);
}

TEST(Subnet, TextFormRoundTripsAndRejectsGarbage) {
  const ModelConfig c = small();
  const Subnet s = partial(c);
  auto back = subnet_from_string(to_string(s), c, 3);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(to_string(*back), to_string(s));
  EXPECT_FALSE(subnet_from_string("T:11:1", c, 3).ok());
  EXPECT_FALSE(subnet_from_string("X:1111:111|T:1111:111|T:1111:111", c, 3).ok());
}

}  // namespace
}  // namespace atl::algorithms
