// θ pulls as deltas against the version a node holds (exact by default, lossy bf16 opt-in), and
// the coordinator side of Streaming DiLoCo (fragment tasks, fragment updates, per-fragment outer
// step). One in-process coordinator on a real RocksDB store and gRPC server; the node is driven
// by hand so each pull can name any version.
#include <gtest/gtest.h>

#include <cstring>

#include "algorithms/compress/exact_delta.h"
#include "service_harness.h"

namespace atl::coordinator {
namespace {

using namespace std::chrono_literals;
using testing::Coordinator;
using testing_util::TempDir;
namespace pb = atoll_pb::v1;

constexpr size_t kNumel = 100000;

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Δ that touches one element in 1000: an outer step then changes only those elements.
std::vector<float> sparse_delta(size_t n, uint64_t round) {
  std::vector<float> d(n, 0.0f);
  for (size_t j = round % 1000; j < n; j += 1000) d[j] = 0.01f * static_cast<float>(round + 1);
  return d;
}

// A hand-driven node: waits for its TRAIN task of `round`.
StatusOr<pb::Task> train_task(node::CoordinatorClient& c, uint64_t round) {
  for (int i = 0; i < 50; ++i) {
    ATOLL_ASSIGN_OR_RETURN(pb::Task t, c.next_task(round, 2000));
    if (t.kind() == pb::Task::TRAIN && t.round() == round) return t;
    if (t.kind() == pb::Task::STOP) return FailedPrecondition("stopped: " + t.reason());
  }
  return Status(StatusCode::kDeadlineExceeded, "no TRAIN task for round " + std::to_string(round));
}

struct PullFixture {
  TempDir dir;
  ExperimentConfig cfg;
  algorithms::ParamSet init = testing_util::toy_params(kNumel);
  std::unique_ptr<Coordinator> coord;
  std::unique_ptr<node::CoordinatorClient> client;
  std::string layout_fp = algorithms::layout_fingerprint(init.layout());
  std::vector<node::PulledParams> versions;  // θ_r as pulled in round r (full pulls)

  explicit PullFixture(ExperimentConfig c) : cfg(std::move(c)) {
    coord = Coordinator::start(dir.path(), cfg, init);
    EXPECT_TRUE(coord && coord->service->start().ok());
    client = std::make_unique<node::CoordinatorClient>(
        testing::insecure_client(coord->address(), "node-0"));
    EXPECT_TRUE(client->join().ok());
  }
  // Runs `rounds` rounds with sparse Δ, pulling each θ_r in full (no held version; as bf16 with
  // pull_codec = "bf16").
  void run_rounds(uint64_t rounds) {
    for (uint64_t r = 0; r < rounds; ++r) {
      auto t = train_task(*client, r);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      auto p = client->pull_params(r, t->params_fingerprint());
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      EXPECT_EQ(p->codec, cfg.diloco.pull_codec == "bf16" ? "bf16" : "none");
      node::UpdateHeader h{r, 100, 1.0, p->fingerprint, layout_fp};
      ASSERT_TRUE(client->push_update(h, sparse_delta(kNumel, r)).ok());
      versions.push_back(std::move(*p));
      ASSERT_TRUE(coord->service->wait_for_round(r + 1, std::chrono::steady_clock::now() + 10s));
    }
  }
  node::HeldParams held(uint64_t v) const {
    return {versions[v].values, versions[v].fingerprint, true};
  }
};

ExperimentConfig pull_config(const std::string& name) {
  ExperimentConfig c = testing::small_config(name, 10, 1);
  c.diloco.keep_params = 3;
  return c;
}

TEST(DeltaPulls, NodeBehindGetsAnExactDeltaAndEndsWithThetaBitwise) {
  PullFixture f(pull_config("delta"));
  f.run_rounds(3);  // current round 3; the store keeps θ_1, θ_2, θ_3
  const std::vector<float> theta3 = f.coord->service->params();
  for (uint64_t v : {2u, 1u}) {  // one version behind, and a node that skipped θ_2
    const node::HeldParams held = f.held(v);
    auto p = f.client->pull_params(3, f.coord->service->params_fingerprint(), &held);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->codec, algorithms::compress::exact_delta::kName) << v;
    EXPECT_TRUE(p->exact);
    EXPECT_TRUE(bitwise_equal(p->values, theta3)) << v;
    EXPECT_EQ(p->fingerprint, f.coord->service->params_fingerprint());
    EXPECT_LT(p->bytes, kNumel * 4 / 20) << "0.1% of the elements changed per round";
  }
}

TEST(DeltaPulls, UnknownOrDroppedVersionsGetTheFullTheta) {
  PullFixture f(pull_config("full"));
  f.run_rounds(3);
  // θ_0 was dropped from the store (keep_params = 3); a made-up fingerprint is unknown.
  node::HeldParams dropped = f.held(0);
  node::HeldParams unknown = f.held(2);
  unknown.fingerprint = std::string(64, 'a');
  for (const node::HeldParams* h : {&dropped, &unknown}) {
    auto p = f.client->pull_params(3, "", h);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->codec, "none");
    EXPECT_EQ(p->bytes, kNumel * 4);
    EXPECT_TRUE(bitwise_equal(p->values, f.coord->service->params()));
  }
}

