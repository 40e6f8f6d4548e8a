// Streaming DiLoCo math: fragment ranges over a model layout and the merge rule.
#include <gtest/gtest.h>

#include <cstring>

#include "algorithms/diloco/streaming.h"
#include "algorithms/model/llama.h"

namespace atl::algorithms {
namespace {

ModelConfig small_model(int layers) {
  ModelConfig c;
  c.vocab = 256;
  c.dim = 32;
  c.layers = layers;
  c.heads = 2;
  c.ffn_hidden = 64;
  c.seq_len = 32;
  return c;
}

bool on_view_boundary(const ParamLayout& layout, size_t at) {
  if (at == 0 || at == layout.numel()) return true;
  for (const auto& v : layout.views())
    if (v.offset == at) return true;
  return false;
}

TEST(StreamingFragments, CoverTheLayoutContiguouslyOnTensorBoundaries) {
  const ParamLayout layout = make_layout(small_model(4));
  for (uint32_t P : {1u, 2u, 3u, 4u, 8u}) {
    auto f = fragment_ranges(layout, P);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ASSERT_EQ(f->size(), P);
    size_t at = 0;
    for (const auto& r : *f) {
      EXPECT_EQ(r.offset, at);
      EXPECT_GT(r.numel, 0u);
      EXPECT_TRUE(on_view_boundary(layout, r.offset)) << P;
      at += r.numel;
    }
    EXPECT_EQ(at, layout.numel());
    // Balanced within the largest tensor (here the 256x32 embedding / 64x32 MLP matrices).
    size_t largest = 0;
    for (const auto& v : layout.views()) largest = std::max(largest, v.numel());
    for (const auto& r : *f)
      EXPECT_LE(r.numel, layout.numel() / P + largest) << "P = " << P;
  }
  auto whole = fragment_ranges(layout, 1);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ((*whole)[0], (FragmentRange{0, layout.numel()}));
}

TEST(StreamingFragments, DeterministicAndBoundedByTheTensorCount) {
  const ParamLayout layout = make_layout(small_model(2));
  const uint32_t views = static_cast<uint32_t>(layout.views().size());  // 9·2 + 2 = 20
  EXPECT_EQ(views, 20u);
  auto a = fragment_ranges(layout, 4), b = fragment_ranges(layout, 4);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  auto all = fragment_ranges(layout, views);
  ASSERT_TRUE(all.ok());
  for (size_t i = 0; i < views; ++i) EXPECT_EQ((*all)[i].numel, layout.views()[i].numel());
  EXPECT_EQ(fragment_ranges(layout, views + 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fragment_ranges(layout, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(StreamingFragments, RoundsCycleThroughFragments) {
  EXPECT_EQ(fragment_of_round(0, 4), 0u);
  EXPECT_EQ(fragment_of_round(5, 4), 1u);
  EXPECT_EQ(fragment_of_round(7, 1), 0u);
}

TEST(StreamingMerge, AlphaZeroReplacesBitwiseAndAlphaMixes) {
  std::vector<float> local = {1.0f, -2.0f, 3.5f, 0.0f};
  const std::vector<float> global = {3.0f, 2.0f, -0.5f, -0.0f};
  std::vector<float> replaced = local;
  merge_fragment(replaced, global, 0.0f);
  EXPECT_EQ(std::memcmp(replaced.data(), global.data(), 16), 0);
  merge_fragment(local, global, 0.5f);
  EXPECT_EQ(local, (std::vector<float>{2.0f, 0.0f, 1.5f, 0.0f}));
  std::vector<float> l2 = {4.0f}, g2 = {0.0f};
  merge_fragment(l2, g2, 0.75f);
  EXPECT_FLOAT_EQ(l2[0], 3.0f);
}

}  // namespace
}  // namespace atl::algorithms
