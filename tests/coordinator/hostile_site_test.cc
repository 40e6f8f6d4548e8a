// An authenticated but hostile site, and an unauthenticated flood, against the real gRPC server
// over mTLS: each failure a tester found becomes a test. The sites here speak the protocol
// directly (node::CoordinatorClient for the calls and streams, the generated stub where the
// exact gRPC status matters, a bare TCP socket for the handshake), without the node's checks.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <random>
#include <thread>

#include "algorithms/compress/codec.h"
#include "algorithms/compress/entropy.h"
#include "algorithms/compress/wire.h"
#include "algorithms/diloco/robust.h"
#include "service_harness.h"
#include "tests/tools/loopback_socket.h"
#include "transport/channel.h"
#include "transport/tls/ca.h"

namespace atl::coordinator {
namespace {

using namespace std::chrono_literals;
using testing::Coordinator;
using testing::EventLog;
using testing::tls_client;
using testing_util::TempDir;
namespace pb = atoll_pb::v1;

constexpr size_t kNumel = 4096;

// A coordinator over mTLS on loopback with node certificates node-0 .. node-(n-1).
struct TlsCoordinator {
  TempDir store_dir, tls_dir;
  std::string ca;
  EventLog events;
  algorithms::ParamSet init = testing_util::toy_params(kNumel);
  std::string layout_fp = algorithms::layout_fingerprint(init.layout());
  std::unique_ptr<Coordinator> c;
  // How updates in a codec other than "none" are decoded (`atoll coordinator` decodes any codec
  // message; without it such updates are refused).
  PayloadDecoder decode;

  TlsCoordinator(const ExperimentConfig& cfg, int nodes, transport::ServerLimits limits = {},
                 PayloadDecoder decoder = {})
      : ca(tls_dir.sub("tls")), decode(std::move(decoder)) {
    EXPECT_TRUE(transport::ca_init(ca).ok());
    EXPECT_TRUE(transport::ca_issue(ca, "coordinator", transport::Role::kServer).ok());
    for (int i = 0; i < nodes; ++i)
      EXPECT_TRUE(transport::ca_issue(ca, name(i), transport::Role::kNode).ok());
    start(cfg, limits);
  }
  // Stops the coordinator (as a crash between two rounds would) and starts it again on the same
  // store: nodes must join again.
  void restart(const ExperimentConfig& cfg, transport::ServerLimits limits = {}) {
    c.reset();
    start(cfg, limits);
  }
  // Starts the coordinator on the store, with TLS identities; c stays null when it cannot.
  void start(const ExperimentConfig& cfg, transport::ServerLimits limits) {
    auto creds = transport::server_credentials(ca, "coordinator");
    ASSERT_TRUE(creds.ok()) << creds.status().to_string();
    ServiceOptions opts;
    opts.identity = IdentitySource::kTlsCertificate;
    opts.on_event = events.callback();
    opts.decode = decode;
    c = Coordinator::start(store_dir.path(), cfg, init, opts, *creds, "127.0.0.1:0", limits);
  }
  static std::string name(int i) { return "node-" + std::to_string(i); }
  std::unique_ptr<node::CoordinatorClient> client(int i) const {
    return std::make_unique<node::CoordinatorClient>(tls_client(c->address(), ca, name(i)));
  }
  // The generated stub over mTLS as node i: every gRPC status as the server sent it.
  std::unique_ptr<pb::Coordinator::Stub> stub(int i) const {
    auto tls = transport::client_credentials(ca, name(i), "coordinator");
    EXPECT_TRUE(tls.ok()) << tls.status().to_string();
    return pb::Coordinator::NewStub(transport::create_channel(c->address(), *tls));
  }
};

// A participant of the open round: its client, its TRAIN task and θ_r.
struct Site {
  std::unique_ptr<node::CoordinatorClient> client;
  pb::Task task;
  node::PulledParams theta;

