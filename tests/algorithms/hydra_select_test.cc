// Hydra selection: Taylor importance vs finite differences, exact knapsack vs brute force,
// deterministic selection within every budget, coverage.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "algorithms/hydra/cost.h"
#include "algorithms/hydra/importance.h"
#include "algorithms/hydra/knapsack.h"
#include "algorithms/hydra/select.h"
#include "algorithms/model/llama.h"
#include "kernels/core/philox.h"
#include "tests/algorithms/hydra_test_util.h"

namespace atl::algorithms::hydra {
namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.vocab = 16;
  c.dim = 8;
  c.layers = 2;
  c.heads = 2;
  c.ffn_hidden = 8;
  c.seq_len = 8;
  return c;
}

// Σ_{i in elements} |g_i w_i| with g from central differences of the mean loss.
double fd_score(Llama& m, ParamSet& p, const std::vector<int32_t>& in,
                const std::vector<int32_t>& tg, int B, int T, const std::vector<size_t>& elems) {
  const float eps = 5e-3f;
  double s = 0;
  for (size_t i : elems) {
    const float w = p.data()[i];
    p.data()[i] = w + eps;
    const double lp = m.forward(p, in.data(), tg.data(), B, T);
    p.data()[i] = w - eps;
    const double lm = m.forward(p, in.data(), tg.data(), B, T);
    p.data()[i] = w;
    s += std::fabs((lp - lm) / (2.0 * eps) * w);
  }
  return s;
}

