// A node's round state on disk (node/round_state_file.h): a state written and read back puts
// the inner step and the sync strategy where the in-memory snapshot does, bit for bit; files of
// another experiment, node or model are not used; a damaged file is refused with its name; only
// the two newest rounds are kept.
#include "node/round_state_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "algorithms/diloco/outer.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/subnet.h"
#include "kernels/core/philox.h"
#include "node/inner_step.h"
#include "node/round_snapshot.h"
#include "node/site_config.h"
#include "node/sync_strategy.h"
#include "tests/node/node_test_util.h"

namespace atl::node {
namespace {

namespace al = atl::algorithms;
namespace fs = std::filesystem;
using atoll_pb::v1::Task;
using testing::fill_random;
using testing::small_join;

constexpr char kLossy[] = "topk:0.05+int4";

class TempStateDir {
 public:
  TempStateDir() : path_(fs::temp_directory_path() / ("atoll-round-state-" + random_suffix())) {
    fs::create_directories(path_);
  }
  ~TempStateDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  static std::string random_suffix() {
    std::random_device rd;
    return std::to_string(rd()) + "-" + std::to_string(rd());
  }
  fs::path path_;
};

// A site's inner step, sync strategy, θ and θ_local, trained a little so that AdamW's moments,
// its step count and the residual are not zero.
struct Site {
  SiteConfig site;
  std::unique_ptr<InnerStep> inner;
  std::unique_ptr<SyncStrategy> sync;
  al::ParamSet theta, local;
  RoundStateOwner owner{"exp", "site-1", ""};

