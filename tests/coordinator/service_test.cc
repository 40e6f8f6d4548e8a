// Coordinator service end to end: a real gRPC server on 127.0.0.1 (ephemeral port), a real
// RocksDB store in a temp dir, in-process node clients with a deterministic fake trainer.
#include <gtest/gtest.h>

#include <future>

#include "algorithms/diloco/outer.h"
#include "service_harness.h"
#include "transport/channel.h"
#include "transport/tensor_stream.h"

namespace atl::coordinator {
namespace {

using namespace std::chrono_literals;
using testing::Coordinator;
using testing::EventLog;
using testing::FakeNode;
using testing_util::TempDir;
namespace pb = atoll_pb::v1;

constexpr size_t kNumel = 300000;  // 1.2 MB of fp32: θ and Δ travel as two chunks

ServiceOptions with_events(EventLog& log) {
  ServiceOptions o;
  o.on_event = log.callback();
  return o;
}
ServiceOptions capped_wait(uint32_t ms) {
  ServiceOptions o;
  o.max_wait_ms = ms;
  return o;
}

struct RunResult {
  std::vector<std::string> round_fingerprints;  // θ_{r+1} per committed round
  std::string final_fingerprint;
};

RunResult run_three_nodes(const std::string& dir, const std::string& name, uint32_t rounds) {
  const ExperimentConfig cfg = testing::small_config(name, rounds, 3);
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  EventLog log;
  auto c = Coordinator::start(dir, cfg, init, with_events(log));
  if (!c) return {};
  EXPECT_TRUE(c->service->start().ok());
  const auto until = std::chrono::steady_clock::now() + 20s;
  std::vector<FakeNode> nodes(3);
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < 3; ++i) {
    nodes[i].options = testing::insecure_client(c->address(), "node-" + std::to_string(i));
    nodes[i].index = i;
    nodes[i].layout_fp = algorithms::layout_fingerprint(init.layout());
    threads.emplace_back([&n = nodes[i], until] { n.run(until); });
  }
  auto fin = c->service->wait_until_finished(until);
  for (auto& t : threads) t.join();
  EXPECT_TRUE(fin.ok()) << fin.status().to_string();
  EXPECT_EQ(c->service->state(), ExperimentState::kFinished);
  EXPECT_EQ(c->service->current_round(), rounds);
  for (const auto& n : nodes) {
    EXPECT_TRUE(n.stopped);
    EXPECT_EQ(n.rounds_done.size(), rounds);
    EXPECT_TRUE(n.errors.empty()) << n.errors.front();
  }
  RunResult out;
  for (uint32_t r = 0; r < rounds; ++r) {
    auto rec = c->store->load_round(name, r);
    EXPECT_TRUE(rec.ok()) << rec.status().to_string();
    if (!rec.ok()) continue;
    out.round_fingerprints.push_back(rec->params_fingerprint);
    EXPECT_EQ(rec->participants.size(), 3u);
    EXPECT_EQ(rec->tokens, 6000u);
    for (const auto& p : rec->participants) {
      EXPECT_TRUE(p.pushed);
      EXPECT_EQ(p.bytes_up, kNumel * 4);
      EXPECT_EQ(p.bytes_down, kNumel * 4);
    }
  }
  // Progress events: one commit per round with each node's loss. They leave the engine on its
  // own thread, in order: once the finish event is in, every commit event is.
  EXPECT_TRUE(testing_util::eventually(
      [&] { return !log.of(Event::Kind::kFinished).empty(); }, 5s));
  const auto commits = log.of(Event::Kind::kRoundCommitted);
  EXPECT_EQ(commits.size(), rounds);
  if (!commits.empty()) {
    EXPECT_EQ(commits[0].record->participants.size(), 3u);
    EXPECT_DOUBLE_EQ(commits[0].record->participants[2].loss, testing::fake_loss(2, 0));
  }
  // Each commit event carries the θ it committed (a listener evaluates it without the store).
  for (const auto& e : commits) {
    EXPECT_TRUE(e.params != nullptr) << "round " << e.round;
    if (e.params) {
      EXPECT_EQ(algorithms::params_fingerprint(*e.params), e.record->params_fingerprint)
          << "round " << e.round;
    }
  }
  EXPECT_EQ(log.of(Event::Kind::kFinished).size(), 1u);
  auto metrics = c->store->list_metrics(name);
  EXPECT_TRUE(metrics.ok());
  EXPECT_EQ(metrics->size(), 3u * rounds);
  out.final_fingerprint = c->service->params_fingerprint();
  EXPECT_EQ(out.final_fingerprint, testing::expected_fingerprint(init, 3, rounds, cfg));
  return out;
}

TEST(CoordinatorService, ThreeNodesCompleteRoundsAndTwoRunsAgreeBitwise) {
  TempDir a, b;
  const RunResult ra = run_three_nodes(a.path(), "det", 4);
  const RunResult rb = run_three_nodes(b.path(), "det", 4);
  ASSERT_EQ(ra.round_fingerprints.size(), 4u);
  EXPECT_EQ(ra.round_fingerprints, rb.round_fingerprints);
  EXPECT_EQ(ra.final_fingerprint, rb.final_fingerprint);
  EXPECT_NE(ra.round_fingerprints[0], ra.round_fingerprints[1]);
}

// Three joined nodes, all holding a TRAIN task for round 0.
struct OpenRound {
  std::unique_ptr<Coordinator> c;
  std::vector<std::unique_ptr<node::CoordinatorClient>> clients;
  std::string theta_fp, layout_fp;
  std::vector<float> theta;
};

OpenRound open_round(const std::string& dir, ExperimentConfig cfg, size_t numel,
                     ServiceOptions options = {}) {
  OpenRound o;
  const algorithms::ParamSet init = testing_util::toy_params(numel);
  o.c = Coordinator::start(dir, cfg, init, std::move(options));
  EXPECT_TRUE(o.c);
  EXPECT_TRUE(o.c->service->start().ok());
  o.layout_fp = algorithms::layout_fingerprint(init.layout());
  for (int i = 0; i < 3; ++i) {
    o.clients.push_back(std::make_unique<node::CoordinatorClient>(
        testing::insecure_client(o.c->address(), "node-" + std::to_string(i))));
    auto j = o.clients.back()->join();
    EXPECT_TRUE(j.ok()) << j.status().to_string();
  }
  std::vector<std::future<StatusOr<pb::Task>>> tasks;
  for (auto& cl : o.clients)
    tasks.push_back(std::async(std::launch::async, [&cl] { return cl->next_task(0, 5000); }));
  for (auto& t : tasks) {
    auto task = t.get();
    EXPECT_TRUE(task.ok()) << task.status().to_string();
    if (task.ok()) {
      EXPECT_EQ(task->kind(), pb::Task::TRAIN) << task->reason();
    }
  }
  auto p = o.clients[0]->pull_params(0);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (p.ok()) {
    o.theta_fp = p->fingerprint;
    o.theta = p->values;
  }
  return o;
}

TEST(CoordinatorService, RejectsStaleReplayWrongShapeNanAndWrongBaseLeavingThetaUntouched) {
  TempDir dir;
  EventLog log;
  auto cfg = testing::small_config("reject", 3, 3);
  OpenRound o = open_round(dir.path(), cfg, 1000, with_events(log));
  ASSERT_FALSE(o.theta.empty());
  auto& a = *o.clients[0];
  const std::vector<float> good = testing::fake_delta(o.theta, 0);
  node::UpdateHeader h{0, 1000, 2.0, o.theta_fp, o.layout_fp};
  auto code = [](const StatusOr<uint64_t>& s) { return s.status().code(); };

  // Wrong shape: one element short, and a different layout.
  std::vector<float> short_delta(good.begin(), good.end() - 1);
  auto r = a.push_update(h, short_delta);
  EXPECT_EQ(code(r), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("wrong shape"), std::string::npos) << r.status().message();
  node::UpdateHeader bad_layout = h;
  bad_layout.layout_fingerprint = std::string(64, 'a');
  EXPECT_EQ(code(a.push_update(bad_layout, good)), StatusCode::kInvalidArgument);
  // NaN.
  std::vector<float> nan_delta = good;
  nan_delta[517] = std::nanf("");
  r = a.push_update(h, nan_delta);
  EXPECT_EQ(code(r), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("element 517 is nan"), std::string::npos)
      << r.status().message();
  // Wrong base θ.
  node::UpdateHeader wrong_base = h;
  wrong_base.base_fingerprint = std::string(64, 'b');
  r = a.push_update(wrong_base, good);
  EXPECT_EQ(code(r), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("wrong base"), std::string::npos) << r.status().message();
  // Stale (future) round; zero tokens.
  node::UpdateHeader future = h;
  future.round = 7;
  r = a.push_update(future, good);
  EXPECT_EQ(code(r), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("stale round"), std::string::npos) << r.status().message();
  node::UpdateHeader no_tokens = h;
  no_tokens.tokens = 0;
  EXPECT_EQ(code(a.push_update(no_tokens, good)), StatusCode::kInvalidArgument);
  // A node that joined after the round started is not a participant.
  node::CoordinatorClient late(testing::insecure_client(o.c->address(), "node-9"));
  ASSERT_TRUE(late.join().ok());
  r = late.push_update(h, good);
  EXPECT_EQ(code(r), StatusCode::kFailedPrecondition);
  // Unknown node (never joined).
  node::CoordinatorClient stranger(testing::insecure_client(o.c->address(), "stranger"));
  EXPECT_EQ(stranger.push_update(h, good).status().code(), StatusCode::kNotFound);

  // None of that moved θ or the round.
  EXPECT_EQ(o.c->service->params_fingerprint(), o.theta_fp);
  EXPECT_EQ(o.c->service->current_round(), 0u);
  // Events leave the engine on its own thread: wait for the seven rejections to arrive.
  EXPECT_TRUE(testing_util::eventually(
      [&] { return log.of(Event::Kind::kUpdateRejected).size() >= 7u; }, 5s))
      << log.of(Event::Kind::kUpdateRejected).size() << " rejection events";

  // A valid update is accepted once; the replay is refused.
  auto ok = a.push_update(h, good);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(*ok, 1000u * 4);
  r = a.push_update(h, good);
  EXPECT_EQ(code(r), StatusCode::kAlreadyExists);
  EXPECT_EQ(o.c->service->params_fingerprint(), o.theta_fp);

  // The other two push; the round commits to exactly what the math says.
  for (uint32_t i = 1; i < 3; ++i) {
    node::UpdateHeader hi{0, testing::fake_tokens(i), 2.0, o.theta_fp, o.layout_fp};
    ASSERT_TRUE(o.clients[i]->push_update(hi, testing::fake_delta(o.theta, i)).ok());
  }
  ASSERT_TRUE(o.c->service->wait_for_round(1, std::chrono::steady_clock::now() + 5s));
  // Node 0 pushed with 1000 tokens = fake_tokens(0): the expected θ is the 3-node formula.
  EXPECT_EQ(o.c->service->params_fingerprint(),
            testing::expected_fingerprint(testing_util::toy_params(1000), 3, 1, cfg));
  // Round 0 is closed: pushing it again is stale, and θ stays.
  const std::string after = o.c->service->params_fingerprint();
  r = a.push_update(h, good);
  EXPECT_EQ(code(r), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("stale round"), std::string::npos);
  EXPECT_EQ(o.c->service->params_fingerprint(), after);
  // Pulling a stale round is refused too.
  EXPECT_EQ(a.pull_params(0).status().code(), StatusCode::kFailedPrecondition);
}

// The PushUpdateResponse tells the node how far the round is ("1 of 3 updates"), through a raw
// stub because the client keeps only the status.
TEST(CoordinatorService, AcceptedPushAnswersWithTheRoundsProgress) {
  TempDir dir;
  auto cfg = testing::small_config("progress", 3, 3);
  OpenRound o = open_round(dir.path(), cfg, 1000);
  ASSERT_FALSE(o.theta.empty());
  auto stub = pb::Coordinator::NewStub(
      transport::create_channel(o.c->address(), transport::insecure_client_credentials()));
  pb::TensorHeader h;
  h.set_experiment_id("progress");
  h.set_round(0);
  h.set_codec("none");
  h.set_numel(o.theta.size());
  h.set_layout_fingerprint(o.layout_fp);
  h.set_params_fingerprint(o.theta_fp);
  h.set_tokens(1000);
  h.set_train_loss(2.0);
  grpc::ClientContext ctx;
  ctx.AddMetadata("atoll-node", "node-1");
  pb::PushUpdateResponse resp;
  auto writer = stub->PushUpdate(&ctx, &resp);
  const std::string payload = transport::floats_to_bytes(testing::fake_delta(o.theta, 1));
  ASSERT_TRUE(transport::for_each_chunk(h, payload, [&](const pb::TensorChunk& c) -> Status {
                return writer->Write(c) ? Status::Ok() : Unavailable("stream closed");
              }).ok());
  writer->WritesDone();
  const grpc::Status gs = writer->Finish();
  ASSERT_TRUE(gs.ok()) << gs.error_message();
  EXPECT_TRUE(resp.accepted());
  EXPECT_EQ(resp.message(), "accepted update for round 0 (1 of 3 updates)");
}

TEST(CoordinatorService, SilentParticipantDoesNotHoldTheRoundPastItsDeadline) {
  TempDir dir;
  auto cfg = testing::small_config("deadline", 3, 2);
  cfg.diloco.round_deadline_s = 1.0;
  cfg.diloco.heartbeat_interval_s = 1.0;  // lost only after 4 s: the deadline decides
  EventLog log;
  OpenRound o = open_round(dir.path(), cfg, 1000, with_events(log));
  ASSERT_FALSE(o.theta.empty());
  const auto started = std::chrono::steady_clock::now();
  for (uint32_t i = 0; i < 2; ++i) {
    node::UpdateHeader hi{0, testing::fake_tokens(i), 1.0, o.theta_fp, o.layout_fp};
    ASSERT_TRUE(o.clients[i]->push_update(hi, testing::fake_delta(o.theta, i)).ok());
  }
  // node-2 never pushes. Quorum (2) is met; the round must close at its 1 s deadline.
  EXPECT_EQ(o.c->service->current_round(), 0u);
  ASSERT_TRUE(o.c->service->wait_for_round(1, started + 4s));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(waited, 2.5);
  auto rec = o.c->store->load_round("deadline", 0);
  ASSERT_TRUE(rec.ok());
  ASSERT_EQ(rec->participants.size(), 3u);
  EXPECT_TRUE(rec->participants[0].pushed);
  EXPECT_TRUE(rec->participants[1].pushed);
  EXPECT_FALSE(rec->participants[2].pushed);
  EXPECT_GE(rec->duration_s, 0.9);
  EXPECT_EQ(rec->tokens, testing::fake_tokens(0) + testing::fake_tokens(1));
  // Its late update is stale.
  node::UpdateHeader late{0, 3000, 1.0, o.theta_fp, o.layout_fp};
  auto r = o.clients[2]->push_update(late, testing::fake_delta(o.theta, 2));
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(o.c->service->params_fingerprint(), rec->params_fingerprint);
}

TEST(CoordinatorService, LostParticipantClosesTheRoundEarlyOnceQuorumIsIn) {
  TempDir dir;
  auto cfg = testing::small_config("lost", 3, 2);
  cfg.diloco.round_deadline_s = 30;  // far away: only lost detection can close the round
  cfg.diloco.heartbeat_interval_s = 0.1;
  cfg.diloco.lost_after_heartbeats = 3;
  EventLog log;
  OpenRound o = open_round(dir.path(), cfg, 500, with_events(log));
  ASSERT_FALSE(o.theta.empty());
  for (uint32_t i = 0; i < 2; ++i) {
    node::UpdateHeader hi{0, testing::fake_tokens(i), 1.0, o.theta_fp, o.layout_fp};
    ASSERT_TRUE(o.clients[i]->push_update(hi, testing::fake_delta(o.theta, i)).ok());
  }
  // node-0 and node-1 wait in NextTask (a polling node is alive); node-2 is silent (no
  // heartbeat, no poll): lost after 0.3 s, then the round closes and round 1 starts without it.
  std::vector<std::future<StatusOr<pb::Task>>> polls;
  for (int i = 0; i < 2; ++i)
    polls.push_back(
        std::async(std::launch::async, [&cl = o.clients[i]] { return cl->next_task(0, 5000); }));
  ASSERT_TRUE(o.c->service->wait_for_round(1, std::chrono::steady_clock::now() + 5s));
  for (auto& p : polls) {
    auto t = p.get();
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->kind(), pb::Task::TRAIN);
    EXPECT_EQ(t->round(), 1u);
  }
  // Events leave the engine on its own thread: the round can be seen before its events are.
  EXPECT_TRUE(testing_util::eventually([&] { return !log.of(Event::Kind::kNodeLost).empty(); },
                                       5s));
  const auto lost = log.of(Event::Kind::kNodeLost);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].node_id, "node-2");
  auto rec = o.c->store->load_round("lost", 0);
  ASSERT_TRUE(rec.ok());
  EXPECT_FALSE(rec->participants[2].pushed);
  EXPECT_LT(rec->duration_s, 5.0);
  auto hb = o.clients[2]->heartbeat(0, 0, 0, 0);
  ASSERT_TRUE(hb.ok()) << hb.status().to_string();
  EXPECT_FALSE(*hb);  // the coordinator tells it to join again
  hb = o.clients[0]->heartbeat(1, 7, 3.25, 1500.0);
  ASSERT_TRUE(hb.ok());
  EXPECT_TRUE(*hb);
  const auto snap = o.c->service->nodes();
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_EQ(snap[0].node_id, "node-0");
  EXPECT_EQ(snap[0].status, "active");
  EXPECT_EQ(snap[0].inner_step, 7u);
  EXPECT_DOUBLE_EQ(snap[0].loss, 3.25);
  EXPECT_EQ(snap[2].status, "lost");
}

