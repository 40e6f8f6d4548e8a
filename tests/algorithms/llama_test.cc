// Llama model: layout, init, validation, determinism, learning, sampling.
#include "algorithms/model/llama.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/philox.h"
#include "kernels/cpu/ops.h"

namespace atl::algorithms {
namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.vocab = 64;
  c.dim = 32;
  c.layers = 2;
  c.heads = 2;
  c.ffn_hidden = 48;
  c.seq_len = 16;
  return c;
}

std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
  Philox r(seed, 7);
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(r.below(i, V));
  return t;
}

TEST(ModelConfig, ValidateNamesTheProblem) {
  EXPECT_TRUE(validate(ModelConfig{}).ok());
  ModelConfig c;
  c.dim = 250;
  Status st = validate(c);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "dim 250 is not divisible by heads 4");
  c = ModelConfig{};
  c.dim = 12;  // head dim 3
  st = validate(c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("head dim 3"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("even"), std::string::npos) << st.message();
  c = ModelConfig{};
  c.layers = 0;
  st = validate(c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("layers"), std::string::npos);
  c = ModelConfig{};
  c.norm_eps = -1;
  EXPECT_FALSE(validate(c).ok());
  c = ModelConfig{};
  c.rope_base = std::nan("");
  EXPECT_FALSE(validate(c).ok());
}

