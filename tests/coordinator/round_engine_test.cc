// The round engine on its own, without gRPC: a real RocksDB store in a temp dir, nodes driven
// by hand with the protocol's messages.
#include "coordinator/round_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include "algorithms/diloco/outer.h"
#include "kernels/core/build_info.h"
#include "test_util.h"
#include "transport/payload_digest.h"
#include "transport/tensor_stream.h"

namespace atl::coordinator {
namespace {

using namespace std::chrono_literals;
using testing_util::TempDir;
namespace pb = atoll_pb::v1;

// small_config with room for slow machines: 60 s deadlines, 10 s before a silent node is lost.
ExperimentConfig engine_config(const std::string& name, uint32_t rounds, uint32_t min_nodes) {
  ExperimentConfig c = testing_util::small_config(name, rounds, min_nodes);
  c.diloco.round_deadline_s = 60;
  c.diloco.heartbeat_interval_s = 1.0;
  c.diloco.lost_after_heartbeats = 10;
  return c;
}

// Δ of node `index` (deterministic, finite).
std::vector<float> node_delta(size_t numel, uint32_t index) {
  std::vector<float> d(numel);
  for (size_t j = 0; j < numel; ++j)
    d[j] =
        0.001f * static_cast<float>(index + 1) * static_cast<float>(static_cast<int>(j % 13) - 6);
  return d;
}

std::string raw_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// raw_bytes(node_delta(numel, index)) without the intermediate vector (400 MB at 100M).
std::string node_delta_bytes(size_t numel, uint32_t index) {
  std::string out(numel * sizeof(float), '\0');
  for (size_t j = 0; j < numel; ++j) {
    const float d =
        0.001f * static_cast<float>(index + 1) * static_cast<float>(static_cast<int>(j % 13) - 6);
    std::memcpy(out.data() + j * sizeof(float), &d, sizeof(float));
  }
  return out;
}

// The header of a codec "none" update, as the node's transport would send it.
pb::TensorHeader update_header(const RoundEngine& e, uint64_t round, uint64_t numel,
                               const std::string& layout_fp, uint64_t tokens) {
  pb::TensorHeader h;
  h.set_wire_version(transport::kWireVersion);
  h.set_experiment_id(e.experiment_id());
  h.set_round(round);
  h.set_codec("none");
  h.set_numel(numel);
  h.set_payload_bytes(numel * sizeof(float));
  h.set_layout_fingerprint(layout_fp);
  h.set_params_fingerprint(e.params_fingerprint());
  h.set_tokens(tokens);
  h.set_train_loss(2.5);
  return h;
}

struct EngineFixture {
  TempDir dir;
  std::unique_ptr<Store> store;
  std::unique_ptr<RoundEngine> engine;
  std::string layout_fp;

  EngineFixture(const ExperimentConfig& cfg, const algorithms::ParamSet& init,
                EngineOptions options = {}) {
    auto s = Store::open(dir.path(), {.keep_params = cfg.diloco.keep_params});
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (!s.ok()) return;
    store = std::move(*s);
    auto e = RoundEngine::open(*store, cfg, init, std::move(options));
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    if (!e.ok()) return;
    engine = std::move(*e);
    layout_fp = algorithms::layout_fingerprint(init.layout());
  }
  ~EngineFixture() {
    engine.reset();  // before the store
    store.reset();
  }