  node::UpdateHeader header(uint64_t tokens, const std::string& layout_fp) const {
    return {task.round(), tokens, 2.0, theta.fingerprint, layout_fp};
  }
};

// Nodes `ids` join (once), poll together until each holds a TRAIN task, and pull θ.
std::vector<Site> train_round(TlsCoordinator& t, const std::vector<int>& ids, bool join = true) {
  std::vector<Site> sites(ids.size());
  std::vector<std::future<void>> polls;
  for (size_t k = 0; k < ids.size(); ++k) {
    sites[k].client = t.client(ids[k]);
    if (join) {
      EXPECT_TRUE(sites[k].client->join().ok());
    }
  }
  for (auto& s : sites)
    polls.push_back(std::async(std::launch::async, [&s] {
      for (int attempt = 0; attempt < 10; ++attempt) {
        auto task = s.client->next_task(0, 5000);
        ASSERT_TRUE(task.ok()) << task.status().to_string();
        if (task->kind() != pb::Task::TRAIN) continue;
        s.task = *task;
        auto theta = s.client->pull_params(task->round(), task->params_fingerprint());
        ASSERT_TRUE(theta.ok()) << theta.status().to_string();
        s.theta = std::move(*theta);
        return;
      }
      FAIL() << "no TRAIN task";
    }));
  for (auto& p : polls) p.get();
  return sites;
}

// θ after one first outer step from θ_0 with `updates` (sorted by node id).
std::string first_step_fingerprint(const algorithms::ParamSet& init, const ExperimentConfig& cfg,
                                   const std::vector<algorithms::Update>& updates) {
  std::vector<float> theta = init.vec(), m(theta.size()), agg(theta.size());
  EXPECT_TRUE(algorithms::aggregate_pseudo_gradients(updates, agg).ok());
  algorithms::OuterNesterov opt(
      {static_cast<float>(cfg.diloco.outer_lr), static_cast<float>(cfg.diloco.outer_momentum)});
  EXPECT_TRUE(opt.step(theta, m, agg, true).ok());
  return algorithms::params_fingerprint(theta);
}

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

// "One node steers θ": a claim of 2^63 − 1 tokens is refused; with the most tokens a round
// allows, the liar weighs as much as the honest node, and the total does not overflow.
TEST(HostileSite, InflatedTokenClaimIsRefusedAndTheHonestNodeCounts) {
  ExperimentConfig cfg = testing::small_config("tokens", 1, 2);
  cfg.robust.screen = "off";  // the weights alone decide θ here
  TlsCoordinator t(cfg, 2);
  ASSERT_TRUE(t.c);
  ASSERT_TRUE(t.c->service->start().ok());
  std::vector<Site> sites = train_round(t, {0, 1});
  // steps_per_round × batch_size × seq_len of small_config: 10 × 8 × 256.
  const uint64_t allowed = 10ull * 8 * 256;

  const std::vector<float> ones(kNumel, 1.0f);
  auto liar = sites[1].client->push_update(sites[1].header(INT64_MAX, t.layout_fp), ones);
  ASSERT_EQ(liar.status().code(), StatusCode::kInvalidArgument) << liar.status().to_string();
  EXPECT_TRUE(contains(liar.status().message(), "is more than a round allows"))
      << liar.status().message();
  auto over = sites[1].client->push_update(sites[1].header(allowed + 1, t.layout_fp), ones);
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);

  // The most a round allows is accepted, from both.
  const std::vector<float> honest = testing::fake_delta(sites[0].theta.values, 0);
  ASSERT_TRUE(sites[1].client->push_update(sites[1].header(allowed, t.layout_fp), ones).ok());
  ASSERT_TRUE(sites[0].client->push_update(sites[0].header(allowed, t.layout_fp), honest).ok());
  auto fin = t.c->service->wait_until_finished(Clock::now() + 20s);
  ASSERT_TRUE(fin.ok()) << fin.status().to_string();
  EXPECT_EQ(*fin, ExperimentState::kFinished);

