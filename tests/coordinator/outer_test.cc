// DiLoCo outer math: weighted aggregation (fixed order, bitwise deterministic) and outer
// Nesterov (PyTorch SGD nesterov=True, dampening 0), against hand-computed values and a direct
// double-precision formula.
#include "algorithms/diloco/outer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace atl::algorithms {
namespace {

TEST(Aggregate, HandComputedTokenWeightedMean) {
  const std::vector<float> a = {1.0f, -2.0f, 0.5f};
  const std::vector<float> b = {3.0f, 2.0f, -0.5f};
  // w = (1, 3): Δ = (1·a + 3·b) / 4
  std::vector<Update> ups = {{"node-a", 1, a}, {"node-b", 3, b}};
  std::vector<float> out(3);
  ASSERT_TRUE(aggregate_pseudo_gradients(ups, out).ok());
  EXPECT_FLOAT_EQ(out[0], 2.5f);
  EXPECT_FLOAT_EQ(out[1], 1.0f);
  EXPECT_FLOAT_EQ(out[2], -0.25f);
}

TEST(Aggregate, MatchesDirectDoubleFormulaAndIsBitwiseDeterministic) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1e-2f);
  const size_t n = 100000, k = 5;
  std::vector<std::vector<float>> deltas(k, std::vector<float>(n));
  for (auto& d : deltas)
    for (auto& x : d) x = nd(rng);
  const std::vector<uint64_t> tokens = {1000, 2048, 7, 123456, 999};
  std::vector<Update> ups;
  const std::vector<std::string> ids = {"n0", "n1", "n2", "n3", "n4"};
  for (size_t i = 0; i < k; ++i) ups.push_back({ids[i], tokens[i], deltas[i]});
  std::vector<float> out(n), again(n);
  ASSERT_TRUE(aggregate_pseudo_gradients(ups, out).ok());
  ASSERT_TRUE(aggregate_pseudo_gradients(ups, again).ok());
  EXPECT_EQ(std::memcmp(out.data(), again.data(), n * 4), 0);
  double w = 0;
  for (auto t : tokens) w += static_cast<double>(t);
  for (size_t j = 0; j < n; ++j) {
    double ref = 0;
    for (size_t i = 0; i < k; ++i) ref += static_cast<double>(tokens[i]) * deltas[i][j];
    ref /= w;
    ASSERT_NEAR(out[j], ref, 1e-7 * std::abs(ref) + 1e-12) << j;
  }
}

