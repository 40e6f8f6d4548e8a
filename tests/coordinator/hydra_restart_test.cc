// Hydra through a coordinator restart (docs/coordinator.md, "Bitwise through a coordinator
// crash"): with hydra.reselect_every = 3 the masks of a selection serve three rounds, so a
// coordinator that stops in a round between selections and opens the store again must go on with
// the stored selection, not score and select anew; one that stops in a selection round's scoring
// phase redoes it. The round engine on a real RocksDB store, three sites driven by hand with the
// protocol's messages.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstring>
#include <optional>

#include "algorithms/hydra/select.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/subnet.h"
#include "coordinator/round_engine.h"
#include "test_util.h"
#include "transport/tensor_stream.h"

namespace atl::coordinator {
namespace {

namespace pb = atoll_pb::v1;

constexpr uint32_t kSites = 3;
constexpr uint32_t kRounds = 5;
const double kBudgets[kSites] = {1.0, 0.5, 0.25};

std::string site_id(uint32_t i) {
  return "site-" + std::to_string(i);
}

ExperimentConfig restart_config() {
  ExperimentConfig c = testing_util::small_hydra_config("hydra-restart", kRounds, kSites);
  c.diloco.max_nodes = kSites;
  c.diloco.round_deadline_s = 60;
  c.diloco.heartbeat_interval_s = 1.0;
  c.diloco.lost_after_heartbeats = 10;
  c.hydra.reselect_every = 3;  // selections in rounds 0 and 3
  return c;
}

// Site i's importance on θ of `round`: different rounds rank the units differently, as scores
// measured on another θ do.
algorithms::hydra::UnitScores site_scores(const ExperimentConfig& c, uint32_t i, uint64_t round) {
  auto s = algorithms::hydra::empty_scores(model_config(c), static_cast<int>(c.hydra.ffn_blocks));
  const size_t r = static_cast<size_t>(round);
  for (size_t u = 0; u < s.head.size(); ++u)
    s.head[u] = 1.0 + static_cast<double>((u * 7 + i * 3 + r * 4) % 5);
  for (size_t u = 0; u < s.ffn.size(); ++u)
    s.ffn[u] = 2.0 + static_cast<double>((u * 5 + i + r * 2) % 3);
  for (size_t l = 0; l < s.layer.size(); ++l) s.layer[l] = 10.0 + static_cast<double>((l + r) % 2);
  return s;
}

// How a run stops early in a round, as a coordinator killed there would.
enum class Stop {
  kNever,
  kInScoring,  // after two of the three importance reports
  kInTraining  // after one of the three updates was accepted
};

struct ThreeSites {
  testing_util::TempDir dir;
  ExperimentConfig cfg = restart_config();
  algorithms::ParamSet init;
  std::unique_ptr<Store> store;
  std::unique_ptr<RoundEngine> engine;
  std::string layout_fp;
  std::vector<uint64_t> scored_rounds;      // the round of every importance report
  std::map<uint64_t, std::string> subnets;  // round → the sites' TRAIN subnets, joined by ' '

  ThreeSites() : init(algorithms::make_layout(model_config(cfg))) {
    algorithms::init_params(init, model_config(cfg), 5);
    layout_fp = algorithms::layout_fingerprint(init.layout());
    auto s = Store::open(dir.path(), {.keep_params = cfg.diloco.keep_params});
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (s.ok()) store = std::move(*s);
  }
  ~ThreeSites() {
    engine.reset();  // before the store
  }

  // Opens the experiment on the store (created the first time, resumed after), starts it when
  // it is not running, and the three sites join.
  void open() {
    auto e = RoundEngine::open(*store, cfg, init);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    engine = std::move(*e);
    if (engine->state() != ExperimentState::kRunning) {
      ASSERT_TRUE(engine->start().ok());
    }
    for (uint32_t i = 0; i < kSites; ++i) {
      pb::JoinRequest req;
      req.set_budget(kBudgets[i]);
      auto j = engine->join(site_id(i), req);
      ASSERT_TRUE(j.ok()) << j.status().to_string();
    }
  }

  // Every site's task in the round that starts once all three are ready (polls without waiting:
  // the first two wait for the third).
  void poll_all(std::vector<pb::Task>& tasks) {
    std::vector<std::optional<pb::Task>> got(kSites);
    for (int pass = 0; pass < 2; ++pass)
      for (uint32_t i = 0; i < kSites; ++i) {
        if (got[i]) continue;
        pb::NextTaskRequest req;
        req.set_wait_ms(0);
        auto t = engine->next_task(site_id(i), req);
        ASSERT_TRUE(t.ok()) << t.status().to_string();
        if (t->kind() != pb::Task::WAIT) got[i] = *t;
      }
    tasks.clear();
    for (uint32_t i = 0; i < kSites; ++i) {
      ASSERT_TRUE(got[i]) << site_id(i) << " got no task";
      tasks.push_back(*got[i]);
    }
  }