TEST(CoordinatorService, RestartResumesAtTheSameRoundAndFingerprintAndFinishesBitwise) {
  TempDir dir, ref_dir;
  const uint32_t rounds = 4;
  const ExperimentConfig cfg = testing::small_config("resume", rounds, 3);
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  std::string listen, fp_at_2;
  uint64_t round_at_stop = 0;
  {
    auto c = Coordinator::start(dir.path(), cfg, init);
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->service->start().ok());
    listen = c->address();
    const auto until = std::chrono::steady_clock::now() + 20s;
    std::vector<FakeNode> nodes(3);
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < 3; ++i) {
      nodes[i].options = testing::insecure_client(listen, "node-" + std::to_string(i));
      nodes[i].index = i;
      nodes[i].layout_fp = algorithms::layout_fingerprint(init.layout());
    }
    // Nodes run against this coordinator, then keep retrying against the restarted one.
    for (uint32_t i = 0; i < 3; ++i) threads.emplace_back([&n = nodes[i], until] { n.run(until); });
    ASSERT_TRUE(c->service->wait_for_round(2, until));
    c.reset();  // "crash": nothing after round 2's commit may survive except committed state
    {
      auto s = Store::open(dir.path());
      ASSERT_TRUE(s.ok());
      auto st = (*s)->load_state("resume");
      ASSERT_TRUE(st.ok()) << st.status().to_string();
      round_at_stop = st->experiment.current_round;
      fp_at_2 = st->experiment.params_fingerprint;
    }
    ASSERT_GE(round_at_stop, 2u);
    ASSERT_LT(round_at_stop, rounds);
    auto again = Coordinator::start(dir.path(), cfg, init, {}, nullptr, listen);
    ASSERT_TRUE(again);
    EXPECT_EQ(again->service->current_round(), round_at_stop);
    EXPECT_EQ(again->service->params_fingerprint(), fp_at_2);
    EXPECT_EQ(again->service->state(), ExperimentState::kRunning);
    auto fin = again->service->wait_until_finished(until);
    ASSERT_TRUE(fin.ok()) << fin.status().to_string();
    for (auto& t : threads) t.join();
    // Same result as if nothing had happened.
    EXPECT_EQ(again->service->params_fingerprint(),
              testing::expected_fingerprint(init, 3, rounds, cfg));
  }
}

