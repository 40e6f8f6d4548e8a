// Byzantine sites (simulate/byzantine.h): what each attack puts on the wire, as the round engine
// receives it, against the honest site's update.
#include "simulate/byzantine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "algorithms/compress/codec.h"
#include "algorithms/diloco/robust.h"

namespace atl::simulate {
namespace {
namespace pb = atoll_pb::v1;

// Records every push; refuses token claims above `max_tokens` as the coordinator does.
class RecordingCalls final : public node::CoordinatorCalls {
 public:
  struct Push {
    pb::TensorHeader header;
    std::string payload;
  };
  std::vector<Push> pushes;
  uint64_t max_tokens = UINT64_MAX;

  const std::string& target() const override { return target_; }
  Status join(const pb::JoinRequest&, pb::JoinResponse*) override { return Status::Ok(); }
  Status heartbeat(const pb::HeartbeatRequest&, pb::HeartbeatResponse*) override {
    return Status::Ok();
  }
  Status next_task(const pb::NextTaskRequest&, pb::Task*) override { return Status::Ok(); }
  Status pull_params(const pb::PullParamsRequest&, pb::TensorHeader*, std::string*) override {
    return Status::Ok();
  }
  Status push_update(const pb::TensorHeader& header, std::string_view payload,
                     pb::PushUpdateResponse* resp) override {
    pushes.push_back({header, std::string(payload)});
    if (header.tokens() > max_tokens)
      return InvalidArgument("token claim " + std::to_string(header.tokens()) +
                             " is more than a round allows");
    resp->set_accepted(true);
    return Status::Ok();
  }
  Status report_metrics(const pb::MetricsReport&, pb::MetricsAck*) override {
    return Status::Ok();
  }
  Status leave(const pb::LeaveRequest&, pb::LeaveResponse*) override { return Status::Ok(); }
  Status report_importance(const pb::ImportanceReport&, pb::ImportanceAck*) override {
    return Status::Ok();
  }
  Status advertise_keys(const pb::SecAggKeys&, pb::SecAggRoster*) override {
    return FailedPrecondition("no secure aggregation here");
  }
  Status share_keys(const pb::SecAggShares&, pb::SecAggShares*) override {
    return FailedPrecondition("no secure aggregation here");
  }
  Status await_unmask(const pb::SecAggUnmaskPoll&, pb::SecAggUnmaskTask*) override {
    return FailedPrecondition("no secure aggregation here");
  }
  Status reveal_shares(const pb::SecAggReveal&, pb::SecAggRevealAck*) override {
    return FailedPrecondition("no secure aggregation here");
  }

 private:
  std::string target_ = "recording";
};

constexpr size_t kNumel = 4096;

// A deterministic honest Δ with values of both signs, different per round.
std::vector<float> honest_delta(uint64_t round) {
  std::vector<float> v(kNumel);
  for (size_t i = 0; i < kNumel; ++i)
    v[i] = 1e-3f * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(round));
  return v;
}

pb::TensorHeader header_of(uint64_t round, const std::string& codec = "none") {
  pb::TensorHeader h;
  h.set_experiment_id("exp");
  h.set_round(round);
  h.set_codec(codec);
  h.set_numel(kNumel);
  h.set_tokens(2048);
  h.set_params_fingerprint("base-" + std::to_string(round));
  return h;
}

std::string raw(const std::vector<float>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)};
}

std::vector<float> floats(const std::string& payload) {
  std::vector<float> v(payload.size() / sizeof(float));
  std::memcpy(v.data(), payload.data(), v.size() * sizeof(float));
  return v;
}

// Pushes `values` for `round` through a Byzantine site; returns what the engine's side got.
struct Attacked {
  RecordingCalls* engine;
  std::unique_ptr<ByzantineCalls> site;
};
Attacked byzantine_site(Attack attack, uint64_t seed = 7) {
  auto rec = std::make_unique<RecordingCalls>();
  RecordingCalls* engine = rec.get();
  return {engine, std::make_unique<ByzantineCalls>(std::move(rec), attack, seed)};
}

