// Hydra on an imported Hugging Face model: a Qwen2-style directory (grouped-query attention,
// q/k/v biases, untied lm_head, bf16 weights) is imported as `atoll import hf` does, and three
// sites with budgets 1.0, 0.5 and 0.25 fine-tune it for a few rounds with the code a federation
// runs: the node's importance measurement, the coordinator's selection, each site's Hydra
// trainer on its subnetwork, the node's masked pseudo-gradient, the coordinator's masked
// aggregation and outer step. Every site's held-out loss must drop by at least 0.2 nats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "algorithms/data/dataset.h"
#include "algorithms/hydra/aggregate.h"
#include "algorithms/hydra/cost.h"
#include "algorithms/hydra/select.h"
#include "algorithms/hydra/trainer.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/subnet.h"
#include "kernels/core/philox.h"
#include "node/hf_model.h"
#include "node/hydra_site.h"
#include "tests/tools/hf_dir.h"
#include "tools/temp_dir.h"

namespace atl::node {
namespace {

namespace al = atl::algorithms;

constexpr int kRange = 32;  // each site's own ids: [32k, 32k + 32)

// Site k's language: each token is the previous one + 1 (mod vocab) with probability 0.85, else
// a random token of the site's own range. The sites share the rule and differ in their noise,
// as genres of one language share its grammar and differ in their words.
al::data::TokenDataset site_tokens(int site, int vocab, int64_t n, uint64_t seed) {
  const Philox r(seed, static_cast<uint64_t>(site));
  al::data::TokenDataset d;
  d.vocab_size = vocab;
  int x = site * kRange;
  for (int64_t i = 0; i < n; ++i) {
    const bool follow = r.uniform_double(2 * uint64_t(i)) < 0.85;
    x = follow ? (x + 1) % vocab
               : site * kRange + static_cast<int>(r.below(2 * uint64_t(i) + 1, kRange));
    d.tokens.push_back(x);
  }
  return d;
}

// Mean loss of θ on `batches` fixed batches of a site's held-out tokens (full model).
double held_out_loss(const al::ModelConfig& model, const al::ParamSet& theta,
                     const al::data::TokenDataset& data, int B, int T) {
  al::Llama m(model);
  std::vector<int32_t> in, tg;
  double sum = 0;
  const int batches = 4;
  for (int k = 0; k < batches; ++k) {
    const auto batch = al::data::sample_global_batch(data, 404, k, B, T);
    al::data::split_inputs_targets(batch.tokens.data(), B, T, in, tg);
    sum += m.forward(theta, in.data(), tg.data(), B, T);
  }
  return sum / batches;
}

TEST(HydraImportedModel, SitesFineTuneSubnetworksOfAGroupedQueryQwen2Model) {
  atl::testing::TempDir dir;
  const std::filesystem::path hf_dir = std::filesystem::path(dir.path()) / "hf";
  atl::testing::HfSpec spec;
  spec.architecture = "Qwen2ForCausalLM";  // q/k/v biases
  spec.vocab = 263;  // the tokenizer's ids (hf_dir.h); the sites' tokens stay below 3 * kRange
  spec.dim = 64;  // wide enough that the 263-row embedding and head leave the smallest budget room
  spec.layers = 2;
  spec.heads = 4;
  spec.kv_heads = 2;  // grouped-query attention: 2 head units per layer
  spec.ffn = 128;
  spec.ctx = 32;
  spec.dtype = al::DType::kBF16;
  atl::testing::write_hf_dir(hf_dir, spec);
  auto imported = import_hf_dir(hf_dir.string());
  ASSERT_TRUE(imported.ok()) << imported.status().message();
  const al::ModelConfig model = imported->meta.model;
  ASSERT_EQ(al::num_kv_heads(model), 2);
  ASSERT_TRUE(model.attention_bias);
  ASSERT_FALSE(model.tie_word_embeddings);

  const int K = 3, G = 2, B = 4, T = 16, rounds = 4, inner = 15;
  const double budgets[K] = {1.0, 0.5, 0.25};
  std::vector<al::data::TokenDataset> train, held_out;
  for (int k = 0; k < K; ++k) {
    train.push_back(site_tokens(k, 3 * kRange, 20000, 1));
    held_out.push_back(site_tokens(k, 3 * kRange, 4000, 2));
  }
  al::TrainerConfig tc;
  tc.batch = B;
  tc.seq = T;
  tc.lr = 1e-2;
  tc.min_lr = 1e-3;
  tc.warmup = 2;
  tc.total_steps = rounds * inner;
  al::hydra::CostModel cm{model, G, T};

  al::ParamSet theta = imported->params;
  std::vector<double> before(K);
  for (int k = 0; k < K; ++k) before[k] = held_out_loss(model, theta, held_out[k], B, T);
  std::vector<float> momentum(theta.numel(), 0.0f);
  std::vector<al::hydra::HydraTrainer> trainers;
  trainers.reserve(K);
  for (int k = 0; k < K; ++k) trainers.emplace_back(model, tc);
  std::vector<std::string> subnets(K);
  for (int round = 0; round < rounds; ++round) {
    // Scores from each site's own data, then the selection.
    std::vector<al::hydra::SiteInput> inputs;
    for (int k = 0; k < K; ++k) {
      auto report = measure_importance(model, theta, train[k], 7 + k, round, 1, B, T, G);
      ASSERT_TRUE(report.ok()) << report.status().message();
      al::hydra::UnitScores sc = al::hydra::empty_scores(model, G);
      sc.layer.assign(report->layer().begin(), report->layer().end());
      sc.head.assign(report->head().begin(), report->head().end());
      sc.ffn.assign(report->ffn().begin(), report->ffn().end());
      ASSERT_TRUE(al::hydra::validate(sc, model, G).ok());
      inputs.push_back({"site-" + std::to_string(k), budgets[k], sc});
    }
    auto sel = al::hydra::select_subnetworks(cm, inputs, {});
    ASSERT_TRUE(sel.ok()) << sel.status().message();
    // Each site trains its subnetwork from θ and sends Δ at its trained elements.
    std::vector<std::vector<uint32_t>> idx(K);
    std::vector<std::vector<float>> deltas(K);
    std::vector<al::hydra::MaskedUpdate> updates;
    for (int k = 0; k < K; ++k) {
      const al::Subnet& s = sel->sites[k].subnet;
      ASSERT_EQ(s.layers[0].heads.size(), 2u) << "one head unit per KV head";
      EXPECT_LE(sel->sites[k].cost_fraction, budgets[k] + 1e-9);
      subnets[k] = al::to_string(s);
      ASSERT_TRUE(trainers[k].set_subnet(s).ok());
      al::ParamSet local = theta;
      for (int step = 0; step < inner; ++step) {
        const int64_t global = int64_t(round) * inner + step;
        const auto batch = al::data::sample_global_batch(train[k], 11 + k, global, B, T);
        const auto st = trainers[k].step(local, batch.tokens.data(), global);
        ASSERT_TRUE(std::isfinite(st.loss));
      }
      idx[k] = trainers[k].indices();
      ASSERT_FALSE(idx[k].empty()) << subnets[k];
      deltas[k].resize(idx[k].size());
      masked_delta(theta.vec(), local.vec(), idx[k], deltas[k]);
      updates.push_back({"site-" + std::to_string(k), uint64_t(inner) * B * T, idx[k], deltas[k]});
    }
    std::vector<float> delta(theta.numel());
    std::vector<uint32_t> held(theta.numel());
    ASSERT_TRUE(al::hydra::aggregate_masked(updates, delta, held).ok());
    ASSERT_TRUE(
        al::hydra::masked_outer_step({1.0f, 0.0f}, theta.vec(), momentum, delta, held, round == 0)
            .ok());
  }
  // The smallest site trains only part of the model: some unit is removed from its forward or
  // some layer is frozen.
  EXPECT_NE(subnets[2], al::to_string(al::full_subnet(model, G, true))) << subnets[2];
  for (int k = 0; k < K; ++k) {
    const double after = held_out_loss(model, theta, held_out[k], B, T);
    EXPECT_LT(after, before[k] - 0.2) << "site " << k << " (" << subnets[k] << ")";
  }
}

}  // namespace
}  // namespace atl::node
