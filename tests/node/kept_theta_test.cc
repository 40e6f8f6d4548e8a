// What a site keeps (node/kept_theta.h): the best candidate by validation bpb, ties to the
// earlier one, and its checkpoint on disk read back exactly, refused for another node.
#include "node/kept_theta.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "algorithms/model/llama.h"
#include "coordinator/test_util.h"

namespace atl::node {
namespace {

namespace al = atl::algorithms;
using Kind = KeptSource::Kind;

al::ModelConfig tiny_model() {
  al::ModelConfig m;
  m.vocab = 256;
  m.dim = 16;
  m.layers = 1;
  m.heads = 2;
  m.ffn_hidden = 32;
  m.seq_len = 16;
  return m;
}

TEST(KeptTheta, ParsesTheFourModesAndRefusesOthersInOneLine) {
  for (const char* name : {"auto", "off", "global", "personal"}) {
    auto mode = parse_keep_best(name);
    ASSERT_TRUE(mode.ok()) << name;
    EXPECT_STREQ(keep_best_name(*mode), name);
  }
  auto bad = parse_keep_best("best");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("use auto, off, global or personal"), std::string::npos);
  EXPECT_EQ(bad.status().message().find('\n'), std::string::npos);
}

TEST(KeptTheta, AutoIsPersonalWhenFineTuningWithValidationDataAndOffOtherwise) {
  EXPECT_EQ(resolve_keep_best(KeepBest::kAuto, true, true), KeepBest::kPersonal);
  EXPECT_EQ(resolve_keep_best(KeepBest::kAuto, false, true), KeepBest::kOff);
  EXPECT_EQ(resolve_keep_best(KeepBest::kAuto, true, false), KeepBest::kOff);
  EXPECT_EQ(resolve_keep_best(KeepBest::kGlobal, false, false), KeepBest::kGlobal);
  EXPECT_EQ(resolve_keep_best(KeepBest::kPersonal, true, false), KeepBest::kPersonal);
  EXPECT_EQ(resolve_keep_best(KeepBest::kOff, true, true), KeepBest::kOff);
}

TEST(KeptTheta, KeepsTheLowestBpbAndTheEarlierOfATie) {
  BestTheta best;
  EXPECT_FALSE(best.kept().has_value());
  const std::vector<float> a = {1, 2, 3}, b = {4, 5, 6}, c = {7, 8, 9}, d = {0, 0, 1};
  EXPECT_TRUE(best.offer({Kind::kGlobal, 0}, 3.0, a));  // the first candidate is always kept
  EXPECT_TRUE(best.offer({Kind::kPersonal, 0}, 2.5, b));
  EXPECT_FALSE(best.offer({Kind::kGlobal, 1}, 2.7, c));  // worse: the earlier one stays
  EXPECT_FALSE(best.offer({Kind::kGlobal, 2}, 2.5, d));  // a tie: the earlier one stays
  ASSERT_TRUE(best.kept().has_value());
  EXPECT_EQ(best.kept()->source, (KeptSource{Kind::kPersonal, 0}));
  EXPECT_EQ(best.kept()->site_val_bpb, 2.5);
  EXPECT_EQ(best.kept()->params, b);
  EXPECT_EQ(best.kept()->source.describe(), "own θ_local of round 0");
  EXPECT_EQ((KeptSource{Kind::kGlobal, 3}).describe(), "global θ of round 3");
}

TEST(KeptTheta, TheCheckpointReadsBackBitForBitAndOnlyForItsNode) {
  testing_util::TempDir dir;
  const std::string path = dir.sub("kept.safetensors");
  const al::ModelConfig model = tiny_model();
  al::ParamSet theta(al::make_layout(model));
  al::init_params(theta, model, 7);
  KeptTheta kept{{Kind::kPersonal, 4}, std::nextafter(2.75, 3.0), theta.vec()};
  CheckpointMeta meta;
  meta.model = model;
  meta.seed = 15513247042215618562u;  // a site's derived seed, >= 2^63 (read as signed: refused)
  meta.experiment = "exp-1";

  auto none = load_kept_theta(path, "exp-1", "node-1", theta.numel());
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_FALSE(none->has_value());

  ASSERT_TRUE(save_kept_theta(path, meta, "node-1", kept, theta.layout(), nullptr).ok());
  auto back = load_kept_theta(path, "exp-1", "node-1", theta.numel());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ((*back)->source, kept.source);
  EXPECT_EQ((*back)->site_val_bpb, kept.site_val_bpb);  // exact, not rounded to a decimal
  EXPECT_EQ((*back)->params, kept.params);
  // An exportable checkpoint: the model loads from it as from any other.
  auto ck = load_checkpoint(path);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ(ck->params.vec(), theta.vec());
  EXPECT_EQ(ck->meta.round, 4);
  EXPECT_EQ(ck->meta.seed, 15513247042215618562u);

  auto other_node = load_kept_theta(path, "exp-1", "node-2", theta.numel());
  ASSERT_FALSE(other_node.ok());
  EXPECT_EQ(other_node.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other_node.status().message().find("its own --state-dir"), std::string::npos);
  auto other_experiment = load_kept_theta(path, "exp-2", "node-1", theta.numel());
  EXPECT_EQ(other_experiment.status().code(), StatusCode::kFailedPrecondition);
  auto other_size = load_kept_theta(path, "exp-1", "node-1", theta.numel() + 1);
  EXPECT_EQ(other_size.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace atl::node