TEST(DeltaPulls, DenseChangesGetTheFullTheta) {
  // After a dense outer step every element changes: the exact delta is larger than θ.
  PullFixture f(pull_config("dense"));
  auto t = train_task(*f.client, 0);
  ASSERT_TRUE(t.ok());
  auto p0 = f.client->pull_params(0, t->params_fingerprint());
  ASSERT_TRUE(p0.ok());
  node::UpdateHeader h{0, 100, 1.0, p0->fingerprint, f.layout_fp};
  ASSERT_TRUE(f.client->push_update(h, testing::fake_delta(p0->values, 0)).ok());
  ASSERT_TRUE(f.coord->service->wait_for_round(1, std::chrono::steady_clock::now() + 10s));
  const node::HeldParams held{p0->values, p0->fingerprint, true};
  auto p1 = f.client->pull_params(1, "", &held);
  ASSERT_TRUE(p1.ok()) << p1.status().to_string();
  EXPECT_EQ(p1->codec, "none");
  EXPECT_EQ(p1->bytes, kNumel * 4);
}

TEST(DeltaPulls, RoundRecordsCountDeltaBytesDown) {
  PullFixture f(pull_config("bytes"));
  f.run_rounds(1);
  auto t = train_task(*f.client, 1);
  ASSERT_TRUE(t.ok());
  const node::HeldParams held = f.held(0);
  auto p = f.client->pull_params(1, t->params_fingerprint(), &held);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->codec, algorithms::compress::exact_delta::kName);
  node::UpdateHeader h{1, 100, 1.0, p->fingerprint, f.layout_fp};
  ASSERT_TRUE(f.client->push_update(h, sparse_delta(kNumel, 1)).ok());
  ASSERT_TRUE(f.coord->service->wait_for_round(2, std::chrono::steady_clock::now() + 10s));
  auto r0 = f.coord->store->load_round("bytes", 0);
  auto r1 = f.coord->store->load_round("bytes", 1);
  ASSERT_TRUE(r0.ok() && r1.ok());
  EXPECT_EQ(r0->bytes_down, kNumel * 4);
  EXPECT_EQ(r1->bytes_down, p->bytes);
  EXPECT_LT(r1->bytes_down, kNumel * 4 / 20);
}

TEST(DeltaPulls, DeltaAgainstCorruptHeldValuesIsRejected) {
  // The node's copy of θ_2 is damaged (one value): the delta decodes to something that is not
  // θ_3, and the fingerprint check says so instead of training on it.
  PullFixture f(pull_config("corrupt"));
  f.run_rounds(3);
  std::vector<float> damaged = f.versions[2].values;
  damaged[12345] += 1.0f;
  const node::HeldParams held{damaged, f.versions[2].fingerprint, true};
  auto p = f.client->pull_params(3, "", &held);
  EXPECT_EQ(p.status().code(), StatusCode::kDataLoss) << p.status().to_string();
  // A held copy of another size cannot take the delta either.
  std::vector<float> short_copy(kNumel - 1);
  const node::HeldParams wrong{short_copy, f.versions[2].fingerprint, true};
  EXPECT_FALSE(f.client->pull_params(3, "", &wrong).ok());
}