  // θ_1 is the equal-weight mean of both updates: the honest one was not ignored.
  EXPECT_EQ(t.c->service->params_fingerprint(),
            first_step_fingerprint(t.init, cfg,
                                   {{"node-0", allowed, honest}, {"node-1", allowed, ones}}));
  auto rec = t.c->store->load_round("tokens", 0);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_EQ(rec->tokens, 2 * allowed);
  // The refusal is logged (event and audit) with the claim.
  // (Events leave the engine on its own thread: wait for it.)
  EXPECT_TRUE(testing_util::eventually(
      [&] {
        for (const Event& e : t.events.of(Event::Kind::kUpdateRejected))
          if (e.node_id == "node-1" && contains(e.message, "9223372036854775807")) return true;
        return false;
      },
      5s));
  auto audit = t.c->store->list_audit("tokens");
  ASSERT_TRUE(audit.ok());
  bool audited = false;
  for (const auto& line : *audit) audited |= contains(line, "9223372036854775807");
  EXPECT_TRUE(audited);
}

// Item 1's Streaming DiLoCo equivalent: a round runs inner_steps / streaming_fragments steps, so
// the plain-DiLoCo maximum (10 steps' tokens) is refused and the round's (5 steps') accepted.
TEST(HostileSite, StreamingTokenClaimIsCappedAtTheFragmentsSteps) {
  ExperimentConfig cfg = testing::small_config("stream-tokens", 1, 1);
  cfg.diloco.streaming_fragments = 2;  // inner_steps 10: 5 steps a round
  TlsCoordinator t(cfg, 1);
  ASSERT_TRUE(t.c);
  ASSERT_TRUE(t.c->service->start().ok());
  std::vector<Site> sites = train_round(t, {0});
  const pb::Task& task = sites[0].task;
  ASSERT_GT(task.fragment_numel(), 0u);
  const std::vector<float> delta(task.fragment_numel(), 0.001f);
  node::UpdateHeader h = sites[0].header(10ull * 8 * 256, t.layout_fp);
  h.fragment_offset = task.fragment_offset();
  auto over = sites[0].client->push_update(h, delta);
  ASSERT_EQ(over.status().code(), StatusCode::kInvalidArgument) << over.status().to_string();
  EXPECT_TRUE(contains(over.status().message(), "is more than a round allows: 5 inner steps"))
      << over.status().message();
  h.tokens = 5ull * 8 * 256;
  auto ok = sites[0].client->push_update(h, delta);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  auto fin = t.c->service->wait_until_finished(Clock::now() + 20s);
  ASSERT_TRUE(fin.ok()) << fin.status().to_string();
  auto rec = t.c->store->load_round("stream-tokens", 0);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_EQ(rec->tokens, 5ull * 8 * 256);
}

// "One node ends an experiment for good", alone: Δ = 3e38 everywhere is finite, but its outer
// step is not. The round is skipped (θ unchanged), and the experiment goes on.
TEST(HostileSite, HugeUpdateFromTheOnlyNodeSkipsTheRoundInsteadOfFailing) {
  ExperimentConfig cfg = testing::small_config("huge1", 2, 1);
  TlsCoordinator t(cfg, 1);
  ASSERT_TRUE(t.c);
  ASSERT_TRUE(t.c->service->start().ok());
  std::vector<Site> sites = train_round(t, {0});
  const std::string theta0 = t.c->service->params_fingerprint();
  const std::vector<float> huge(kNumel, 3e38f);
  ASSERT_TRUE(sites[0].client->push_update(sites[0].header(1000, t.layout_fp), huge).ok());
  ASSERT_TRUE(t.c->service->wait_for_round(1, Clock::now() + 20s));
  EXPECT_EQ(t.c->service->state(), ExperimentState::kRunning);
  EXPECT_EQ(t.c->service->params_fingerprint(), theta0);
  auto rec = t.c->store->load_round("huge1", 0);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_TRUE(rec->skipped);
  EXPECT_EQ(rec->params_fingerprint, rec->base_fingerprint);
  ASSERT_EQ(rec->participants.size(), 1u);
  EXPECT_EQ(rec->participants[0].screen, "dropped");
  EXPECT_GT(rec->participants[0].norm, 1e39);

  // The next round runs normally and the experiment finishes.
  sites = train_round(t, {0}, /*join=*/false);
  ASSERT_EQ(sites[0].task.round(), 1u);
  const std::vector<float> honest = testing::fake_delta(sites[0].theta.values, 0);
  ASSERT_TRUE(sites[0].client->push_update(sites[0].header(1000, t.layout_fp), honest).ok());
  auto fin = t.c->service->wait_until_finished(Clock::now() + 20s);
  ASSERT_TRUE(fin.ok()) << fin.status().to_string();
  EXPECT_EQ(*fin, ExperimentState::kFinished);
  for (float v : t.c->service->params()) ASSERT_TRUE(std::isfinite(v));
  auto rec1 = t.c->store->load_round("huge1", 1);
  ASSERT_TRUE(rec1.ok());
  EXPECT_FALSE(rec1->skipped);
  EXPECT_EQ(rec1->participants[0].screen, "kept");
}

// A "+zstd" update whose frame would expand to 64 MiB (64 kB on the wire: a decompression bomb)
// for a 4096-value int3 message, then one split into frames of the wrong parts: each is refused
// with a line naming the frame, before anything is expanded, and θ stays; the node's honest update
// then commits the round.
TEST(HostileSite, ZstdBombAndMisframedUpdatesAreRefused) {
  namespace cx = algorithms::compress;
  ExperimentConfig cfg = testing::small_config("zbomb", 1, 1);
  cfg.train.codec = "int3:256+zstd";
  TlsCoordinator t(cfg, 1, {}, [](const std::string&, const std::string& payload, uint64_t numel) {
    return cx::decode(std::span(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()),
                      numel);
  });
  ASSERT_TRUE(t.c);
  ASSERT_TRUE(t.c->service->start().ok());
  std::vector<Site> sites = train_round(t, {0});
  const std::string theta0 = t.c->service->params_fingerprint();
  const std::vector<float> honest = testing::fake_delta(sites[0].theta.values, 0);
  const cx::Codec codec = *cx::Codec::create(cfg.train.codec);
  const std::vector<uint8_t> good = *codec.encode(honest);
  const size_t head = cx::kHeaderBytes + cfg.train.codec.size();
  // good's header and spec, then `payload` (its length and the CRC fixed).
  auto message = [&](const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> m(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(head));
    m.insert(m.end(), payload.begin(), payload.end());
    cx::store<uint64_t>(m.data() + 16, payload.size());
    cx::store<uint32_t>(m.data() + 24, cx::message_crc(m));
    return std::string(m.begin(), m.end());
  };
  std::vector<uint8_t> bomb;
  cx::zstd_append(std::vector<uint8_t>(size_t{64} << 20, 0), bomb);
  ASSERT_LT(bomb.size(), size_t{64} << 10);
  // The raw int3:256 payload of the update (16 blocks of 132 bytes) as two frames of 1056 bytes.
  const std::vector<uint8_t> raw = *cx::Codec::create("int3:256")->encode(honest);
  const std::span<const uint8_t> raw_payload = std::span(raw).subspan(head - 5);  // no "+zstd"
  std::vector<uint8_t> halves;
  cx::zstd_append(raw_payload.first(raw_payload.size() / 2), halves);
  cx::zstd_append(raw_payload.subspan(raw_payload.size() / 2), halves);
  for (const auto& payload : {bomb, halves}) {
    auto r = sites[0].client->push_encoded(sites[0].header(1000, t.layout_fp), cfg.train.codec,
                                           kNumel, message(payload));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().to_string();
    EXPECT_NE(r.status().message().find("zstd frame"), std::string::npos) << r.status().message();
    EXPECT_EQ(t.c->service->params_fingerprint(), theta0);
    EXPECT_EQ(t.c->service->current_round(), 0u);
  }
  auto ok = sites[0].client->push_encoded(sites[0].header(1000, t.layout_fp), cfg.train.codec,
                                          kNumel, std::string(good.begin(), good.end()));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(*ok, good.size());
  auto fin = t.c->service->wait_until_finished(Clock::now() + 20s);
  ASSERT_TRUE(fin.ok()) << fin.status().to_string();
  EXPECT_EQ(*fin, ExperimentState::kFinished);
  EXPECT_NE(t.c->service->params_fingerprint(), theta0);
}

// The same attack next to an honest node, with screen = "clip" at 10×: the huge update is clipped
// to 10× the honest norm, the round commits with a finite θ, computed exactly as screening says.
TEST(HostileSite, HugeUpdateNextToAnHonestNodeIsClipped) {
  ExperimentConfig cfg = testing::small_config("huge2", 1, 2);
  cfg.robust.screen = "clip";
  cfg.robust.norm_multiple = 10.0;
  TlsCoordinator t(cfg, 2);
  ASSERT_TRUE(t.c);
  ASSERT_TRUE(t.c->service->start().ok());
  std::vector<Site> sites = train_round(t, {0, 1});
  const std::vector<float> honest = testing::fake_delta(sites[0].theta.values, 0);
  const std::vector<float> huge(kNumel, 3e38f);
  ASSERT_TRUE(sites[1].client->push_update(sites[1].header(1000, t.layout_fp), huge).ok());
  ASSERT_TRUE(sites[0].client->push_update(sites[0].header(1000, t.layout_fp), honest).ok());
  auto fin = t.c->service->wait_until_finished(Clock::now() + 20s);
  ASSERT_TRUE(fin.ok()) << fin.status().to_string();
  EXPECT_EQ(*fin, ExperimentState::kFinished);
  for (float v : t.c->service->params()) ASSERT_TRUE(std::isfinite(v));

  const double honest_norm = algorithms::l2_norm(honest);
  std::vector<float> clipped = huge;
  algorithms::scale_values(clipped, 10.0 * honest_norm / algorithms::l2_norm(huge));
  EXPECT_EQ(
      t.c->service->params_fingerprint(),
      first_step_fingerprint(t.init, cfg, {{"node-0", 1000, honest}, {"node-1", 1000, clipped}}));
  auto rec = t.c->store->load_round("huge2", 0);
  ASSERT_TRUE(rec.ok());
  EXPECT_FALSE(rec->skipped);
  EXPECT_EQ(rec->participants[0].screen, "kept");
  EXPECT_EQ(rec->participants[1].screen, "clipped");
  EXPECT_DOUBLE_EQ(rec->median_norm, honest_norm);
  EXPECT_DOUBLE_EQ(rec->norm_limit, 10.0 * honest_norm);
}

// Δ of normal draws keyed by `seed`: an honest site's updates of two rounds are unrelated.
std::vector<float> drawn_delta(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.01f);
  std::vector<float> d(kNumel);
  for (float& x : d) x = dist(rng);
  return d;
}

