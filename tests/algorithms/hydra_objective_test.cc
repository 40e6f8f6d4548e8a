// Hydra's selection objective with removal damage (select.h, docs/hydra.md "Selection
// objective"): value = Σ trained score − λ·Σ removed score; a small budget trades trained layers
// for a forward pass that keeps more of the model; leftover capacity returns to frozen units; and
// a site's optimizer survives re-selections that only move its frozen units.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "algorithms/hydra/cost.h"
#include "algorithms/hydra/select.h"
#include "algorithms/hydra/trainer.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/subnet.h"
#include "kernels/core/philox.h"
#include "tests/algorithms/hydra_test_util.h"

namespace atl::algorithms::hydra {
namespace {

SiteInput random_site(const CostModel& cm, const std::string& id, double budget, uint64_t seed) {
  SiteInput in{id, budget, empty_scores(cm.model, cm.ffn_blocks)};
  Philox r(seed, 5);
  uint64_t c = 0;
  for (double& x : in.scores.head) x = 0.1 + r.uniform_double(c++);
  for (double& x : in.scores.ffn) x = 0.1 + r.uniform_double(c++);
  for (double& x : in.scores.layer) x = r.uniform_double(c++);
  return in;
}

// Σ score of the units the subnet leaves out of the forward pass, recomputed from the masks.
double removed_of(const SiteInput& in, const Subnet& s) {
  double r = 0;
  for (size_t l = 0; l < s.layers.size(); ++l) {
    for (size_t h = 0; h < s.layers[l].heads.size(); ++h)
      if (!s.layers[l].heads[h]) r += in.scores.head[l * in.scores.heads + h];
    for (size_t b = 0; b < s.layers[l].ffn_blocks.size(); ++b)
      if (!s.layers[l].ffn_blocks[b]) r += in.scores.ffn[l * in.scores.ffn_blocks + b];
  }
  return r;
}

int layers_in(const std::vector<uint8_t>& S) {
  return std::accumulate(S.begin(), S.end(), 0);
}

TEST(HydraObjective, RemovalPenaltyTradesTrainedLayersForForwardFidelity) {
  const CostModel cm = bench_cost();
  const std::vector<SiteInput> sites = {random_site(cm, "a", 0.25, 1),
                                        random_site(cm, "b", 0.25, 2)};
  SelectOptions plain, damage;
  plain.removal_penalty = 0;
  damage.removal_penalty = 10;
  plain.min_coverage = damage.min_coverage = 0;  // the objective alone (two small sites cannot
                                                 // cover many layers)
  auto p = select_subnetworks(cm, sites, plain);
  auto d = select_subnetworks(cm, sites, damage);
  ASSERT_TRUE(p.ok() && d.ok());
  // Counting trained units only, every layer is worth training: all of S is pruned instead.
  EXPECT_EQ(layers_in(p->layers), cm.model.layers);
  // With the damage counted, fewer layers train and the forward keeps more of the model.
  EXPECT_LT(layers_in(d->layers), cm.model.layers);
  for (size_t k = 0; k < sites.size(); ++k) {
    const SiteSelection& a = p->sites[k];
    const SiteSelection& b = d->sites[k];
    EXPECT_LT(b.removed_score, a.removed_score) << k;
    EXPECT_GT(b.trained_value, 0) << "a quarter site still trains something";
    EXPECT_LE(b.cost_fraction, sites[k].budget + 1e-12);
    // The reported parts are those of the masks.
    EXPECT_NEAR(a.removed_score, removed_of(sites[k], a.subnet), 1e-9);
    EXPECT_NEAR(b.removed_score, removed_of(sites[k], b.subnet), 1e-9);
    EXPECT_DOUBLE_EQ(b.value, b.trained_value - 10 * b.removed_score);
    EXPECT_DOUBLE_EQ(a.value, a.trained_value);
  }
  EXPECT_NEAR(d->total_value, d->sites[0].value + d->sites[1].value, 1e-12);
}

TEST(HydraObjective, SelectionOfSIsExhaustiveOverTheNewObjective) {
  // Without coverage repair (min_coverage 0) the chosen S has the largest Σ value of all 15.
  const CostModel cm = bench_cost();
  std::vector<SiteInput> sites = {random_site(cm, "a", 1.0, 3), random_site(cm, "b", 0.5, 4),
                                  random_site(cm, "c", 0.25, 5)};
  SelectOptions opt;
  opt.removal_penalty = 2;
  opt.min_coverage = 0;
  auto sel = select_subnetworks(cm, sites, opt);
  ASSERT_TRUE(sel.ok());
  double best = -1e300;
  for (uint32_t m = 1; m < 16; ++m) {
    std::vector<uint8_t> S(4);
    for (int l = 0; l < 4; ++l) S[l] = (m >> l) & 1u;
    double total = 0;
    for (const auto& s : sites) total += select_site(cm, s, S, opt).value;
    best = std::max(best, total);
    if (S == sel->layers) {
      EXPECT_DOUBLE_EQ(total, sel->total_value);
    }
  }
  EXPECT_DOUBLE_EQ(best, sel->total_value);
}

TEST(HydraObjective, CapacityTrainingLeavesGoesBackToFrozenUnits) {
  // S = {top layer}, full budget, min_train_share 1: training layer 3 uses a quarter of the
  // layers' cost; what is left keeps every frozen unit in the forward pass.
  const CostModel cm = bench_cost();
  const SiteInput in = random_site(cm, "a", 1.0, 7);
  SelectOptions opt;
  opt.min_train_share = 1.0;
  const SiteSelection s = select_site(cm, in, {0, 0, 0, 1}, opt);
  EXPECT_TRUE(s.within_budget);
  EXPECT_DOUBLE_EQ(s.removed_score, 0.0) << to_string(s.subnet);
  EXPECT_EQ(to_string(s.subnet), "F:1111:1111|F:1111:1111|F:1111:1111|T:1111:1111");
  // A budget too small for everything: frozen units drop, least important first (exactly the
  // knapsack on the frozen share), and the cost stays within the budget.
  SiteInput small = in;
  small.budget = 0.3;
  const SiteSelection t = select_site(cm, small, {0, 0, 0, 1}, SelectOptions{});
  EXPECT_GT(t.removed_score, 0.0);
  EXPECT_LE(t.cost_fraction, 0.3 + 1e-12);
  EXPECT_GT(t.trained_value, 0.0);
}

TEST(HydraObjective, BadPenaltyIsOneLine) {
  const CostModel cm = bench_cost();
  SelectOptions opt;
  opt.removal_penalty = -1;
  auto r = select_subnetworks(cm, {random_site(cm, "a", 1.0, 1)}, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("removal_penalty"), std::string::npos);
}

TEST(HydraTrainerState, OptimizerSurvivesFrozenOnlyChangesAndResetsOnTrainedOnes) {
  const ModelConfig c = small_subnet_model();
  TrainerConfig t;
  t.batch = 2;
  t.seq = 16;
  t.warmup = 0;
  t.total_steps = 10;
  HydraTrainer tr(c, t);
  ParamSet p(make_layout(c));
  init_params(p, c, 2);
  std::vector<int32_t> rows(static_cast<size_t>(t.batch) * (t.seq + 1));
  Philox r(3, 3);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int32_t>(r.below(i, c.vocab));
  Subnet a = full_subnet(c, 3, false);  // layers 0, 1 frozen, layer 2 trained
  a.layers[2].train = 1;
  ASSERT_TRUE(tr.set_subnet(a).ok());
  const uint64_t gen_a = tr.trained_set_generation();
  tr.step(p, rows.data(), 0);
  tr.step(p, rows.data(), 1);
  EXPECT_EQ(tr.optimizer_steps(), 2);
  // A frozen head leaves the forward pass: same trained elements, the moments stay.
  Subnet b = a;
  b.layers[0].heads[1] = 0;
  ASSERT_TRUE(tr.set_subnet(b).ok());
  EXPECT_EQ(to_string(tr.subnet()), to_string(b)) << "the forward does change";
  EXPECT_EQ(tr.optimizer_steps(), 2);
  EXPECT_EQ(tr.trained_set_generation(), gen_a) << "same trained elements";
  tr.step(p, rows.data(), 2);
  EXPECT_EQ(tr.optimizer_steps(), 3);
  // A trained head leaves: other elements, a fresh optimizer.
  Subnet d = b;
  d.layers[2].heads[0] = 0;
  ASSERT_TRUE(tr.set_subnet(d).ok());
  EXPECT_EQ(tr.optimizer_steps(), 0);
  EXPECT_EQ(tr.trained_set_generation(), gen_a + 1) << "the trained elements changed";
}

}  // namespace
}  // namespace atl::algorithms::hydra
