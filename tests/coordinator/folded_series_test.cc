// FoldedSeries: the dashboard's per-round series in bounded memory.
#include "coordinator/folded_series.h"

#include <gtest/gtest.h>

namespace atl::coordinator {
namespace {

TEST(FoldedSeries, KeepsEveryRoundUntilFullThenHalvesAndStaysBounded) {
  FoldedSeries s;
  for (int r = 1; r < static_cast<int>(kMaxSeriesPoints); ++r) s.add(r, 2.0 * r);
  EXPECT_EQ(s.stride(), 1u);
  EXPECT_EQ(s.points(), kMaxSeriesPoints - 1);
  const Series all = s.bucketed(1);
  ASSERT_EQ(all.size(), kMaxSeriesPoints - 1);
  EXPECT_EQ(all[41].round, 42);
  EXPECT_EQ(all[41].value, 84);
  s.add(kMaxSeriesPoints, 2.0 * kMaxSeriesPoints);  // full: pairs merge
  EXPECT_EQ(s.stride(), 2u);
  EXPECT_EQ(s.points(), kMaxSeriesPoints / 2);
  // A million rounds: never more than kMaxSeriesPoints points.
  for (int r = kMaxSeriesPoints + 1; r <= 1000000; ++r) {
    s.add(r, 2.0 * r);
    ASSERT_LE(s.points(), kMaxSeriesPoints) << "round " << r;
  }
  EXPECT_EQ(s.stride(), 256u);  // 1e6 values / 256 = 3906 points, between 2500 and 5000
  EXPECT_GE(s.points(), kMaxSeriesPoints / 2);
}

TEST(FoldedSeries, BucketsThatAreMultiplesOfTheStrideSumExactly) {
  // One value per round (bytes sent): bucket × each point's mean is the bucket's sum, which the
  // dashboard adds up for its "bytes sent" axis.
  FoldedSeries s;
  double total = 0;
  const int rounds = 3 * static_cast<int>(kMaxSeriesPoints) + 7;  // stride 4, a partial tail
  for (int r = 1; r <= rounds; ++r) {
    const double bytes = 1000 + (r * 7919) % 313;
    s.add(r, bytes);
    total += bytes;
  }
  ASSERT_EQ(s.stride(), 4u);
  for (uint64_t bucket : {4u, 8u, 12u, 400u}) {
    const Series b = s.bucketed(bucket);
    double sum = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      const bool last = i + 1 == b.size();
      const double in_bucket = last ? rounds - bucket * i : bucket;
      sum += b[i].value * in_bucket;
      // x is the mean round of the bucket's rounds.
      const double first = bucket * i + 1, end = last ? rounds : bucket * (i + 1);
      EXPECT_DOUBLE_EQ(b[i].round, (first + end) / 2) << "bucket " << bucket << " point " << i;
    }
    EXPECT_NEAR(sum, total, 1e-6 * total) << "bucket " << bucket;
    EXPECT_EQ(b.size(), (rounds + bucket - 1) / bucket);
  }
}

TEST(FoldedSeries, TheLatestValueOfARoundWinsAndRoundZeroStandsAlone) {
  FoldedSeries s;
  s.add(0, 9.0);  // the initial parameters' bpb
  s.add(10, 5.0);
  s.add(10, 4.0);  // the same round reported again (after a restart): the latest wins
  s.add(20, 3.0);
  s.add(15, 7.0);  // an earlier round stored later goes in its place
  const Series b = s.bucketed(100);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].round, 0);
  EXPECT_EQ(b[0].value, 9);
  EXPECT_DOUBLE_EQ(b[1].round, 15);
  EXPECT_DOUBLE_EQ(b[1].value, (4.0 + 7.0 + 3.0) / 3);
  const Series each = s.bucketed(1);
  ASSERT_EQ(each.size(), 4u);
  EXPECT_EQ(each[1].value, 4);
  EXPECT_EQ(each[2].round, 15);
  EXPECT_EQ(each[3].round, 20);
}

TEST(FoldedSeries, ReplacingAfterAMergeAdjustsTheNewestPoint) {
  FoldedSeries s;
  for (int r = 1; r <= static_cast<int>(kMaxSeriesPoints); ++r) s.add(r, 1.0);
  ASSERT_EQ(s.stride(), 2u);
  s.add(kMaxSeriesPoints, 3.0);  // its value now sits in a merged point with round 4999's
  const Series b = s.bucketed(2);
  EXPECT_DOUBLE_EQ(b.back().value, 2.0);
  s.add(kMaxSeriesPoints + 1, 5.0);  // pending: half a point
  s.add(kMaxSeriesPoints + 1, 1.0);
  EXPECT_DOUBLE_EQ(s.bucketed(2).back().value, 1.0);
}

}  // namespace
}  // namespace atl::coordinator