// One attacked run over mTLS: `nodes` sites (the last one the attacker) train the rounds of `cfg`,
// each round's pushes made by `push_round(sites, round, layout_fp)`; with `restart_round` > 0 the
// coordinator is stopped once round restart_round - 1 is committed and started again on the same
// store. Then checks that every honest update was kept and the attacker's dropped for `reason` in
// every round after the first, also in the audit log. Returns θ's final fingerprint ("" when the
// run could not be made).
std::string attacked_run(
    const ExperimentConfig& cfg, int nodes, uint64_t restart_round, const std::string& reason,
    const std::function<void(std::vector<Site>&, uint64_t, const std::string&)>& push_round) {
  const std::string& experiment = cfg.name;
  const uint64_t rounds = cfg.diloco.rounds;
  TlsCoordinator t(cfg, nodes);
  EXPECT_TRUE(t.c);
  if (!t.c) return "";
  EXPECT_TRUE(t.c->service->start().ok());
  std::vector<int> ids(static_cast<size_t>(nodes));
  for (int k = 0; k < nodes; ++k) ids[static_cast<size_t>(k)] = k;
  for (uint64_t r = 0; r < rounds; ++r) {
    const bool restarts = restart_round > 0 && r == restart_round;
    if (restarts) {
      // Once round r - 1 is committed (the next TRAIN task would be round r's).
      EXPECT_TRUE(testing_util::eventually(
          [&] { return t.c->store->load_round(experiment, r - 1).ok(); }, 20000ms));
      t.restart(cfg);
      if (!t.c) return "";
      EXPECT_TRUE(t.c->service->start().ok());
    }
    std::vector<Site> sites = train_round(t, ids, r == 0 || restarts);
    EXPECT_EQ(sites[0].task.round(), r);
    push_round(sites, r, t.layout_fp);
  }
  auto fin = t.c->service->wait_until_finished(Clock::now() + 20s);
  EXPECT_TRUE(fin.ok()) << fin.status().to_string();
  const size_t attacker = static_cast<size_t>(nodes - 1);
  for (uint64_t r = 0; r < rounds; ++r) {
    auto rec = t.c->store->load_round(experiment, r);
    EXPECT_TRUE(rec.ok()) << rec.status().to_string();
    if (!rec.ok()) return "";
    for (size_t k = 0; k < attacker; ++k) EXPECT_EQ(rec->participants[k].screen, "kept") << r;
    EXPECT_EQ(rec->participants[attacker].screen, r == 0 ? "kept" : "dropped") << r;
    EXPECT_EQ(rec->participants[attacker].screen_reason, r == 0 ? "" : reason) << r;
  }
  // The audit log is written by the engine's event thread after the commit: wait for it.
  const std::string node_round = TlsCoordinator::name(nodes - 1) + " round ";
  const std::string dropped = "dropped: " + reason;
  auto drop_lines = [&] {
    auto audit = t.c->store->list_audit(experiment);
    size_t n = 0;
    if (audit.ok())
      for (const auto& line : *audit) n += contains(line, node_round) && contains(line, dropped);
    return n;
  };
  testing_util::eventually([&] { return drop_lines() >= rounds - 1; }, 10000ms);
  EXPECT_EQ(drop_lines(), rounds - 1);
  return t.c->service->params_fingerprint();
}