TEST(ModelLayout, HuggingFaceNamesContiguousFusedBlocks) {
  ModelConfig c;  // V 256, C 256, L 4, F 768
  ParamLayout L = make_layout(c);
  EXPECT_EQ(L.numel(), 3475712u);
  EXPECT_EQ(static_cast<int64_t>(L.numel()), count_params(c));
  ASSERT_EQ(L.views().size(), 1u + 9u * 4u + 1u);
  EXPECT_EQ(L.views().front().name, "model.embed_tokens.weight");
  EXPECT_EQ(L.views().front().shape, (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(L.views().back().name, "model.norm.weight");
  EXPECT_EQ(L.find("lm_head.weight"), nullptr);  // tied
  // Packed in order with no padding.
  size_t off = 0;
  for (const auto& v : L.views()) {
    EXPECT_EQ(v.offset, off) << v.name;
    off += v.numel();
  }
  EXPECT_EQ(off, L.numel());
  for (int l = 0; l < c.layers; ++l) {
    auto at = [&](const std::string& s) {
      const ParamView* v = L.find("model.layers." + std::to_string(l) + "." + s);
      EXPECT_NE(v, nullptr) << s;
      return v;
    };
    const ParamView *q = at("self_attn.q_proj.weight"), *k = at("self_attn.k_proj.weight"),
                    *v = at("self_attn.v_proj.weight"), *o = at("self_attn.o_proj.weight"),
                    *g = at("mlp.gate_proj.weight"), *u = at("mlp.up_proj.weight"),
                    *d = at("mlp.down_proj.weight"), *n1 = at("input_layernorm.weight"),
                    *n2 = at("post_attention_layernorm.weight");
    EXPECT_EQ(q->shape, (std::vector<int64_t>{256, 256}));
    EXPECT_EQ(k->offset, q->offset + q->numel());  // q|k|v is one (3C, C) matrix
    EXPECT_EQ(v->offset, k->offset + k->numel());
    EXPECT_EQ(o->shape, (std::vector<int64_t>{256, 256}));
    EXPECT_EQ(g->shape, (std::vector<int64_t>{768, 256}));
    EXPECT_EQ(u->offset, g->offset + g->numel());  // gate|up is one (2F, C) matrix
    EXPECT_EQ(d->shape, (std::vector<int64_t>{256, 768}));
    EXPECT_EQ(n1->shape, (std::vector<int64_t>{256}));
    EXPECT_EQ(n2->shape, (std::vector<int64_t>{256}));
  }
}

TEST(ModelLayout, FlopsPerToken) {
  ModelConfig c;
  EXPECT_DOUBLE_EQ(flops_per_token(c, 256), 6.0 * 3475712 + 12.0 * 4 * 256 * 256);
}

// The Hugging Face variants: GQA shrinks k and v to (Ckv, C), biases sit after v_proj (q|k|v
// stays one matrix and the biases one vector), an untied head comes last.
TEST(ModelLayout, GroupedQueryBiasesAndUntiedHead) {
  ModelConfig c = tiny();  // V 64, C 32, H 2 (D 16), L 2, F 48
  c.heads = 4;             // D 8
  c.kv_heads = 2;          // Ckv 16
  c.attention_bias = true;
  c.tie_word_embeddings = false;
  ASSERT_TRUE(validate(c).ok());
  const ParamLayout L = make_layout(c);
  EXPECT_EQ(static_cast<int64_t>(L.numel()), count_params(c));
  const int64_t per_layer = 2 * 32 + 32 * 32 * 2 + 16 * 32 * 2 + (32 + 16 + 16) + 3 * 48 * 32;
  EXPECT_EQ(count_params(c), 64 * 32 * 2 + 32 + 2 * per_layer);
  const ParamView* k = L.find("model.layers.0.self_attn.k_proj.weight");
  const ParamView* v = L.find("model.layers.0.self_attn.v_proj.weight");
  const ParamView* qb = L.find("model.layers.0.self_attn.q_proj.bias");
  const ParamView* kb = L.find("model.layers.0.self_attn.k_proj.bias");
  const ParamView* vb = L.find("model.layers.0.self_attn.v_proj.bias");
  ASSERT_TRUE(k && v && qb && kb && vb);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(v->offset, k->offset + k->numel());
  EXPECT_EQ(qb->offset, v->offset + v->numel());
  EXPECT_EQ(kb->offset, qb->offset + 32);
  EXPECT_EQ(vb->offset, kb->offset + 16);
  EXPECT_EQ(L.views().back().name, "lm_head.weight");
  EXPECT_EQ(std::string(head_param_name(c)), "lm_head.weight");
  // Untied: the embedding is a lookup, the head a GEMM.
  EXPECT_DOUBLE_EQ(flops_per_token(c, 16),
                   6.0 * double(count_params(c) - 64 * 32) + 12.0 * 2 * 32 * 16);
  // Biases start at 0, the head like any matrix.
  ParamSet p(L);
  init_params(p, c, 3);
  for (size_t i = 0; i < qb->numel(); ++i) EXPECT_EQ(p.data()[qb->offset + i], 0.0f);
  EXPECT_NE(p.data()[L.find("lm_head.weight")->offset], 0.0f);
  c.kv_heads = 3;
  EXPECT_NE(validate(c).message().find("kv_heads 3 must divide heads 4"), std::string::npos);
}

// Central finite differences of the fp32 model's loss on the new parameters (grouped-query
// k/v, q/k/v biases, untied head), at the coordinates with the largest analytic gradient.
TEST(Llama, GroupedQueryBiasesUntiedHeadGradientsMatchFiniteDifferences) {
  ModelConfig c = tiny();
  c.vocab = 32;
  c.dim = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = 1;
  c.ffn_hidden = 24;
  c.attention_bias = true;
  c.tie_word_embeddings = false;
  ParamSet p(make_layout(c));
  init_params(p, c, 9);
  Philox r(4, 4);
  for (size_t i = 0; i < p.numel(); ++i)  // larger weights: gradients well above fp32 noise
    p.data()[i] += static_cast<float>(0.3 * r.normal(i));
  const int B = 2, T = 8;
  auto tokens = random_tokens(B * T, c.vocab, 5), targets = random_tokens(B * T, c.vocab, 6);
  Llama m(c);
  ParamSet g(m.layout());
  g.zero();
  m.forward(p, tokens.data(), targets.data(), B, T);
  m.backward(p, g);
  for (const char* name :
       {"model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
        "model.layers.0.self_attn.q_proj.bias", "model.layers.0.self_attn.k_proj.bias",
        "model.layers.0.self_attn.v_proj.bias", "lm_head.weight"}) {
    const ParamView* v = p.layout().find(name);
    ASSERT_NE(v, nullptr) << name;
    std::vector<size_t> idx(v->numel());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = v->offset + i;
    std::partial_sort(idx.begin(), idx.begin() + 3, idx.end(), [&](size_t a, size_t b) {
      return std::fabs(g.data()[a]) > std::fabs(g.data()[b]);
    });
    for (int j = 0; j < 3; ++j) {
      const size_t i = idx[j];
      const float keep = p.data()[i], h = 1e-2f;
      p.data()[i] = keep + h;
      const double up = m.forward(p, tokens.data(), targets.data(), B, T);
      p.data()[i] = keep - h;
      const double down = m.forward(p, tokens.data(), targets.data(), B, T);
      p.data()[i] = keep;
      const double fd = (up - down) / (2.0 * h), an = g.data()[i];
      EXPECT_GT(std::fabs(an), 1e-3) << name << ": gradient too small to check";
      EXPECT_NEAR(an, fd, 2e-2 * std::fabs(an)) << name << " element " << i - v->offset;
    }
  }
}

// Every training precision runs the Hugging Face variants (the q|k|v GEMM is (C + 2Ckv) wide,
// the head lm_head): finite loss and gradients, the same bits on 1 thread and on all, and the
// low-precision recipes within a few percent of fp32's loss.
TEST(Llama, HuggingFaceVariantsTrainUnderEveryPrecision) {
  ModelConfig c = tiny();
  c.heads = 4;
  c.kv_heads = 1;
  c.attention_bias = true;
  c.tie_word_embeddings = false;
  ParamSet p(make_layout(c));
  init_params(p, c, 12);
  const int B = 2, T = 16;
  auto tokens = random_tokens(B * T, c.vocab, 13), targets = random_tokens(B * T, c.vocab, 14);
  double fp32_loss = 0;
  for (Precision prec : {Precision::kFp32, Precision::kBf16, Precision::kFp8, Precision::kMxfp8,
                         Precision::kNvfp4}) {
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
      kernels::cpu::set_num_threads(run == 0 ? 1 : 0);
      Llama m(c);
      m.set_precision(prec, 5);
      ParamSet g(m.layout());
      g.zero();
      const float loss = m.forward(p, tokens.data(), targets.data(), B, T);
      m.backward(p, g);
      ASSERT_TRUE(std::isfinite(loss)) << precision_name(prec);
      for (size_t i = 0; i < g.numel(); ++i)
        ASSERT_TRUE(std::isfinite(g.data()[i])) << precision_name(prec) << " " << i;
      std::vector<float> bits(g.data(), g.data() + g.numel());
      bits.push_back(loss);
      if (run == 0)
        first = bits;
      else
        EXPECT_EQ(bits, first) << precision_name(prec) << ": not deterministic";
      if (prec == Precision::kFp32)
        fp32_loss = loss;
      else
        EXPECT_NEAR(loss, fp32_loss, 0.05 * fp32_loss) << precision_name(prec);
    }
  }
  kernels::cpu::set_num_threads(0);
}

TEST(ModelInit, DeterministicAndScaled) {
  ModelConfig c;
  ParamSet a(make_layout(c)), b(make_layout(c)), d(make_layout(c));
  init_params(a, c, 42);
  init_params(b, c, 42);
  init_params(d, c, 43);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_NE(a.fingerprint(), d.fingerprint());
  // Same bits with a different thread count.
  kernels::cpu::set_num_threads(1);
  ParamSet e(make_layout(c));
  init_params(e, c, 42);
  kernels::cpu::set_num_threads(0);
  EXPECT_EQ(a.fingerprint(), e.fingerprint());

  auto stddev = [&](const std::string& name) {
    const ParamView* v = a.layout().find(name);
    double s = 0;
    for (size_t i = 0; i < v->numel(); ++i)
      s += double(a.data()[v->offset + i]) * a.data()[v->offset + i];
    return std::sqrt(s / v->numel());
  };
  EXPECT_NEAR(stddev("model.embed_tokens.weight"), 0.02, 0.001);
  EXPECT_NEAR(stddev("model.layers.1.self_attn.q_proj.weight"), 0.02, 0.001);
  EXPECT_NEAR(stddev("model.layers.1.self_attn.o_proj.weight"), 0.02 / std::sqrt(8.0), 0.0005);
  EXPECT_NEAR(stddev("model.layers.3.mlp.down_proj.weight"), 0.02 / std::sqrt(8.0), 0.0005);
  const float* n = a.ptr("model.norm.weight");
  for (int i = 0; i < c.dim; ++i) ASSERT_EQ(n[i], 1.0f);
  // Different tensors draw different numbers.
  EXPECT_NE(a.ptr("model.layers.0.self_attn.q_proj.weight")[0],
            a.ptr("model.layers.0.self_attn.k_proj.weight")[0]);
}

struct RunResult {
  float loss;
  std::vector<float> logits;
  std::string grad_fp;
};

RunResult run_once(const ModelConfig& c, const ParamSet& p, const std::vector<int32_t>& x,
                   const std::vector<int32_t>& y, int B, int T) {
  Llama m(c);
  ParamSet g(m.layout());
  RunResult r;
  r.loss = m.forward(p, x.data(), y.data(), B, T);
  r.logits.assign(m.logits(), m.logits() + size_t(B) * T * c.vocab);
  m.backward(p, g);
  r.grad_fp = g.fingerprint();
  return r;
}

TEST(Llama, ForwardBackwardBitwiseDeterministicAcrossRunsAndThreads) {
  ModelConfig c = tiny();
  ParamSet p(make_layout(c));
  init_params(p, c, 5);
  const int B = 3, T = 16;
  auto x = random_tokens(B * T, c.vocab, 1), y = random_tokens(B * T, c.vocab, 2);
  y[5] = -1;
  kernels::cpu::set_num_threads(2);
  RunResult a = run_once(c, p, x, y, B, T);
  RunResult b = run_once(c, p, x, y, B, T);
  kernels::cpu::set_num_threads(1);
  RunResult d = run_once(c, p, x, y, B, T);
  kernels::cpu::set_num_threads(0);
  EXPECT_TRUE(std::isfinite(a.loss));
  EXPECT_NEAR(a.loss, std::log(double(c.vocab)), 0.2);  // near-uniform at init
  for (const RunResult* r : {&b, &d}) {
    EXPECT_EQ(a.loss, r->loss);
    EXPECT_EQ(a.logits, r->logits);
    EXPECT_EQ(a.grad_fp, r->grad_fp);
  }
}

TEST(Llama, BackwardAccumulatesAndShapesCanShrink) {
  ModelConfig c = tiny();
  ParamSet p(make_layout(c));
  init_params(p, c, 5);
  auto x = random_tokens(2 * 16, c.vocab, 3), y = random_tokens(2 * 16, c.vocab, 4);
  Llama m(c);
  ParamSet g1(m.layout()), g2(m.layout());
  m.forward(p, x.data(), y.data(), 2, 16);
  m.backward(p, g1);
  m.forward(p, x.data(), y.data(), 2, 16);
  m.backward(p, g2);
  m.forward(p, x.data(), y.data(), 2, 16);
  m.backward(p, g2);  // g2 = 2 * g1 (accumulated; GEMM's beta=1 path may round differently)
  float gmax = 0;
  for (float x : g1.vec()) gmax = std::max(gmax, std::fabs(x));
  ASSERT_GT(gmax, 0.0f);
  for (size_t i = 0; i < g1.numel(); ++i)
    ASSERT_NEAR(2.0f * g1.data()[i], g2.data()[i], 1e-6f * gmax) << i;
  // A smaller shape after a larger one reuses the buffers and gives the same numbers as a
  // fresh model.
  const float l_small = m.forward(p, x.data(), y.data(), 1, 8);
  Llama fresh(c);
  EXPECT_EQ(l_small, fresh.forward(p, x.data(), y.data(), 1, 8));
  // Causality: the first 8 positions of row 0 do not depend on later tokens.
  m.forward(p, x.data(), nullptr, 1, 16);
  std::vector<float> full(m.logits(), m.logits() + 8 * c.vocab);
  fresh.forward(p, x.data(), nullptr, 1, 8);
  std::vector<float> prefix(fresh.logits(), fresh.logits() + 8 * c.vocab);
  for (size_t i = 0; i < full.size(); ++i) ASSERT_NEAR(full[i], prefix[i], 1e-5) << i;
}

TEST(Llama, IgnoredTargetsDoNotCount) {
  ModelConfig c = tiny();
  ParamSet p(make_layout(c));
  init_params(p, c, 9);
  auto x = random_tokens(16, c.vocab, 3), y = random_tokens(16, c.vocab, 4);
  Llama m(c);
  std::vector<int32_t> y_ign = y;
  for (int i = 8; i < 16; ++i) y_ign[i] = -1;
  const float l = m.forward(p, x.data(), y_ign.data(), 1, 16);
  EXPECT_EQ(m.num_targets(), 8);
  double s = 0;
  for (int i = 0; i < 8; ++i) s += m.losses()[i];
  EXPECT_NEAR(l, s / 8, 1e-6);
  for (int i = 8; i < 16; ++i) EXPECT_EQ(m.losses()[i], 0.0f);
}

TEST(InnerTrainer, OverfitsOneBatch) {
  ModelConfig c = tiny();
  TrainerConfig t;
  t.batch = 4;
  t.seq = 16;
  t.lr = 1e-2;
  t.min_lr = 1e-3;
  t.warmup = 5;
  t.total_steps = 60;
  t.weight_decay = 0.0;
  ASSERT_TRUE(validate(t, c).ok());
  ParamSet p(make_layout(c));
  init_params(p, c, 11);
  auto rows = random_tokens(size_t(t.batch) * (t.seq + 1), c.vocab, 12);
  InnerTrainer tr(c, t);
  const float before = tr.evaluate(p, rows.data(), t.batch);
  StepStats first{}, last{};
  std::vector<double> lrs;
  for (int s = 0; s < 60; ++s) {
    StepStats st = tr.step(p, rows.data(), s);
    lrs.push_back(st.lr);
    if (s == 0) first = st;
    last = st;
    ASSERT_TRUE(std::isfinite(st.loss)) << s;
  }
  EXPECT_EQ(first.loss, before);  // step reports the loss before its update
  EXPECT_EQ(first.tokens, 64);
  EXPECT_LT(lrs[0], lrs[4]);  // warmup, then cosine decay to min_lr
  EXPECT_LE(lrs[4], t.lr);
  EXPECT_GT(lrs[10], lrs[50]);
  EXPECT_GE(lrs[59], t.min_lr - 1e-12);
  EXPECT_EQ(tr.optimizer().step_count(), 60);
  const float after = tr.evaluate(p, rows.data(), t.batch);
  EXPECT_LT(after, 0.25f * before) << "before " << before << " after " << after;
  EXPECT_LT(last.loss, 0.3f * first.loss);
}

TEST(InnerTrainer, EvaluateIsMeanOverRowsInChunks) {
  ModelConfig c = tiny();
  TrainerConfig t;
  t.batch = 2;
  t.seq = 16;
  ParamSet p(make_layout(c));
  init_params(p, c, 1);
  auto rows = random_tokens(size_t(5) * 17, c.vocab, 2);
  InnerTrainer tr(c, t);
  const float all = tr.evaluate(p, rows.data(), 5);  // chunks 2 + 2 + 1
  double s = 0;
  for (int r = 0; r < 5; ++r) s += tr.evaluate(p, rows.data() + r * 17, 1);
  EXPECT_NEAR(all, s / 5, 1e-5);
}

TEST(TrainerConfig, ValidateNamesTheProblem) {
  ModelConfig c = tiny();
  TrainerConfig t;
  t.seq = 17;
  Status st = validate(t, c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("seq 17"), std::string::npos) << st.message();
  t = TrainerConfig{};
  t.seq = 16;
  t.min_lr = 1.0;
  EXPECT_FALSE(validate(t, c).ok());
  t = TrainerConfig{};
  t.seq = 16;
  t.beta2 = 1.0;
  EXPECT_FALSE(validate(t, c).ok());
}

TEST(Llama, GenerationDeterministicPerSeed) {
  ModelConfig c = tiny();
  ParamSet p(make_layout(c));
  init_params(p, c, 21);
  // Sharpen the distribution a little so sampling and greedy differ visibly.
  for (float& w : p.vec()) w *= 3.0f;
  Llama m(c);
  std::vector<int32_t> prompt = {1, 2, 3};
  auto a = m.generate(p, prompt, 24, 1.0f, 0, 7);
  auto b = m.generate(p, prompt, 24, 1.0f, 0, 7);
  auto d = m.generate(p, prompt, 24, 1.0f, 0, 8);
  ASSERT_TRUE(a.ok() && b.ok() && d.ok());
  ASSERT_EQ(a->size(), 24u);  // longer than seq_len with the prompt: the window slides
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *d);
  for (int32_t t : *a) EXPECT_TRUE(t >= 0 && t < c.vocab);
  // Greedy ignores the seed; top_k = 1 is greedy.
  auto g1 = m.generate(p, prompt, 10, 0.0f, 0, 1);
  auto g2 = m.generate(p, prompt, 10, 0.0f, 0, 2);
  auto k1 = m.generate(p, prompt, 10, 0.8f, 1, 3);
  ASSERT_TRUE(g1.ok() && g2.ok() && k1.ok());
  EXPECT_EQ(*g1, *g2);
  EXPECT_EQ(*g1, *k1);
  // The first greedy token is the argmax of the prompt's last logits.
  m.forward(p, prompt.data(), nullptr, 1, 3);
  const float* lg = m.logits() + 2 * c.vocab;
  int best = 0;
  for (int v = 1; v < c.vocab; ++v)
    if (lg[v] > lg[best]) best = v;
  EXPECT_EQ((*g1)[0], best);
  // Bad input is an error, not a crash.
  EXPECT_FALSE(m.generate(p, {}, 3, 1.0f, 0, 1).ok());
  EXPECT_FALSE(m.generate(p, {c.vocab}, 3, 1.0f, 0, 1).ok());
}

}  // namespace
}  // namespace atl::algorithms