  // Joins the nodes, then polls for each in parallel until all hold a TRAIN task of `round`.
  void join_and_get_tasks(const std::vector<std::string>& ids, uint64_t round) {
    for (const auto& id : ids) {
      pb::JoinRequest req;
      auto j = engine->join(id, req);
      ASSERT_TRUE(j.ok()) << j.status().to_string();
      EXPECT_EQ(j->node_id(), id);
      EXPECT_EQ(j->experiment_id(), engine->experiment_id());
    }
    std::vector<std::future<StatusOr<pb::Task>>> polls;
    for (const auto& id : ids)
      polls.push_back(std::async(std::launch::async, [this, id] {
        pb::NextTaskRequest req;
        req.set_wait_ms(10000);
        return engine->next_task(id, req);
      }));
    for (auto& p : polls) {
      auto t = p.get();
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      EXPECT_EQ(t->kind(), pb::Task::TRAIN) << t->reason();
      EXPECT_EQ(t->round(), round);
      EXPECT_EQ(t->params_fingerprint(), engine->params_fingerprint());
    }
  }
};

// An experiment with train.optimizer = "muon" refuses a node that does not list Muon among its
// capabilities (a build from before the field would train AdamW), and bounds the list.
TEST(RoundEngine, AMuonExperimentRefusesANodeThatCannotTrainMuon) {
  ExperimentConfig cfg = engine_config("muon", 3, 1);
  cfg.train.optimizer = "muon";
  EngineFixture f(cfg, testing_util::toy_params(1000));
  ASSERT_TRUE(f.engine);
  auto old = f.engine->join("old-node", pb::JoinRequest());
  ASSERT_EQ(old.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(
      old.status().message().find("site 'old-node' cannot train with train.optimizer = \"muon\""),
      std::string::npos)
      << old.status().message();
  pb::JoinRequest adamw_only;
  adamw_only.mutable_capabilities()->add_optimizers("adamw");
  EXPECT_EQ(f.engine->join("adamw-node", adamw_only).status().code(),
            StatusCode::kFailedPrecondition);
  pb::JoinRequest flood;
  for (int i = 0; i < 17; ++i) flood.mutable_capabilities()->add_optimizers("muon");
  EXPECT_EQ(f.engine->join("flood", flood).status().code(), StatusCode::kInvalidArgument);
  pb::JoinRequest current;
  current.mutable_capabilities()->add_optimizers("adamw");
  current.mutable_capabilities()->add_optimizers("muon");
  auto joined = f.engine->join("new-node", current);
  ASSERT_TRUE(joined.ok()) << joined.status().to_string();
  EXPECT_EQ(joined->train().optimizer(), "muon");
  EXPECT_EQ(joined->train().muon_momentum(), 0.95);
  // An AdamW experiment still takes a node that lists nothing.
  EngineFixture plain(engine_config("plain", 3, 1), testing_util::toy_params(1000));
  ASSERT_TRUE(plain.engine);
  EXPECT_TRUE(plain.engine->join("old-node", pb::JoinRequest()).ok());
}

// Sites that tokenize differently train on ids that mean different text: the first site (or the
// checkpoint the launch names) sets the experiment's tokenizer, a site with another is refused
// naming both, and a node that reports none (an older build) is not checked.
TEST(RoundEngine, ASiteWithAnotherTokenizerIsRefused) {
  auto join_with = [](RoundEngine& e, const std::string& id, const std::string& name, char digit) {
    pb::JoinRequest req;
    req.mutable_data()->set_tokenizer(name);
    req.mutable_data()->set_tokenizer_sha256(std::string(64, digit));
    return e.join(id, req);
  };
  EngineFixture f(engine_config("tok", 3, 1), testing_util::toy_params(1000));
  ASSERT_TRUE(f.engine);
  ASSERT_TRUE(join_with(*f.engine, "site-1", "bytes", 'a').ok());
  ASSERT_TRUE(join_with(*f.engine, "site-2", "bytes", 'a').ok());
  auto other = join_with(*f.engine, "site-3", "bpe-320", 'b');
  ASSERT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(other.status().message(),
            "site 'site-3' reads its data with tokenizer bpe-320 (sha256 bbbbbbbbbbbbbbbb...), "
            "this experiment's sites with bytes (sha256 aaaaaaaaaaaaaaaa..., from site 'site-1', "
            "the first to join): every site must tokenize alike; give each node the same --base "
            "CKPT (or none)");
  EXPECT_TRUE(f.engine->join("old-build", pb::JoinRequest()).ok());

  EngineOptions launch;
  launch.tokenizer = SiteTokenizer{"bpe-320", std::string(64, 'b'), "the checkpoint θ_0 came from"};
  EngineFixture g(engine_config("tok2", 3, 1), testing_util::toy_params(1000), std::move(launch));
  ASSERT_TRUE(g.engine);
  auto bytes = join_with(*g.engine, "site-1", "bytes", 'a');
  ASSERT_EQ(bytes.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(bytes.status().message().find("from the checkpoint θ_0 came from"), std::string::npos)
      << bytes.status().message();
  EXPECT_TRUE(join_with(*g.engine, "site-2", "bpe-320", 'b').ok());

  // The first site's tokenizer is kept with the next commit: after a restart, a site with
  // another is still refused (it was held in memory only, and the first to rejoin set it anew).
  constexpr size_t kNumel = 1000;
  EngineFixture h(engine_config("tok3", 3, 1), testing_util::toy_params(kNumel));
  ASSERT_TRUE(h.engine);
  ASSERT_TRUE(h.engine->start().ok());
  ASSERT_TRUE(join_with(*h.engine, "site-1", "bytes", 'a').ok());
  h.join_and_get_tasks({"site-1"}, 0);
  const pb::TensorHeader header = update_header(*h.engine, 0, kNumel, h.layout_fp, 100);
  ASSERT_TRUE(h.engine->begin_update("site-1", header).ok());
  ASSERT_TRUE(h.engine->finish_update("site-1", header, node_delta_bytes(kNumel, 0)).ok());
  ASSERT_EQ(h.engine->current_round(), 1u);
  h.engine.reset();
  auto stored = h.store->load_experiment("tok3");
  ASSERT_TRUE(stored.ok() && stored->site_tokenizer);
  EXPECT_EQ(stored->site_tokenizer->sha256, std::string(64, 'a'));
  auto reopened = RoundEngine::open(*h.store, engine_config("tok3", 3, 1),
                                    testing_util::toy_params(kNumel), {});
  ASSERT_TRUE(reopened.ok()) << reopened.status().to_string();
  h.engine = std::move(*reopened);
  auto after_restart = join_with(*h.engine, "site-2", "bpe-320", 'b');
  ASSERT_EQ(after_restart.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(after_restart.status().message().find("from site 'site-1', the first to join"),
            std::string::npos)
      << after_restart.status().message();
  EXPECT_TRUE(join_with(*h.engine, "site-1", "bytes", 'a').ok());
}

// A node moving θ or Δ is alive: on a slow link its heartbeats queue behind the stream on the
// same connection, and a pull that outlasted the loss window got the node marked lost, the round
// redone, and the next pull cut the same way, for ever (0 rounds in 600 s at 100 kbit/s).
TEST(RoundEngine, ANodeStreamingThetaOrItsUpdateIsNotLost) {
  constexpr size_t kNumel = 1000;
  ExperimentConfig cfg = engine_config("slow-link", 3, 1);
  cfg.diloco.heartbeat_interval_s = 0.1;
  cfg.diloco.lost_after_heartbeats = 3;  // lost after 0.3 s without a call
  EngineFixture f(cfg, testing_util::toy_params(kNumel));
  ASSERT_TRUE(f.engine);
  ASSERT_TRUE(f.engine->start().ok());
  f.join_and_get_tasks({"node-0"}, 0);
  auto status_of_node = [&] { return f.engine->nodes().at(0).status; };

  pb::PullParamsRequest pr;
  pr.set_round(0);
  std::optional<StatusOr<PullPlan>> pulling = f.engine->pull("node-0", pr);
  ASSERT_TRUE(pulling->ok()) << pulling->status().to_string();
  std::this_thread::sleep_for(1s);  // over three loss windows with the stream open
  EXPECT_EQ(status_of_node(), "active");
  pulling.reset();  // the stream ended: the node was alive until then

  const pb::TensorHeader header = update_header(*f.engine, 0, kNumel, f.layout_fp, 100);
  ASSERT_TRUE(f.engine->begin_update("node-0", header).ok());
  std::this_thread::sleep_for(1s);  // the payload in flight
  EXPECT_EQ(status_of_node(), "active");
  f.engine->abort_update("node-0", header, Unavailable("the link went down"));
  // Silent from then on: lost as before.
  EXPECT_TRUE(testing_util::eventually([&] { return status_of_node() == "lost"; }, 5s));
}

// An experiment opened again must be the one in the store: another seed or codec is refused,
// naming what differs, while the timing of rounds may change between two starts.
TEST(RoundEngine, OpeningAgainWithAnotherConfigNamesWhatDiffers) {
  const ExperimentConfig cfg = engine_config("again", 3, 1);
  const algorithms::ParamSet init = testing_util::toy_params(1000);
  EngineFixture f(cfg, init);
  ASSERT_TRUE(f.engine);
  f.engine.reset();
  ExperimentConfig other = cfg;
  other.seed = cfg.seed + 1;
  other.train.codec = "int8";
  other.diloco.round_deadline_s = cfg.diloco.round_deadline_s * 2;  // may change
  auto refused = RoundEngine::open(*f.store, other, init, {});
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            "experiment 'again' in the store was created with another config (seed " +
                std::to_string(cfg.seed) + " -> " + std::to_string(other.seed) +
                ", train.codec \"none\" -> \"int8\"); start it with the config it was created "
                "with (GET /api/experiments/again shows it), or use another experiment name or "
                "store");
  ExperimentConfig later = cfg;
  later.diloco.round_deadline_s = cfg.diloco.round_deadline_s * 2;
  later.diloco.heartbeat_interval_s = cfg.diloco.heartbeat_interval_s / 2;
  auto reopened = RoundEngine::open(*f.store, later, init, {});
  EXPECT_TRUE(reopened.ok()) << reopened.status().to_string();
  reopened->reset();

  // A store an earlier version wrote, whose config this version's bounds refuse (heartbeats of
  // 0.05 s were accepted before): it is still compared, so the seed change is still refused.
  auto record = f.store->load_experiment("again");
  ASSERT_TRUE(record.ok()) << record.status().to_string();
  const std::string key = "heartbeat_interval_s = ";
  const size_t at = record->config_toml.find(key);
  ASSERT_NE(at, std::string::npos) << record->config_toml;
  record->config_toml.replace(at, record->config_toml.find('\n', at) - at, key + "0.05");
  ASSERT_FALSE(check_experiment_config(record->config_toml).errors.empty());
  ASSERT_TRUE(f.store->put_experiment(*record).ok());
  ExperimentConfig reseeded = later;
  reseeded.seed = cfg.seed + 1;
  auto still = RoundEngine::open(*f.store, reseeded, init, {});
  EXPECT_EQ(still.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(still.status().message().find("(seed " + std::to_string(cfg.seed) + " -> "),
            std::string::npos)
      << still.status().message();
}

// trim_fraction's default went from 0.1 to 0.2, and every experiment stored before was refused
// at its restart ("robust.trim_fraction 0.1 -> 0.2") whatever its aggregator. An aggregator's
// parameter is compared only where that aggregator is used; the trim itself may change.
TEST(RoundEngine, ParametersOfAnUnusedAggregatorDoNotStopARestart) {
  ExperimentConfig cfg = engine_config("defaults", 3, 1);
  cfg.robust.trim_fraction = 0.1;  // as an older build stored it
  cfg.robust.krum_keep = 2;
  const algorithms::ParamSet init = testing_util::toy_params(100);
  EngineFixture f(cfg, init);
  ASSERT_TRUE(f.engine);
  f.engine.reset();
  ExperimentConfig now = cfg;
  now.robust.trim_fraction = 0.2;
  now.robust.krum_keep = 1;
  auto reopened = RoundEngine::open(*f.store, now, init, {});
  EXPECT_TRUE(reopened.ok()) << reopened.status().to_string();
  reopened->reset();
  EXPECT_EQ(config_changes(cfg, now), std::vector<std::string>{});
  // The record holds the config that runs now (the API shows it, checkpoints are built from it),
  // and the audit log says what changed.
  auto record = f.store->load_experiment("defaults");
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->config_toml, to_toml(now));
  auto audit = f.store->list_audit("defaults");
  ASSERT_TRUE(audit.ok());
  bool said = false;
  for (const std::string& line : *audit)
    said |= line.find("robust.trim_fraction 0.1 -> 0.2") != std::string::npos;
  EXPECT_TRUE(said);
  ExperimentConfig krum = cfg;
  krum.robust.aggregator = "krum";
  ExperimentConfig krum_now = krum;
  krum_now.robust.krum_keep = 1;
  EXPECT_EQ(config_changes(krum, krum_now), std::vector<std::string>{"robust.krum_keep 2 -> 1"});
}

TEST(RoundEngine, TwoNodesPushAndTheCommitIsTheDirectAggregateAndOuterStep) {
  constexpr size_t kNumel = 4000;
  const ExperimentConfig cfg = engine_config("engine", 3, 2);
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  std::mutex mu;
  std::vector<std::string> accepted;  // UpdateAccepted messages
  EngineOptions opt;
  opt.on_event = [&](const Event& e) {
    std::lock_guard<std::mutex> lk(mu);
    if (e.kind == Event::Kind::kUpdateAccepted) accepted.push_back(e.message);
  };
  EngineFixture f(cfg, init, opt);
  ASSERT_TRUE(f.engine);
  ASSERT_TRUE(f.engine->start().ok());
  f.join_and_get_tasks({"node-0", "node-1"}, 0);

  // The pull of round 0 is all of θ_0 as raw fp32 (the node holds nothing). Asked for with
  // kIfKnown (the bulk lane, in-process sites), the new θ is not hashed for it; a gRPC pull
  // (kUpFront) hashes it once, and from then on every pull of it carries that digest.
  pb::PullParamsRequest pr;
  pr.set_round(0);
  auto lane_first = f.engine->pull("node-1", pr, PullDigest::kIfKnown);
  ASSERT_TRUE(lane_first.ok()) << lane_first.status().to_string();
  EXPECT_TRUE(lane_first->payload_digest.empty());
  auto plan = f.engine->pull("node-0", pr);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->payload_digest, transport::payload_digest(plan->payload));
  auto lane_later = f.engine->pull("node-1", pr, PullDigest::kIfKnown);
  ASSERT_TRUE(lane_later.ok()) << lane_later.status().to_string();
  EXPECT_EQ(lane_later->payload_digest, plan->payload_digest);
  EXPECT_EQ(plan->header.codec(), "none");
  EXPECT_EQ(plan->header.numel(), kNumel);
  EXPECT_EQ(plan->header.params_fingerprint(), init.fingerprint());
  ASSERT_EQ(plan->payload.size(), kNumel * 4);
  EXPECT_EQ(std::memcmp(plan->payload.data(), init.data(), kNumel * 4), 0);
  f.engine->pull_delivered("node-0", 0, plan->payload.size());

  const std::string theta0_fp = f.engine->params_fingerprint();
  const pb::TensorHeader h0 = update_header(*f.engine, 0, kNumel, f.layout_fp, 1000);
  ASSERT_TRUE(f.engine->begin_update("node-0", h0).ok());
  auto r0 = f.engine->finish_update("node-0", h0, raw_bytes(node_delta(kNumel, 0)));
  ASSERT_TRUE(r0.ok()) << r0.status().to_string();
  EXPECT_TRUE(r0->accepted());
  EXPECT_EQ(r0->message(), "accepted update for round 0 (1 of 2 updates)");

  // Replay: node-0's second update for round 0 is refused and changes nothing.
  Status replay = f.engine->begin_update("node-0", h0);
  EXPECT_EQ(replay.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(replay.message().find("replay"), std::string::npos) << replay.message();
  EXPECT_EQ(f.engine->current_round(), 0u);

  const pb::TensorHeader h1 = update_header(*f.engine, 0, kNumel, f.layout_fp, 3000);
  ASSERT_TRUE(f.engine->begin_update("node-1", h1).ok());
  auto r1 = f.engine->finish_update("node-1", h1, raw_bytes(node_delta(kNumel, 1)));
  ASSERT_TRUE(r1.ok()) << r1.status().to_string();
  EXPECT_EQ(r1->message(), "accepted update for round 0 (2 of 2 updates)");
  // The update that completed the round committed it before its answer.
  ASSERT_EQ(f.engine->current_round(), 1u);

  // The same round computed directly.
  std::vector<float> theta = init.vec(), momentum(kNumel), agg(kNumel);
  const std::vector<float> d0 = node_delta(kNumel, 0), d1 = node_delta(kNumel, 1);
  ASSERT_TRUE(
      algorithms::aggregate_pseudo_gradients({{"node-0", 1000, d0}, {"node-1", 3000, d1}}, agg)
          .ok());
  const algorithms::OuterNesterov outer(
      {static_cast<float>(cfg.diloco.outer_lr), static_cast<float>(cfg.diloco.outer_momentum)});
  ASSERT_TRUE(outer.step(theta, momentum, agg, /*first_step=*/true).ok());
  EXPECT_EQ(f.engine->params_fingerprint(), algorithms::params_fingerprint(theta));
  EXPECT_EQ(f.engine->params(), theta);
  auto rec = f.store->load_round("engine", 0);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_EQ(rec->base_fingerprint, theta0_fp);
  EXPECT_EQ(rec->params_fingerprint, algorithms::params_fingerprint(theta));
  EXPECT_EQ(rec->momentum_fingerprint, algorithms::params_fingerprint(momentum));
  EXPECT_EQ(rec->tokens, 4000u);
  ASSERT_EQ(rec->participants.size(), 2u);
  EXPECT_EQ(rec->participants[0].bytes_down, kNumel * 4);
  EXPECT_EQ(rec->participants[1].bytes_down, 0u);  // node-1 never pulled
  EXPECT_EQ(rec->participants[1].bytes_up, kNumel * 4);

  // Stale round: round 0 is committed; its updates and θ are refused from now on.
  Status stale = f.engine->begin_update("node-0", h0);
  EXPECT_EQ(stale.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(stale.message().find("stale round"), std::string::npos) << stale.message();
  EXPECT_EQ(f.engine->pull("node-0", pr).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.engine->params_fingerprint(), algorithms::params_fingerprint(theta));

  // Events carry the same progress text as the answers.
  f.engine.reset();  // drains the event thread
  std::lock_guard<std::mutex> lk(mu);
  EXPECT_EQ(accepted, (std::vector<std::string>{"1 of 2 updates", "2 of 2 updates"}));
}

// A slow node's pull of θ_0 that ends after round 0 closed is counted in round 1's record
// (late_bytes_down, per node), stored and read back, and in the node view's bytes down.
TEST(RoundEngine, APullThatOutlivesItsRoundIsCountedInTheNextRecord) {
  constexpr size_t kNumel = 1000;
  const ExperimentConfig cfg = engine_config("late", 3, 1);
  EngineFixture f(cfg, testing_util::toy_params(kNumel));
  ASSERT_TRUE(f.engine);
  ASSERT_TRUE(f.engine->start().ok());
  f.join_and_get_tasks({"node-0"}, 0);
  pb::PullParamsRequest pr;
  pr.set_round(0);
  auto slow = f.engine->pull("node-0", pr);
  ASSERT_TRUE(slow.ok()) << slow.status().to_string();
  const uint64_t slow_bytes = slow->payload.size();
  slow->in_flight.reset();  // the stream is still running; only its end is counted below

  const pb::TensorHeader h0 = update_header(*f.engine, 0, kNumel, f.layout_fp, 100);
  ASSERT_TRUE(f.engine->begin_update("node-0", h0).ok());
  ASSERT_TRUE(f.engine->finish_update("node-0", h0, node_delta_bytes(kNumel, 0)).ok());
  ASSERT_EQ(f.engine->current_round(), 1u);
  f.engine->pull_delivered("node-0", 0, slow_bytes);  // round 0 is closed by now

  pb::NextTaskRequest poll;
  poll.set_wait_ms(10000);
  auto task1 = f.engine->next_task("node-0", poll);
  ASSERT_TRUE(task1.ok()) << task1.status().to_string();
  ASSERT_EQ(task1->kind(), pb::Task::TRAIN) << task1->reason();
  const pb::TensorHeader h1 = update_header(*f.engine, 1, kNumel, f.layout_fp, 100);
  ASSERT_TRUE(f.engine->begin_update("node-0", h1).ok());
  ASSERT_TRUE(f.engine->finish_update("node-0", h1, node_delta_bytes(kNumel, 1)).ok());
  ASSERT_EQ(f.engine->current_round(), 2u);

  auto r0 = f.store->load_round("late", 0);
  auto r1 = f.store->load_round("late", 1);
  ASSERT_TRUE(r0.ok() && r1.ok());
  EXPECT_EQ(r0->bytes_down, 0u);
  EXPECT_TRUE(r0->late_bytes_down.empty());
  EXPECT_EQ(r1->bytes_down, 0u);
  EXPECT_EQ(r1->late_bytes_down, (std::map<std::string, uint64_t>{{"node-0", slow_bytes}}));
  EXPECT_EQ(late_bytes_down_total(*r1), slow_bytes);
}

// A node whose certificate is revoked after its update arrived: the round starts again without
// it, and the commit is the aggregate of the other sites alone; a revoked node that had not
// pushed only stops being waited for.
TEST(RoundEngine, ARevokedNodesUpdateNeverReachesTheta) {
  constexpr size_t kNumel = 2000;
  ExperimentConfig cfg = engine_config("revoke", 3, 2);
  cfg.diloco.start_wait_s = 5;  // every round starts with all live nodes, also on a slow machine
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  std::mutex mu;
  std::vector<std::string> revoked, restarts;
  EngineOptions opt;
  opt.on_event = [&](const Event& e) {
    std::lock_guard<std::mutex> lk(mu);
    if (e.kind == Event::Kind::kNodeRevoked) revoked.push_back(e.node_id + ": " + e.message);
    if (e.kind == Event::Kind::kRoundRestarted) restarts.push_back(e.message);
  };
  EngineFixture f(cfg, init, opt);
  ASSERT_TRUE(f.engine);
  ASSERT_TRUE(f.engine->start().ok());
  f.join_and_get_tasks({"node-0", "node-1", "node-2"}, 0);
  const pb::TensorHeader h = update_header(*f.engine, 0, kNumel, f.layout_fp, 1000);
  for (const char* id : {"node-0", "node-1"}) {
    ASSERT_TRUE(f.engine->begin_update(id, h).ok());
    ASSERT_TRUE(f.engine->finish_update(id, h, node_delta_bytes(kNumel, id[5] - '0')).ok());
  }
  ASSERT_EQ(f.engine->current_round(), 0u);  // node-2 is still awaited

  f.engine->revoke_node("node-1", "certificate serial 0A revoked by ca.crl");
  f.engine->revoke_node("node-1", "again");  // no longer a member: nothing happens
  EXPECT_EQ(f.engine->current_round(), 0u);
  for (const NodeSnapshot& n : f.engine->nodes())
    EXPECT_EQ(n.status, n.node_id == "node-1" ? "revoked" : "active") << n.node_id;
  pb::NextTaskRequest poll;
  poll.set_wait_ms(100);
  const Status refused = f.engine->next_task("node-1", poll).status();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(refused.message(),
            "the certificate of node 'node-1' was revoked (certificate serial 0A revoked by "
            "ca.crl): it no longer takes part");

  // The round starts again for node-0 and node-2, which both push.
  const auto both_get_tasks = [&f](uint64_t round) {
    std::vector<std::future<StatusOr<pb::Task>>> polls;
    for (const char* id : {"node-0", "node-2"})
      polls.push_back(std::async(std::launch::async, [&f, id] {
        pb::NextTaskRequest req;
        req.set_wait_ms(10000);
        return f.engine->next_task(id, req);
      }));
    for (auto& p : polls) {
      auto t = p.get();
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      ASSERT_EQ(t->kind(), pb::Task::TRAIN) << t->reason();
      EXPECT_EQ(t->round(), round);
    }
  };
  ASSERT_NO_FATAL_FAILURE(both_get_tasks(0));
  for (const char* id : {"node-0", "node-2"}) {
    ASSERT_TRUE(f.engine->begin_update(id, h).ok()) << id;
    ASSERT_TRUE(f.engine->finish_update(id, h, node_delta_bytes(kNumel, id[5] - '0')).ok());
  }
  ASSERT_EQ(f.engine->current_round(), 1u);

  std::vector<float> theta = init.vec(), momentum(kNumel), agg(kNumel);
  const std::vector<float> d0 = node_delta(kNumel, 0), d2 = node_delta(kNumel, 2);
  ASSERT_TRUE(
      algorithms::aggregate_pseudo_gradients({{"node-0", 1000, d0}, {"node-2", 1000, d2}}, agg)
          .ok());
  const algorithms::OuterNesterov outer(
      {static_cast<float>(cfg.diloco.outer_lr), static_cast<float>(cfg.diloco.outer_momentum)});
  ASSERT_TRUE(outer.step(theta, momentum, agg, /*first_step=*/true).ok());
  EXPECT_EQ(f.engine->params(), theta);
  auto rec = f.store->load_round("revoke", 0);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  ASSERT_EQ(rec->participants.size(), 2u);
  EXPECT_EQ(rec->participants[0].node_id, "node-0");
  EXPECT_EQ(rec->participants[1].node_id, "node-2");

  // Round 1: node-2 is revoked before it pushes; node-0's update alone commits the round.
  ASSERT_NO_FATAL_FAILURE(both_get_tasks(1));
  const pb::TensorHeader h1 = update_header(*f.engine, 1, kNumel, f.layout_fp, 1000);
  ASSERT_TRUE(f.engine->begin_update("node-0", h1).ok());
  ASSERT_TRUE(f.engine->finish_update("node-0", h1, node_delta_bytes(kNumel, 0)).ok());
  EXPECT_EQ(f.engine->current_round(), 1u);
  f.engine->revoke_node("node-2", "certificate serial 0B revoked by ca.crl");
  // node-2 had sent nothing: it is no longer waited for, and one update is below min_nodes = 2,
  // so the round starts again as it does when a site is lost.
  EXPECT_EQ(f.engine->current_round(), 1u);

  f.engine.reset();  // drains the event thread
  std::lock_guard<std::mutex> lk(mu);
  EXPECT_EQ(revoked, (std::vector<std::string>{"node-1: certificate serial 0A revoked by ca.crl",
                                               "node-2: certificate serial 0B revoked by ca.crl"}));
  ASSERT_EQ(restarts.size(), 2u);
  EXPECT_NE(restarts[0].find("the certificate of node 'node-1' was revoked"), std::string::npos)
      << restarts[0];
  EXPECT_NE(restarts[1].find("only 1 of diloco.min_nodes = 2 updates arrived"), std::string::npos)
      << restarts[1];
}

// Each join says which build the node runs; one that differs from the coordinator's is named
// with the coordinator's own, where an operator mid-upgrade looks first.
TEST(RoundEngine, AJoinNamesTheNodesBuildAndOneThatDiffers) {
  std::mutex mu;
  std::vector<std::string> joins;
  EngineOptions opt;
  opt.on_event = [&](const Event& e) {
    std::lock_guard<std::mutex> lk(mu);
    if (e.kind == Event::Kind::kNodeJoined) joins.push_back(e.node_id + ": " + e.message);
  };
  EngineFixture f(engine_config("versions", 3, 1), testing_util::toy_params(100), opt);
  ASSERT_TRUE(f.engine);
  pb::JoinRequest same, older, unnamed;
  same.set_client_version(build_label());
  older.set_client_version("atoll 0.1.0\x01");
  ASSERT_TRUE(f.engine->join("node-a", same).ok());
  ASSERT_TRUE(f.engine->join("node-b", older).ok());
  ASSERT_TRUE(f.engine->join("node-c", unnamed).ok());
  f.engine.reset();  // drains the event thread
  const std::string differs = "; this coordinator runs " + build_label() +
                              ": run one build at every site (docs/coordinator.md, \"Upgrading\")";
  EXPECT_EQ(joins, (std::vector<std::string>{"node-a: joined (" + build_label() + ")",
                                             "node-b: joined (atoll 0.1.0?)" + differs,
                                             "node-c: joined (an unnamed build)" + differs}));
}

// 64 members and 2 sites waiting outside max_nodes: after a coordinator restart the outsiders
// took 2 seats in the reconnect race, and two members, refused, gave up for good. The members
// active at the stop keep their seats until they are back or would count as lost anyway.
TEST(RoundEngine, MembersKeepTheirSeatsAcrossACoordinatorRestart) {
  ExperimentConfig cfg = engine_config("seats", 3, 1);
  cfg.diloco.max_nodes = 2;
  cfg.diloco.heartbeat_interval_s = 0.2;
  cfg.diloco.lost_after_heartbeats = 3;  // seats kept 0.6 s
  const algorithms::ParamSet init = testing_util::toy_params(100);
  EngineFixture f(cfg, init);
  ASSERT_TRUE(f.engine);
  ASSERT_TRUE(f.engine->join("member-a", {}).ok());
  ASSERT_TRUE(f.engine->join("member-b", {}).ok());
  EXPECT_EQ(f.engine->join("outsider", {}).status().code(), StatusCode::kOutOfRange);
  f.engine.reset();  // the coordinator stops; its members are still active in the store
  auto reopened = RoundEngine::open(*f.store, cfg, init, {});
  ASSERT_TRUE(reopened.ok()) << reopened.status().to_string();
  RoundEngine& e = **reopened;
  const auto outsider = e.join("outsider", {});
  EXPECT_EQ(outsider.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(outsider.status().message().find(
                "already has diloco.max_nodes = 2 nodes (2 of the seats are kept for its nodes "
                "of before the coordinator restarted"),
            std::string::npos)
      << outsider.status().message();
  EXPECT_TRUE(e.join("member-a", {}).ok());
  EXPECT_EQ(e.join("outsider", {}).status().code(), StatusCode::kOutOfRange);  // b's seat
  // member-b does not come back: its seat is free once lost_after_heartbeats intervals passed.
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  ASSERT_TRUE(e.join("member-a", {}).ok());  // lost meanwhile without heartbeats: back again
  const auto later = e.join("outsider", {});
  EXPECT_TRUE(later.ok()) << later.status().to_string();
  EXPECT_EQ(e.join("member-b", {}).status().code(), StatusCode::kOutOfRange);
  reopened->reset();
}

// A [privacy] experiment stored before privacy.noise_key existed: its noise stays keyed by the
// seed, the engine says so (its config, which the log line and the API show), and a config file
// may say either key.
TEST(RoundEngine, AStoreFromBeforeTheNoiseKeyKeepsTheSeedsNoiseAndSaysSo) {
  ExperimentConfig cfg = engine_config("old-dp", 3, 1);
  cfg.robust.screen = "off";
  cfg.privacy.clip_norm = 0.5;
  cfg.privacy.noise_multiplier = 1.0;
  cfg.privacy.noise_key = "seed";  // what the old build did, with no key in the record
  const algorithms::ParamSet init = testing_util::toy_params(100);
  EngineFixture f(cfg, init);
  ASSERT_TRUE(f.engine);
  f.engine.reset();
  auto record = f.store->load_experiment("old-dp");
  ASSERT_TRUE(record.ok());
  const size_t at = record->config_toml.find("\nnoise_key = ");
  ASSERT_NE(at, std::string::npos);
  record->config_toml.erase(at, record->config_toml.find('\n', at + 1) - at);
  ASSERT_TRUE(f.store->put_experiment(*record).ok());
  for (const char* key : {"secret", "seed", "secret"}) {
    ExperimentConfig given = cfg;
    given.privacy.noise_key = key;
    auto e = RoundEngine::open(*f.store, given, init, {});
    ASSERT_TRUE(e.ok()) << key << ": " << e.status().to_string();
    EXPECT_EQ((*e)->config().privacy.noise_key, "seed") << key;
    e->reset();
  }
}

TEST(RoundEngine, RefusesStrangersOtherExperimentsAndPayloadsWithoutAHeader) {
  constexpr size_t kNumel = 1000;
  const ExperimentConfig cfg = engine_config("refuse", 2, 2);
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  EngineFixture f(cfg, init);
  ASSERT_TRUE(f.engine);
  ASSERT_TRUE(f.engine->start().ok());
  f.join_and_get_tasks({"node-0", "node-1"}, 0);
  const pb::TensorHeader h = update_header(*f.engine, 0, kNumel, f.layout_fp, 1000);
  const std::string payload = raw_bytes(node_delta(kNumel, 0));

  Status st = f.engine->begin_update("stranger", h);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("not an active member"), std::string::npos) << st.message();
  pb::TensorHeader other = h;
  other.set_experiment_id("another");
  st = f.engine->begin_update("node-0", other);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("unknown experiment 'another'"), std::string::npos);
  EXPECT_EQ(f.engine->admits("another").code(), StatusCode::kNotFound);
  EXPECT_TRUE(f.engine->admits("").ok());
  EXPECT_EQ(f.engine->join("bad name!", pb::JoinRequest()).status().code(),
            StatusCode::kInvalidArgument);

  // A payload needs its header screened first.
  auto r = f.engine->finish_update("node-0", h, payload);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  // Wrong shape, refused at the header.
  pb::TensorHeader short_h = h;
  short_h.set_numel(kNumel - 1);
  short_h.set_payload_bytes((kNumel - 1) * 4);
  st = f.engine->begin_update("node-0", short_h);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("wrong shape"), std::string::npos) << st.message();
  // An aborted push frees the node's slot: the next one is accepted.
  ASSERT_TRUE(f.engine->begin_update("node-0", h).ok());
  EXPECT_EQ(f.engine->begin_update("node-0", h).code(), StatusCode::kAlreadyExists);
  f.engine->abort_update("node-0", h, Unavailable("stream broke"));
  ASSERT_TRUE(f.engine->begin_update("node-0", h).ok());
  // A payload that is not what the header announced is refused and leaves θ alone.
  std::vector<float> nan_delta = node_delta(kNumel, 0);
  nan_delta[17] = std::nanf("");
  r = f.engine->finish_update("node-0", h, raw_bytes(nan_delta));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("element 17 is nan"), std::string::npos);
  EXPECT_EQ(f.engine->params_fingerprint(), init.fingerprint());
  ASSERT_TRUE(f.engine->begin_update("node-0", h).ok());
  ASSERT_TRUE(f.engine->finish_update("node-0", h, payload).ok());
  EXPECT_EQ(f.engine->current_round(), 0u);  // node-1 has not pushed
}

// The commit runs without the engine lock: with 100M parameters (400 MB of θ, a commit of
// seconds), a node's heartbeats keep being answered within 100 ms while it runs. One node's
// update closes the round (min_nodes 1): the commit's work (the outer step over 100M
// parameters, θ and momentum written to the store) does not depend on how many updates it
// averages, and building and checking a second 400 MB update only made the test longer.
TEST(RoundEngine, HeartbeatsAreAnsweredWhileA100MParameterRoundCommits) {
  constexpr size_t kNumel = 100'000'000;
  ExperimentConfig cfg = engine_config("big", 1, 1);
  cfg.diloco.keep_params = 1;
  cfg.diloco.heartbeat_interval_s = 5.0;   // nobody is lost while the test builds 400 MB buffers
  std::atomic<int64_t> last_accept_ns{0};  // when the update that closes the round was reported
  EngineOptions opt;
  opt.on_event = [&](const Event& e) {
    if (e.kind == Event::Kind::kUpdateAccepted && e.node_id == "node-0")
      last_accept_ns = std::chrono::steady_clock::now().time_since_epoch().count();
  };
  std::unique_ptr<EngineFixture> f;
  {
    const algorithms::ParamSet init = testing_util::toy_params(kNumel, 0.5f);
    f = std::make_unique<EngineFixture>(cfg, init, opt);
  }
  ASSERT_TRUE(f->engine);
  RoundEngine& engine = *f->engine;
  ASSERT_TRUE(engine.start().ok());
  f->join_and_get_tasks({"node-0"}, 0);
  ASSERT_TRUE(engine.join("node-2", pb::JoinRequest()).ok());  // not in the round: heartbeats

  const pb::TensorHeader h0 = update_header(engine, 0, kNumel, f->layout_fp, 1000);
  std::string payload0 = node_delta_bytes(kNumel, 0);
  ASSERT_TRUE(engine.begin_update("node-0", h0).ok());

  struct Beat {
    int64_t sent_ns = 0;
    int64_t latency_ns = 0;
    uint64_t round_after = 0;  // current round once answered: 0 while the commit runs
  };
  std::vector<Beat> beats;
  std::atomic<bool> done{false};
  std::thread heart([&] {
    pb::HeartbeatRequest hb;
    while (!done) {
      const auto t0 = std::chrono::steady_clock::now();
      auto r = engine.heartbeat("node-2", hb);
      const auto t1 = std::chrono::steady_clock::now();
      EXPECT_TRUE(r.ok() && r->known());
      beats.push_back({t0.time_since_epoch().count(), (t1 - t0).count(), engine.current_round()});
      std::this_thread::sleep_for(5ms);  // a heartbeat every ~5 ms, not a busy loop
    }
  });
  const auto close_begin = std::chrono::steady_clock::now();
  auto r1 = engine.finish_update("node-0", h0, std::move(payload0));  // closes and commits
  const auto close_end = std::chrono::steady_clock::now();
  done = true;
  heart.join();
  ASSERT_TRUE(r1.ok()) << r1.status().to_string();
  ASSERT_EQ(engine.current_round(), 1u);
  ASSERT_EQ(engine.state(), ExperimentState::kFinished);
  ASSERT_NE(last_accept_ns.load(), 0);

  // Heartbeats sent after the round closed and answered before its commit was published.
  int64_t max_latency_ns = 0;
  size_t during_commit = 0;
  for (const Beat& b : beats) {
    if (b.sent_ns < close_begin.time_since_epoch().count() ||
        b.sent_ns > close_end.time_since_epoch().count())
      continue;
    max_latency_ns = std::max(max_latency_ns, b.latency_ns);
    if (b.sent_ns >= last_accept_ns && b.round_after == 0) ++during_commit;
  }
  const double commit_s = std::chrono::duration<double>(close_end - close_begin).count();
  RecordProperty("close_to_publish_ms", static_cast<int>(commit_s * 1000));
  RecordProperty("max_heartbeat_us", static_cast<int>(max_latency_ns / 1000));
  RecordProperty("heartbeats_during_commit", static_cast<int>(during_commit));
  EXPECT_GE(during_commit, 5u) << "the commit took " << commit_s << " s";
  EXPECT_LT(max_latency_ns, 100'000'000) << "slowest heartbeat " << max_latency_ns / 1e6
                                         << " ms during a commit of " << commit_s << " s";
}

}  // namespace
}  // namespace atl::coordinator
