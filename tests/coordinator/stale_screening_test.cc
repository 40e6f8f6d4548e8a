// Stale-update detection in the commit's screening (coordinator/update_screening.h): an update
// trained from the previous round's θ is dropped, this round's updates are kept, a figure is
// judged against the run's own recent figures, and the screening memory round-trips through its
// bytes.
#include <gtest/gtest.h>

#include <cmath>

#include "algorithms/diloco/replay.h"
#include "coordinator/update_screening.h"
#include "test_util.h"

namespace atl::coordinator {
namespace {

using testing_util::normal_vector;

constexpr size_t kNumel = 20000;
constexpr algorithms::compress::UpdateRange kAll{0, kNumel};

PendingUpdate update_of(std::vector<float> delta) {
  PendingUpdate u;
  u.delta = std::move(delta);
  u.tokens = 100;
  return u;
}

// A synthetic training run: round r's updates share a direction g_r (each site adds its own
// noise of the same size), and g_r drifts from g_{r-1} (half of it carried over), as the
// pseudo-gradients of consecutive DiLoCo rounds do.
struct Trajectory {
  std::vector<std::vector<float>> directions;  // g_0, g_1, ... (kNumel each)
  explicit Trajectory(size_t rounds) {
    for (size_t r = 0; r < rounds; ++r) {
      std::vector<float> g = normal_vector(kNumel, 1000 + static_cast<uint32_t>(r));
      if (r > 0)
        for (size_t i = 0; i < kNumel; ++i) g[i] += 0.7f * directions[r - 1][i];
      directions.push_back(std::move(g));
    }
  }
  // Site `site`'s honest update of round r.
  std::vector<float> update(size_t r, uint32_t site) const {
    std::vector<float> u = normal_vector(kNumel, 50000 + 100 * static_cast<uint32_t>(r) + site);
    for (size_t i = 0; i < kNumel; ++i) u[i] = 0.8f * u[i] + directions[r][i];
    return u;
  }
};

// One commit: screening with `margin` against `memory`, and the memory after it.
ScreeningMemory commit(PendingUpdates& updates, const ScreeningMemory& memory, double margin,
                       ScreenOutcome& screened) {
  ReplayMemory sketched = sketch_updates(updates, kAll);
  StaleScreen stale = screen_stale(updates, sketched, memory, margin, screened);
  ScreeningMemory next;
  next.replay = remember_accepted(memory.replay, std::move(sketched), updates);
  for (const auto& applied : updates) next.applied_last_round.insert(applied.first);
  next.stale_history = extend_stale_history(memory.stale_history, std::move(stale.kept_figures));
  return next;
}

// Round 0 of `sites` honest sites, screened and committed: the memory round 1 starts from.
ScreeningMemory first_round(const Trajectory& t, uint32_t sites) {
  PendingUpdates r0;
  for (uint32_t s = 1; s <= sites; ++s) r0["node-" + std::to_string(s)] = update_of(t.update(0, s));
  ScreenOutcome s0;
  return commit(r0, {}, 0.05, s0);
}

// Rounds 0..rounds-1 of `sites` sites, the last `stale` of which send their update of the
// previous round (round 0: their own); returns the nodes dropped in each round.
std::vector<std::vector<std::string>> run(const Trajectory& t, uint32_t sites, uint32_t stale,
                                          double margin,
                                          std::map<std::string, StaleFigures>* last_figures) {
  std::vector<std::vector<std::string>> dropped;
  ScreeningMemory memory;
  for (size_t r = 0; r < t.directions.size(); ++r) {
    PendingUpdates updates;
    for (uint32_t s = 1; s <= sites; ++s) {
      const bool is_stale = s > sites - stale && r > 0;
      updates["node-" + std::to_string(s)] = update_of(t.update(is_stale ? r - 1 : r, s));
    }
    if (last_figures) *last_figures = stale_figures(updates, sketch_updates(updates, kAll), memory);
    ScreenOutcome screened;
    memory = commit(updates, memory, margin, screened);
    std::vector<std::string> out;
    for (const auto& [id, s] : screened.by_node)
      if (s.action == algorithms::ScreenAction::kDropped) out.push_back(id);
    dropped.push_back(out);
  }
  return dropped;
}

TEST(StaleScreening, AnUpdateOfThePreviousRoundIsDroppedThisRoundsAreKept) {
  const Trajectory t(4);
  std::map<std::string, StaleFigures> figures;
  const auto dropped = run(t, 4, 1, 0.05, &figures);
  ASSERT_EQ(dropped.size(), 4u);
  EXPECT_TRUE(dropped[0].empty());  // round 0: no previous round to compare with
  for (size_t r = 1; r < 4; ++r) EXPECT_EQ(dropped[r], std::vector<std::string>{"node-4"}) << r;
  // The figures of the last round: the honest sites point at this round, the stale one at the
  // previous round.
  ASSERT_EQ(figures.size(), 4u);
  for (const std::string id : {"node-1", "node-2", "node-3"})
    EXPECT_LT(figures.at(id).previous - figures.at(id).current, 0.0) << id;
  EXPECT_GT(figures.at("node-4").previous - figures.at("node-4").current, 0.05);

  // Without stale sites nothing is dropped; with two of eight both are, every round after the
  // first.
  for (const auto& round : run(t, 4, 0, 0.05, nullptr)) EXPECT_TRUE(round.empty());
  const auto two = run(t, 8, 2, 0.05, nullptr);
  for (size_t r = 1; r < 4; ++r)
    EXPECT_EQ(two[r], (std::vector<std::string>{"node-7", "node-8"})) << r;
}

// Two sites: the one other update is no measure of the round's direction (an honest LoRA pair
// lost 3 of 12 updates to this check), so nothing is compared, even for a stale update whose
// figure is far above the margin; a third site makes it count again.
TEST(StaleScreening, RoundsOfFewerThanThreeUpdatesAreNotCompared) {
  const Trajectory t(4);
  std::map<std::string, StaleFigures> figures;
  for (const auto& round : run(t, 2, 1, 0.05, &figures)) EXPECT_TRUE(round.empty());
  ASSERT_EQ(figures.count("node-2"), 1u);
  EXPECT_GT(figures.at("node-2").previous - figures.at("node-2").current, 0.05);
  const auto three = run(t, 3, 1, 0.05, nullptr);
  for (size_t r = 1; r < 4; ++r) EXPECT_EQ(three[r], std::vector<std::string>{"node-3"}) << r;
}

TEST(StaleScreening, TheDropIsRecordedWithItsFigures) {
  const Trajectory t(2);
  PendingUpdates r0, r1;
  for (uint32_t s = 1; s <= 3; ++s) r0["node-" + std::to_string(s)] = update_of(t.update(0, s));
  ScreenOutcome s0;
  const ScreeningMemory m0 = commit(r0, {}, 0.05, s0);
  EXPECT_EQ(m0.applied_last_round, (std::set<std::string>{"node-1", "node-2", "node-3"}));
  for (uint32_t s = 1; s <= 2; ++s) r1["node-" + std::to_string(s)] = update_of(t.update(1, s));
  const std::vector<float> late = t.update(0, 9);  // trained from θ_0, never sent
  r1["node-3"] = update_of(late);
  ScreenOutcome s1;
  const ReplayMemory sketched = sketch_updates(r1, kAll);
  const auto figures = stale_figures(r1, sketched, m0);
  EXPECT_EQ(screen_stale(r1, sketched, m0, 0.05, s1).dropped, 1u);
  EXPECT_EQ(r1.count("node-3"), 0u);
  const ScreenedUpdate& d = s1.by_node.at("node-3");
  EXPECT_EQ(d.action, algorithms::ScreenAction::kDropped);
  EXPECT_EQ(d.reason, "stale");
  EXPECT_NEAR(d.norm, algorithms::l2_norm(late), 1e-6 * d.norm);
  char expected[256];
  std::snprintf(expected, sizeof(expected),
                "dropped: stale: cosine %.6f to the previous round's other updates - cosine %.6f "
                "to this round's other updates >= robust.stale_margin 0.050000",
                figures.at("node-3").previous, figures.at("node-3").current);
  EXPECT_EQ(d.why, expected);
}

TEST(StaleScreening, FiguresNeedBothSumsOfTheSameLayoutAndMarginZeroIsOff) {
  const Trajectory t(2);
  PendingUpdates r0{{"node-1", update_of(t.update(0, 1))}, {"node-2", update_of(t.update(0, 2))}};
  ScreenOutcome s;
  const ScreeningMemory m0 = commit(r0, {}, 0.05, s);
  // One update alone has no other update this round to compare with.
  PendingUpdates alone{{"node-1", update_of(t.update(0, 1))}};
  EXPECT_TRUE(stale_figures(alone, sketch_updates(alone, kAll), m0).empty());
  // No previous round: nothing to compare with either.
  PendingUpdates r1{{"node-1", update_of(t.update(0, 1))}, {"node-2", update_of(t.update(1, 2))}};
  EXPECT_TRUE(stale_figures(r1, sketch_updates(r1, kAll), ScreeningMemory{}).empty());
  // Only the previous round's *other* nodes count: node-1's own previous update is no term.
  ScreeningMemory only_own = m0;
  only_own.applied_last_round = {"node-1"};
  const auto own = stale_figures(r1, sketch_updates(r1, kAll), only_own);
  EXPECT_EQ(own.count("node-1"), 0u);
  EXPECT_EQ(own.count("node-2"), 1u);
  // Another layout (another synced range) is no term of either sum.
  const auto other_layout = stale_figures(r1, sketch_updates(r1, {0, kNumel / 2}), m0);
  EXPECT_TRUE(other_layout.empty());
  // margin 0: nothing compared, nothing dropped (node-1 is a stale update here).
  ScreenOutcome off;
  const ReplayMemory sketched = sketch_updates(r1, kAll);
  const StaleScreen none = screen_stale(r1, sketched, m0, 0.0, off);
  EXPECT_EQ(none.dropped, 0u);
  EXPECT_TRUE(none.kept_figures.empty());
  EXPECT_EQ(r1.size(), 2u);
  EXPECT_TRUE(off.by_node.empty());
}

TEST(StaleScreening, AHugeUpdateWeighsAsOneInTheSums) {
  // The sums add unit sketches: one update of a huge norm among this round's updates cannot
  // make the honest ones look stale.
  const Trajectory t(2);
  const ScreeningMemory m0 = first_round(t, 4);
  PendingUpdates r1;
  for (uint32_t s = 1; s <= 3; ++s) r1["node-" + std::to_string(s)] = update_of(t.update(1, s));
  std::vector<float> huge = normal_vector(kNumel, 77);
  for (float& v : huge) v *= 1e6f;
  r1["node-4"] = update_of(huge);
  ScreenOutcome s1;
  const ReplayMemory sketched = sketch_updates(r1, kAll);
  screen_stale(r1, sketched, m0, 0.05, s1);
  for (const std::string id : {"node-1", "node-2", "node-3"}) EXPECT_EQ(r1.count(id), 1u) << id;
}

TEST(StaleScreening, MemoryBytesRoundTripKeepTheReplayFormatAndCorruptionIsDataLoss) {
  const Trajectory t(1);
  PendingUpdates r{{"node-1", update_of(t.update(0, 1))}, {"node-22", update_of(t.update(0, 2))}};
  ScreenOutcome s;
  ScreeningMemory m = commit(r, {}, 0.05, s);
  m.stale_history.clear();  // the layout of a store written before stale histories were kept
  const std::string bytes = encode_screening_memory(m);
  EXPECT_EQ(bytes.substr(0, 4), "ATR2");
  auto back = decode_screening_memory(bytes, "memory");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->applied_last_round, m.applied_last_round);
  ASSERT_EQ(back->replay.size(), 2u);
  for (const auto& [id, e] : m.replay) {
    EXPECT_EQ(back->replay.at(id).layout, e.layout);
    EXPECT_EQ(back->replay.at(id).sketch, e.sketch);  // bit for bit
  }
  // Without stale detection (no applied set) the bytes are the replay memory's, as before.
  ScreeningMemory replay_only{m.replay, {}, {}};
  EXPECT_EQ(encode_screening_memory(replay_only), encode_replay_memory(m.replay));
  auto old = decode_screening_memory(encode_replay_memory(m.replay), "memory");
  ASSERT_TRUE(old.ok()) << old.status().to_string();
  EXPECT_TRUE(old->applied_last_round.empty());
  EXPECT_EQ(old->replay.size(), 2u);
  for (const std::string& bad :
       {bytes.substr(0, bytes.size() - 1), bytes + "x", bytes.substr(0, 10), std::string("ATR2"),
        "XTR2" + bytes.substr(4)}) {
    auto d = decode_screening_memory(bad, "screening memory of 'e'");
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
    EXPECT_EQ(d.status().message().rfind("store: screening memory of 'e' is corrupt (", 0), 0u)
        << d.status().message();
  }
}

// A round of figures from nodes node-1, node-2, ... in order.
std::vector<SiteFigure> round_of(std::vector<double> figures) {
  std::vector<SiteFigure> round;
  for (size_t i = 0; i < figures.size(); ++i)
    round.push_back({"node-" + std::to_string(i + 1), figures[i]});
  return round;
}

TEST(StaleScreening, BaselineIsTakenPerNodeSoThatNoOneNodeMovesIt) {
  // node-1: 1, 4 (median 1); node-2: 2, 3 (2); node-3: 3 (3): centre 2. Deviations from 2:
  // node-1 1, 2 (1); node-2 0, 1 (0); node-3 1: spread 1.4826 × 1.
  const std::vector<std::vector<SiteFigure>> h = {round_of({1.0, 2.0, 3.0}), {}, round_of({4.0, 3.0})};
  const StaleBaseline b = stale_baseline(h);
  EXPECT_EQ(b.sites, 3u);
  EXPECT_DOUBLE_EQ(b.median, 2.0);
  EXPECT_DOUBLE_EQ(b.spread, 1.4826);
  // A fourth node whose figures are as far out as it likes moves neither the centre nor the
  // spread more than one honest node would (the lower medians over four nodes).
  auto wide = h;
  wide.push_back({{"node-4", -50.0}, {"node-4", 60.0}});
  wide.push_back({{"node-4", -70.0}, {"node-4", 80.0}});
  const StaleBaseline w = stale_baseline(wide);
  EXPECT_EQ(w.sites, 4u);
  EXPECT_DOUBLE_EQ(w.median, 1.0);
  EXPECT_LE(w.spread, 1.4826 * 2.0);
  EXPECT_EQ(stale_baseline({}).sites, 0u);
  // The history keeps the last kStaleHistoryRounds rounds, oldest first.
  std::vector<std::vector<SiteFigure>> kept;
  for (int r = 0; r < 9; ++r)
    kept = extend_stale_history(std::move(kept), round_of({static_cast<double>(r)}));
  ASSERT_EQ(kept.size(), kStaleHistoryRounds);
  EXPECT_EQ(kept.front(), round_of({9.0 - kStaleHistoryRounds}));
  EXPECT_EQ(kept.back(), round_of({8.0}));
}

TEST(StaleScreening, AFigureIsJudgedAgainstTheRunsOwnRecentFigures) {
  // Round 1 of three sites, node-3's update trained from θ_0: its figure is well over the margin.
  const Trajectory t(2);
  const ScreeningMemory m0 = first_round(t, 3);
  auto round1 = [&] {
    PendingUpdates r1;
    for (uint32_t s = 1; s <= 2; ++s) r1["node-" + std::to_string(s)] = update_of(t.update(1, s));
    r1["node-3"] = update_of(t.update(0, 9));
    return r1;
  };
  PendingUpdates probe = round1();
  const double figure = [&] {
    const auto f = stale_figures(probe, sketch_updates(probe, kAll), m0).at("node-3");
    return f.previous - f.current;
  }();
  ASSERT_GT(figure, 0.1);

  // A run whose own honest figures reach as high (small models, few tokens a round): kept, and
  // its figure joins the kept ones.
  ScreeningMemory noisy = m0;
  noisy.stale_history = {round_of({figure - 0.3, figure + 0.1, figure - 0.1}),
                         round_of({figure, figure - 0.4, figure + 0.2})};
  PendingUpdates r1 = round1();
  ScreenOutcome kept_screen;
  const StaleScreen kept = screen_stale(r1, sketch_updates(r1, kAll), noisy, 0.05, kept_screen);
  EXPECT_EQ(kept.dropped, 0u);
  EXPECT_EQ(r1.size(), 3u);
  EXPECT_TRUE(kept_screen.by_node.empty());
  ASSERT_EQ(kept.kept_figures.size(), 3u);
  EXPECT_EQ(kept.kept_figures[2].node_id, "node-3");
  EXPECT_DOUBLE_EQ(kept.kept_figures[2].figure, figure);

  // A run whose figures sit far below it: dropped, and the line says against what.
  ScreeningMemory calm = m0;
  calm.stale_history = {round_of({-0.30, -0.31, -0.29}), round_of({-0.29, -0.30, -0.32})};
  r1 = round1();
  ScreenOutcome dropped_screen;
  const StaleScreen dropped =
      screen_stale(r1, sketch_updates(r1, kAll), calm, 0.05, dropped_screen);
  EXPECT_EQ(dropped.dropped, 1u);
  EXPECT_EQ(r1.count("node-3"), 0u);
  EXPECT_EQ(dropped.kept_figures.size(), 2u);
  const std::string& why = dropped_screen.by_node.at("node-3").why;
  EXPECT_NE(why.find(">= robust.stale_margin 0.050000 and >= -0.250696 (the median -0.310000 + "
                     "4.000000 robust s.d. 0.014826 of the kept figures of 3 nodes over the last "
                     "2 rounds)"),
            std::string::npos)
      << why;

  // Figures of fewer than kStaleMinSites nodes: the margin alone decides (the first rounds).
  ScreeningMemory young = m0;
  young.stale_history = {{{"node-1", figure + 1.0}, {"node-2", figure + 1.0}}};
  r1 = round1();
  ScreenOutcome young_screen;
  EXPECT_EQ(screen_stale(r1, sketch_updates(r1, kAll), young, 0.05, young_screen).dropped, 1u);
}

TEST(StaleScreening, HistoryBytesRoundTripAndCorruptHistoriesAreDataLoss) {
  const Trajectory t(1);
  PendingUpdates r{{"node-1", update_of(t.update(0, 1))}, {"node-2", update_of(t.update(0, 2))}};
  ScreenOutcome s;
  ScreeningMemory m = commit(r, {}, 0.05, s);
  m.stale_history = {{{"node-1", -0.25}, {"node-22", 0.125}}, {}, {{"node-1", -0.5}}};
  const std::string bytes = encode_screening_memory(m);
  EXPECT_EQ(bytes.substr(0, 4), "ATR3");
  auto back = decode_screening_memory(bytes, "memory");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->stale_history, m.stale_history);
  EXPECT_EQ(back->applied_last_round, m.applied_last_round);
  EXPECT_EQ(back->replay.size(), 2u);
  // A history without an applied set (every update of the last round dropped) is followed by
  // the replay memory alone.
  ScreeningMemory none_applied{m.replay, {}, {{{"node-1", 0.5}}}};
  auto back2 = decode_screening_memory(encode_screening_memory(none_applied), "memory");
  ASSERT_TRUE(back2.ok()) << back2.status().to_string();
  EXPECT_TRUE(back2->applied_last_round.empty());
  EXPECT_EQ(back2->stale_history, none_applied.stale_history);

