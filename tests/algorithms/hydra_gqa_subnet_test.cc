// Subnetworks of a Hugging Face-style model (grouped-query attention, q/k/v biases, untied head):
// the subnetwork is a view of the one Llama. With every unit kept it is the plain model bit for
// bit; a partial subnetwork's gradients match finite differences at the trained elements and
// leave every other element untouched; the counted FLOPs are the cost model's, and the masks,
// importance scores and removed-unit columns use KV groups as the head unit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/hydra/cost.h"
#include "algorithms/hydra/importance.h"
#include "algorithms/hydra/removed_units.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/subnet.h"
#include "kernels/core/philox.h"

namespace atl::algorithms {
namespace {

// V 64, C 32, L 3, H 4 query heads over KV 2 KV heads (g = 2, D = 8), F 48, biases, lm_head.
ModelConfig gqa_model() {
  ModelConfig c;
  c.vocab = 64;
  c.dim = 32;
  c.layers = 3;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn_hidden = 48;
  c.seq_len = 16;
  c.attention_bias = true;
  c.tie_word_embeddings = false;
  return c;
}

// init_params, then every element (biases too: they start at 0) moved by N(0, scale²), so that
// gradients stand well above fp32 noise and the biases matter.
ParamSet perturbed_params(const ModelConfig& c, uint64_t seed, double scale) {
  ParamSet p(make_layout(c));
  init_params(p, c, seed);
  const Philox r(seed, 99);
  for (size_t i = 0; i < p.numel(); ++i) p.data()[i] += static_cast<float>(scale * r.normal(i));
  return p;
}

void random_batch(const ModelConfig& c, int B, int T, std::vector<int32_t>& in,
                  std::vector<int32_t>& tg) {
  const Philox r(31, 7);
  in.resize(static_cast<size_t>(B) * T);
  tg.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<int32_t>(r.below(2 * i, c.vocab));
    tg[i] = static_cast<int32_t>(r.below(2 * i + 1, c.vocab));
  }
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Layer 0 frozen (head unit 1 and block 2 removed), layer 1 trained (head unit 0 and block 0
// removed), layer 2 trained with both head units and blocks 0, 1 (block 2 removed).
Subnet partial_subnet(const ModelConfig& c) {
  Subnet s = full_subnet(c, 3, true);
  s.layers[0].train = false;
  s.layers[0].heads = {1, 0};
  s.layers[0].ffn_blocks = {1, 1, 0};
  s.layers[1].heads = {0, 1};
  s.layers[1].ffn_blocks = {0, 1, 1};
  s.layers[2].ffn_blocks = {1, 1, 0};
  return s;
}

TEST(SubnetView, FullSubnetOfAGroupedQueryModelIsThePlainModelBitwise) {
  const ModelConfig c = gqa_model();
  const ParamSet p = perturbed_params(c, 1, 0.05);
  const int B = 2, T = 12;
  std::vector<int32_t> in, tg;
  random_batch(c, B, T, in, tg);

  Llama m(c);
  const float plain_loss = m.forward(p, in.data(), tg.data(), B, T);
  ParamSet plain_g(p.layout());
  m.backward(p, plain_g);

  const Subnet full = full_subnet(c, 3, true);
  ASSERT_TRUE(m.set_subnet(full).ok());
  ASSERT_NE(m.subnet(), nullptr);
  const std::vector<uint8_t> mask = trainable_mask(full, c);
  ParamSet g(p.layout());
  for (size_t i = 0; i < g.numel(); ++i) g.data()[i] = mask[i] ? 0.0f : 7.0f;
  const float loss = m.forward(p, in.data(), tg.data(), B, T);
  m.backward(p, g);
  EXPECT_EQ(bits(loss), bits(plain_loss));
  size_t trained = 0;
  for (size_t i = 0; i < g.numel(); ++i) {
    if (!mask[i]) {
      // The embedding, the final norm and lm_head are frozen under a subnetwork.
      ASSERT_EQ(g.data()[i], 7.0f) << "untrained element " << i << " was written";
      continue;
    }
    ++trained;
    ASSERT_EQ(bits(g.data()[i]), bits(plain_g.data()[i])) << "element " << i;
  }
  // Every layer tensor (biases included) is trained; the embedding, norm and lm_head are not.
  const int64_t frozen = 2 * int64_t(c.vocab) * c.dim + c.dim;
  EXPECT_EQ(static_cast<int64_t>(trained), count_params(c) - frozen);

  // Back to the full model: the same bits as before the subnetwork was set.
  m.clear_subnet();
  EXPECT_EQ(m.subnet(), nullptr);
  EXPECT_EQ(bits(m.forward(p, in.data(), tg.data(), B, T)), bits(plain_loss));
}

TEST(SubnetView, PartialSubnetGradientsMatchFiniteDifferencesAndTouchNothingElse) {
  const ModelConfig c = gqa_model();
  ParamSet p = perturbed_params(c, 2, 0.3);
  const int B = 2, T = 8;
  std::vector<int32_t> in, tg;
  random_batch(c, B, T, in, tg);
  const Subnet s = partial_subnet(c);
  ASSERT_TRUE(validate(s, c).ok()) << validate(s, c).message();

  Llama m(c);
  ASSERT_TRUE(m.set_subnet(s).ok());
  m.forward(p, in.data(), tg.data(), B, T);
  ParamSet g(p.layout());
  for (float& x : g.vec()) x = 7.0f;  // accumulated into: untrained elements must stay 7
  m.backward(p, g);
  const std::vector<uint8_t> mask = trainable_mask(s, c);
  for (size_t i = 0; i < g.numel(); ++i) {
    if (!mask[i]) {
      ASSERT_EQ(g.data()[i], 7.0f) << "untrained element " << i << " was written";
    }
  }

  // The subnetwork is the full model with the removed units' output columns zeroed: its loss
  // moves with a removed unit's q/k/v rows not at all, so those are not trained (checked above),
  // and with a trained element's as the analytic gradient says.
  const ParamLayout& L = p.layout();
  struct Checked {
    const char* name;
    bool every_element;  // false: a removed unit owns part of the tensor
  };
  const Checked checked[] = {{"model.layers.1.self_attn.q_proj.weight", false},
                             {"model.layers.1.self_attn.k_proj.weight", false},
                             {"model.layers.1.self_attn.v_proj.weight", false},
                             {"model.layers.1.self_attn.q_proj.bias", false},
                             {"model.layers.1.self_attn.k_proj.bias", false},
                             {"model.layers.1.self_attn.v_proj.bias", false},
                             {"model.layers.1.self_attn.o_proj.weight", false},
                             {"model.layers.1.mlp.gate_proj.weight", false},
                             {"model.layers.1.mlp.down_proj.weight", false},
                             {"model.layers.2.self_attn.k_proj.bias", true},
                             {"model.layers.2.mlp.up_proj.weight", false},
                             {"model.layers.2.input_layernorm.weight", true},
                             {"model.layers.1.post_attention_layernorm.weight", true}};
  for (const Checked& ck : checked) {
    const std::string name = ck.name;
    const ParamView* v = L.find(name);
    ASSERT_NE(v, nullptr) << name;
    std::vector<size_t> idx;
    for (size_t i = v->offset; i < v->offset + v->numel(); ++i)
      if (mask[i]) idx.push_back(i);
    ASSERT_FALSE(idx.empty()) << name << " has no trained element";
    EXPECT_EQ(idx.size() == v->numel(), ck.every_element) << name;
    std::partial_sort(idx.begin(), idx.begin() + std::min<size_t>(2, idx.size()), idx.end(),
                      [&](size_t a, size_t b) {
                        return std::fabs(g.data()[a] - 7.0f) > std::fabs(g.data()[b] - 7.0f);
                      });
    for (size_t j = 0; j < std::min<size_t>(2, idx.size()); ++j) {
      const size_t i = idx[j];
      const float keep = p.data()[i], h = 1e-2f;
      p.data()[i] = keep + h;
      const double up = m.forward(p, in.data(), tg.data(), B, T);
      p.data()[i] = keep - h;
      const double down = m.forward(p, in.data(), tg.data(), B, T);
      p.data()[i] = keep;
      const double fd = (up - down) / (2.0 * h), an = double(g.data()[i]) - 7.0;
      EXPECT_GT(std::fabs(an), 1e-3) << name << ": gradient too small to check";
      EXPECT_NEAR(an, fd, 2e-2 * std::fabs(an) + 2e-4) << name << " element " << i - v->offset;
    }
  }
  // A removed unit's weights do not move the subnetwork's loss at all (not computed).
  const float base = m.forward(p, in.data(), tg.data(), B, T);
  ParamSet q = p;
  const ParamView* k1 = L.find("model.layers.1.self_attn.k_proj.weight");  // (Ckv 16, C 32)
  for (size_t i = 0; i < 8 * 32; ++i) q.data()[k1->offset + i] += 1.0f;    // KV head 0: removed
  EXPECT_EQ(bits(m.forward(q, in.data(), tg.data(), B, T)), bits(base));

  // The counted FLOPs are the cost model's, to the FLOP.
  m.forward(p, in.data(), tg.data(), B, T);
  m.backward(p, g);
  const hydra::CostModel cm{c, 3, T};
  EXPECT_EQ((m.last_forward_flops() + m.last_backward_flops()) / (B * T),
            static_cast<double>(hydra::subnet_flops_per_token(cm, s)));
}

TEST(SubnetView, PartialSubnetEqualsTheFullModelWithRemovedGroupsZeroed) {
  const ModelConfig c = gqa_model();
  const ParamSet p = perturbed_params(c, 3, 0.1);
  const int B = 2, T = 12;
  std::vector<int32_t> in, tg;
  random_batch(c, B, T, in, tg);
  const Subnet s = partial_subnet(c);
  const auto blocks = hydra::removed_output_columns(s, c);
  ASSERT_EQ(blocks.size(), 5u);     // layer 0: unit 1, block 2; layer 1: unit 0, block 0; 2: b 2
  EXPECT_EQ(blocks[0].width, 16u);  // a KV group's o_proj columns: g·D = 2·8
  ParamSet zeroed = p;
  hydra::zero_columns(zeroed.vec(), blocks);
  Llama full(c);
  const float want = full.forward(zeroed, in.data(), tg.data(), B, T);
  ParamSet want_g(p.layout());
  full.backward(zeroed, want_g);
  Llama sub(c);
  ASSERT_TRUE(sub.set_subnet(s).ok());
  const float got = sub.forward(p, in.data(), tg.data(), B, T);
  ParamSet got_g(p.layout());
  sub.backward(p, got_g);
  EXPECT_NEAR(got, want, 1e-5 * want);
  double scale = 0;
  const auto idx = trainable_indices(s, c);
  for (uint32_t i : idx) scale = std::max(scale, std::fabs(double(want_g.data()[i])));
  ASSERT_GT(scale, 0.0);
  for (uint32_t i : idx)
    ASSERT_NEAR(got_g.data()[i], want_g.data()[i], 1e-5 * scale) << "element " << i;
}

TEST(SubnetView, MasksAndScoresCountKvGroupsWithTheirBiases) {
  const ModelConfig c = gqa_model();
  EXPECT_EQ(head_units(c), 2);
  EXPECT_EQ(heads_per_unit(c), 2);
  Subnet s = full_subnet(c, 1, false);
  s.layers[1].train = true;
  s.layers[1].heads = {0, 1};
  s.layers[1].ffn_blocks = {0};
  const std::vector<uint8_t> mask = trainable_mask(s, c);
  const ParamLayout L = make_layout(c);
  auto count = [&](const std::string& name) {
    const ParamView* v = L.find("model.layers.1." + name);
    return std::count(mask.begin() + v->offset, mask.begin() + v->offset + v->numel(), 1);
  };
  // Unit 1: query heads 2, 3 (rows 16..31 of q), KV head 1 (rows 8..15 of k and v).
  EXPECT_EQ(count("self_attn.q_proj.weight"), 16 * 32);
  EXPECT_EQ(count("self_attn.k_proj.weight"), 8 * 32);
  EXPECT_EQ(count("self_attn.v_proj.weight"), 8 * 32);
  EXPECT_EQ(count("self_attn.q_proj.bias"), 16);
  EXPECT_EQ(count("self_attn.k_proj.bias"), 8);
  EXPECT_EQ(count("self_attn.o_proj.weight"), 32 * 16);
  EXPECT_EQ(count("input_layernorm.weight"), 32);
  EXPECT_EQ(count("post_attention_layernorm.weight"), 0);
  const ParamView* q = L.find("model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(mask[q->offset + 15 * 32], 0);
  EXPECT_EQ(mask[q->offset + 16 * 32], 1);
  const ParamView* o = L.find("model.layers.1.self_attn.o_proj.weight");
  EXPECT_EQ(mask[o->offset + 15], 0);
  EXPECT_EQ(mask[o->offset + 16], 1);
  EXPECT_EQ(to_string(s), "F:11:1|T:01:0|F:11:1");

  // Importance: one score per KV group; a group's score is Σ|g·w| over exactly its elements.
  ParamSet p = perturbed_params(c, 4, 0.1), g(L);
  const Philox r(5, 5);
  for (size_t i = 0; i < g.numel(); ++i) g.data()[i] = static_cast<float>(r.normal(i));
  hydra::UnitScores acc = hydra::empty_scores(c, 1);
  ASSERT_EQ(acc.heads, 2);
  hydra::accumulate_taylor(p, g, c, acc);
  double want = 0;
  for (const char* name :
       {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
        "self_attn.o_proj.weight"}) {
    const ParamView* v = L.find(std::string("model.layers.1.") + name);
    for (size_t i = v->offset; i < v->offset + v->numel(); ++i)
      if (mask[i]) want += std::fabs(double(g.data()[i]) * p.data()[i]);
  }
  EXPECT_NEAR(acc.head[1 * 2 + 1], want, 1e-9 * want);
  EXPECT_TRUE(hydra::validate(acc, c, 1).ok());
}

}  // namespace
}  // namespace atl::algorithms
