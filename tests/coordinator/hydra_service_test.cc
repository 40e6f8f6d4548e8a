// Hydra over the real service (in-process gRPC, real RocksDB): nodes with budgets 1.0, 0.5 and
// 0.25 report importance, receive their subnetworks, push masked updates; a wrong-mask update is
// refused; θ after the rounds equals the selection + masked aggregation computed directly, bit
// for bit.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cmath>
#include <thread>

#include "algorithms/hydra/aggregate.h"
#include "algorithms/hydra/select.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/subnet.h"
#include "coordinator/experiment_manager.h"
#include "coordinator/http/api.h"
#include "coordinator/http/auth.h"
#include "kernels/core/number_text.h"
#include "service_harness.h"

namespace atl::coordinator {
namespace {

using namespace std::chrono_literals;
namespace pb = atoll_pb::v1;

ExperimentConfig hydra_config() {
  ExperimentConfig c = testing::small_hydra_config("hydra", 2, 3);
  c.hydra.reselect_every = 1;
  return c;
}

const double kBudgets[] = {1.0, 0.5, 0.25};

algorithms::hydra::UnitScores fake_scores(const ExperimentConfig& c, uint32_t index) {
  auto s = algorithms::hydra::empty_scores(model_config(c), static_cast<int>(c.hydra.ffn_blocks));
  for (size_t i = 0; i < s.head.size(); ++i)
    s.head[i] = 1.0 + static_cast<double>((i * 7 + index * 3) % 5);
  for (size_t i = 0; i < s.ffn.size(); ++i)
    s.ffn[i] = 2.0 + static_cast<double>((i * 5 + index) % 3);
  for (size_t i = 0; i < s.layer.size(); ++i) s.layer[i] = 10.0 + i;
  return s;
}

// Δ at held elements, deterministic from θ.
std::vector<float> fake_masked_delta(const std::vector<float>& theta,
                                     const std::vector<uint32_t>& idx, uint32_t index) {
  std::vector<float> d(idx.size());
  for (size_t i = 0; i < idx.size(); ++i)
    d[i] = 0.05f * theta[idx[i]] + 0.001f * static_cast<float>(index + 1) *
                                       static_cast<float>(static_cast<int>(idx[i] % 13) - 6);
  return d;
}

struct HydraNode {
  node::ClientOptions options;
  uint32_t index = 0;
  std::string layout_fp;
  bool try_wrong_mask = false;
  std::string wrong_mask_error;
  std::vector<std::string> errors;
  std::vector<std::string> subnets;  // per round
  int scored = 0;

