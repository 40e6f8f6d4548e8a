// Replay detection's count sketch (algorithms/diloco/replay.h): a repeat has cosine 1, the
// sketch's cosine follows the exact one within its error bound, and the sketch is keyed by the
// θ element, not the position in the update.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "algorithms/diloco/replay.h"
#include "test_util.h"

namespace atl::algorithms {
namespace {

using testing_util::normal_vector;

double exact_cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return d / std::sqrt(aa * bb);
}

// b = c·a + √(1 − c²)·noise: cosine ≈ c with a.
std::vector<float> correlated(const std::vector<float>& a, double c, uint32_t seed) {
  const std::vector<float> noise = normal_vector(a.size(), seed);
  std::vector<float> b(a.size());
  for (size_t i = 0; i < a.size(); ++i)
    b[i] = static_cast<float>(c * a[i] + std::sqrt(1 - c * c) * noise[i]);
  return b;
}

TEST(ReplaySketch, ARepeatHasCosineOneAndTheSketchIsReproducible) {
  const std::vector<float> a = normal_vector(100000, 1);
  const std::vector<double> s1 = replay_sketch(a), s2 = replay_sketch(a);
  ASSERT_EQ(s1.size(), kReplaySketchBuckets);
  EXPECT_EQ(s1, s2);  // bit for bit
  EXPECT_NEAR(sketch_cosine(s1, s2), 1.0, 1e-12);
  // Scale does not matter, the sign does.
  std::vector<float> scaled = a, negated = a;
  for (float& x : scaled) x *= 3.0f;
  for (float& x : negated) x = -x;
  EXPECT_NEAR(sketch_cosine(s1, replay_sketch(scaled)), 1.0, 1e-6);
  EXPECT_NEAR(sketch_cosine(s1, replay_sketch(negated)), -1.0, 1e-12);
}

TEST(ReplaySketch, CosineFollowsTheExactOneWithinTheSketchError) {
  // 1/√4096 = 0.016 is one standard deviation at worst; 0.08 is five.
  const std::vector<float> a = normal_vector(200000, 2);
  for (double c : {0.0, 0.3, 0.7, 0.9, 0.99}) {
    const std::vector<float> b = correlated(a, c, 3 + static_cast<uint32_t>(c * 100));
    const double exact = exact_cosine(a, b);
    const double sketched = sketch_cosine(replay_sketch(a), replay_sketch(b));
    EXPECT_NEAR(sketched, exact, 0.08) << "c = " << c;
  }
}

TEST(ReplaySketch, ValuesAreKeyedByTheirThetaElement) {
  // The same values at other θ elements are another update: cosine near 0, not 1.
  const std::vector<float> a = normal_vector(50000, 4);
  std::vector<uint32_t> same(a.size()), shifted(a.size());
  for (size_t j = 0; j < a.size(); ++j) {
    same[j] = static_cast<uint32_t>(j);
    shifted[j] = static_cast<uint32_t>(j + 50000);
  }
  EXPECT_EQ(replay_sketch(a, same), replay_sketch(a));
  EXPECT_LT(std::abs(sketch_cosine(replay_sketch(a, same), replay_sketch(a, shifted))), 0.1);
}

TEST(ReplaySketch, ZeroOrMismatchedSketchesHaveCosineZero) {
  const std::vector<double> zero = replay_sketch(std::vector<float>(1000, 0.0f));
  const std::vector<double> a = replay_sketch(normal_vector(1000, 5));
  EXPECT_EQ(sketch_cosine(zero, zero), 0.0);
  EXPECT_EQ(sketch_cosine(a, zero), 0.0);
  EXPECT_EQ(sketch_cosine(a, std::vector<double>(10, 1.0)), 0.0);
  // Non-finite values (refused at the push anyway) never read as a repeat.
  std::vector<float> inf(1000, std::numeric_limits<float>::infinity());
  EXPECT_EQ(sketch_cosine(replay_sketch(inf), replay_sketch(inf)), 0.0);
}

}  // namespace
}  // namespace atl::algorithms