TEST(HydraImportance, TaylorScoresMatchFiniteDifferences) {
  const ModelConfig cfg = tiny();
  Llama model(cfg);
  ParamSet p(make_layout(cfg));
  init_params(p, cfg, 3);
  // Larger weights than the init so the gradients are not tiny.
  for (float& x : p.vec()) x *= 8.0f;
  const int B = 2, T = 6, G = 2;
  Philox r(11, 1);
  std::vector<int32_t> rows(static_cast<size_t>(B) * (T + 1));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int32_t>(r.below(i, cfg.vocab));
  auto sc = taylor_importance(model, p, rows.data(), 1, B, T, G);
  ASSERT_TRUE(sc.ok()) << sc.status().message();
  std::vector<int32_t> in, tg;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      in.push_back(rows[b * (T + 1) + t]);
      tg.push_back(rows[b * (T + 1) + t + 1]);
    }
  const ParamLayout& L = p.layout();
  const size_t C = cfg.dim, D = C / cfg.heads, F = cfg.ffn_hidden, Fb = F / G;
  const int l = 1;
  auto off = [&](const char* s) {
    return L.find("model.layers." + std::to_string(l) + "." + s)->offset;
  };
  // Head 1 of layer 1: q, k, v rows and o_proj columns.
  std::vector<size_t> head;
  for (const char* m :
       {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"})
    for (size_t i = 0; i < D * C; ++i) head.push_back(off(m) + D * C + i);
  for (size_t row = 0; row < C; ++row)
    for (size_t j = 0; j < D; ++j) head.push_back(off("self_attn.o_proj.weight") + row * C + D + j);
  const double h_fd = fd_score(model, p, in, tg, B, T, head);
  EXPECT_NEAR(sc->head[l * cfg.heads + 1], h_fd, 0.03 * h_fd);
  // FFN block 0 of layer 1.
  std::vector<size_t> blk;
  for (const char* m : {"mlp.gate_proj.weight", "mlp.up_proj.weight"})
    for (size_t i = 0; i < Fb * C; ++i) blk.push_back(off(m) + i);
  for (size_t row = 0; row < C; ++row)
    for (size_t j = 0; j < Fb; ++j) blk.push_back(off("mlp.down_proj.weight") + row * F + j);
  const double b_fd = fd_score(model, p, in, tg, B, T, blk);
  EXPECT_NEAR(sc->ffn[l * G + 0], b_fd, 0.03 * b_fd);
  // The whole layer 1.
  std::vector<size_t> layer;
  for (size_t i = off("input_layernorm.weight"); i < off("mlp.down_proj.weight") + C * F; ++i)
    layer.push_back(i);
  const double l_fd = fd_score(model, p, in, tg, B, T, layer);
  EXPECT_NEAR(sc->layer[l], l_fd, 0.03 * l_fd);
  EXPECT_GT(h_fd, 0);
  EXPECT_GT(b_fd, 0);
  EXPECT_TRUE(validate(*sc, cfg, G).ok());
  UnitScores bad = *sc;
  bad.head[0] = -1;
  EXPECT_FALSE(validate(bad, cfg, G).ok());
}

TEST(HydraKnapsack, MatchesBruteForceOnRandomInstances) {
  Philox r(5, 2);
  uint64_t c = 0;
  for (int inst = 0; inst < 300; ++inst) {
    const int n = 1 + static_cast<int>(r.below(c++, 14));
    std::vector<KnapsackItem> items(n);
    int64_t total = 0;
    for (auto& it : items) {
      // Few distinct costs on half the instances (like a model's units), arbitrary otherwise.
      it.cost = inst % 2 ? 1 + static_cast<int64_t>(r.below(c++, 3)) * 7
                         : static_cast<int64_t>(r.below(c++, 50));
      it.value = r.uniform_double(c++) * 10.0;
      it.forced = r.below(c++, 10) == 0;
      total += it.cost;
    }
    const int64_t cap = static_cast<int64_t>(r.below(c++, static_cast<uint32_t>(total + 2)));
    const KnapsackResult a = solve_knapsack(items, cap);
    const KnapsackResult b = brute_force_knapsack(items, cap);
    ASSERT_EQ(a.feasible, b.feasible) << "instance " << inst;
    if (!a.feasible) continue;
    EXPECT_NEAR(a.value, b.value, 1e-9) << "instance " << inst;
    EXPECT_LE(a.cost, cap);
    int64_t cost = 0;
    double value = 0;
    for (int i = 0; i < n; ++i) {
      if (items[i].forced) {
        EXPECT_EQ(a.take[i], 1);
      }
      if (a.take[i]) {
        cost += items[i].cost;
        value += items[i].value;
      }
    }
    EXPECT_EQ(cost, a.cost);
    EXPECT_NEAR(value, a.value, 1e-9);
  }
}

std::vector<SiteInput> random_sites(const CostModel& cm, uint64_t seed) {
  const double budgets[] = {1.0, 0.5, 0.25, 0.25};
  std::vector<SiteInput> s;
  Philox r(seed, 3);
  uint64_t c = 0;
  for (int k = 0; k < 4; ++k) {
    SiteInput in;
    in.id = "site-" + std::to_string(k);
    in.budget = budgets[k];
    in.scores = empty_scores(cm.model, cm.ffn_blocks);
    for (double& x : in.scores.head) x = r.uniform_double(c++);
    for (double& x : in.scores.ffn) x = r.uniform_double(c++);
    for (double& x : in.scores.layer) x = r.uniform_double(c++);
    s.push_back(in);
  }
  return s;
}

TEST(HydraSelect, DeterministicWithinBudgetAndCovered) {
  const CostModel cm = bench_cost();
  auto sites = random_sites(cm, 9);
  SelectOptions opt;
  auto a = select_subnetworks(cm, sites, opt);
  ASSERT_TRUE(a.ok()) << a.status().message();
  // Same inputs in another order: same selection, bit for bit.
  std::vector<SiteInput> rev(sites.rbegin(), sites.rend());
  auto b = select_subnetworks(cm, rev, opt);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->layers, b->layers);
  ASSERT_EQ(a->sites.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(a->sites[k].id, "site-" + std::to_string(k));
    EXPECT_EQ(to_string(a->sites[k].subnet), to_string(b->sites[k].subnet));
    EXPECT_TRUE(a->sites[k].within_budget);
    EXPECT_LE(a->sites[k].cost_fraction, sites[k].budget + 1e-12) << k;
    EXPECT_DOUBLE_EQ(a->sites[k].cost_fraction, cost_fraction(cm, a->sites[k].subnet));
    EXPECT_GT(a->sites[k].trained_value, 0) << "every site trains something";
    EXPECT_DOUBLE_EQ(a->sites[k].value,
                     a->sites[k].trained_value - opt.removal_penalty * a->sites[k].removed_score);
  }
  EXPECT_EQ(a->total_value, b->total_value);
  EXPECT_EQ(a->uncovered_units, 0);
  // Every unit of S is held by at least one site.
  for (int l = 0; l < cm.model.layers; ++l) {
    if (!a->layers[l]) continue;
    for (int h = 0; h < cm.model.heads; ++h) {
      int n = 0;
      for (const auto& s : a->sites) n += s.subnet.layers[l].heads[h];
      EXPECT_GE(n, 1) << "layer " << l << " head " << h;
    }
  }
  // The full-budget site trains every unit of S (it can afford the whole model).
  for (int l = 0; l < cm.model.layers; ++l)
    if (a->layers[l]) {
      for (int h = 0; h < cm.model.heads; ++h) EXPECT_EQ(a->sites[0].subnet.layers[l].heads[h], 1);
    }
}