  void run(const ExperimentConfig& cfg, std::chrono::steady_clock::time_point until) {
    node::CoordinatorClient client(options);
    pb::JoinRequest jr;
    jr.set_budget(kBudgets[index]);
    auto j = client.join(jr);
    if (!j.ok()) return errors.push_back(j.status().to_string());
    if (j->train().algorithm() != "hydra") errors.push_back("join: algorithm not hydra");
    uint64_t last = 0;
    const auto mc = model_config(cfg);
    while (std::chrono::steady_clock::now() < until) {
      auto task = client.next_task(last, 2000);
      if (!task.ok()) return errors.push_back(task.status().to_string());
      if (task->kind() == pb::Task::STOP) return;
      if (task->kind() == pb::Task::SCORE) {
        const auto s = fake_scores(cfg, index);
        pb::ImportanceReport rep;
        rep.set_round(task->round());
        rep.set_batches(1);
        for (double x : s.layer) rep.add_layer(x);
        for (double x : s.head) rep.add_head(x);
        for (double x : s.ffn) rep.add_ffn(x);
        if (Status st = client.report_importance(rep); !st.ok()) errors.push_back(st.to_string());
        ++scored;
        continue;
      }
      if (task->kind() != pb::Task::TRAIN) continue;
      auto sub = algorithms::subnet_from_string(task->subnet(), mc,
                                                static_cast<int>(cfg.hydra.ffn_blocks));
      if (!sub.ok()) return errors.push_back(sub.status().to_string());
      subnets.push_back(task->subnet());
      const auto idx = algorithms::trainable_indices(*sub, mc);
      auto theta = client.pull_params(task->round(), task->params_fingerprint());
      if (!theta.ok()) return errors.push_back(theta.status().to_string());
      node::UpdateHeader h{task->round(), testing::fake_tokens(index), 1.0, theta->fingerprint,
                           layout_fp};
      h.mask_fingerprint = task->mask_fingerprint();
      if (try_wrong_mask) {
        // One element more than the mask holds, and a mask fingerprint of another subnetwork.
        std::vector<float> wrong(idx.size() + 1, 0.0f);
        node::UpdateHeader bad = h;
        bad.mask_fingerprint = std::string(64, 'a');
        auto r = client.push_update(bad, wrong);
        wrong_mask_error = r.ok() ? "accepted" : r.status().message();
        try_wrong_mask = false;
      }
      auto pushed = client.push_update(h, fake_masked_delta(theta->values, idx, index));
      if (!pushed.ok()) return errors.push_back(pushed.status().to_string());
      last = task->round();
    }
  }
};

// A coordinator started with `cfg` from θ_0 = `init`, and three HydraNode threads (node-2 also
// pushes one update with a wrong mask when `wrong_mask_from_node_2`) run until the experiment ends.
struct HydraRun {
  std::unique_ptr<testing::Coordinator> coord;
  std::vector<HydraNode> nodes = std::vector<HydraNode>(3);
};
void run_three_hydra_nodes(const testing_util::TempDir& dir, const ExperimentConfig& cfg,
                           const algorithms::ParamSet& init, bool wrong_mask_from_node_2,
                           HydraRun& run) {
  run.coord = testing::Coordinator::start(dir.path(), cfg, init);
  ASSERT_TRUE(run.coord);
  ASSERT_TRUE(run.coord->service->start().ok());
  const std::string layout_fp = algorithms::layout_fingerprint(init.layout());
  std::vector<std::thread> threads;
  const auto until = std::chrono::steady_clock::now() + 60s;
  for (uint32_t i = 0; i < 3; ++i) {
    HydraNode& n = run.nodes[i];
    n.options = testing::insecure_client(run.coord->address(), "node-" + std::to_string(i));
    n.index = i;
    n.layout_fp = layout_fp;
    n.try_wrong_mask = wrong_mask_from_node_2 && i == 2;
  }
  for (uint32_t i = 0; i < 3; ++i) threads.emplace_back([&, i] { run.nodes[i].run(cfg, until); });
  auto done = run.coord->service->wait_until_finished(std::chrono::steady_clock::now() + 60s);
  for (auto& t : threads) t.join();
  ASSERT_TRUE(done.ok()) << done.status().to_string();
  for (const auto& n : run.nodes) EXPECT_TRUE(n.errors.empty()) << n.errors.front();
}

// The subnetworks the coordinator selects for node-0..2 (budgets kBudgets, scores fake_scores).
StatusOr<algorithms::hydra::Selection> expected_selection(const ExperimentConfig& cfg,
                                                          const algorithms::hydra::CostModel& cm) {
  std::vector<algorithms::hydra::SiteInput> sites;
  for (uint32_t i = 0; i < 3; ++i)
    sites.push_back({"node-" + std::to_string(i), kBudgets[i], fake_scores(cfg, i)});
  return algorithms::hydra::select_subnetworks(cm, sites, {});
}

// The masked rounds of `run_three_hydra_nodes`, computed directly from θ_0 = `init` with the
// selection `sel` and forward share power p: θ after `rounds` rounds.
std::vector<float> masked_rounds_directly(const ExperimentConfig& cfg,
                                          const algorithms::ParamSet& init,
                                          const algorithms::hydra::CostModel& cm,
                                          const algorithms::hydra::Selection& sel, double p,
                                          int rounds, bool final_look_ahead = true) {
  const auto mc = model_config(cfg);
  std::vector<float> theta = init.vec(), mom(theta.size()), delta(theta.size());
  std::vector<uint32_t> held(theta.size());
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::vector<uint32_t>> idx(3);
    std::vector<std::vector<float>> d(3);
    std::vector<algorithms::hydra::MaskedUpdate> ups;
    for (uint32_t i = 0; i < 3; ++i) {
      idx[i] = algorithms::trainable_indices(sel.sites[i].subnet, mc);
      d[i] = fake_masked_delta(theta, idx[i], i);
      ups.push_back({"node-" + std::to_string(i), testing::fake_tokens(i), idx[i], d[i],
                     algorithms::hydra::forward_share(cm, sel.sites[i].subnet)});
    }
    EXPECT_TRUE(algorithms::hydra::aggregate_masked(ups, delta, held, p).ok());
    EXPECT_TRUE(
        algorithms::hydra::masked_outer_step({static_cast<float>(cfg.diloco.outer_lr),
                                              static_cast<float>(cfg.diloco.outer_momentum)},
                                             theta, mom, delta, held, r == 0,
                                             final_look_ahead || r + 1 < rounds)
            .ok());
  }
  return theta;
}

// `cfg` run to its end by three HydraNodes from θ_0 = init_params(seed 5), and the selection
// the coordinator must have made for them (the masked rounds' inputs for masked_rounds_directly).
struct FinishedHydraRun {
  algorithms::ParamSet init;
  HydraRun run;
  algorithms::hydra::CostModel cm;
  algorithms::hydra::Selection sel;
};
void finish_hydra_run(const testing_util::TempDir& dir, const ExperimentConfig& cfg,
                      FinishedHydraRun& out) {
  const auto mc = model_config(cfg);
  out.init = algorithms::ParamSet(algorithms::make_layout(mc));
  algorithms::init_params(out.init, mc, 5);
  ASSERT_NO_FATAL_FAILURE(run_three_hydra_nodes(dir, cfg, out.init, false, out.run));
  out.cm = {mc, 2, mc.seq_len};
  auto sel = expected_selection(cfg, out.cm);
  ASSERT_TRUE(sel.ok());
  out.sel = *sel;
}

TEST(HydraService, HeterogeneousBudgetsMaskedRoundsBitwiseAndWrongMaskRefused) {
  testing_util::TempDir dir;
  const ExperimentConfig cfg = hydra_config();
  const auto mc = model_config(cfg);
  algorithms::ParamSet init(algorithms::make_layout(mc));
  algorithms::init_params(init, mc, 5);
  HydraRun run;
  ASSERT_NO_FATAL_FAILURE(run_three_hydra_nodes(dir, cfg, init, true, run));
  const auto& coord = run.coord;
  const auto& nodes = run.nodes;
  for (const auto& n : nodes) {
    EXPECT_EQ(n.scored, 2) << "reselect_every = 1: one SCORE per round";
    EXPECT_EQ(n.subnets.size(), 2u);
  }
  EXPECT_NE(nodes[2].wrong_mask_error.find("wrong mask"), std::string::npos)
      << nodes[2].wrong_mask_error;

  // The same selection and masked rounds, computed directly.
  algorithms::hydra::CostModel cm{mc, 2, mc.seq_len};
  auto sel = expected_selection(cfg, cm);
  ASSERT_TRUE(sel.ok());
  for (int r = 0; r < 2; ++r)
    for (uint32_t i = 0; i < 3; ++i)
      EXPECT_EQ(nodes[i].subnets[r], algorithms::to_string(sel->sites[i].subnet));
  const std::vector<float> theta = masked_rounds_directly(cfg, init, cm, *sel, 0.0, 2);
  EXPECT_EQ(coord->service->params_fingerprint(), algorithms::params_fingerprint(theta));
  // Elements no site holds (the embedding) are exactly θ_0.
  const auto final_theta = coord->service->params();
  const size_t emb = static_cast<size_t>(mc.vocab) * mc.dim;
  EXPECT_TRUE(std::equal(final_theta.begin(), final_theta.begin() + emb, init.vec().begin()));
  EXPECT_NE(final_theta, init.vec());
  EXPECT_EQ(coord->service->hydra_subnets().size(), 3u);

  // The dashboard API's view of the same subnetworks (GET /api/experiments/{id}/subnets, the
  // real route and token check): per site the layers × heads grid and the FLOPs fraction.
  ExperimentManager manager(*coord->store);
  manager.attach(coord->service.get());
  auto token = http::create_token(*coord->store, http::Role::kViewer, "viewer");
  ASSERT_TRUE(token.ok());
  http::Api api(manager, *coord->store, {});
  const std::string id = coord->service->experiment_id();
  http::Response r =
      api.handle({"GET", "/api/experiments/" + id + "/subnets", "Bearer " + *token, "", "", ""});
  ASSERT_EQ(r.status, 200u) << r.body;
  const boost::json::object view = boost::json::parse(r.body).as_object();
  EXPECT_EQ(view.at("algorithm").as_string(), "hydra");
  EXPECT_TRUE(view.at("live").as_bool());
  EXPECT_EQ(view.at("heads").to_number<int>(), 2);
  EXPECT_EQ(view.at("layers").to_number<int>(), 2);
  const auto& subnets = view.at("subnets").as_array();
  ASSERT_EQ(subnets.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    const auto& site = subnets[i].as_object();
    const algorithms::Subnet& want = sel->sites[i].subnet;
    EXPECT_EQ(site.at("node_id").as_string(), "node-" + std::to_string(i));
    EXPECT_EQ(site.at("subnet").as_string(), algorithms::to_string(want));
    EXPECT_DOUBLE_EQ(site.at("flops_fraction").as_double(),
                     algorithms::hydra::cost_fraction(cm, want));
    const auto& layers = site.at("layers").as_array();
    ASSERT_EQ(layers.size(), want.layers.size());
    for (size_t l = 0; l < layers.size(); ++l) {
      const auto& lj = layers[l].as_object();
      EXPECT_EQ(lj.at("trained").as_bool(), want.layers[l].train) << "site " << i << " layer " << l;
      std::vector<int> heads;
      for (const auto& h : lj.at("heads").as_array()) heads.push_back(h.to_number<int>());
      std::vector<int> want_heads;
      for (size_t h = 0; h < want.layers[l].heads.size(); ++h)
        if (want.layers[l].heads[h]) want_heads.push_back(static_cast<int>(h));
      EXPECT_EQ(heads, want_heads) << "site " << i << " layer " << l;
      int blocks = 0;
      for (uint8_t b : want.layers[l].ffn_blocks) blocks += b;
      EXPECT_EQ(lj.at("ffn_blocks_kept").to_number<int>(), blocks);
    }
  }
  // Budgets 1.0, 0.5, 0.25: the 0.25 site gets a strictly cheaper subnetwork than the full one.
  EXPECT_LT(subnets[2].as_object().at("flops_fraction").as_double(),
            subnets[0].as_object().at("flops_fraction").as_double());
  manager.attach(nullptr);
}

// hydra.forward_share_power = 2: the service weighs each node's masked update by tokens × φ²,
// φ the forward share of the subnetwork it assigned (algorithms/hydra/cost.h); θ after the rounds
// equals that aggregation computed directly, bit for bit, and differs from the token weighting.
TEST(HydraService, ForwardSharePowerWeighsUpdatesByTheirSubnetworksForwardShare) {
  testing_util::TempDir dir;
  ExperimentConfig cfg = hydra_config();
  cfg.hydra.forward_share_power = 2.0;
  FinishedHydraRun f;
  ASSERT_NO_FATAL_FAILURE(finish_hydra_run(dir, cfg, f));
  // The budget-limited nodes run part of the forward pass, so p changes their weight.
  EXPECT_LT(algorithms::hydra::forward_share(f.cm, f.sel.sites[2].subnet), 1.0);
  const std::vector<float> weighted = masked_rounds_directly(cfg, f.init, f.cm, f.sel, 2.0, 2);
  const std::vector<float> plain = masked_rounds_directly(cfg, f.init, f.cm, f.sel, 0.0, 2);
  EXPECT_EQ(f.run.coord->service->params_fingerprint(), algorithms::params_fingerprint(weighted));
  EXPECT_NE(algorithms::params_fingerprint(weighted), algorithms::params_fingerprint(plain));
}

// diloco.final_look_ahead = false: the service's last masked step moves θ by −η·Δ on the held
// elements, bit for bit as computed directly, and ends elsewhere than with the look-ahead.
TEST(HydraService, WithoutTheFinalLookAheadTheLastMaskedStepIsThetaMinusLrDelta) {
  testing_util::TempDir dir;
  ExperimentConfig cfg = hydra_config();
  cfg.diloco.final_look_ahead = false;
  ASSERT_GT(cfg.diloco.outer_momentum, 0.0);
  FinishedHydraRun f;
  ASSERT_NO_FATAL_FAILURE(finish_hydra_run(dir, cfg, f));
  const auto plain_last = masked_rounds_directly(cfg, f.init, f.cm, f.sel, 0.0, 2, false);
  const auto look_ahead = masked_rounds_directly(cfg, f.init, f.cm, f.sel, 0.0, 2, true);
  EXPECT_EQ(f.run.coord->service->params_fingerprint(), algorithms::params_fingerprint(plain_last));
  EXPECT_NE(algorithms::params_fingerprint(plain_last), algorithms::params_fingerprint(look_ahead));
}

// A budget below the cheapest subnetwork that trains anything (the output head and one unit,
// algorithms::hydra::cheapest_training_subnet) is refused at the join with FAILED_PRECONDITION
// naming the budget, the minimum and the --budget that works; that budget joins. Before, such a
// site joined, was selected the output head alone and pushed 0 bytes every round.
TEST(HydraService, ABudgetBelowTheCheapestTrainingSubnetworkIsRefusedAtJoin) {
  const ExperimentConfig cfg = hydra_config();
  const auto mc = model_config(cfg);
  const algorithms::hydra::CostModel cm{mc, static_cast<int>(cfg.hydra.ffn_blocks), mc.seq_len};
  const algorithms::Subnet cheapest = algorithms::hydra::cheapest_training_subnet(cm);
  const double least = algorithms::hydra::cost_fraction(cm, cheapest);
  // The selection trains one unit with a budget of exactly its FLOPs, and nothing with one FLOP
  // per token less.
  const double flops = static_cast<double>(algorithms::hydra::subnet_flops_per_token(cm, cheapest));
  const double just_enough = (flops + 0.5) / cm.full_flops_per_token();
  const double one_short = (flops - 0.5) / cm.full_flops_per_token();
  const std::vector<uint8_t> top = {0, 1};
  auto trained = [&](double budget) {
    const auto s = algorithms::hydra::select_site(cm, {"x", budget, fake_scores(cfg, 0)}, top, {});
    return algorithms::trainable_indices(s.subnet, mc).size();
  };
  EXPECT_GT(trained(just_enough), 0u);
  EXPECT_EQ(trained(just_enough), algorithms::trainable_indices(cheapest, mc).size());
  EXPECT_EQ(trained(one_short), 0u);

  testing_util::TempDir dir;
  algorithms::ParamSet init(algorithms::make_layout(mc));
  algorithms::init_params(init, mc, 5);
  auto coord = testing::Coordinator::start(dir.path(), cfg, init);
  ASSERT_TRUE(coord);
  node::CoordinatorClient client(testing::insecure_client(coord->address(), "node-small"));
  pb::JoinRequest jr;
  jr.set_budget(0.01);
  auto refused = client.join(jr);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  const std::string& why = refused.status().message();
  EXPECT_NE(why.find("site 'node-small' has Hydra budget 0.01, below the cheapest subnetwork "
                     "that trains anything"),
            std::string::npos)
      << why;
  char minimum[32];  // to 4 decimals, as the suggestion beside it
  std::snprintf(minimum, sizeof(minimum), "%.4f", least);
  EXPECT_NE(why.find(std::string(": ") + minimum + " of the full model's training FLOPs"),
            std::string::npos)
      << why;
  const std::string fix = "start the node with --budget at least ";
  const size_t at = why.find(fix);
  ASSERT_NE(at, std::string::npos) << why;
  const double suggested = std::stod(why.substr(at + fix.size()));
  EXPECT_GE(suggested, least);
  EXPECT_LT(suggested, least + 1e-4);
  EXPECT_TRUE(coord->service->nodes().empty());  // refused before it counted as joined
  jr.set_budget(one_short);
  EXPECT_EQ(client.join(jr).status().code(), StatusCode::kFailedPrecondition);
  jr.set_budget(suggested);
  auto joined = client.join(jr);
  EXPECT_TRUE(joined.ok()) << joined.status().to_string();
}

}  // namespace
}  // namespace atl::coordinator