TEST(CoordinatorService, LongPollIsCappedAndExplainsWhy) {
  TempDir dir;
  auto cfg = testing::small_config("poll", 2, 2);
  auto c = Coordinator::start(dir.path(), cfg, testing_util::toy_params(100), capped_wait(200));
  ASSERT_TRUE(c);
  node::CoordinatorClient a(testing::insecure_client(c->address(), "node-0"));
  ASSERT_TRUE(a.join().ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto t = a.next_task(0, 60000);  // asks for a minute, the coordinator caps it at 200 ms
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(t->kind(), pb::Task::WAIT);
  EXPECT_EQ(t->reason(), "experiment not started yet");
  ASSERT_TRUE(c->service->start().ok());
  t = a.next_task(0, 100);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->reason(), "waiting for diloco.min_nodes = 2 ready nodes");
  // Calls without identity are refused in insecure mode.
  auto anon_opts = testing::insecure_client(c->address(), "");
  node::CoordinatorClient anon(anon_opts);
  EXPECT_EQ(anon.next_task(0, 10).status().code(), StatusCode::kUnauthenticated);
}

TEST(CoordinatorService, UnreachableCoordinatorIsOneClearLine) {
  // Port 1 on loopback: nothing listens there.
  auto o = testing::insecure_client("127.0.0.1:1", "node-0");
  o.rpc_timeout = 2s;
  node::CoordinatorClient c(o);
  auto j = c.join();
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(j.status().message().find("127.0.0.1:1"), std::string::npos) << j.status().message();
}

}  // namespace
}  // namespace atl::coordinator