TEST(HydraSelect, MinCoverageTwoIsMetOrReported) {
  const CostModel cm = bench_cost();
  auto sites = random_sites(cm, 4);
  SelectOptions opt;
  opt.min_coverage = 2;
  auto a = select_subnetworks(cm, sites, opt);
  ASSERT_TRUE(a.ok());
  int uncovered = 0;
  for (int l = 0; l < cm.model.layers; ++l) {
    if (!a->layers[l]) continue;
    for (int h = 0; h < cm.model.heads; ++h) {
      int n = 0;
      for (const auto& s : a->sites) n += s.subnet.layers[l].heads[h];
      uncovered += n < 2;
    }
    for (int b = 0; b < cm.ffn_blocks; ++b) {
      int n = 0;
      for (const auto& s : a->sites) n += s.subnet.layers[l].ffn_blocks[b];
      uncovered += n < 2;
    }
  }
  EXPECT_EQ(uncovered, a->uncovered_units);
  EXPECT_EQ(a->uncovered_units, 0);
  for (size_t k = 0; k < 4; ++k) EXPECT_LE(a->sites[k].cost_fraction, sites[k].budget + 1e-12);
}

TEST(HydraSelect, GreedySearchBeyondExhaustiveLimit) {
  CostModel cm = bench_cost();
  cm.model.layers = 6;
  auto sites = random_sites(cm, 2);
  SelectOptions ex, gr;
  gr.exhaustive_max_layers = 3;  // forces greedy + local search on 6 layers
  auto a = select_subnetworks(cm, sites, ex);
  auto b = select_subnetworks(cm, sites, gr);
  ASSERT_TRUE(a.ok() && b.ok());
  // Local search comes within 10% of the exhaustive optimum here, and never beats it (the
  // objective subtracts removal damage, so it may be negative).
  EXPECT_LE(b->total_value, a->total_value + 1e-9);
  EXPECT_GE(b->total_value, a->total_value - 0.1 * std::abs(a->total_value));
  for (size_t k = 0; k < 4; ++k) EXPECT_LE(b->sites[k].cost_fraction, sites[k].budget + 1e-12);
}

TEST(HydraSelect, BadInputIsOneLine) {
  const CostModel cm = bench_cost();
  auto sites = random_sites(cm, 1);
  sites[1].budget = 0;
  auto a = select_subnetworks(cm, sites, {});
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("budget"), std::string::npos);
  sites = random_sites(cm, 1);
  sites[2].id = sites[1].id;
  EXPECT_FALSE(select_subnetworks(cm, sites, {}).ok());
  sites = random_sites(cm, 1);
  sites[0].scores.head.pop_back();
  EXPECT_FALSE(select_subnetworks(cm, sites, {}).ok());
}