TEST(Byzantine, SignFlipSendsMinusTenTimesTheHonestUpdate) {
  auto [engine, site] = byzantine_site(Attack::kSignFlip);
  const std::vector<float> honest = honest_delta(1);
  pb::PushUpdateResponse resp;
  ASSERT_TRUE(site->push_update(header_of(1), raw(honest), &resp).ok());
  ASSERT_EQ(engine->pushes.size(), 1u);
  const std::vector<float> got = floats(engine->pushes[0].payload);
  ASSERT_EQ(got.size(), kNumel);
  for (size_t i = 0; i < kNumel; ++i)
    ASSERT_EQ(got[i], static_cast<float>(-10.0 * honest[i])) << i;
  // The header is the honest one's: same round, claim, base.
  EXPECT_EQ(engine->pushes[0].header.SerializeAsString(), header_of(1).SerializeAsString());
  EXPECT_NEAR(algorithms::l2_norm(got) / algorithms::l2_norm(honest), 10.0, 1e-6);
}

TEST(Byzantine, ScaleSendsAMillionTimesTheHonestUpdate) {
  auto [engine, site] = byzantine_site(Attack::kScale);
  const std::vector<float> honest = honest_delta(3);
  pb::PushUpdateResponse resp;
  ASSERT_TRUE(site->push_update(header_of(3), raw(honest), &resp).ok());
  const std::vector<float> got = floats(engine->pushes.at(0).payload);
  for (size_t i = 0; i < kNumel; ++i) ASSERT_EQ(got[i], static_cast<float>(1e6 * honest[i])) << i;
}

TEST(Byzantine, GaussianIsNoiseOfTenTimesTheHonestNormKeyedBySeedAndRound) {
  const std::vector<float> honest = honest_delta(2);
  const double honest_norm = algorithms::l2_norm(honest);
  auto [engine, site] = byzantine_site(Attack::kGaussian, 11);
  pb::PushUpdateResponse resp;
  ASSERT_TRUE(site->push_update(header_of(2), raw(honest), &resp).ok());
  const std::vector<float> got = floats(engine->pushes.at(0).payload);
  // ‖N(0, σ²I)‖ over 4096 draws is within a few percent of σ√n = 10 ‖Δ‖.
  EXPECT_NEAR(algorithms::l2_norm(got) / honest_norm, 10.0, 0.5);
  // Noise, not the update: almost no correlation with Δ.
  double dot = 0;
  for (size_t i = 0; i < kNumel; ++i) dot += static_cast<double>(got[i]) * honest[i];
  EXPECT_LT(std::abs(dot) / (algorithms::l2_norm(got) * honest_norm), 0.1);
  // Reproducible for (seed, round); another round or seed draws other noise.
  EXPECT_EQ(attacked_values(Attack::kGaussian, honest, {}, 11, 2), got);
  EXPECT_NE(attacked_values(Attack::kGaussian, honest, {}, 11, 3), got);
  EXPECT_NE(attacked_values(Attack::kGaussian, honest, {}, 12, 2), got);
}

TEST(Byzantine, InflatedTokenClaimIsSentThenTheHonestClaimWhenRefused) {
  auto [engine, site] = byzantine_site(Attack::kTokens);
  engine->max_tokens = 4096;
  const std::vector<float> honest = honest_delta(1);
  pb::PushUpdateResponse resp;
  ASSERT_TRUE(site->push_update(header_of(1), raw(honest), &resp).ok());
  EXPECT_TRUE(resp.accepted());
  ASSERT_EQ(engine->pushes.size(), 2u);
  EXPECT_EQ(engine->pushes[0].header.tokens(), kInflatedTokenClaim);
  EXPECT_EQ(engine->pushes[1].header.tokens(), 2048u);
  EXPECT_EQ(engine->pushes[0].payload, raw(honest));
  EXPECT_EQ(engine->pushes[1].payload, raw(honest));

  // A coordinator that took the claim gets it once.
  auto [lax, site2] = byzantine_site(Attack::kTokens);
  ASSERT_TRUE(site2->push_update(header_of(1), raw(honest), &resp).ok());
  ASSERT_EQ(lax->pushes.size(), 1u);
  EXPECT_EQ(lax->pushes[0].header.tokens(), kInflatedTokenClaim);
}