  void push(uint32_t i, const pb::Task& task) {
    const auto mc = model_config(cfg);
    auto sub =
        algorithms::subnet_from_string(task.subnet(), mc, static_cast<int>(cfg.hydra.ffn_blocks));
    ASSERT_TRUE(sub.ok()) << sub.status().to_string();
    const std::vector<uint32_t> idx = algorithms::trainable_indices(*sub, mc);
    // Δ at the trained elements, deterministic from θ_r.
    const std::vector<float> theta = engine->params();
    std::vector<float> delta(idx.size());
    for (size_t k = 0; k < idx.size(); ++k)
      delta[k] = 0.05f * theta[idx[k]] + 0.001f * static_cast<float>(i + 1) *
                                             static_cast<float>(static_cast<int>(idx[k] % 13) - 6);
    pb::TensorHeader h;
    h.set_wire_version(transport::kWireVersion);
    h.set_experiment_id(engine->experiment_id());
    h.set_round(task.round());
    h.set_codec("none");
    h.set_numel(idx.size());
    h.set_payload_bytes(idx.size() * sizeof(float));
    h.set_layout_fingerprint(layout_fp);
    h.set_params_fingerprint(engine->params_fingerprint());
    h.set_mask_fingerprint(task.mask_fingerprint());
    h.set_tokens(1000 + 500 * i);
    h.set_train_loss(2.5);
    ASSERT_TRUE(engine->begin_update(site_id(i), h).ok());
    std::string payload(idx.size() * sizeof(float), '\0');
    std::memcpy(payload.data(), delta.data(), payload.size());
    auto r = engine->finish_update(site_id(i), h, payload);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(r->accepted()) << r->message();
  }

  // Round `round`: SCORE tasks are answered with site_scores, then every site pushes its masked
  // Δ (the last push commits the round), unless `stop` ends it early.
  void round(uint64_t round, Stop stop = Stop::kNever) {
    std::vector<pb::Task> tasks;
    ASSERT_NO_FATAL_FAILURE(poll_all(tasks));
    if (tasks[0].kind() == pb::Task::SCORE) {
      for (uint32_t i = 0; i < kSites; ++i) {
        ASSERT_EQ(tasks[i].kind(), pb::Task::SCORE);
        ASSERT_EQ(tasks[i].round(), round);
        if (stop == Stop::kInScoring && i == 2) return;
        const auto s = site_scores(cfg, i, round);
        pb::ImportanceReport rep;
        rep.set_round(round);
        rep.set_batches(1);
        for (double x : s.layer) rep.add_layer(x);
        for (double x : s.head) rep.add_head(x);
        for (double x : s.ffn) rep.add_ffn(x);
        ASSERT_TRUE(engine->report_importance(site_id(i), rep).ok());
        scored_rounds.push_back(round);
      }
      ASSERT_NO_FATAL_FAILURE(poll_all(tasks));
    }
    ASSERT_NE(stop, Stop::kInScoring) << "round " << round << " has no scoring phase";
    std::string masks;
    for (uint32_t i = 0; i < kSites; ++i) {
      ASSERT_EQ(tasks[i].kind(), pb::Task::TRAIN) << tasks[i].reason();
      ASSERT_EQ(tasks[i].round(), round);
      if (i > 0) masks += ' ';
      masks += tasks[i].subnet();
    }
    subnets[round] = masks;
    for (uint32_t i = 0; i < kSites; ++i) {
      if (stop == Stop::kInTraining && i == 1) return;
      ASSERT_NO_FATAL_FAILURE(push(i, tasks[i]));
    }
    ASSERT_EQ(engine->current_round(), round + 1);
  }

