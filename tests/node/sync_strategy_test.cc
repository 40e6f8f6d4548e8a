// The sync strategies' arithmetic on real ParamSets and codecs: which elements an update covers,
// Δ = θ_global − θ_local over them, the error feedback each keeps (one residual for DiLoCo, one
// per fragment for Streaming DiLoCo, one per trained set for Hydra), the Streaming merge, and
// the refusals of impossible TrainSpecs.
#include "node/sync_strategy.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "algorithms/compress/codec.h"
#include "algorithms/compress/error_feedback.h"
#include "algorithms/diloco/streaming.h"
#include "algorithms/model/subnet.h"
#include "node/inner_step.h"
#include "node/site_config.h"
#include "tests/node/node_test_util.h"

namespace atl::node {
namespace {

namespace al = atl::algorithms;
using atoll_pb::v1::Task;
using testing::fill_random;
using testing::small_join;

constexpr char kLossy[] = "topk:0.05+int4";

SiteConfig site_of(const atoll_pb::v1::JoinResponse& j) {
  auto s = site_config_from_join(j);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : SiteConfig{};
}

// A strategy with the inner step it plans on (Hydra sets subnetworks there), and θ, θ_local.
struct Sync {
  SiteConfig site;
  std::unique_ptr<InnerStep> inner;
  std::unique_ptr<SyncStrategy> strategy;
  al::ParamSet theta, local;

