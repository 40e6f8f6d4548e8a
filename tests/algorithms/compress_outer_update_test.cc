// Compressed broadcast of outer updates (algorithms/compress/outer_update.h): the θ a node
// rebuilds from the coordinator's message equals the coordinator's θ bit for bit, round after
// round; the error feedback carries what the codec did not send; a Streaming DiLoCo fragment
// update leaves the rest of θ untouched; hostile messages are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/compress/codec.h"
#include "algorithms/compress/outer_update.h"
#include "kernels/core/philox.h"

namespace atl::algorithms::compress {
namespace {

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// θ_0 and an outer step of about 1e-3 per element, different every round.
std::vector<float> values(size_t n, uint64_t seed, float scale) {
  const Philox rng(seed, 7);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(rng.normal(i));
  return v;
}

Codec make(const std::string& s) {
  auto c = Codec::create(s);
  EXPECT_TRUE(c.ok()) << s << ": " << c.status().to_string();
  return *c;
}

class OuterUpdateCodecs : public ::testing::TestWithParam<const char*> {};

TEST_P(OuterUpdateCodecs, NodeApplyingTheMessageHoldsTheCoordinatorsThetaEveryRound) {
  const Codec codec = make(GetParam());
  constexpr size_t n = 10000;
  std::vector<float> coord = values(n, 1, 0.1f);  // the coordinator's θ_r
  std::vector<float> node = coord;                // a node that followed every round
  std::vector<float> residual(n, 0.0f);
  std::vector<float> exact = coord;  // θ without compression: θ_0 + Σ u_r
  size_t bytes = 0;
  for (uint64_t r = 0; r < 6; ++r) {
    const std::vector<float> step = values(n, 100 + r, 1e-3f);
    std::vector<float> candidate(n);
    for (size_t i = 0; i < n; ++i) candidate[i] = coord[i] + step[i];
    for (size_t i = 0; i < n; ++i) exact[i] += step[i];
    const std::vector<float> before = coord;
    auto message = compress_outer_update(codec, before, candidate, residual, {0, n});
    ASSERT_TRUE(message.ok()) << message.status().to_string();
    bytes = message->size();
    coord = candidate;
    auto rebuilt = apply_update_message(*message, node, 0);
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status().to_string();
    node = std::move(*rebuilt);
    ASSERT_TRUE(bitwise_equal(node, coord)) << GetParam() << " round " << r;
    // θ_{r+1} + e_{r+1} tracks the uncompressed θ: their difference is float rounding only,
    // while the error feedback itself is as large as the codec's error.
    double drift = 0, feedback = 0;
    for (size_t i = 0; i < n; ++i) {
      drift = std::max(drift, std::abs(double{coord[i]} + residual[i] - exact[i]));
      feedback = std::max(feedback, std::abs(double{residual[i]}));
    }
    EXPECT_LT(drift, 1e-6) << GetParam() << " round " << r;
    EXPECT_GT(feedback, 1e-7) << GetParam() << ": a lossy codec leaves something behind";
  }
  EXPECT_EQ(bytes, encoded_bytes(codec.spec(), n)) << "the message is the codec's size";
  EXPECT_LT(bytes, n * sizeof(float) / 3);
}

INSTANTIATE_TEST_SUITE_P(Codecs, OuterUpdateCodecs,
                         ::testing::Values("int8", "nvfp4", "mxfp4", "ternary", "topk:0.1+int8"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST(OuterUpdate, AFragmentUpdateLeavesTheRestOfThetaBitForBit) {
  const Codec codec = make("int8");
  constexpr size_t n = 4096;
  std::vector<float> theta = values(n, 3, 0.1f);
  theta[5] = -0.0f;  // θ + 0 would turn it into +0: elements outside the range are not added to
  std::vector<float> candidate = theta;
  const UpdateRange frag{1024, 2048};
  for (uint64_t i = frag.offset; i < frag.offset + frag.numel; ++i) candidate[i] += 1e-3f;
  std::vector<float> residual(n, 0.25f);  // outside the fragment: untouched
  auto message = compress_outer_update(codec, theta, candidate, residual, frag);
  ASSERT_TRUE(message.ok()) << message.status().to_string();
  auto numel = message_numel(*message);
  ASSERT_TRUE(numel.ok());
  EXPECT_EQ(*numel, frag.numel);
  for (size_t i = 0; i < n; ++i) {
    const bool inside = i >= frag.offset && i < frag.offset + frag.numel;
    if (!inside) {
      ASSERT_EQ(std::memcmp(&candidate[i], &theta[i], 4), 0) << i;
      ASSERT_EQ(residual[i], 0.25f) << i;
    }
  }
  EXPECT_TRUE(std::signbit(candidate[5]));
  auto node = apply_update_message(*message, theta, frag.offset);
  ASSERT_TRUE(node.ok()) << node.status().to_string();
  EXPECT_TRUE(bitwise_equal(*node, candidate));
}

TEST(OuterUpdate, HostileMessagesAreRefused) {
  const Codec codec = make("int8");
  constexpr size_t n = 1000;
  std::vector<float> theta = values(n, 4, 0.1f);
  std::vector<float> candidate = theta;
  for (float& v : candidate) v += 1e-3f;
  std::vector<float> residual(n, 0.0f);
  auto message = compress_outer_update(codec, theta, candidate, residual, {0, n});
  ASSERT_TRUE(message.ok());
  // A flipped payload bit fails the checksum.
  std::vector<uint8_t> flipped = *message;
  flipped.back() ^= 1;
  EXPECT_FALSE(apply_update_message(flipped, theta, 0).ok());
  // A message longer than θ past its offset, a truncated one, and an offset beyond θ.
  EXPECT_EQ(apply_update_message(*message, theta, 1).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(apply_update_message(std::span<const uint8_t>(message->data(), 10), theta, 0)
                .status()
                .code(),
            StatusCode::kDataLoss);
  EXPECT_FALSE(apply_update_message(*message, theta, n + 1).ok());
  // A range outside θ is refused before anything is encoded.
  EXPECT_EQ(compress_outer_update(codec, theta, candidate, residual, {n - 10, 20}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace atl::algorithms::compress