TEST(Aggregate, RejectsUnsortedDuplicatesWrongSizeAndZeroTokens) {
  std::vector<float> a(4, 1.0f), b(4, 2.0f), c(3, 1.0f), out(4);
  EXPECT_EQ(aggregate_pseudo_gradients({{"b", 1, a}, {"a", 1, b}}, out).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(aggregate_pseudo_gradients({{"a", 1, a}, {"a", 1, b}}, out).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(aggregate_pseudo_gradients({{"a", 1, a}, {"b", 1, c}}, out).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(aggregate_pseudo_gradients({{"a", 0, a}}, out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(aggregate_pseudo_gradients({}, out).code(), StatusCode::kInvalidArgument);
}

TEST(OuterNesterov, HandComputedTwoSteps) {
  // η = 0.5, μ = 0.5, θ = 1, Δ₁ = 0.25: m = 0.25, θ = 1 - 0.5·(0.25 + 0.125) = 0.8125.
  // Δ₂ = 0.5: m = 0.125 + 0.5 = 0.625, θ = 0.8125 - 0.5·(0.5 + 0.3125) = 0.40625.
  // (all exactly representable)
  OuterNesterov opt({0.5f, 0.5f});
  std::vector<float> theta = {1.0f}, m = {0.0f};
  std::vector<float> d1 = {0.25f}, d2 = {0.5f};
  ASSERT_TRUE(opt.step(theta, m, d1, /*first_step=*/true).ok());
  EXPECT_EQ(m[0], 0.25f);
  EXPECT_EQ(theta[0], 0.8125f);
  ASSERT_TRUE(opt.step(theta, m, d2, /*first_step=*/false).ok());
  EXPECT_EQ(m[0], 0.625f);
  EXPECT_EQ(theta[0], 0.40625f);
}

TEST(OuterNesterov, WithoutTheLookAheadThetaMovesByTheDeltaAndTheBufferAsAlways) {
  // η = 0.5, μ = 0.5, after the first step of HandComputedTwoSteps (θ = 0.8125, m = 0.25),
  // Δ₂ = 0.5 without the look-ahead: m = 0.625 as with it, θ = 0.8125 - 0.5·0.5 = 0.5625.
  OuterNesterov opt({0.5f, 0.5f});
  std::vector<float> theta = {0.8125f}, m = {0.25f}, d = {0.5f};
  ASSERT_TRUE(opt.step(theta, m, d, /*first_step=*/false, /*look_ahead=*/false).ok());
  EXPECT_EQ(m[0], 0.625f);
  EXPECT_EQ(theta[0], 0.5625f);
  // With η = 1: the sites' mean θ_local, θ − Δ (Δ = θ − mean), whatever the buffer holds.
  OuterNesterov unit({1.0f, 0.9f});
  std::vector<float> t = {2.0f, -1.0f}, buf = {7.0f, -3.0f}, mean = {1.5f, -0.25f};
  std::vector<float> delta = {t[0] - mean[0], t[1] - mean[1]};
  ASSERT_TRUE(unit.step(t, buf, delta, false, false).ok());
  EXPECT_EQ(t, mean);
  EXPECT_EQ(buf, (std::vector<float>{0.9f * 7.0f + 0.5f, 0.9f * -3.0f - 0.75f}));
}

TEST(OuterNesterov, FirstStepBufferIsDeltaEvenForNegativeZero) {
  // PyTorch initialises the buffer to clone(Δ); μ·0 + (−0) would give +0 instead.
  OuterNesterov opt;
  std::vector<float> theta = {-0.0f}, m = {123.0f /* ignored on the first step */};
  std::vector<float> d = {-0.0f};
  ASSERT_TRUE(opt.step(theta, m, d, true).ok());
  EXPECT_TRUE(std::signbit(m[0]));
  // For ordinary values the two definitions coincide: compare with a zero buffer, not first.
  std::vector<float> t1 = {0.3f, -1.7f}, t2 = t1, m1(2), m2(2, 0.0f), dd = {0.01f, -0.2f};
  ASSERT_TRUE(opt.step(t1, m1, dd, true).ok());
  ASSERT_TRUE(opt.step(t2, m2, dd, false).ok());
  EXPECT_EQ(std::memcmp(t1.data(), t2.data(), 8), 0);
  EXPECT_EQ(std::memcmp(m1.data(), m2.data(), 8), 0);
}

TEST(OuterNesterov, MatchesDoubleFormulaOverManySteps) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1e-3f);
  const size_t n = 1000;
  OuterNesterov opt;  // η = 0.7, μ = 0.9
  EXPECT_FLOAT_EQ(opt.options().lr, 0.7f);
  EXPECT_FLOAT_EQ(opt.options().momentum, 0.9f);
  std::vector<float> theta(n), m(n);
  std::vector<double> theta_d(n), m_d(n);
  for (size_t j = 0; j < n; ++j) theta_d[j] = theta[j] = nd(rng) * 100;
  for (int step = 0; step < 10; ++step) {
    std::vector<float> d(n);
    for (auto& x : d) x = nd(rng);
    ASSERT_TRUE(opt.step(theta, m, d, step == 0).ok());
    for (size_t j = 0; j < n; ++j) {
      m_d[j] = (step == 0) ? d[j] : 0.9 * m_d[j] + d[j];
      theta_d[j] -= 0.7 * (d[j] + 0.9 * m_d[j]);
    }
  }
  for (size_t j = 0; j < n; ++j) {
    EXPECT_NEAR(theta[j], theta_d[j], 1e-5 * (1 + std::abs(theta_d[j])));
    EXPECT_NEAR(m[j], m_d[j], 1e-5 * (1 + std::abs(m_d[j])));
  }
}

TEST(OuterNesterov, RejectsSizeMismatch) {
  OuterNesterov opt;
  std::vector<float> a(3), b(3), c(2);
  EXPECT_EQ(opt.step(a, b, c, true).code(), StatusCode::kInvalidArgument);
}

TEST(Finite, NamesFirstBadElement) {
  std::vector<float> v = {1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity()};
  EXPECT_FALSE(all_finite(v));
  Status st = check_finite(v, "update");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "update: element 2 is nan (all values must be finite)");
  v[2] = 0.0f;
  EXPECT_NE(check_finite(v, "update").message().find("element 3 is inf"), std::string::npos);
  v[3] = 0.0f;
  EXPECT_TRUE(check_finite(v, "update").ok());
}

TEST(Fingerprints, LayoutAndParams) {
  ParamLayout a, b;
  a.add("w", {2, 3});
  b.add("w", {3, 2});
  EXPECT_NE(layout_fingerprint(a), layout_fingerprint(b));
  ParamSet p(a);
  p.data()[1] = 0.5f;
  EXPECT_EQ(params_fingerprint(p.vec()), p.fingerprint());
}

}  // namespace
}  // namespace atl::algorithms