TEST(DeltaPulls, FullModeNeverSendsDeltas) {
  ExperimentConfig c = pull_config("fullmode");
  c.diloco.pull_codec = "full";
  PullFixture f(c);
  f.run_rounds(2);
  const node::HeldParams held = f.held(1);
  auto p = f.client->pull_params(2, "", &held);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->codec, "none");
}

TEST(DeltaPulls, LossySparseDeltaIsOptInAndKeepsTheToldVersion) {
  ExperimentConfig c = pull_config("lossy");
  c.diloco.pull_codec = "sparse-delta";
  PullFixture f(c);
  f.run_rounds(2);
  const node::HeldParams held = f.held(1);
  auto p = f.client->pull_params(2, f.coord->service->params_fingerprint(), &held);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->codec, "sparse-delta");
  EXPECT_FALSE(p->exact);
  // The node's base id is the version it was told, its values θ_2 at bf16 precision.
  EXPECT_EQ(p->fingerprint, f.coord->service->params_fingerprint());
  const std::vector<float> theta2 = f.coord->service->params();
  for (size_t j = 0; j < kNumel; ++j)
    ASSERT_NEAR(p->values[j], theta2[j], std::abs(theta2[j]) / 128 + 1e-30) << j;
  // An update computed from it names that version and is accepted.
  auto t = train_task(*f.client, 2);
  ASSERT_TRUE(t.ok());
  node::UpdateHeader h{2, 100, 1.0, p->fingerprint, f.layout_fp};
  EXPECT_TRUE(f.client->push_update(h, sparse_delta(kNumel, 2)).ok());
}

// ---- Streaming DiLoCo on the coordinator -------------------------------------------------------

TEST(StreamingRounds, EachRoundSyncsOneFragmentWithItsOwnOuterStep) {
  TempDir dir;
  ExperimentConfig cfg = testing::small_config("stream", 4, 1);
  cfg.diloco.streaming_fragments = 2;
  cfg.diloco.inner_steps = 10;
  cfg.diloco.overlap_steps = 1;
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  const std::string layout_fp = algorithms::layout_fingerprint(init.layout());
  auto coord = Coordinator::start(dir.path(), cfg, init);
  ASSERT_TRUE(coord && coord->service->start().ok());
  node::CoordinatorClient client(testing::insecure_client(coord->address(), "node-0"));
  auto joined = client.join();
  ASSERT_TRUE(joined.ok());
  EXPECT_EQ(joined->train().streaming_fragments(), 2u);
  EXPECT_EQ(joined->train().overlap_steps(), 1u);
  EXPECT_EQ(joined->train().total_inner_steps(), 4u * 5u);

  // What the coordinator must compute: Nesterov on the fragment's slices only.
  std::vector<float> theta = init.vec(), m(kNumel, 0.0f);
  const algorithms::OuterNesterov opt({0.7f, 0.9f});
  node::PulledParams held;
  for (uint64_t r = 0; r < 4; ++r) {
    auto t = train_task(client, r);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    const size_t off = (r % 2) * (kNumel / 2), n = kNumel / 2;
    EXPECT_EQ(t->fragment(), r % 2);
    EXPECT_EQ(t->fragment_offset(), off);
    EXPECT_EQ(t->fragment_numel(), n);
    EXPECT_EQ(t->inner_steps(), 5u);
    EXPECT_EQ(t->global_step(), r * 5);
    const node::HeldParams h{held.values, held.fingerprint, true};
    auto p = client.pull_params(r, t->params_fingerprint(), r == 0 ? nullptr : &h);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_TRUE(bitwise_equal(p->values, theta)) << r;
    if (r > 0) {
      // Only the previous round's fragment changed: a delta of about half of θ.
      EXPECT_EQ(p->codec, algorithms::compress::exact_delta::kName);
      EXPECT_LT(p->bytes, kNumel * 4 / 2 + 1024);
    }
    held = *p;
    std::vector<float> d(n);
    for (size_t j = 0; j < n; ++j) d[j] = 0.01f * theta[off + j] + 0.001f;
    node::UpdateHeader uh{r, 100, 1.0, held.fingerprint, layout_fp};
    // The whole θ, or another range, is the wrong shape in a streaming round.
    auto whole = client.push_update(uh, std::vector<float>(kNumel, 0.0f));
    EXPECT_EQ(whole.status().code(), StatusCode::kInvalidArgument) << whole.status().to_string();
    uh.fragment_offset = off == 0 ? n : 0;
    EXPECT_EQ(client.push_update(uh, d).status().code(), StatusCode::kInvalidArgument);
    uh.fragment_offset = off;
    auto ok = client.push_update(uh, d);
    ASSERT_TRUE(ok.ok()) << ok.status().to_string();
    EXPECT_EQ(*ok, n * 4);
    ASSERT_TRUE(coord->service->wait_for_round(r + 1, std::chrono::steady_clock::now() + 10s));
    ASSERT_TRUE(opt.step(std::span<float>(theta).subspan(off, n),
                         std::span<float>(m).subspan(off, n), d, r < 2)
                    .ok());
    EXPECT_TRUE(bitwise_equal(coord->service->params(), theta)) << r;
  }
  EXPECT_EQ(coord->service->state(), ExperimentState::kFinished);
}