  // The coordinator stops without a word: only what the store committed survives.
  void crash() { engine.reset(); }
};

// The selection of round `round`'s scores for the three sites, as text.
std::string selection_at(const ExperimentConfig& cfg, uint64_t round) {
  const auto mc = model_config(cfg);
  algorithms::hydra::CostModel cm{mc, static_cast<int>(cfg.hydra.ffn_blocks), mc.seq_len};
  std::vector<algorithms::hydra::SiteInput> sites;
  for (uint32_t i = 0; i < kSites; ++i)
    sites.push_back({site_id(i), kBudgets[i], site_scores(cfg, i, round)});
  auto sel = algorithms::hydra::select_subnetworks(cm, sites, {});
  EXPECT_TRUE(sel.ok()) << sel.status().to_string();
  std::string out;
  if (!sel.ok()) return out;
  for (const auto& s : sel->sites) {
    if (!out.empty()) out += ' ';
    out += algorithms::to_string(s.subnet);
  }
  return out;
}

TEST(HydraRestart, ACoordinatorRestartedBetweenSelectionsEndsOnTheUninterruptedTheta) {
  ThreeSites plain;
  ASSERT_NO_FATAL_FAILURE(plain.open());
  for (uint64_t r = 0; r < kRounds; ++r) ASSERT_NO_FATAL_FAILURE(plain.round(r));
  ASSERT_EQ(plain.engine->state(), ExperimentState::kFinished);
  // Selections in rounds 0 and 3 only; rounds 1-2 and 4 train the masks selected before.
  EXPECT_EQ(plain.scored_rounds, (std::vector<uint64_t>{0, 0, 0, 3, 3, 3}));
  EXPECT_EQ(plain.subnets[0], selection_at(plain.cfg, 0));
  EXPECT_EQ(plain.subnets[1], plain.subnets[0]);
  EXPECT_EQ(plain.subnets[2], plain.subnets[0]);
  EXPECT_EQ(plain.subnets[3], selection_at(plain.cfg, 3));
  EXPECT_EQ(plain.subnets[4], plain.subnets[3]);
  // What makes the test mean something: scoring again in round 1 would select other masks.
  ASSERT_NE(selection_at(plain.cfg, 1), plain.subnets[0]);

  ThreeSites restarted;
  ASSERT_NO_FATAL_FAILURE(restarted.open());
  ASSERT_NO_FATAL_FAILURE(restarted.round(0));
  // Killed in round 1 (between selections) with one update in: the store has round 0's commit,
  // and with it round 0's selection.
  ASSERT_NO_FATAL_FAILURE(restarted.round(1, Stop::kInTraining));
  const auto before = restarted.engine->hydra_subnets();
  restarted.crash();
  auto committed = restarted.store->load_state(restarted.cfg.name);
  ASSERT_TRUE(committed.ok()) << committed.status().to_string();
  ASSERT_TRUE(committed->strategy_state);
  const boost::json::object stored = boost::json::parse(*committed->strategy_state).as_object();
  EXPECT_EQ(stored.at("selected_round").to_number<uint64_t>(), 0u);
  EXPECT_EQ(stored.at("subnets").as_object().size(), kSites);
  ASSERT_NO_FATAL_FAILURE(restarted.open());
  EXPECT_EQ(restarted.engine->current_round(), 1u);
  EXPECT_EQ(restarted.engine->hydra_subnets(), before);
  ASSERT_NO_FATAL_FAILURE(restarted.round(1));
  ASSERT_NO_FATAL_FAILURE(restarted.round(2));
  // Killed in round 3's scoring phase (a selection round): the round is done again, scores too.
  ASSERT_NO_FATAL_FAILURE(restarted.round(3, Stop::kInScoring));
  restarted.crash();
  ASSERT_NO_FATAL_FAILURE(restarted.open());
  EXPECT_EQ(restarted.engine->current_round(), 3u);
  ASSERT_NO_FATAL_FAILURE(restarted.round(3));
  ASSERT_NO_FATAL_FAILURE(restarted.round(4));
  ASSERT_EQ(restarted.engine->state(), ExperimentState::kFinished);

  // Round 1 after the restart trained round 0's masks without scoring; round 3 scored twice
  // (two reports before the stop, three after it).
  EXPECT_EQ(restarted.scored_rounds, (std::vector<uint64_t>{0, 0, 0, 3, 3, 3, 3, 3}));
  EXPECT_EQ(restarted.subnets, plain.subnets);
  EXPECT_EQ(restarted.engine->params_fingerprint(), plain.engine->params_fingerprint());
  for (uint64_t r = 0; r < kRounds; ++r) {
    auto a = plain.store->load_round(plain.cfg.name, r);
    auto b = restarted.store->load_round(restarted.cfg.name, r);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->params_fingerprint, b->params_fingerprint) << "round " << r;
  }
}

// A stored selection that does not fit the experiment's model is refused when the experiment is
// opened again (DATA_LOSS naming it), never used for masks.
TEST(HydraRestart, AStoredSelectionThatDoesNotFitTheModelIsRefused) {
  ThreeSites run;
  ASSERT_NO_FATAL_FAILURE(run.open());
  ASSERT_NO_FATAL_FAILURE(run.round(0));
  run.crash();
  auto st = run.store->load_state(run.cfg.name);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  // Round 1 committed by hand with a selection of a three-layer model.
  ExperimentRecord next = st->experiment;
  next.current_round = 2;
  RoundRecord rec;
  rec.round = 1;
  rec.params_fingerprint = next.params_fingerprint;
  rec.momentum_fingerprint = algorithms::params_fingerprint(*st->momentum);
  const std::string wrong =
      R"({"selected_round":0,"subnets":{"site-0":"T:11:11|T:11:11|T:11:11"}})";
  ASSERT_TRUE(
      run.store->commit_round(next, rec, st->params, *st->momentum, nullptr, {}, wrong).ok());
  auto reopened = RoundEngine::open(*run.store, run.cfg, run.init);
  ASSERT_FALSE(reopened.ok());
  EXPECT_EQ(reopened.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(reopened.status().message().find("the stored Hydra selection of 'site-0'"),
            std::string::npos)
      << reopened.status().message();
}

}  // namespace
}  // namespace atl::coordinator