// Σ over layers of the subnet's train flags.
int trained_layer_count(const Subnet& s) {
  int n = 0;
  for (const auto& l : s.layers) n += l.train;
  return n;
}

// Units (heads + FFN blocks) the subnet trains.
int trained_unit_count(const Subnet& s) {
  int n = 0;
  for (const auto& l : s.layers)
    if (l.train) {
      for (uint8_t h : l.heads) n += h;
      for (uint8_t b : l.ffn_blocks) n += b;
    }
  return n;
}

TEST(HydraSelectPerSite, FullBudgetSiteTrainsEveryLayerWhileSmallSitesKeepFew) {
  const CostModel cm = bench_cost();
  const auto sites = random_sites(cm, 9);
  SelectOptions global, per_site;
  per_site.trained_layers = TrainedLayers::kPerSite;
  auto g = select_subnetworks(cm, sites, global);
  auto p = select_subnetworks(cm, sites, per_site);
  ASSERT_TRUE(g.ok() && p.ok());
  const int L = cm.model.layers;
  // Under one global S the small sites' removal damage keeps S small, so the full-budget site is
  // held to it; on its own it trains the whole model.
  EXPECT_LT(trained_layer_count(g->sites[0].subnet), L) << to_string(g->sites[0].subnet);
  EXPECT_EQ(to_string(p->sites[0].subnet), to_string(full_subnet(cm.model, cm.ffn_blocks, true)));
  // (below 1: the embedding and the output head are never trained)
  EXPECT_DOUBLE_EQ(p->sites[0].cost_fraction,
                   cost_fraction(cm, full_subnet(cm.model, cm.ffn_blocks, true)));
  EXPECT_DOUBLE_EQ(p->sites[0].removed_score, 0.0);
  for (size_t k = 2; k < 4; ++k) {  // the 0.25 sites
    EXPECT_LT(trained_layer_count(p->sites[k].subnet), L) << k;
    EXPECT_GT(trained_unit_count(p->sites[k].subnet), 0) << k;
  }
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_TRUE(p->sites[k].within_budget) << k;
    EXPECT_LE(p->sites[k].cost_fraction, sites[k].budget + 1e-12) << k;
    EXPECT_DOUBLE_EQ(p->sites[k].cost_fraction, cost_fraction(cm, p->sites[k].subnet));
    // No site is worse off than under the shared S: its own S_k is chosen for its own value.
    EXPECT_GE(p->sites[k].value, g->sites[k].value - 1e-9) << k;
  }
  EXPECT_GT(p->total_value, g->total_value);
  // layers = the union of the sites' trained layers.
  for (int l = 0; l < L; ++l) {
    uint8_t any = 0;
    for (const auto& s : p->sites) any |= static_cast<uint8_t>(s.subnet.layers[l].train);
    EXPECT_EQ(p->layers[l], any) << l;
  }
  EXPECT_EQ(p->uncovered_units, 0);
}

TEST(HydraSelectPerSite, DeterministicInAnySiteOrder) {
  const CostModel cm = bench_cost();
  const auto sites = random_sites(cm, 5);
  SelectOptions opt;
  opt.trained_layers = TrainedLayers::kPerSite;
  opt.min_coverage = 2;
  auto a = select_subnetworks(cm, sites, opt);
  std::vector<SiteInput> rev(sites.rbegin(), sites.rend());
  auto b = select_subnetworks(cm, rev, opt);
  auto c = select_subnetworks(cm, sites, opt);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->layers, b->layers);
  EXPECT_EQ(a->total_value, b->total_value);
  EXPECT_EQ(a->total_value, c->total_value);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(a->sites[k].id, "site-" + std::to_string(k));
    EXPECT_EQ(to_string(a->sites[k].subnet), to_string(b->sites[k].subnet)) << k;
    EXPECT_EQ(to_string(a->sites[k].subnet), to_string(c->sites[k].subnet)) << k;
  }
}