  explicit Site(const atoll_pb::v1::JoinResponse& j) {
    auto s = site_config_from_join(j);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    site = *s;
    const auto layout = al::make_layout(site.model);
    theta = al::ParamSet(layout);
    local = al::ParamSet(layout);
    owner.layout_fingerprint = al::layout_fingerprint(layout);
    fill_random(theta, 7, 0.1f);
    auto i = make_inner_step(site, InnerStepOptions{});
    EXPECT_TRUE(i.ok()) << i.status().to_string();
    inner = std::move(i).value();
    auto y = make_sync_strategy(site, *inner);
    EXPECT_TRUE(y.ok()) << y.status().to_string();
    sync = std::move(y).value();
  }
  // One round: θ_local from θ, `steps` inner steps from global step `first`, the update.
  std::string round(int64_t first, int steps, const Task& task = Task{}) {
    local.vec() = theta.vec();
    EXPECT_TRUE(sync->plan(task).ok());
    for (int k = 0; k < steps; ++k) {
      al::data::GlobalBatch b;
      b.B = site.train.batch;
      b.T = site.train.seq;
      b.tokens.resize(static_cast<size_t>(b.B) * (b.T + 1));
      Philox r(static_cast<uint64_t>(first + k), 3);
      for (size_t i = 0; i < b.tokens.size(); ++i)
        b.tokens[i] = static_cast<int32_t>(r.below(i, site.model.vocab));
      EXPECT_TRUE(inner->step(local, b, nullptr, first + k).ok());
    }
    auto u = sync->make_update(theta, local);
    EXPECT_TRUE(u.ok()) << u.status().to_string();
    return u.ok() && u->payload ? *u->payload : "";
  }
};

TEST(RoundStateFile, AStateReadBackRedoesTheRoundAsTheInMemorySnapshot) {
  Site s(small_join("diloco", kLossy));
  ASSERT_TRUE(s.inner && s.sync);
  s.round(0, 3);  // AdamW and the residual hold something now
  auto snap = take_round_snapshot(1, *s.inner, *s.sync, nullptr, 0);
  ASSERT_TRUE(snap.ok()) << snap.status().to_string();
  TempStateDir dir;
  ASSERT_TRUE(write_round_state(dir.str(), s.owner, *snap, *s.inner, *s.sync).ok());
  const std::string first = s.round(3, 3);  // round 1, then the state has moved on
  const std::string advanced = s.round(3, 3);
  EXPECT_NE(advanced, first) << "redoing from the advanced state would be indistinguishable";

  auto read = read_round_states(dir.str(), s.owner, s.theta.numel(), *s.inner, *s.sync);
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  ASSERT_EQ(read->size(), 1u);
  ASSERT_EQ(read->begin()->first, 1u);
  al::ParamSet unused(s.local.layout());
  ASSERT_TRUE(restore_round_snapshot(read->begin()->second, *s.inner, *s.sync, unused).ok());
  EXPECT_EQ(s.round(3, 3), first);
  const std::vector<float> redone = s.local.vec();
  ASSERT_TRUE(restore_round_snapshot(*snap, *s.inner, *s.sync, unused).ok());
  EXPECT_EQ(s.round(3, 3), first);
  EXPECT_EQ(s.local.vec(), redone);
}

// Hydra: the subnetwork, its masked AdamW moments and the per-trained-element residual come back
// from disk (they were not written: "this inner step's state is not written to disk", and a
// restarted Hydra node trained on from a fresh optimizer state).
TEST(RoundStateFile, HydraStateComesBackFromDisk) {
  Site s(small_join("hydra", kLossy));
  ASSERT_TRUE(s.inner && s.sync);
  // Layer 0 frozen with one head unit and one FFN block removed; layers 1 and 2 trained.
  al::Subnet sub = al::full_subnet(s.site.model, 3, /*train=*/true);
  sub.layers[0].train = false;
  sub.layers[0].heads[1] = 0;
  sub.layers[0].ffn_blocks[2] = 0;
  Task task;
  task.set_subnet(al::to_string(sub));
  task.set_mask_fingerprint(al::subnet_fingerprint(sub));
  s.round(0, 3, task);
  auto snap = take_round_snapshot(1, *s.inner, *s.sync, nullptr, 0);
  ASSERT_TRUE(snap.ok()) << snap.status().to_string();
  TempStateDir dir;
  ASSERT_TRUE(write_round_state(dir.str(), s.owner, *snap, *s.inner, *s.sync).ok());
  const std::string first = s.round(3, 3, task);
  const std::vector<float> first_local = s.local.vec();
  const std::string advanced = s.round(3, 3, task);
  EXPECT_NE(advanced, first);

  // A fresh inner step and sync strategy, as in a restarted process.
  Site again(small_join("hydra", kLossy));
  again.theta.vec() = s.theta.vec();
  auto read =
      read_round_states(dir.str(), again.owner, again.theta.numel(), *again.inner, *again.sync);
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  ASSERT_EQ(read->size(), 1u);
  al::ParamSet unused(again.local.layout());
  ASSERT_TRUE(
      restore_round_snapshot(read->begin()->second, *again.inner, *again.sync, unused).ok());
  EXPECT_EQ(again.round(3, 3, task), first);
  EXPECT_EQ(again.local.vec(), first_local);
}

// Streaming DiLoCo: the fragment, the residual per fragment and θ_local come back too.
TEST(RoundStateFile, StreamingStateKeepsThetaLocalAndItsFragments) {
  auto j = small_join("diloco", kLossy);
  j.mutable_train()->set_streaming_fragments(2);
  j.mutable_train()->set_overlap_steps(1);
  Site s(j);
  ASSERT_TRUE(s.inner && s.sync);
  s.round(0, 2);
  fill_random(s.local, 9, 0.1f);
  auto snap = take_round_snapshot(4, *s.inner, *s.sync, &s.local, 1);
  ASSERT_TRUE(snap.ok()) << snap.status().to_string();
  TempStateDir dir;
  ASSERT_TRUE(write_round_state(dir.str(), s.owner, *snap, *s.inner, *s.sync).ok());
  auto read = read_round_states(dir.str(), s.owner, s.theta.numel(), *s.inner, *s.sync);
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  ASSERT_EQ(read->count(4), 1u);
  const RoundSnapshot& back = read->at(4);
  EXPECT_EQ(back.overlap_steps, 1u);
  ASSERT_TRUE(back.local.has_value());
  EXPECT_EQ(back.local->vec(), s.local.vec());
  auto a = s.sync->encode_state(*snap->sync);
  auto b = s.sync->encode_state(*back.sync);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  auto x = s.inner->encode_state(*snap->inner);
  auto y = s.inner->encode_state(*back.inner);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(*x, *y);
}

// A node resumed from --state-dir on a host whose OpenBLAS kernels differ went on with other
// bits and said nothing: the directory records its host, and another one is named.
TEST(RoundStateFile, TheStateDirRecordsItsHostAndNamesAnotherOne) {
  TempStateDir dir;
  const std::string here = "cpu X; OpenBLAS kernels SkylakeX; compiled for AVX-512";
  EXPECT_EQ(note_state_dir_host(dir.str(), here), std::nullopt);  // first use: recorded
  EXPECT_EQ(note_state_dir_host(dir.str(), here), std::nullopt);
  const std::string there = "cpu X; OpenBLAS kernels Haswell; compiled for AVX-512";
  EXPECT_EQ(note_state_dir_host(dir.str(), there), std::optional<std::string>(here));
  EXPECT_EQ(note_state_dir_host(dir.str(), there), std::nullopt);  // said once, now recorded
}

TEST(RoundStateFile, KeepsTheTwoNewestRoundsAndSkipsOtherOwners) {
  Site s(small_join());
  ASSERT_TRUE(s.inner && s.sync);
  TempStateDir dir;
  for (uint64_t r = 3; r <= 5; ++r) {
    auto snap = take_round_snapshot(r, *s.inner, *s.sync, nullptr, 0);
    ASSERT_TRUE(snap.ok());
    ASSERT_TRUE(write_round_state(dir.str(), s.owner, *snap, *s.inner, *s.sync).ok());
  }
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"round-4.state", "round-5.state"}));
  auto mine = read_round_states(dir.str(), s.owner, s.theta.numel(), *s.inner, *s.sync);
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(mine->size(), 2u);
  for (auto other : {RoundStateOwner{"another-exp", "site-1", s.owner.layout_fingerprint},
                     RoundStateOwner{"exp", "site-2", s.owner.layout_fingerprint},
                     RoundStateOwner{"exp", "site-1", "another-layout"}}) {
    auto theirs = read_round_states(dir.str(), other, s.theta.numel(), *s.inner, *s.sync);
    ASSERT_TRUE(theirs.ok());
    EXPECT_TRUE(theirs->empty());
  }
  auto none =
      read_round_states(dir.str() + "/missing", s.owner, s.theta.numel(), *s.inner, *s.sync);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(RoundStateFile, ADamagedFileIsRefusedWithItsName) {
  Site s(small_join());
  ASSERT_TRUE(s.inner && s.sync);
  TempStateDir dir;
  auto snap = take_round_snapshot(2, *s.inner, *s.sync, nullptr, 0);
  ASSERT_TRUE(snap.ok());
  ASSERT_TRUE(write_round_state(dir.str(), s.owner, *snap, *s.inner, *s.sync).ok());
  const std::string path = dir.str() + "/round-2.state";
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 100u);
  bytes[bytes.size() / 2] ^= 0x40;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  auto read = read_round_states(dir.str(), s.owner, s.theta.numel(), *s.inner, *s.sync);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("round-2.state"), std::string::npos);
  EXPECT_NE(read.status().message().find("CRC"), std::string::npos);
  // Cut short: refused too.
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, 40);
  EXPECT_FALSE(read_round_states(dir.str(), s.owner, s.theta.numel(), *s.inner, *s.sync).ok());
}

}  // namespace
}  // namespace atl::node