// node-1 sends its round-0 update again in rounds 1 and 2 (a replay, byte for byte) next to an
// honest node-0; with `restart`, the coordinator is stopped after round 1 and started again on
// the same store. Returns θ's final fingerprint.
std::string replay_run(bool restart) {
  ExperimentConfig cfg = testing::small_config("replay", 3, 2);
  cfg.robust.replay_cosine = 0.99;
  const std::vector<float> replayed = drawn_delta(100);
  auto push_round = [&](std::vector<Site>& sites, uint64_t r, const std::string& layout_fp) {
    EXPECT_TRUE(sites[1].client->push_update(sites[1].header(1000, layout_fp), replayed).ok());
    EXPECT_TRUE(
        sites[0]
            .client
            ->push_update(sites[0].header(1000, layout_fp), drawn_delta(static_cast<uint32_t>(r)))
            .ok());
  };
  return attacked_run(cfg, 2, restart ? 2 : 0, "replay", push_round);
}

// A site replaying its previous accepted update (byte for byte) is dropped in every later round,
// also after a coordinator restart: the memory of each node's last update is committed with the
// round, so the run with a restart ends on the same θ, bit for bit.
TEST(HostileSite, ReplayedUpdateIsDroppedAlsoAfterARestart) {
  const std::string straight = replay_run(false);
  const std::string restarted = replay_run(true);
  ASSERT_FALSE(straight.empty());
  EXPECT_EQ(restarted, straight);
}

// Round r's update of site `site` in a synthetic run whose updates share a direction g_r that
// drifts from round to round (g_r = N(0, 1) + 0.7 g_{r-1}; each site adds its own noise), as
// consecutive DiLoCo pseudo-gradients do. Scaled to honest-update size (0.01).
std::vector<float> trajectory_delta(uint64_t round, uint32_t site) {
  std::vector<float> g(kNumel, 0.0f);
  for (uint64_t r = 0; r <= round; ++r) {
    const std::vector<float> fresh = testing_util::normal_vector(kNumel, 500 + uint32_t(r));
    for (size_t i = 0; i < kNumel; ++i) g[i] = fresh[i] + 0.7f * g[i];
  }
  std::vector<float> d = testing_util::normal_vector(kNumel, 9000 + 100 * uint32_t(round) + site);
  for (size_t i = 0; i < kNumel; ++i) d[i] = 0.01f * (0.8f * d[i] + g[i]);
  return d;
}

// node-2 sends, from round 1 on, an update trained from the previous round's θ that it never
// sent before (a stale update: no replay) next to honest node-0 and node-1; with `restart`, the
// coordinator is stopped after round 2 and started again on the same store. Returns θ's final
// fingerprint.
std::string stale_run(bool restart) {
  ExperimentConfig cfg = testing::small_config("stale", 4, 3);
  cfg.robust.stale_margin = ExperimentConfig{}.robust.stale_margin;  // the default
  auto push_round = [](std::vector<Site>& sites, uint64_t r, const std::string& layout_fp) {
    for (uint32_t k = 0; k < 3; ++k) {
      const std::vector<float> delta =
          k == 2 && r > 0 ? trajectory_delta(r - 1, 20 + uint32_t(r)) : trajectory_delta(r, k);
      EXPECT_TRUE(sites[k].client->push_update(sites[k].header(1000, layout_fp), delta).ok());
    }
  };
  return attacked_run(cfg, 3, restart ? 3 : 0, "stale", push_round);
}

// A site sending updates one round late (trained from θ_{r-1}, never sent before) is dropped
// in every round after the first, also after a coordinator restart: which updates the last
// round applied is committed with it, so the run with a restart ends on the same θ.
TEST(HostileSite, StaleUpdateIsDroppedAlsoAfterARestart) {
  const std::string straight = stale_run(false);
  const std::string restarted = stale_run(true);
  ASSERT_FALSE(straight.empty());
  EXPECT_EQ(restarted, straight);
}

