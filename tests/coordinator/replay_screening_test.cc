// Replay detection in the commit's screening (coordinator/update_screening.h): which updates are
// dropped as repeats, what the memory keeps, and its bytes through the store's round commit.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "algorithms/diloco/replay.h"
#include "coordinator/store.h"
#include "coordinator/update_screening.h"
#include "test_util.h"

namespace atl::coordinator {
namespace {

using testing_util::TempDir;

using testing_util::normal_vector;

PendingUpdate update_of(std::vector<float> delta) {
  PendingUpdate u;
  u.delta = std::move(delta);
  u.tokens = 100;
  return u;
}

constexpr algorithms::compress::UpdateRange kAll{0, 20000};

// One commit's screening: replays out of `updates`, and the memory after it.
ReplayMemory commit(PendingUpdates& updates, const ReplayMemory& memory, double min_cosine,
                    ScreenOutcome& screened) {
  ReplayMemory sketched = screen_replays(updates, memory, min_cosine, kAll, screened);
  return remember_accepted(memory, std::move(sketched), updates);
}

TEST(ReplayScreening, AnExactRepeatIsDroppedAndAFreshUpdateKept) {
  const std::vector<float> a = normal_vector(20000, 1), b = normal_vector(20000, 2);
  PendingUpdates r0{{"node-1", update_of(a)}, {"node-2", update_of(b)}};
  ScreenOutcome s0;
  const ReplayMemory m0 = commit(r0, {}, 0.99, s0);
  EXPECT_EQ(r0.size(), 2u);  // nothing to compare with yet
  EXPECT_TRUE(s0.by_node.empty());
  ASSERT_EQ(m0.size(), 2u);

  // node-1 sends a again; node-2 sends a fresh update.
  PendingUpdates r1{{"node-1", update_of(a)}, {"node-2", update_of(normal_vector(20000, 3))}};
  ScreenOutcome s1;
  const ReplayMemory m1 = commit(r1, m0, 0.99, s1);
  ASSERT_EQ(r1.size(), 1u);
  EXPECT_EQ(r1.count("node-2"), 1u);
  ASSERT_EQ(s1.by_node.count("node-1"), 1u);
  const ScreenedUpdate& dropped = s1.by_node.at("node-1");
  EXPECT_EQ(dropped.action, algorithms::ScreenAction::kDropped);
  EXPECT_EQ(dropped.reason, "replay");
  EXPECT_EQ(dropped.why,
            "dropped: replay: cosine 1.000000 to its previous accepted update >= "
            "robust.replay_cosine 0.990000");
  EXPECT_NEAR(dropped.norm, algorithms::l2_norm(a), 1e-9);
  // The dropped node keeps the update that counted; the other one moves on.
  EXPECT_EQ(m1.at("node-1").sketch, m0.at("node-1").sketch);
  EXPECT_NE(m1.at("node-2").sketch, m0.at("node-2").sketch);

  // So a replay of the same update is dropped every round after the first.
  PendingUpdates r2{{"node-1", update_of(a)}};
  ScreenOutcome s2;
  commit(r2, m1, 0.99, s2);
  EXPECT_TRUE(r2.empty());
}

TEST(ReplayScreening, NearRepeatsAboveTheThresholdAreDroppedHonestCorrelationIsKept) {
  const std::vector<float> a = normal_vector(20000, 4);
  ScreenOutcome s;
  // node-2: an honest site beside it, whose consecutive updates are unrelated.
  PendingUpdates first{{"node-1", update_of(a)}, {"node-2", update_of(normal_vector(20000, 40))}};
  const ReplayMemory m = commit(first, {}, 0.99, s);
  // a with 1% noise (cosine ≈ 0.99995): a replay through a lossy re-encoding.
  std::vector<float> near = a;
  const std::vector<float> noise = normal_vector(a.size(), 5);
  for (size_t i = 0; i < near.size(); ++i) near[i] += 0.01f * noise[i];
  PendingUpdates r1{{"node-1", update_of(near)}, {"node-2", update_of(normal_vector(20000, 41))}};
  commit(r1, m, 0.99, s);
  EXPECT_EQ(r1.count("node-1"), 0u);
  EXPECT_EQ(r1.count("node-2"), 1u);
  // Alone in its round the same near repeat is kept (nothing to compare it with), an exact one
  // is not.
  PendingUpdates alone{{"node-1", update_of(near)}};
  commit(alone, m, 0.99, s);
  EXPECT_EQ(alone.size(), 1u);
  PendingUpdates alone_exact{{"node-1", update_of(a)}};
  commit(alone_exact, m, 0.99, s);
  EXPECT_TRUE(alone_exact.empty());
  // cosine 0.8 (above the 0.74 measured between an honest site's consecutive updates): kept.
  std::vector<float> honest(a.size());
  for (size_t i = 0; i < a.size(); ++i) honest[i] = 0.8f * a[i] + 0.6f * noise[i];
  PendingUpdates r2{{"node-1", update_of(honest)}};
  ScreenOutcome s2;
  commit(r2, m, 0.99, s2);
  EXPECT_EQ(r2.size(), 1u);
  EXPECT_TRUE(s2.by_node.empty());
}

// A tiny model or one inner step: every honest site's update is within cosine 0.99 of its
// previous one. 4–10% of honest updates were dropped as replays (64 sites, 2,712 parameters).
// Judged against the round's other sites, they are kept; repeats still are not.
TEST(ReplayScreening, UpdatesAsCloseAsTheRoundsOthersAreKeptRepeatsAreNot) {
  const size_t n = 20000;
  std::vector<std::vector<float>> before;
  PendingUpdates r0;
  for (int i = 0; i < 4; ++i) {
    before.push_back(normal_vector(n, 10 + i));
    r0["node-" + std::to_string(i)] = update_of(before.back());
  }
  ScreenOutcome s0;
  const ReplayMemory m0 = commit(r0, {}, 0.99, s0);
  // Each site's next update: cosine about 0.995 to its previous one.
  auto next_of = [&](int i, float noise_share, int seed) {
    std::vector<float> v = before[i];
    const std::vector<float> noise = normal_vector(n, seed);
    for (size_t j = 0; j < n; ++j) v[j] += noise_share * noise[j];
    return v;
  };
  PendingUpdates honest;
  for (int i = 0; i < 4; ++i)
    honest["node-" + std::to_string(i)] = update_of(next_of(i, 0.1f, 20 + i));
  ScreenOutcome s1;
  commit(honest, m0, 0.99, s1);
  EXPECT_EQ(honest.size(), 4u);
  EXPECT_TRUE(s1.by_node.empty());
  // Among them, an exact repeat and a lossy re-encoding of one (cosine ≈ 0.99995) are dropped.
  PendingUpdates attacked;
  attacked["node-0"] = update_of(before[0]);
  attacked["node-1"] = update_of(next_of(1, 0.01f, 31));
  attacked["node-2"] = update_of(next_of(2, 0.1f, 32));
  attacked["node-3"] = update_of(next_of(3, 0.1f, 33));
  ScreenOutcome s2;
  commit(attacked, m0, 0.99, s2);
  EXPECT_EQ(attacked.size(), 2u);
  EXPECT_EQ(s2.by_node.count("node-0"), 1u);
  EXPECT_EQ(s2.by_node.count("node-1"), 1u);
  // Every site repeating: all dropped (an exact repeat needs no comparison).
  PendingUpdates all_repeat;
  for (int i = 0; i < 4; ++i) all_repeat["node-" + std::to_string(i)] = update_of(before[i]);
  ScreenOutcome s3;
  commit(all_repeat, m0, 0.99, s3);
  EXPECT_TRUE(all_repeat.empty());
}

TEST(ReplayScreening, OffOtherLayoutsZeroUpdatesAndExactOnly) {
  const std::vector<float> a = normal_vector(20000, 6);
  ScreenOutcome s;
  PendingUpdates first{{"node-1", update_of(a)}};
  const ReplayMemory m = commit(first, {}, 0.99, s);
  // replay_cosine 0: nothing compared, nothing remembered.
  PendingUpdates off{{"node-1", update_of(a)}};
  EXPECT_TRUE(screen_replays(off, m, 0.0, kAll, s).empty());
  EXPECT_EQ(off.size(), 1u);
  // Another synced range (a Streaming DiLoCo fragment) or other Hydra indices: not compared.
  PendingUpdates other_range{{"node-1", update_of(a)}};
  screen_replays(other_range, m, 0.99, {20000, 20000}, s);
  EXPECT_EQ(other_range.size(), 1u);
  PendingUpdates indexed{{"node-1", update_of(a)}};
  indexed["node-1"].indices.resize(a.size());
  for (size_t j = 0; j < a.size(); ++j) indexed["node-1"].indices[j] = static_cast<uint32_t>(j);
  screen_replays(indexed, m, 0.99, kAll, s);
  EXPECT_EQ(indexed.size(), 1u);
  // A zero update repeats nothing.
  PendingUpdates z0{{"node-2", update_of(std::vector<float>(20000, 0.0f))}};
  const ReplayMemory mz = commit(z0, {}, 0.99, s);
  PendingUpdates z1{{"node-2", update_of(std::vector<float>(20000, 0.0f))}};
  commit(z1, mz, 0.99, s);
  EXPECT_EQ(z1.size(), 1u);
  // replay_cosine 1: exact repeats only.
  PendingUpdates exact{{"node-1", update_of(a)}};
  commit(exact, m, 1.0, s);
  EXPECT_TRUE(exact.empty());
  std::vector<float> nudged = a;
  nudged[7] = std::nextafter(nudged[7], 10.0f);
  PendingUpdates almost{{"node-1", update_of(nudged)}};
  commit(almost, m, 1.0, s);
  EXPECT_EQ(almost.size(), 1u);
}

TEST(ReplayScreening, MemoryBytesRoundTripAndCorruptionIsDataLoss) {
  ScreenOutcome s;
  PendingUpdates r{{"node-1", update_of(normal_vector(5000, 7))},
                   {"node-22", update_of(normal_vector(5000, 8))}};
  const ReplayMemory m = commit(r, {}, 0.99, s);
  const std::string bytes = encode_replay_memory(m);
  auto back = decode_replay_memory(bytes, "memory");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->size(), 2u);
  for (const auto& [id, e] : m) {
    EXPECT_EQ(back->at(id).layout, e.layout);
    EXPECT_EQ(back->at(id).sketch, e.sketch);  // bit for bit
  }
  EXPECT_TRUE(decode_replay_memory(encode_replay_memory({}), "memory")->empty());
  for (const std::string& bad :
       {bytes.substr(0, bytes.size() - 1), bytes + "x", "XTR1" + bytes.substr(4), std::string()}) {
    auto d = decode_replay_memory(bad, "replay memory of 'e'");
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
    EXPECT_EQ(d.status().message().rfind("store: replay memory of 'e' is corrupt (", 0), 0u)
        << d.status().message();
  }
}

TEST(ReplayScreening, TheStoreCommitsTheMemoryWithTheRoundAndChecksIt) {
  TempDir dir;
  auto store = Store::open(dir.path(), {.keep_params = 2, .sync = false});
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  ExperimentRecord e;
  e.id = "rp";
  e.numel = 4;
  const std::vector<float> theta0(4, 0.5f), theta1(4, 0.25f), momentum(4, 0.0f);
  e.params_fingerprint = algorithms::params_fingerprint(theta0);
  ASSERT_TRUE((*store)->create_experiment(e, theta0).ok());
  auto st = (*store)->load_state("rp");
  ASSERT_TRUE(st.ok());
  EXPECT_FALSE(st->replay_memory.has_value());  // before the first commit

  ScreenOutcome s;
  PendingUpdates r{{"node-1", update_of(normal_vector(100, 9))}};
  const std::string bytes = encode_replay_memory(commit(r, {}, 0.99, s));
  RoundRecord rec;
  rec.round = 0;
  rec.momentum_fingerprint = algorithms::params_fingerprint(momentum);
  e.current_round = 1;
  e.params_fingerprint = algorithms::params_fingerprint(theta1);
  ASSERT_TRUE((*store)->commit_round(e, rec, theta1, momentum, nullptr, bytes).ok());
  st = (*store)->load_state("rp");
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  ASSERT_TRUE(st->replay_memory.has_value());
  EXPECT_EQ(*st->replay_memory, bytes);
  // A commit without a memory (replay detection off) removes it.
  rec.round = 1;
  e.current_round = 2;
  ASSERT_TRUE((*store)->commit_round(e, rec, theta1, momentum).ok());
  st = (*store)->load_state("rp");
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_FALSE(st->replay_memory.has_value());
}

}  // namespace
}  // namespace atl::coordinator
