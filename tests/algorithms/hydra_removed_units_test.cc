// A subnetwork as the full model with its removed units' output weights zeroed
// (algorithms/hydra/removed_units.h, the CUDA model's Hydra path): the same loss as the model
// restricted to the subnetwork (Llama::set_subnet)
// and, at the trained elements, the same gradient, up to summation order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "algorithms/data/dataset.h"
#include "algorithms/hydra/removed_units.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/subnet.h"
#include "kernels/core/philox.h"
#include "tests/algorithms/hydra_test_util.h"

namespace atl::algorithms::hydra {
namespace {

TEST(HydraRemovedUnits, ZeroedOutputWeightsGiveTheSubnetworksLossAndGradient) {
  const ModelConfig c = small_subnet_model();  // C 32, L 3, H 4, F 48
  Subnet s = full_subnet(c, 3, false);         // G = 3 blocks of 16 channels
  s.layers[0].heads[1] = 0;                    // frozen layer: removed units still matter
  s.layers[0].ffn_blocks[2] = 0;
  s.layers[1].train = true;
  s.layers[1].heads[3] = 0;
  s.layers[2].train = true;
  s.layers[2].heads[0] = 0;
  s.layers[2].heads[2] = 0;
  s.layers[2].ffn_blocks[0] = 0;
  ASSERT_TRUE(validate(s, c).ok());
  const auto blocks = removed_output_columns(s, c);
  ASSERT_EQ(blocks.size(), 6u);
  EXPECT_EQ(blocks[0].width, 8u);   // D = 32 / 4
  EXPECT_EQ(blocks[0].rows, 32u);   // every row of o_proj (C, C)
  EXPECT_EQ(blocks[1].width, 16u);  // F / G
  EXPECT_EQ(blocks[1].pitch, 48u);  // down_proj (C, F)

  ParamSet params(make_layout(c));
  init_params(params, c, 4);
  const int B = 2, T = 16;
  std::vector<int32_t> rows(size_t(B) * (T + 1));
  Philox r(5, 1);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int32_t>(r.below(i, c.vocab));
  std::vector<int32_t> in, tg;
  data::split_inputs_targets(rows.data(), B, T, in, tg);

  Llama sub(c);
  ASSERT_TRUE(sub.set_subnet(s).ok());
  const float want_loss = sub.forward(params, in.data(), tg.data(), B, T);
  ParamSet want_g(params.layout());
  sub.backward(params, want_g);

  ParamSet zeroed = params;
  zero_columns(zeroed.vec(), blocks);
  Llama full(c);
  const float got_loss = full.forward(zeroed, in.data(), tg.data(), B, T);
  ParamSet got_g(params.layout());
  full.backward(zeroed, got_g);
  EXPECT_NEAR(got_loss, want_loss, 1e-5 * want_loss);

  const auto idx = trainable_indices(s, c);
  ASSERT_GT(idx.size(), 0u);
  double scale = 0;
  for (uint32_t i : idx) scale = std::max(scale, std::abs(double(want_g.data()[i])));
  ASSERT_GT(scale, 0.0);
  for (uint32_t i : idx)
    ASSERT_NEAR(got_g.data()[i], want_g.data()[i], 1e-5 * scale) << "element " << i;
  // Without the zeroing the gradient is another one (the tolerance above could not hide it).
  ParamSet plain_g(params.layout());
  full.forward(params, in.data(), tg.data(), B, T);
  full.backward(params, plain_g);
  double worst = 0;
  for (uint32_t i : idx)
    worst = std::max(worst, std::abs(double(plain_g.data()[i]) - double(want_g.data()[i])));
  EXPECT_GT(worst, 1e-2 * scale);
}

}  // namespace
}  // namespace atl::algorithms::hydra