TEST(StreamingRounds, FragmentCountMustFitTheModel) {
  TempDir dir;
  ExperimentConfig cfg = testing::small_config("toomany", 4, 1);
  cfg.diloco.streaming_fragments = 5;  // the toy layout has 2 tensors
  cfg.diloco.inner_steps = 10;
  auto s = Store::open(dir.path(), {});
  ASSERT_TRUE(s.ok());
  auto svc = CoordinatorService::open(**s, cfg, testing_util::toy_params(kNumel));
  EXPECT_EQ(svc.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(svc.status().message().find("diloco.streaming_fragments = 5"), std::string::npos)
      << svc.status().message();
}

TEST(DeltaPulls, Bf16PullsAreDenseHalfSizeAndWithinOneUlp) {
  ExperimentConfig c = pull_config("bf16pull");
  c.diloco.pull_codec = "bf16";
  PullFixture f(c);
  f.run_rounds(2);
  // Whatever the node holds (nothing, or θ_1), it gets the whole θ_2 as one bf16 message.
  const node::HeldParams held = f.held(1);
  for (const node::HeldParams* h : {static_cast<const node::HeldParams*>(nullptr), &held}) {
    auto p = f.client->pull_params(2, f.coord->service->params_fingerprint(), h);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->codec, "bf16");
    EXPECT_FALSE(p->exact);
    EXPECT_EQ(p->fingerprint, f.coord->service->params_fingerprint());
    // 2 bytes a value plus the codec header and chunk framing: about half of fp32.
    EXPECT_GT(p->bytes, kNumel * 2);
    EXPECT_LT(p->bytes, kNumel * 2 + 4096);
    const std::vector<float> theta2 = f.coord->service->params();
    ASSERT_EQ(p->values.size(), theta2.size());
    for (size_t j = 0; j < kNumel; ++j)
      ASSERT_NEAR(p->values[j], theta2[j], std::abs(theta2[j]) / 256 + 1e-30) << j;
  }
  // An update computed from it names that version and is accepted.
  auto t = train_task(*f.client, 2);
  ASSERT_TRUE(t.ok());
  node::UpdateHeader h{2, 100, 1.0, f.coord->service->params_fingerprint(), f.layout_fp};
  EXPECT_TRUE(f.client->push_update(h, sparse_delta(kNumel, 2)).ok());
}

}  // namespace
}  // namespace atl::coordinator
