// Screening and the robust aggregators (algorithms/diloco/robust.h, algorithms/hydra/aggregate.h)
// against hand-computed values, including ties, even counts and signed zeros.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "algorithms/diloco/robust.h"
#include "algorithms/hydra/aggregate.h"

namespace atl::algorithms {
namespace {

// A round's updates over deltas it owns (the Updates view them).
struct Round {
  std::vector<std::vector<float>> deltas;
  std::vector<Update> ups;
  Round(const std::vector<std::string>& ids, std::vector<std::vector<float>> d,
        const std::vector<uint64_t>& tokens)
      : deltas(std::move(d)) {
    for (size_t i = 0; i < ids.size(); ++i) ups.push_back({ids[i], tokens[i], deltas[i]});
  }
  Round(const Round&) = delete;
  Round& operator=(const Round&) = delete;
};

std::vector<float> aggregate(const Round& r, const AggregatorOptions& o) {
  const std::vector<Update>& ups = r.ups;
  std::vector<float> out(ups.front().delta.size());
  Status st = aggregate_robust(ups, o, out);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

AggregatorOptions kind(AggregatorKind k) {
  AggregatorOptions o;
  o.kind = k;
  return o;
}

TEST(RobustScreen, LowerMedianOfOddAndEvenCounts) {
  EXPECT_EQ(lower_median_of({3, 1, 2}), 2.0);
  EXPECT_EQ(lower_median_of({4, 1, 3, 2}), 2.0);  // the smaller middle value
  EXPECT_EQ(lower_median_of({5, 5}), 5.0);
  EXPECT_EQ(lower_median_of({7}), 7.0);
  EXPECT_EQ(lower_median_of({}), 0.0);
}

TEST(RobustScreen, ClipsDropsOrKeepsAgainstTheLimit) {
  const std::vector<double> norms = {1, 2, 3, 100};
  ScreenOptions o{ScreenMode::kClip, 10.0};  // clip, 10 × the lower median (2) = 20
  ScreenDecision d = screen_norms(norms, o);
  EXPECT_EQ(d.median_norm, 2.0);
  EXPECT_EQ(d.limit, 20.0);
  EXPECT_EQ(d.actions, (std::vector<ScreenAction>{ScreenAction::kKept, ScreenAction::kKept,
                                                  ScreenAction::kKept, ScreenAction::kClipped}));
  o.mode = ScreenMode::kDrop;
  EXPECT_EQ(screen_norms(norms, o).actions[3], ScreenAction::kDropped);
  // The absolute bound takes over when it is lower; a norm equal to the limit is kept.
  o.mode = ScreenMode::kClip;
  o.max_norm = 2.0;
  d = screen_norms(norms, o);
  EXPECT_EQ(d.limit, 2.0);
  EXPECT_EQ(d.actions, (std::vector<ScreenAction>{ScreenAction::kKept, ScreenAction::kKept,
                                                  ScreenAction::kClipped, ScreenAction::kClipped}));
  o.mode = ScreenMode::kOff;
  d = screen_norms(norms, o);
  EXPECT_TRUE(std::isinf(d.limit));
  for (ScreenAction a : d.actions) EXPECT_EQ(a, ScreenAction::kKept);
}

TEST(RobustScreen, TwoUpdatesOneHugeIsClippedToTenTimesTheOther) {
  // With the mean of the two middle norms, 1e30 would sit under 10 × 5e29; the lower median
  // keeps the limit at 10 × the small one.
  const ScreenOptions clip10{ScreenMode::kClip, 10.0};
  ScreenDecision d = screen_norms({1.0, 1e30}, clip10);
  EXPECT_EQ(d.limit, 10.0);
  EXPECT_EQ(d.actions[0], ScreenAction::kKept);
  EXPECT_EQ(d.actions[1], ScreenAction::kClipped);
  // One update alone is its own median: never screened by the multiple.
  EXPECT_EQ(screen_norms({1e30}, clip10).actions[0], ScreenAction::kKept);
  // The default drops it instead, at 5 × the small one.
  d = screen_norms({1.0, 1e30}, ScreenOptions{});
  EXPECT_EQ(d.limit, 5.0);
  EXPECT_EQ(d.actions[0], ScreenAction::kKept);
  EXPECT_EQ(d.actions[1], ScreenAction::kDropped);
}

TEST(RobustScreen, ZeroUpdatesDoNotPullTheLimitDown) {
  // Two Hydra sites with nothing to train send Δ = 0: the limit comes from the others.
  ScreenDecision d = screen_norms({0.0, 0.0, 0.09, 0.16}, ScreenOptions{ScreenMode::kClip, 10.0});
  EXPECT_EQ(d.median_norm, 0.09);
  EXPECT_DOUBLE_EQ(d.limit, 0.9);
  for (ScreenAction a : d.actions) EXPECT_EQ(a, ScreenAction::kKept);
  // Only zeros: nothing to screen.
  d = screen_norms({0.0, 0.0}, ScreenOptions{});
  for (ScreenAction a : d.actions) EXPECT_EQ(a, ScreenAction::kKept);
}

TEST(RobustScreen, NormOfHugeFloatsIsFinite) {
  const std::vector<float> v(1000, 3e38f);
  const double n = l2_norm(v);
  EXPECT_TRUE(std::isfinite(n));
  EXPECT_NEAR(n / (3e38 * std::sqrt(1000.0)), 1.0, 1e-6);
}

TEST(RobustAggregate, MeanIsTheWeightedMeanBitForBit) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g;
  std::vector<std::vector<float>> d(3, std::vector<float>(257));
  for (auto& v : d)
    for (auto& x : v) x = g(rng);
  const Round ups({"a", "b", "c"}, d, {1000, 2048, 7});
  std::vector<float> want(257);
  ASSERT_TRUE(aggregate_pseudo_gradients(ups.ups, want).ok());
  EXPECT_EQ(aggregate(ups, kind(AggregatorKind::kMean)), want);
  // clipped-mean with a limit no update reaches is the same sum, bit for bit.
  AggregatorOptions wide = kind(AggregatorKind::kClippedMean);
  wide.clip_multiple = 100.0;
  EXPECT_EQ(aggregate(ups, wide), want);
}

TEST(RobustAggregate, MedianOddEvenAndTies) {
  // Columns: {1,3,2} -> 2, {5,2,9} -> 5, {-1,-1,0} -> -1 (a tie at the middle).
  Round odd({"a", "b", "c"}, {{1, 5, -1}, {3, 2, -1}, {2, 9, 0}}, {1, 1, 1});
  EXPECT_EQ(aggregate(odd, kind(AggregatorKind::kMedian)), (std::vector<float>{2, 5, -1}));
  // Even count: the mean of the two middle values. {1,2,3,10} -> 2.5, {0,2,5,9} -> 3.5,
  // {-1,-1,0,4} -> -0.5.
  Round even({"a", "b", "c", "d"}, {{1, 5, -1}, {3, 2, -1}, {2, 9, 0}, {10, 0, 4}},
                         {1, 1, 1, 1});
  EXPECT_EQ(aggregate(even, kind(AggregatorKind::kMedian)),
            (std::vector<float>{2.5f, 3.5f, -0.5f}));
  // Weights do not matter (FedMedian is unweighted).
  Round weighted({"a", "b", "c"}, {{1, 5, -1}, {3, 2, -1}, {2, 9, 0}}, {1, 1000, 7});
  EXPECT_EQ(aggregate(weighted, kind(AggregatorKind::kMedian)), (std::vector<float>{2, 5, -1}));
}

TEST(RobustAggregate, TrimmedMeanCutsFloorOfBetaKAtEachEnd) {
  Round four({"a", "b", "c", "d"}, {{1, 5, -1}, {3, 2, -1}, {2, 9, 0}, {10, 0, 4}},
                         {1, 1, 1, 1});
  AggregatorOptions o = kind(AggregatorKind::kTrimmedMean);
  o.trim_fraction = 0.25;  // ⌊0.25·4⌋ = 1 cut at each end
  EXPECT_EQ(aggregate(four, o), (std::vector<float>{2.5f, 3.5f, -0.5f}));
  o.trim_fraction = 0.2;  // ⌊0.8⌋ = 0: the plain (unweighted) mean
  EXPECT_EQ(aggregate(four, o), (std::vector<float>{4.0f, 4.0f, 0.5f}));
  // Five values, β = 0.4: two cut at each end leaves the median.
  Round five({"a", "b", "c", "d", "e"}, {{1}, {100}, {3}, {-50}, {2}}, {1, 1, 1, 1, 1});
  o.trim_fraction = 0.4;
  EXPECT_EQ(aggregate(five, o), (std::vector<float>{2.0f}));
  o.trim_fraction = 0.2;  // one cut at each end: mean(1, 2, 3)
  EXPECT_EQ(aggregate(five, o), (std::vector<float>{2.0f}));
}

TEST(RobustAggregate, CoordinateWiseResultsDoNotDependOnWhoSentWhat) {
  // The same values under other node ids (so in another order in the sum): identical bits,
  // signed zeros included.
  const std::vector<std::vector<float>> d = {{-0.0f, 1.5f}, {0.0f, -2.0f}, {0.0f, 7.25f}};
  const std::vector<std::vector<float>> rotated = {d[2], d[0], d[1]};
  for (AggregatorKind k : {AggregatorKind::kMedian, AggregatorKind::kTrimmedMean}) {
    AggregatorOptions o = kind(k);
    o.trim_fraction = 0.34;  // one cut at each end of three
    const auto a = aggregate(Round({"a", "b", "c"}, d, {1, 1, 1}), o);
    const auto b = aggregate(Round({"a", "b", "c"}, rotated, {1, 1, 1}), o);
    ASSERT_EQ(a.size(), b.size());
    for (size_t j = 0; j < a.size(); ++j)
      EXPECT_EQ(std::bit_cast<uint32_t>(a[j]), std::bit_cast<uint32_t>(b[j])) << j;
    EXPECT_EQ(a[1], 1.5f);
  }
  // Median of {−0, +0, +0} is +0, whichever node sent the −0.
  auto z = aggregate(Round({"a", "b", "c"}, d, {1, 1, 1}), kind(AggregatorKind::kMedian));
  EXPECT_FALSE(std::signbit(z[0]));
}

TEST(RobustAggregate, ClippedMeanScalesToTheMedianNorm) {
  // Norms 5, 1, 2: the lower median is 2, so a = (3, 4) is scaled to (1.2, 1.6).
  Round ups({"a", "b", "c"}, {{3, 4}, {0, 1}, {0, 2}}, {1, 1, 1});
  const auto out = aggregate(ups, kind(AggregatorKind::kClippedMean));
  EXPECT_FLOAT_EQ(out[0], 1.2f / 3);
  EXPECT_FLOAT_EQ(out[1], (1.6f + 1 + 2) / 3);
}

TEST(RobustAggregate, KrumPicksTheMostCentralUpdate) {
  // Squared distances: a-b 1, a-c 1, b-c 2, d is ~2e4 from everyone.
  Round ups({"a", "b", "c", "d"}, {{0, 0}, {1, 0}, {0, 1}, {100, 100}}, {1, 1, 2, 1});
  AggregatorOptions o = kind(AggregatorKind::kKrum);
  o.krum_byzantine = 1;  // one neighbour scored: a, b, c tie at 1; the lowest id wins
  EXPECT_EQ(aggregate(ups, o), (std::vector<float>{0, 0}));
  o.krum_byzantine = 0;  // two neighbours: a 2, b 3, c 3, d ~4e4
  EXPECT_EQ(aggregate(ups, o), (std::vector<float>{0, 0}));
  // Multi-Krum: the token-weighted mean of a, b, c (tokens 1, 1, 2).
  o.krum_byzantine = 1;
  o.krum_keep = 3;
  EXPECT_EQ(aggregate(ups, o), (std::vector<float>{0.25f, 0.5f}));
  // One update: itself.
  EXPECT_EQ(aggregate(Round({"x"}, {{4, 2}}, {3}), o), (std::vector<float>{4, 2}));
}

TEST(RobustAggregate, RefusesUnsortedOrEmptyInput) {
  std::vector<float> out(1);
  EXPECT_EQ(aggregate_robust({}, kind(AggregatorKind::kMedian), out).code(),
            StatusCode::kInvalidArgument);
  Round unsorted({"b", "a"}, {{1}, {2}}, {1, 1});
  EXPECT_EQ(aggregate_robust(unsorted.ups, kind(AggregatorKind::kMedian), out).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(parse_aggregator("average").ok());
  EXPECT_EQ(*parse_aggregator("trimmed-mean"), AggregatorKind::kTrimmedMean);
  EXPECT_EQ(*parse_screen_mode("drop"), ScreenMode::kDrop);
}

TEST(RobustAggregate, MaskedMedianTakesTheSitesHoldingEachElement) {
  // numel 4. a holds {0,1,2}, b holds {1,2}, c holds {2}; nobody holds 3.
  const std::vector<uint32_t> ia = {0, 1, 2}, ib = {1, 2}, ic = {2};
  const std::vector<float> va = {5, 1, -3}, vb = {3, 10}, vc = {0};
  std::vector<hydra::MaskedUpdate> ups = {{"a", 1, ia, va}, {"b", 1, ib, vb}, {"c", 1, ic, vc}};
  std::vector<float> delta(4, 99.0f);
  std::vector<uint32_t> held(4, 99);
  ASSERT_TRUE(hydra::aggregate_masked_robust(ups, kind(AggregatorKind::kMedian), delta, held).ok());
  // Element 0: {5}; 1: {1, 3} -> 2; 2: {-3, 10, 0} -> 0; 3: none.
  EXPECT_EQ(delta, (std::vector<float>{5, 2, 0, 0}));
  EXPECT_EQ(held, (std::vector<uint32_t>{1, 2, 3, 0}));
  // mean is aggregate_masked itself; krum is refused for masked updates.
  std::vector<float> d2(4);
  std::vector<uint32_t> h2(4);
  ASSERT_TRUE(hydra::aggregate_masked(ups, d2, h2).ok());
  ASSERT_TRUE(hydra::aggregate_masked_robust(ups, kind(AggregatorKind::kMean), delta, held).ok());
  EXPECT_EQ(delta, d2);
  EXPECT_EQ(hydra::aggregate_masked_robust(ups, kind(AggregatorKind::kKrum), delta, held).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace atl::algorithms