TEST(Byzantine, ReplaySendsItsFirstPushAgainByteForByte) {
  auto [engine, site] = byzantine_site(Attack::kReplay);
  pb::PushUpdateResponse resp;
  ASSERT_TRUE(site->push_update(header_of(1), raw(honest_delta(1)), &resp).ok());
  ASSERT_TRUE(site->push_update(header_of(2), raw(honest_delta(2)), &resp).ok());
  ASSERT_TRUE(site->push_update(header_of(3), raw(honest_delta(3)), &resp).ok());
  ASSERT_EQ(engine->pushes.size(), 3u);
  for (const auto& push : engine->pushes) EXPECT_EQ(push.payload, raw(honest_delta(1)));
  EXPECT_EQ(engine->pushes[2].header.round(), 3u);  // the current round's header
  // An update of another codec cannot carry the replayed bytes: the honest one goes, and is
  // replayed from then on.
  ASSERT_TRUE(site->push_update(header_of(4, "bf16"), "bf16-bytes-4", &resp).ok());
  ASSERT_TRUE(site->push_update(header_of(5, "bf16"), "bf16-bytes-5", &resp).ok());
  EXPECT_EQ(engine->pushes[3].payload, "bf16-bytes-4");
  EXPECT_EQ(engine->pushes[4].payload, "bf16-bytes-4");
}

TEST(Byzantine, StaleSendsThePreviousRoundsUpdate) {
  auto [engine, site] = byzantine_site(Attack::kStale);
  pb::PushUpdateResponse resp;
  // Round 1 has no previous update: the honest one goes.
  ASSERT_TRUE(site->push_update(header_of(1), raw(honest_delta(1)), &resp).ok());
  ASSERT_TRUE(site->push_update(header_of(2), raw(honest_delta(2)), &resp).ok());
  // A retried push of round 2 still replays round 1.
  ASSERT_TRUE(site->push_update(header_of(2), raw(honest_delta(2)), &resp).ok());
  ASSERT_TRUE(site->push_update(header_of(3), raw(honest_delta(3)), &resp).ok());
  ASSERT_EQ(engine->pushes.size(), 4u);
  EXPECT_EQ(engine->pushes[0].payload, raw(honest_delta(1)));
  EXPECT_EQ(engine->pushes[1].payload, raw(honest_delta(1)));
  EXPECT_EQ(engine->pushes[2].payload, raw(honest_delta(1)));
  EXPECT_EQ(engine->pushes[3].payload, raw(honest_delta(2)));
  EXPECT_EQ(engine->pushes[3].header.round(), 3u);  // the current round's header
}

TEST(Byzantine, AttacksGoThroughTheUpdatesCodec) {
  const std::string spec = "int8";
  auto codec = algorithms::compress::Codec::create(spec);
  ASSERT_TRUE(codec.ok()) << codec.status().to_string();
  const std::vector<float> honest = honest_delta(1);
  auto encoded = codec->encode(honest);
  ASSERT_TRUE(encoded.ok());
  auto honest_decoded = codec->decode(*encoded, kNumel);
  ASSERT_TRUE(honest_decoded.ok());

  auto [engine, site] = byzantine_site(Attack::kSignFlip);
  pb::PushUpdateResponse resp;
  const std::string payload(encoded->begin(), encoded->end());
  ASSERT_TRUE(site->push_update(header_of(1, spec), payload, &resp).ok());
  const std::string& sent = engine->pushes.at(0).payload;
  auto got = codec->decode({reinterpret_cast<const uint8_t*>(sent.data()), sent.size()}, kNumel);
  ASSERT_TRUE(got.ok()) << got.status().to_string();  // a valid int8 message
  float max_abs = 0;
  for (float v : *honest_decoded) max_abs = std::max(max_abs, std::abs(v));
  for (size_t i = 0; i < kNumel; ++i)  // −10 × Δ within int8's step of the attacked range
    ASSERT_NEAR((*got)[i], -10.0f * (*honest_decoded)[i], 10.0f * max_abs / 100.0f) << i;
}

TEST(Byzantine, AnUpdateItCannotDecodeIsNotSent) {
  auto [engine, site] = byzantine_site(Attack::kSignFlip);
  pb::PushUpdateResponse resp;
  Status st = site->push_update(header_of(1), "short", &resp);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_TRUE(engine->pushes.empty());
}

TEST(Byzantine, AttackNamesParseAndABadOneSaysWhichExist) {
  for (Attack a : {Attack::kSignFlip, Attack::kGaussian, Attack::kScale, Attack::kTokens,
                   Attack::kReplay, Attack::kStale}) {
    auto parsed = parse_attack(attack_name(a));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, a);
  }
  auto bad = parse_attack("flip");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(
      bad.status().message(),
      "--attack flip is not an attack: use one of sign-flip, gaussian, scale, tokens, replay, "
      "stale");
  EXPECT_FALSE(parse_attack("none").ok());
}

}  // namespace
}  // namespace atl::simulate