  // rounds × figures of node "n1" with `value`.
  auto history_bytes = [](uint64_t rounds, uint64_t figures, double value) {
    std::string b = "ATR3";
    b.append(reinterpret_cast<const char*>(&rounds), 8);
    for (uint64_t i = 0; i < rounds; ++i) {
      b.append(reinterpret_cast<const char*>(&figures), 8);
      for (uint64_t f = 0; f < figures; ++f) {
        const uint32_t id_bytes = 2;
        b.append(reinterpret_cast<const char*>(&id_bytes), 4);
        b += "n1";
        b.append(reinterpret_cast<const char*>(&value), 8);
      }
    }
    return b;
  };
  const std::string tail = encode_replay_memory(m.replay);
  ASSERT_TRUE(decode_screening_memory(history_bytes(2, 3, 0.25) + tail, "memory").ok());
  for (const auto& [bad, says] : std::vector<std::pair<std::string, std::string>>{
           {history_bytes(kStaleHistoryRounds + 1, 1, 0.25) + tail, "stale history of 7 rounds"},
           {history_bytes(1, 2, std::nan("")) + tail, "not finite"},
           {history_bytes(1, 2, 0.25).substr(0, 30), "truncated"},
           {"ATR3" + std::string(8, '\x01'), "stale history of"},
           {"ATR3\x01" + std::string(7, '\0') + std::string(8, '\xff'), "truncated"},
           {history_bytes(1, 1, 0.25) + "garbage", "no ATR1 header"}}) {
    auto d = decode_screening_memory(bad, "screening memory of 'e'");
    ASSERT_FALSE(d.ok()) << says;
    EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(d.status().message().find(says), std::string::npos) << d.status().message();
  }
}

}  // namespace
}  // namespace atl::coordinator