  explicit Sync(const atoll_pb::v1::JoinResponse& j)
      : site(site_of(j)), theta(al::make_layout(site.model)), local(al::make_layout(site.model)) {
    auto i = make_inner_step(site, InnerStepOptions{});
    EXPECT_TRUE(i.ok()) << i.status().to_string();
    if (!i.ok()) return;
    inner = std::move(i).value();
    auto s = make_sync_strategy(site, *inner);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (s.ok()) strategy = std::move(s).value();
  }
  // A new θ, θ_local pair for round `r` (θ_local = θ plus a small training step's worth).
  void new_round(uint64_t r) {
    fill_random(theta, 100 + r);
    fill_random(local, 200 + r, 0.01f);
    for (size_t i = 0; i < theta.numel(); ++i) local.data()[i] += theta.data()[i];
  }
  std::vector<float> delta_at(size_t offset, size_t numel) const {
    std::vector<float> d(numel);
    for (size_t i = 0; i < numel; ++i) d[i] = theta.data()[offset + i] - local.data()[offset + i];
    return d;
  }
};

std::string as_string(const std::vector<uint8_t>& b) {
  return std::string(b.begin(), b.end());
}

std::string reference_encode(al::compress::ErrorFeedback& fb, const std::vector<float>& d) {
  auto codec = al::compress::Codec::create(kLossy);
  EXPECT_TRUE(codec.ok());
  auto bytes = fb.encode(*codec, d);
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  return bytes.ok() ? as_string(*bytes) : "";
}

Task fragment_task(const al::FragmentRange& f) {
  Task t;
  t.set_kind(Task::TRAIN);
  t.set_fragment_offset(f.offset);
  t.set_fragment_numel(f.numel);
  return t;
}

TEST(DilocoSync, UpdateIsThetaMinusLocalOverAllOfThetaUncompressed) {
  Sync s(small_join());
  ASSERT_TRUE(s.strategy);
  s.new_round(0);
  ASSERT_TRUE(s.strategy->plan(Task{}).ok());
  EXPECT_EQ(s.strategy->planned_numel(), s.theta.numel());
  auto u = s.strategy->make_update(s.theta, s.local);
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  EXPECT_EQ(u->codec, "none");
  EXPECT_FALSE(u->payload.has_value());
  EXPECT_EQ(u->numel, s.theta.numel());
  EXPECT_EQ(u->header.fragment_offset, 0u);
  const auto want = s.delta_at(0, s.theta.numel());
  ASSERT_EQ(u->delta.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(u->delta[i], want[i]) << i;
  // No merge: the next round starts from the pulled θ.
  const std::vector<float> before = s.local.vec();
  s.strategy->merge(s.local, s.theta);
  EXPECT_EQ(s.local.vec(), before);
  EXPECT_EQ(s.strategy->overlap_steps(), 0u);
  EXPECT_FALSE(s.strategy->scores());
}

// With a lossy codec, what round r dropped is added to round r + 1's Δ (one residual over θ);
// with error_feedback off, every round is encoded alone.
TEST(DilocoSync, ErrorFeedbackCarriesTheResidualAcrossRounds) {
  Sync with(small_join("diloco", kLossy));
  auto j = small_join("diloco", kLossy);
  j.mutable_train()->set_error_feedback(false);
  Sync without(j);
  ASSERT_TRUE(with.strategy && without.strategy);
  al::compress::ErrorFeedback ref(with.theta.numel());
  auto codec = al::compress::Codec::create(kLossy);
  ASSERT_TRUE(codec.ok());
  for (uint64_t r = 0; r < 3; ++r) {
    with.new_round(r);
    without.new_round(r);
    ASSERT_TRUE(with.strategy->plan(Task{}).ok());
    ASSERT_TRUE(without.strategy->plan(Task{}).ok());
    auto a = with.strategy->make_update(with.theta, with.local);
    auto b = without.strategy->make_update(without.theta, without.local);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE(a->payload && b->payload);
    EXPECT_EQ(a->codec, kLossy);
    const auto d = with.delta_at(0, with.theta.numel());
    EXPECT_EQ(*a->payload, reference_encode(ref, d)) << "round " << r;
    auto alone = codec->encode(d);
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ(*b->payload, as_string(*alone)) << "round " << r;
    if (r > 0) {
      EXPECT_NE(*a->payload, *b->payload) << "the residual changed nothing";
    }
  }
}

TEST(StreamingSync, UpdateCoversTheTasksFragmentAndMergeBlendsOnlyIt) {
  auto j = small_join();
  j.mutable_train()->set_streaming_fragments(2);
  j.mutable_train()->set_overlap_steps(2);
  j.mutable_train()->set_merge_alpha(0.25);
  Sync s(j);
  ASSERT_TRUE(s.strategy);
  EXPECT_EQ(s.strategy->overlap_steps(), 2u);
  auto frags = al::fragment_ranges(al::make_layout(s.site.model), 2);
  ASSERT_TRUE(frags.ok());
  const al::FragmentRange f = (*frags)[1];
  s.new_round(0);
  ASSERT_TRUE(s.strategy->plan(fragment_task(f)).ok());
  EXPECT_EQ(s.strategy->planned_numel(), f.numel);
  auto u = s.strategy->make_update(s.theta, s.local);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->header.fragment_offset, f.offset);
  EXPECT_EQ(u->numel, f.numel);
  const auto want = s.delta_at(f.offset, f.numel);
  ASSERT_EQ(u->delta.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(u->delta[i], want[i]) << i;

  // θ_local[f] ← α·θ_local[f] + (1 − α)·θ[f]; the rest of θ_local untouched.
  std::vector<float> expect = s.local.vec();
  al::merge_fragment(std::span<float>(expect.data() + f.offset, f.numel),
                     std::span<const float>(s.theta.data() + f.offset, f.numel), 0.25f);
  const std::vector<float> before = s.local.vec();
  s.strategy->merge(s.local, s.theta);
  EXPECT_EQ(s.local.vec(), expect);
  for (size_t i = 0; i < f.offset; ++i) ASSERT_EQ(s.local.data()[i], before[i]) << i;
  EXPECT_NE(s.local.vec(), before);
}

// Fragments alternate; each one's residual comes back only with that fragment.
TEST(StreamingSync, ErrorFeedbackIsKeptPerFragment) {
  auto j = small_join("diloco", kLossy);
  j.mutable_train()->set_streaming_fragments(2);
  j.mutable_train()->set_merge_alpha(0.5);
  Sync s(j);
  ASSERT_TRUE(s.strategy);
  auto frags = al::fragment_ranges(al::make_layout(s.site.model), 2);
  ASSERT_TRUE(frags.ok());
  std::vector<al::compress::ErrorFeedback> ref = {al::compress::ErrorFeedback((*frags)[0].numel),
                                                  al::compress::ErrorFeedback((*frags)[1].numel)};
  std::vector<std::string> payloads;
  for (uint64_t r = 0; r < 4; ++r) {
    const al::FragmentRange f = (*frags)[r % 2];
    s.new_round(r);
    ASSERT_TRUE(s.strategy->plan(fragment_task(f)).ok());
    auto u = s.strategy->make_update(s.theta, s.local);
    ASSERT_TRUE(u.ok()) << u.status().to_string();
    ASSERT_TRUE(u->payload);
    EXPECT_EQ(u->header.fragment_offset, f.offset);
    EXPECT_EQ(*u->payload, reference_encode(ref[r % 2], s.delta_at(f.offset, f.numel)))
        << "round " << r;
  }
}

TEST(StreamingSync, RefusesAFragmentOutsideTheta) {
  auto j = small_join();
  j.mutable_train()->set_streaming_fragments(2);
  Sync s(j);
  ASSERT_TRUE(s.strategy);
  const size_t n = s.theta.numel();
  for (const al::FragmentRange f : {al::FragmentRange{n + 1, 1}, al::FragmentRange{n - 10, 11}}) {
    Status st = s.strategy->plan(fragment_task(f));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("outside θ"), std::string::npos) << st.message();
  }
  EXPECT_TRUE(s.strategy->plan(fragment_task({n - 10, 10})).ok());
}

// A Hydra TRAIN task for subnetwork `sub`.
Task subnet_task(const al::Subnet& sub) {
  Task t;
  t.set_kind(Task::TRAIN);
  t.set_subnet(al::to_string(sub));
  t.set_mask_fingerprint(al::subnet_fingerprint(sub));
  return t;
}

// Layers 0 and 1 frozen, layer 2 trained, every unit computed.
al::Subnet top_layer_trained(const al::ModelConfig& m) {
  al::Subnet s = al::full_subnet(m, 3, false);
  s.layers[2].train = true;
  return s;
}

TEST(HydraSync, UpdateCoversTheTrainedElementsInIndexOrder) {
  Sync s(small_join("hydra"));
  ASSERT_TRUE(s.strategy);
  EXPECT_TRUE(s.strategy->scores());
  const al::Subnet sub = top_layer_trained(s.site.model);
  const auto idx = al::trainable_indices(sub, s.site.model);
  ASSERT_GT(idx.size(), 0u);
  ASSERT_LT(idx.size(), s.theta.numel());
  s.new_round(0);
  ASSERT_TRUE(s.strategy->plan(subnet_task(sub)).ok());
  EXPECT_EQ(s.strategy->planned_numel(), idx.size());
  auto u = s.strategy->make_update(s.theta, s.local);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->header.mask_fingerprint, al::subnet_fingerprint(sub));
  EXPECT_EQ(u->numel, idx.size());
  ASSERT_EQ(u->delta.size(), idx.size());
  for (size_t i = 0; i < idx.size(); ++i)
    ASSERT_EQ(u->delta[i], s.theta.data()[idx[i]] - s.local.data()[idx[i]]) << i;
}

// The residual belongs to the trained elements: a new mask that only moves frozen units keeps
// it; one that changes the trained elements starts a new one.
TEST(HydraSync, ErrorFeedbackRestartsWhenTheTrainedSetChanges) {
  Sync s(small_join("hydra", kLossy));
  ASSERT_TRUE(s.strategy);
  const al::Subnet a = top_layer_trained(s.site.model);
  al::Subnet frozen_moved = a;
  frozen_moved.layers[0].heads[1] = 0;
  al::Subnet trained_moved = frozen_moved;
  trained_moved.layers[2].heads[0] = 0;
  const auto idx_a = al::trainable_indices(a, s.site.model);
  const auto idx_c = al::trainable_indices(trained_moved, s.site.model);
  ASSERT_EQ(idx_a, al::trainable_indices(frozen_moved, s.site.model));
  ASSERT_NE(idx_a.size(), idx_c.size());
  auto masked = [&](const std::vector<uint32_t>& idx) {
    std::vector<float> d(idx.size());
    for (size_t i = 0; i < idx.size(); ++i) d[i] = s.theta.data()[idx[i]] - s.local.data()[idx[i]];
    return d;
  };
  al::compress::ErrorFeedback ref(idx_a.size());
  const std::vector<std::pair<al::Subnet, bool>> rounds = {
      {a, false}, {frozen_moved, false}, {trained_moved, true}, {trained_moved, false}};
  for (size_t r = 0; r < rounds.size(); ++r) {
    const auto& [sub, restarts] = rounds[r];
    if (restarts) ref = al::compress::ErrorFeedback(idx_c.size());
    s.new_round(r);
    ASSERT_TRUE(s.strategy->plan(subnet_task(sub)).ok());
    auto u = s.strategy->make_update(s.theta, s.local);
    ASSERT_TRUE(u.ok()) << u.status().to_string();
    ASSERT_TRUE(u->payload);
    const auto& idx = r < 2 ? idx_a : idx_c;
    EXPECT_EQ(*u->payload, reference_encode(ref, masked(idx))) << "round " << r;
  }
}

TEST(HydraSync, RefusesAMaskFingerprintThatIsNotItsSubnetworks) {
  Sync s(small_join("hydra"));
  ASSERT_TRUE(s.strategy);
  Task t = subnet_task(top_layer_trained(s.site.model));
  t.set_mask_fingerprint(std::string(64, '0'));
  Status st = s.strategy->plan(t);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("mask fingerprint"), std::string::npos) << st.message();
  t.set_subnet("T:1111");
  EXPECT_EQ(s.strategy->plan(t).code(), StatusCode::kInvalidArgument);
}

TEST(SyncStrategyFactory, RefusesWhatNoStrategyCanDo) {
  auto hydra_streaming = small_join("hydra");
  hydra_streaming.mutable_train()->set_streaming_fragments(2);
  auto bad_alpha = small_join();
  bad_alpha.mutable_train()->set_overlap_steps(1);
  bad_alpha.mutable_train()->set_merge_alpha(1.0);
  auto bad_codec = small_join("diloco", "zip:9");
  const std::vector<std::pair<atoll_pb::v1::JoinResponse, std::string>> cases = {
      {hydra_streaming, "Hydra with Streaming DiLoCo"},
      {bad_alpha, "merge_alpha"},
      {bad_codec, "zip"}};
  for (const auto& [join, says] : cases) {
    const SiteConfig site = site_of(join);
    Status st = check_sync_strategy(site);
    EXPECT_FALSE(st.ok()) << says;
    EXPECT_NE(st.message().find(says), std::string::npos) << st.message();
    auto inner = make_inner_step(site_of(small_join()), InnerStepOptions{});
    ASSERT_TRUE(inner.ok());
    EXPECT_FALSE(make_sync_strategy(site, **inner).ok()) << says;
  }
}

}  // namespace
}  // namespace atl::node