TEST(HydraSelectPerSite, EachSiteGetsTheExhaustiveOptimumOfItsOwnValue) {
  // Without coverage repair each S_k is the best of all 15 non-empty sets for site k alone (ties:
  // the smallest set as a bit string), with the exact knapsacks of select_site inside.
  const CostModel cm = bench_cost();
  const auto sites = random_sites(cm, 13);
  for (double lambda : {0.0, 2.0, 10.0}) {
    SelectOptions opt;
    opt.trained_layers = TrainedLayers::kPerSite;
    opt.min_coverage = 0;
    opt.removal_penalty = lambda;
    auto sel = select_subnetworks(cm, sites, opt);
    ASSERT_TRUE(sel.ok());
    double total = 0;
    for (size_t k = 0; k < sites.size(); ++k) {
      double best = -1e300;
      std::vector<uint8_t> bestS;
      for (uint32_t m = 1; m < 16; ++m) {
        std::vector<uint8_t> S(4);
        for (int l = 0; l < 4; ++l) S[l] = (m >> l) & 1u;
        const double v = select_site(cm, sites[k], S, opt).value;
        if (bestS.empty() || v > best || (v == best && S < bestS)) best = v, bestS = S;
      }
      const SiteSelection want = select_site(cm, sites[k], bestS, opt);
      EXPECT_DOUBLE_EQ(sel->sites[k].value, best) << "λ " << lambda << " site " << k;
      EXPECT_EQ(to_string(sel->sites[k].subnet), to_string(want.subnet))
          << "λ " << lambda << " site " << k;
      total += best;
    }
    EXPECT_DOUBLE_EQ(sel->total_value, total);
  }
}

TEST(HydraSelectPerSite, CoverageIsRepairedWithinTheSitesOwnLayers) {
  const CostModel cm = bench_cost();
  const auto sites = random_sites(cm, 4);
  SelectOptions opt;
  opt.trained_layers = TrainedLayers::kPerSite;
  opt.min_coverage = 2;
  SelectOptions no_repair = opt;
  no_repair.min_coverage = 0;
  auto a = select_subnetworks(cm, sites, opt);
  auto f = select_subnetworks(cm, sites, no_repair);
  ASSERT_TRUE(a.ok() && f.ok());
  // Recount: units of the union of the trained layers held (trained) by fewer than two sites.
  int uncovered = 0;
  for (int l = 0; l < cm.model.layers; ++l) {
    if (!a->layers[l]) continue;
    for (int h = 0; h < cm.model.heads; ++h) {
      int n = 0;
      for (const auto& s : a->sites) n += s.subnet.layers[l].train && s.subnet.layers[l].heads[h];
      uncovered += n < 2;
    }
    for (int b = 0; b < cm.ffn_blocks; ++b) {
      int n = 0;
      for (const auto& s : a->sites)
        n += s.subnet.layers[l].train && s.subnet.layers[l].ffn_blocks[b];
      uncovered += n < 2;
    }
  }
  EXPECT_EQ(uncovered, a->uncovered_units);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_LE(a->sites[k].cost_fraction, sites[k].budget + 1e-12) << k;
    // Repair never changes a site's trained layers, and costs value, never adds it.
    for (int l = 0; l < cm.model.layers; ++l)
      EXPECT_EQ(a->sites[k].subnet.layers[l].train, f->sites[k].subnet.layers[l].train) << k;
    EXPECT_LE(a->sites[k].value, f->sites[k].value + 1e-9) << k;
  }
  EXPECT_LE(a->total_value, f->total_value + 1e-9);
}

TEST(HydraSelectPerSite, TrainedLayersNamesParse) {
  EXPECT_EQ(*parse_trained_layers("global"), TrainedLayers::kGlobal);
  EXPECT_EQ(*parse_trained_layers("per_site"), TrainedLayers::kPerSite);
  EXPECT_STREQ(trained_layers_name(TrainedLayers::kPerSite), "per_site");
  EXPECT_STREQ(trained_layers_name(TrainedLayers::kGlobal), "global");
  auto bad = parse_trained_layers("per-site");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("per_site"), std::string::npos);
}

}  // namespace
}  // namespace atl::algorithms::hydra