// ReportMetrics over the wire: n metrics named m000.., for `round`.
grpc::Status report(pb::Coordinator::Stub& stub, const std::string& experiment, uint64_t round,
                    int n, const std::string& name_prefix = "m") {
  pb::MetricsReport req;
  req.set_experiment_id(experiment);
  req.set_round(round);
  req.set_step(1);
  for (int i = 0; i < n; ++i) {
    pb::Metric* m = req.add_metrics();
    char index[8];
    std::snprintf(index, sizeof(index), "%03d", i);
    m->set_name(name_prefix + index);
    m->set_value(i);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  pb::MetricsAck ack;
  return stub.ReportMetrics(&ctx, req, &ack);
}

// "Metrics flood" (3,000 × 256 metrics from round 1,000,000 up, scaled down): rounds outside the
// window, names and counts out of bounds are refused, a node's reports per round are capped and
// a burst beyond the rate limit is refused before anything is parsed; the store keeps at most
// the few reports allowed.
TEST(HostileSite, MetricsFloodIsRefusedAndTheStoreStaysBounded) {
  ExperimentConfig cfg = testing::small_config("flood", 1, 3);
  cfg.diloco.lost_after_heartbeats = 60;  // the idle nodes stay members while node-0 floods
  TlsCoordinator t(cfg, 3);
  ASSERT_TRUE(t.c);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t.client(i)->join().ok());
  const size_t stored_before = t.c->store->list_metrics("flood")->size();

  // node-0: far-future rounds, as fast as it can.
  auto stub = t.stub(0);
  int ok = 0, invalid = 0, exhausted = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < 300; ++i) {
    grpc::Status st = report(*stub, "flood", 1000000 + i, 64);
    if (st.ok()) ++ok;
    if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      ++invalid;
      EXPECT_TRUE(contains(st.error_message(), "the current round is 0")) << st.error_message();
    }
    if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++exhausted;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(ok, 0);
  EXPECT_EQ(invalid + exhausted, 300);
  // At most the burst (20) plus 5 a second got past the rate limit.
  EXPECT_LE(invalid, 20 + static_cast<int>(5 * secs) + 1) << secs << " s";
  EXPECT_GE(exhausted, 300 - 20 - static_cast<int>(5 * secs) - 1);

  // node-1: the current round, over and over: 4 reports are stored, then refused.
  auto stub1 = t.stub(1);
  int ok1 = 0, exhausted1 = 0;
  for (int i = 0; i < 100; ++i) {
    grpc::Status st = report(*stub1, "flood", 0, 64);
    ok1 += st.ok();
    exhausted1 += st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
  }
  EXPECT_EQ(ok1, 4);
  EXPECT_EQ(exhausted1, 96);

  // node-2: bad names and too many metrics are INVALID_ARGUMENT.
  auto stub2 = t.stub(2);
  EXPECT_EQ(report(*stub2, "flood", 0, 65).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(report(*stub2, "flood", 0, 1, "bad name ").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(report(*stub2, "flood", 0, 1, std::string(70, 'x')).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(report(*stub2, "flood", 0, 3).ok());

  auto stored = t.c->store->list_metrics("flood");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size() - stored_before, 5u);  // node-1's 4 and node-2's 1
}

using ::atl::testing::connect_loopback;

// True once the peer closed `fd` (EOF or reset) before `deadline`.
bool closed_by_peer(int fd, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    char byte;
    const ssize_t r = ::recv(fd, &byte, 1, 0);
    if (r <= 0) return true;  // EOF or reset: the server let go
  }
}

// "half-finished TLS handshakes are kept 120 s": connections that never send a ClientHello
// are closed by the server within its 10 s handshake timeout, and while they are open a real
// node still joins.
TEST(HostileSite, IdleHalfOpenConnectionsAreDroppedWithinTheHandshakeTimeout) {
  TlsCoordinator t(testing::small_config("idle", 1, 1), 1);
  ASSERT_TRUE(t.c);
  std::vector<int> fds;
  const auto opened = Clock::now();
  for (int i = 0; i < 64; ++i) {
    const int fd = connect_loopback(t.c->server->port());
    ASSERT_GE(fd, 0) << "connect failed: " << std::strerror(errno);
    fds.push_back(fd);
  }
  auto joined = t.client(0)->join();
  EXPECT_TRUE(joined.ok()) << joined.status().to_string();
  // 10 s timeout, 3 s of margin for a loaded machine.
  const auto deadline = opened + 13s;
  for (int fd : fds) EXPECT_TRUE(closed_by_peer(fd, deadline)) << "fd " << fd << " still open";
  const double secs = std::chrono::duration<double>(Clock::now() - opened).count();
  // Not closed at once: it is the handshake timeout at work, not a refused connection.
  EXPECT_GT(secs, 5.0);
  for (int fd : fds) ::close(fd);
}

