// Secure aggregation's math (algorithms/secagg): Shamir sharing, key agreement and sealing,
// masks that cancel, the exact unmasked sum with and without dropped sites, and masked inputs
// that look uniform to the coordinator.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "algorithms/secagg/crypto.h"
#include "algorithms/secagg/protocol.h"
#include "algorithms/secagg/quantize.h"
#include "algorithms/secagg/shamir.h"

namespace atl::algorithms::secagg {
namespace {

TEST(SecAggShamir, ReconstructsWithThresholdSharesAndNotWithFewer) {
  const std::string secret = "the mask key of site three, 32 B";
  ASSERT_EQ(secret.size(), 32u);
  auto shares = shamir_split(secret, 3, 5);
  ASSERT_TRUE(shares.ok()) << shares.status().to_string();
  // Every 3-subset reconstructs.
  for (size_t a = 0; a < 5; ++a)
    for (size_t b = a + 1; b < 5; ++b)
      for (size_t c = b + 1; c < 5; ++c) {
        std::vector<Share> pick = {(*shares)[a], (*shares)[b], (*shares)[c]};
        auto got = shamir_combine(pick);
        ASSERT_TRUE(got.ok());
        EXPECT_EQ(*got, secret) << a << b << c;
      }
  // All five reconstruct too (consistent shares of a degree-2 polynomial).
  EXPECT_EQ(*shamir_combine(*shares), secret);
  // Two shares: a wrong secret.
  std::vector<Share> two = {(*shares)[0], (*shares)[3]};
  auto wrong = shamir_combine(two);
  ASSERT_TRUE(wrong.ok());
  EXPECT_NE(*wrong, secret);
  // A share changed in one byte: a wrong secret.
  std::vector<Share> bad = {(*shares)[0], (*shares)[1], (*shares)[2]};
  bad[1].y[7] ^= 1;
  EXPECT_NE(*shamir_combine(bad), secret);
}

TEST(SecAggShamir, RefusesBadParametersAndDuplicatePoints) {
  EXPECT_FALSE(shamir_split("x", 0, 3).ok());
  EXPECT_FALSE(shamir_split("x", 4, 3).ok());
  EXPECT_FALSE(shamir_split("x", 2, 256).ok());
  auto shares = shamir_split("abc", 2, 3);
  ASSERT_TRUE(shares.ok());
  std::vector<Share> dup = {(*shares)[0], (*shares)[0]};
  EXPECT_FALSE(shamir_combine(dup).ok());
  EXPECT_EQ(gf256_mul(0x57, 0x83), 0xc1);  // FIPS-197's worked example
}

TEST(SecAggCrypto, AgreementIsSymmetricAndSealingIsAuthenticated) {
  auto a = generate_key_pair(), b = generate_key_pair(), c = generate_key_pair();
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto ab = agree(a->private_key, b->public_key, "p");
  auto ba = agree(b->private_key, a->public_key, "p");
  auto ab_other = agree(a->private_key, b->public_key, "q");
  ASSERT_TRUE(ab.ok() && ba.ok() && ab_other.ok());
  EXPECT_EQ(*ab, *ba);
  EXPECT_NE(*ab, *ab_other);
  EXPECT_EQ(*public_key_of(a->private_key), a->public_key);

  auto sealed = seal(*ab, "shares", "aad");
  ASSERT_TRUE(sealed.ok());
  EXPECT_EQ(*open(*ba, *sealed, "aad"), "shares");
  EXPECT_FALSE(open(*ba, *sealed, "other aad").ok());
  auto ac = agree(a->private_key, c->public_key, "p");
  EXPECT_FALSE(open(*ac, *sealed, "aad").ok());
  std::string altered = *sealed;
  altered[14] ^= 0x20;
  EXPECT_EQ(open(*ba, altered, "aad").status().code(), StatusCode::kDataLoss);

  // The PRG is a function of its seed alone.
  std::vector<uint32_t> m1(1000), m2(1000), m3(1000);
  ASSERT_TRUE(expand_mask(*ab, m1).ok());
  ASSERT_TRUE(expand_mask(*ba, m2).ok());
  ASSERT_TRUE(expand_mask(*ab_other, m3).ok());
  EXPECT_EQ(m1, m2);
  EXPECT_NE(m1, m3);
}

TEST(SecAggQuantize, ClipsMapsAndDequantizesTheMean) {
  const QuantizeOptions o{.clip_range = 1.0, .quantization_range = 1u << 20};
  ASSERT_TRUE(check_quantization(o, 4095).ok());
  EXPECT_FALSE(check_quantization(o, 4096).ok());  // 4096 · 2^20 > 2^32 − 1
  EXPECT_FALSE(check_quantization({.clip_range = 0.0, .quantization_range = 8}, 2).ok());
  // The value as given (it printed -1e-9 as -0.000000).
  EXPECT_EQ(check_quantization({.clip_range = -1e-9, .quantization_range = 8}, 2).message(),
            "secagg.clip_range must be a finite number > 0, got -1e-09");
  EXPECT_EQ(check_quantization({.clip_range = 1.0, .quantization_range = 0}, 2).message(),
            "secagg.quantization_range must be >= 1, got 0");
  const std::vector<float> a = {-5.f, -1.f, 0.f, 0.25f, 1.f, 7.f};
  const std::vector<float> b = {0.5f, 0.5f, -0.5f, 0.25f, -1.f, NAN};
  std::vector<uint32_t> qa(a.size()), qb(b.size()), qa2(a.size());
  quantize(a, o, 11, qa);
  quantize(a, o, 11, qa2);
  quantize(b, o, 12, qb);
  EXPECT_EQ(qa, qa2);  // deterministic for a seed
  EXPECT_EQ(qa[0], 0u);
  EXPECT_EQ(qa[4], 1u << 20);
  EXPECT_EQ(qa[5], 1u << 20);
  std::vector<uint32_t> sum(a.size());
  for (size_t k = 0; k < a.size(); ++k) sum[k] = qa[k] + qb[k];
  std::vector<float> mean(a.size());
  dequantize_mean(sum, 2, o, mean);
  const double step = 2.0 / (1u << 20);
  const std::vector<double> want = {-0.25, -0.25, -0.25, 0.25, 0.0, 0.5};  // b's NaN → 0
  for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(mean[k], want[k], step) << k;
}

// n sites through all four stages; sites in `drop_before_push` share keys but never push.
struct SimulatedRound {
  std::vector<std::vector<uint32_t>> q;     // plain quantized inputs, by site (index k + 1)
  std::vector<std::vector<uint32_t>> y;     // masked inputs of the sites that pushed
  StatusOr<std::vector<uint32_t>> unmasked = std::vector<uint32_t>{};
  std::vector<uint32_t> plain_sum;          // Σ q over the sites that pushed
};

SimulatedRound run_round(uint32_t n, uint32_t t, size_t numel, const std::set<uint32_t>& drop_before_push,
              const std::set<uint32_t>& silent_at_unmask) {
  SimulatedRound run;
  const uint64_t round = 7;
  std::vector<SiteSession> sites;
  Roster roster;
  for (uint32_t i = 1; i <= n; ++i) {
    auto s = SiteSession::start(round);
    EXPECT_TRUE(s.ok());
    roster[i] = s->keys();
    sites.push_back(std::move(*s));
  }
  // Stage 2: sealed shares, routed by the "coordinator".
  std::map<uint32_t, std::map<uint32_t, std::string>> inbox;  // to → from → sealed
  for (uint32_t i = 1; i <= n; ++i) {
    auto out = sites[i - 1].share_keys(i, roster, t);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    for (auto& [j, m] : *out) inbox[j][i] = m;
  }
  for (uint32_t i = 1; i <= n; ++i) EXPECT_TRUE(sites[i - 1].receive_shares(inbox[i]).ok());
  // Stage 3.
  std::mt19937 rng(5);
  UnmaskInput in;
  in.round = round;
  in.threshold = t;
  in.masked_sum.assign(numel, 0);
  run.plain_sum.assign(numel, 0);
  for (uint32_t i = 1; i <= n; ++i) {
    std::vector<uint32_t> q(numel);
    // A plain quantized update is far from uniform: values near the middle of [0, 2^16].
    for (auto& v : q) v = 32768 + (rng() % 512);
    run.q.push_back(q);
    in.mask_public[i] = roster[i].mask_public;
    if (drop_before_push.count(i)) {
      in.dropped.push_back(i);
      continue;
    }
    std::vector<uint32_t> y = q;
    EXPECT_TRUE(sites[i - 1].mask(y).ok());
    for (size_t k = 0; k < numel; ++k) {
      in.masked_sum[k] += y[k];
      run.plain_sum[k] += q[k];
    }
    run.y.push_back(std::move(y));
    in.survivors.push_back(i);
  }
  // Stage 4.
  for (uint32_t i : in.survivors) {
    if (silent_at_unmask.count(i)) continue;
    auto r = sites[i - 1].reveal(in.survivors, in.dropped);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    in.reveals[i] = *r;
  }
  run.unmasked = unmask(in);
  return run;
}

TEST(SecAggProtocol, UnmaskedSumEqualsThePlainSumExactly) {
  SimulatedRound run = run_round(5, 3, 4096, {}, {});
  ASSERT_TRUE(run.unmasked.ok()) << run.unmasked.status().to_string();
  EXPECT_EQ(*run.unmasked, run.plain_sum);
  // Without the unmask, the masked sum is not the plain sum.
  std::vector<uint32_t> masked(4096, 0);
  for (const auto& y : run.y)
    for (size_t k = 0; k < y.size(); ++k) masked[k] += y[k];
  EXPECT_NE(masked, run.plain_sum);
}

TEST(SecAggProtocol, PairwiseMasksCancelInTheSum) {
  // With the self masks taken out by hand, Σ y = Σ q: the pairwise masks cancel.
  const uint64_t round = 3;
  std::vector<SiteSession> sites;
  Roster roster;
  for (uint32_t i = 1; i <= 4; ++i) {
    auto s = SiteSession::start(round);
    ASSERT_TRUE(s.ok());
    roster[i] = s->keys();
    sites.push_back(std::move(*s));
  }
  std::map<uint32_t, std::map<uint32_t, std::string>> inbox;
  for (uint32_t i = 1; i <= 4; ++i) {
    auto sealed = sites[i - 1].share_keys(i, roster, 2);
    ASSERT_TRUE(sealed.ok()) << sealed.status().to_string();
    for (auto& [j, m] : *sealed) inbox[j][i] = m;
  }
  std::vector<uint32_t> sum(257, 0), q(257);
  for (size_t k = 0; k < q.size(); ++k) q[k] = static_cast<uint32_t>(k * 977);
  for (uint32_t i = 1; i <= 4; ++i) ASSERT_TRUE(sites[i - 1].receive_shares(inbox[i]).ok());
  for (uint32_t i = 1; i <= 4; ++i) {
    std::vector<uint32_t> y = q;
    ASSERT_TRUE(sites[i - 1].mask(y).ok());
    // Remove PRG(b_i) with b_i reconstructed from two sites' shares.
    auto r1 = sites[(i % 4)].reveal({1, 2, 3, 4}, {});
    auto r2 = sites[((i + 1) % 4)].reveal({1, 2, 3, 4}, {});
    ASSERT_TRUE(r1.ok() && r2.ok());
    std::vector<Share> shares = {{static_cast<uint8_t>(i % 4 + 1), r1->self_seed_shares.at(i)},
                                 {static_cast<uint8_t>((i + 1) % 4 + 1),
                                  r2->self_seed_shares.at(i)}};
    auto seed = key_from_bytes(*shamir_combine(shares), "seed");
    ASSERT_TRUE(seed.ok());
    ASSERT_TRUE(add_prg(y, *seed, -1).ok());
    EXPECT_NE(y, q);  // the pairwise masks are still on it
    for (size_t k = 0; k < q.size(); ++k) sum[k] += y[k];
  }
  for (size_t k = 0; k < q.size(); ++k) EXPECT_EQ(sum[k], 4 * q[k]) << k;
}

TEST(SecAggProtocol, SitesDroppingBeforeAndAfterTheirPushLeaveAnExactSum) {
  // Site 2 shares keys and never pushes (its mask key is reconstructed); site 4 pushes and
  // then says nothing at the unmask (its self-mask seed is reconstructed from the others').
  SimulatedRound run = run_round(6, 3, 1024, {2}, {4});
  ASSERT_TRUE(run.unmasked.ok()) << run.unmasked.status().to_string();
  EXPECT_EQ(*run.unmasked, run.plain_sum);
}

TEST(SecAggProtocol, FewerRevealsThanTheThresholdAreRefused) {
  SimulatedRound run = run_round(4, 3, 64, {}, {1, 2});
  EXPECT_EQ(run.unmasked.status().code(), StatusCode::kFailedPrecondition);
}

TEST(SecAggProtocol, NeverRevealsOrReconstructsBothSecretsOfOneSite) {
  auto a = SiteSession::start(1), b = SiteSession::start(1);
  ASSERT_TRUE(a.ok() && b.ok());
  Roster roster = {{1, a->keys()}, {2, b->keys()}};
  auto to_b = a->share_keys(1, roster, 2);
  auto to_a = b->share_keys(2, roster, 2);
  ASSERT_TRUE(to_a.ok() && to_b.ok());
  ASSERT_TRUE(a->receive_shares({{2, to_a->at(1)}}).ok());
  // Site 2 as survivor and dropped at once: refused.
  EXPECT_FALSE(a->reveal({1, 2}, {2}).ok());
  // A site missing from both lists: refused.
  EXPECT_FALSE(a->reveal({1}, {}).ok());
  // Answered once; other lists later are refused, the same lists again are not.
  ASSERT_TRUE(a->reveal({1}, {2}).ok());
  EXPECT_FALSE(a->reveal({1, 2}, {}).ok());
  EXPECT_TRUE(a->reveal({1}, {2}).ok());

  // The coordinator's side refuses overlapping lists too.
  UnmaskInput in;
  in.threshold = 1;
  in.masked_sum = {0};
  in.survivors = {1, 2};
  in.dropped = {2};
  EXPECT_EQ(unmask(in).status().code(), StatusCode::kFailedPrecondition);
  // A tampered share of a tampered seal is refused on receipt.
  std::string tampered = to_b->at(2);
  tampered.back() ^= 1;
  EXPECT_EQ(b->receive_shares({{1, tampered}}).code(), StatusCode::kDataLoss);
}

// χ² statistic of the byte values of `words` against the uniform distribution (255 degrees of
// freedom: mean 255, standard deviation ≈ 22.6).
double byte_chi_square(const std::vector<uint32_t>& words) {
  std::vector<double> counts(256, 0.0);
  for (uint32_t w : words)
    for (int k = 0; k < 4; ++k) counts[(w >> (8 * k)) & 0xff] += 1;
  const double expected = static_cast<double>(words.size()) * 4 / 256;
  double chi = 0;
  for (double c : counts) chi += (c - expected) * (c - expected) / expected;
  return chi;
}

TEST(SecAggProtocol, OneMaskedInputLooksUniformWhileThePlainInputDoesNot) {
  SimulatedRound run = run_round(3, 2, 1 << 15, {}, {});
  ASSERT_TRUE(run.unmasked.ok());
  // 255 degrees of freedom: P(χ² > 360) < 1e-4 for uniform bytes.
  for (size_t i = 0; i < run.y.size(); ++i) {
    EXPECT_LT(byte_chi_square(run.y[i]), 360.0) << "masked input of site " << i + 1;
    EXPECT_GT(byte_chi_square(run.q[i]), 10000.0) << "plain input of site " << i + 1;
  }
  // Bit balance: every bit position of the masked words is set about half the time.
  const auto& y = run.y[0];
  for (int bit = 0; bit < 32; ++bit) {
    size_t ones = 0;
    for (uint32_t w : y) ones += (w >> bit) & 1;
    const double frac = static_cast<double>(ones) / static_cast<double>(y.size());
    EXPECT_NEAR(frac, 0.5, 0.015) << "bit " << bit;  // 5.4 σ for 32768 words
  }
}

}  // namespace
}  // namespace atl::algorithms::secagg