// How many of `fds` the peer has closed by `deadline`: each is waited for until then, and
// checked without waiting once it has passed.
int count_closed_by_peer(const std::vector<int>& fds, Clock::time_point deadline) {
  int closed = 0;
  for (int fd : fds) {
    for (;;) {
      const auto left = std::max<int64_t>(
          0,
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      pollfd p{fd, POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(left));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      char byte;
      if (::recv(fd, &byte, 1, 0) <= 0) {
        ++closed;
        break;
      }
    }
  }
  return closed;
}

// The handshake timeout is the server's setting: with 1.5 s, idle connections that never send a
// ClientHello are closed after about 1.5 s, not before and not much later.
TEST(HostileSite, HandshakeTimeoutIsConfigurable) {
  transport::ServerLimits limits;
  limits.handshake_timeout = 1500ms;
  TlsCoordinator t(testing::small_config("idle-fast", 1, 1), 1, limits);
  ASSERT_TRUE(t.c);
  std::vector<int> fds;
  const auto opened = Clock::now();
  for (int i = 0; i < 16; ++i) fds.push_back(connect_loopback(t.c->server->port()));
  for (int fd : fds) ASSERT_GE(fd, 0) << "connect failed";
  // Still open 0.75 s in: the timeout, not a refusal.
  EXPECT_FALSE(closed_by_peer(fds.front(), opened + 750ms));
  EXPECT_EQ(count_closed_by_peer(fds, opened + 4s), 16);
  const double secs = std::chrono::duration<double>(Clock::now() - opened).count();
  EXPECT_GT(secs, 1.0);
  EXPECT_LT(secs, 4.0);
  for (int fd : fds) ::close(fd);
}

// "no connection cap": with a cap of 8 connections, a flood of 40 idle connections gets at most
// 8 places (the rest are closed at once, before any TLS byte); the node that joined before the
// flood still trains its round, and once the handshake timeout has closed the flood's places
// new connections are admitted again.
TEST(HostileSite, ConnectionCapRefusesTheFloodAndANodeStillTrains) {
  transport::ServerLimits limits;
  limits.handshake_timeout = 2000ms;
  limits.caps.max_connections = 8;
  limits.caps.max_per_address = 0;
  ExperimentConfig cfg = testing::small_config("capped", 1, 1);
  TlsCoordinator t(cfg, 1, limits);
  ASSERT_TRUE(t.c);
  ASSERT_TRUE(t.c->service->start().ok());
  auto node0 = t.client(0);
  ASSERT_TRUE(node0->join().ok());
  const size_t held_by_node = t.c->server->open_connections();
  ASSERT_GE(held_by_node, 1u);
  ASSERT_LT(held_by_node, 8u);

  std::vector<int> flood;
  const auto opened = Clock::now();
  for (int i = 0; i < 40; ++i) {
    const int fd = connect_loopback(t.c->server->port());
    ASSERT_GE(fd, 0) << "connect failed: " << std::strerror(errno);  // the kernel accepts
    flood.push_back(fd);
  }
  // Refused connections are closed within moments; the admitted ones wait for the 2 s timeout.
  const int closed_at_once = count_closed_by_peer(flood, opened + 1s);
  EXPECT_EQ(closed_at_once, 40 - static_cast<int>(8 - held_by_node));
  EXPECT_EQ(t.c->server->refused_connections(), static_cast<uint64_t>(closed_at_once));
  EXPECT_LE(t.c->server->open_connections(), 8u);

  // The node that joined before the flood trains its round over its open connection.
  std::vector<Site> sites;
  sites.push_back({std::move(node0), {}, {}});
  for (int attempt = 0; attempt < 10 && sites[0].task.kind() != pb::Task::TRAIN; ++attempt) {
    auto task = sites[0].client->next_task(0, 5000);
    ASSERT_TRUE(task.ok()) << task.status().to_string();
    sites[0].task = *task;
  }
  ASSERT_EQ(sites[0].task.kind(), pb::Task::TRAIN);
  auto theta =
      sites[0].client->pull_params(sites[0].task.round(), sites[0].task.params_fingerprint());
  ASSERT_TRUE(theta.ok()) << theta.status().to_string();
  sites[0].theta = std::move(*theta);
  const uint64_t allowed = 10ull * 8 * 256;
  ASSERT_TRUE(sites[0]
                  .client
                  ->push_update(sites[0].header(allowed, t.layout_fp),
                                testing::fake_delta(sites[0].theta.values, 0))
                  .ok());
  auto fin = t.c->service->wait_until_finished(Clock::now() + 20s);
  ASSERT_TRUE(fin.ok()) << fin.status().to_string();
  EXPECT_EQ(*fin, ExperimentState::kFinished);

  // The flood's places are freed by the handshake timeout: then new connections are admitted
  // again (held open, not closed at accept).
  EXPECT_EQ(count_closed_by_peer(flood, opened + 6s), 40);
  // gRPC may shut a socket down (the peer sees it closed) a moment before it closes the
  // descriptor, and the cap counts descriptors gRPC still holds: wait for the server's own count
  // to drop below the cap (on a busy machine this lags the FIN).
  const auto released_by = Clock::now() + 5s;
  while (t.c->server->open_connections() >= 8 && Clock::now() < released_by)
    std::this_thread::sleep_for(20ms);
  ASSERT_LT(t.c->server->open_connections(), 8u) << "the flood's places were never released";
  const uint64_t refused = t.c->server->refused_connections();
  const int late = connect_loopback(t.c->server->port());
  ASSERT_GE(late, 0);
  EXPECT_FALSE(closed_by_peer(late, Clock::now() + 500ms));
  EXPECT_EQ(t.c->server->refused_connections(), refused);
  ::close(late);
  for (int fd : flood) ::close(fd);
}

// The per-address cap: 4 places per client address, whatever the total cap leaves.
TEST(HostileSite, PerAddressCapLimitsOneAddressOnly) {
  transport::ServerLimits limits;
  limits.handshake_timeout = 3000ms;
  limits.caps.max_connections = 64;
  limits.caps.max_per_address = 4;
  TlsCoordinator t(testing::small_config("per-address", 1, 1), 1, limits);
  ASSERT_TRUE(t.c);
  std::vector<int> from2, from3;
  for (int i = 0; i < 10; ++i) from2.push_back(connect_loopback(t.c->server->port(), "127.0.0.2"));
  for (int i = 0; i < 3; ++i) from3.push_back(connect_loopback(t.c->server->port(), "127.0.0.3"));
  for (int fd : from2) ASSERT_GE(fd, 0) << "connect failed: " << std::strerror(errno);
  for (int fd : from3) ASSERT_GE(fd, 0) << "connect failed: " << std::strerror(errno);
  const auto soon = Clock::now() + 1s;
  EXPECT_EQ(count_closed_by_peer(from2, soon), 6);  // the 5th to 10th
  EXPECT_EQ(count_closed_by_peer(from3, soon), 0);
  EXPECT_EQ(t.c->server->refused_connections(), 6u);
  EXPECT_EQ(t.c->server->open_connections(), 7u);
  // A node (127.0.0.1) is not held back by the other addresses' flood.
  auto joined = t.client(0)->join();
  EXPECT_TRUE(joined.ok()) << joined.status().to_string();
  for (int fd : from2) ::close(fd);
  for (int fd : from3) ::close(fd);
}

TEST(ConnectionTable, EvictsTheLongestIdleOfTheAddressThenOfAll) {
  transport::ConnectionTable table(
      {.max_connections = 3, .max_per_address = 2, .evict_idle = true});
  std::vector<std::string> closed;
  auto closer = [&closed](std::string name) { return [&closed, name] { closed.push_back(name); }; };
  auto run = [](transport::ConnectionTable::Admission a) {
    for (auto& c : a.evicted) c();
    return a.id;
  };
  const auto a1 = run(table.admit("A", closer("a1")));
  const auto a2 = run(table.admit("A", closer("a2")));
  ASSERT_NE(a1, 0u);
  ASSERT_NE(a2, 0u);
  table.set_idle(a1, false);  // a1 busy: a2 is A's only idle connection
  const auto a3 = run(table.admit("A", closer("a3")));
  EXPECT_NE(a3, 0u);
  EXPECT_EQ(closed, std::vector<std::string>{"a2"});
  EXPECT_EQ(table.count("A"), 2u);
  // Total cap 3: B takes a place; the next B evicts the longest idle anywhere (a3, since a1 is
  // busy and b1 became idle later).
  const auto b1 = run(table.admit("B", closer("b1")));
  EXPECT_NE(b1, 0u);
  const auto b2 = run(table.admit("B", closer("b2")));
  EXPECT_NE(b2, 0u);
  EXPECT_EQ(closed, (std::vector<std::string>{"a2", "a3"}));
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.evictions(), 2u);
  // Everyone busy: refused, nothing evicted.
  table.set_idle(b1, false);
  table.set_idle(b2, false);
  EXPECT_EQ(run(table.admit("C", closer("c1"))), 0u);
  EXPECT_EQ(closed.size(), 2u);
  EXPECT_EQ(table.refusals(), 1u);
  // A connection that closes frees its place; removing an evicted id changes nothing.
  table.remove(a2);
  EXPECT_EQ(table.size(), 3u);
  table.remove(b1);
  EXPECT_NE(run(table.admit("C", closer("c2"))), 0u);
  EXPECT_EQ(table.count("B"), 1u);
  EXPECT_EQ(table.count("C"), 1u);
}

TEST(ConnectionTable, WithoutEvictionOverACapIsRefused) {
  transport::ConnectionTable table(
      {.max_connections = 2, .max_per_address = 0, .evict_idle = false});
  EXPECT_NE(table.admit("A", nullptr).id, 0u);
  EXPECT_NE(table.admit("A", nullptr).id, 0u);  // no per-address cap
  auto third = table.admit("B", nullptr);
  EXPECT_EQ(third.id, 0u);
  EXPECT_TRUE(third.evicted.empty());
  EXPECT_EQ(table.refusals(), 1u);
}

TEST(RateLimiter, BurstThenRefillPerKeyWithABoundedTable) {
  RateLimiter limiter({.burst = 3, .per_second = 1}, /*max_keys=*/2);
  const auto t0 = RateLimiter::Clock::now();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.allow("a", t0));
  EXPECT_FALSE(limiter.allow("a", t0));
  EXPECT_FALSE(limiter.allow("a", t0 + 500ms));
  EXPECT_TRUE(limiter.allow("a", t0 + 1000ms));  // one call refilled
  EXPECT_FALSE(limiter.allow("a", t0 + 1000ms));
  EXPECT_TRUE(limiter.allow("b", t0 + 1000ms));  // another key has its own bucket
  // A third key while a and b are busy: refused rather than growing the table...
  EXPECT_FALSE(limiter.allow("c", t0 + 1000ms));
  // ...and admitted once an idle key (refilled completely) can be forgotten.
  EXPECT_TRUE(limiter.allow("c", t0 + 10s));
}

}  // namespace
}  // namespace atl::coordinator

namespace atl::coordinator {
namespace {

// A node's θ and update streams travel on a connection of their own: on one shared connection a
// heartbeat waited behind θ in the socket buffer, and at 100 kbit/s the node was marked lost
// mid-download every round (0 rounds in 600 s). Counted at the server: the node's calls before
// its first pull use one connection, its pull opens a second.
TEST(HostileSite, ANodesStreamsUseAConnectionApartFromItsCalls) {
  ExperimentConfig cfg = testing::small_config("apart", 1, 1);
  TlsCoordinator t(cfg, 1);
  ASSERT_TRUE(t.c);
  ASSERT_TRUE(t.c->service->start().ok());
  std::vector<Site> sites = train_round(t, {0});  // join, poll, pull θ
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_FALSE(sites[0].theta.values.empty());
  EXPECT_EQ(t.c->server->open_connections(), 2u);
}

}  // namespace
}  // namespace atl::coordinator
