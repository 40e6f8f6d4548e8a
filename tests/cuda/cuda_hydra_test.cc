// Hydra's subnetwork step on the GPU (algorithms/cuda/cuda_hydra.h) against the CPU's
// HydraTrainer, the reference: the same losses, gradient norms and schedule step by step (up to
// the CUDA model's rounding, as llama_cuda_test.cc's trainer test), elements outside the trained
// set untouched bit for bit, and the same optimizer restarts when the subnetwork changes. GPU
// tests skip with "no CUDA device: ..." without one.
#include "algorithms/cuda/cuda_hydra.h"

#include <gtest/gtest.h>

#include <vector>

#include "algorithms/hydra/trainer.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/subnet.h"
#include "cuda/cuda_test_util.h"
#include "cuda/model_test_util.h"

namespace atl::algorithms::cuda {
namespace {

using kernels::cuda::testing::CudaTest;
using testing::make_tokens;
using testing::small_model;
using testing::small_trainer;

class CudaHydraTest : public CudaTest {};

// Layer 0 frozen without head 1 and FFN block 2; layer 1 trained without FFN block 0 (G = 4).
Subnet mixed_subnet(const ModelConfig& cfg) {
  Subnet s = full_subnet(cfg, 4, false);
  s.layers[0].heads[1] = 0;
  s.layers[0].ffn_blocks[2] = 0;
  s.layers[1].train = true;
  s.layers[1].ffn_blocks[0] = 0;
  return s;
}

TEST(CudaHydraSupport, RefusesAnMoeModelWithOneLine) {
  ModelConfig moe = small_model();
  moe.moe_experts = 4;
  moe.moe_top_k = 2;
  moe.moe_hidden = 32;
  auto t = CudaHydraTrainer::create(moe, small_trainer(4), 0);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("dense models only"), std::string::npos)
      << t.status().message();
}

TEST_F(CudaHydraTest, StepsTrackTheCpuHydraTrainerAcrossSubnetworkChanges) {
  const ModelConfig cfg = small_model();
  const TrainerConfig tc = small_trainer(4);
  ParamSet init(make_layout(cfg));
  init_params(init, cfg, 13);
  ParamSet p_cpu = init, p_gpu = init;
  hydra::HydraTrainer cpu(cfg, tc);
  auto gpu = CudaHydraTrainer::create(cfg, tc, 0);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  Subnet sub = mixed_subnet(cfg);
  ASSERT_TRUE(cpu.set_subnet(sub).ok());
  ASSERT_OK((*gpu)->set_subnet(sub));
  EXPECT_EQ((*gpu)->indices(), cpu.indices());
  std::vector<float> lc, lg;
  for (int s = 0; s < 16; ++s) {
    if (s == 10) {  // another trained set: both optimizers restart
      sub.layers[1].heads[0] = 0;
      ASSERT_TRUE(cpu.set_subnet(sub).ok());
      ASSERT_OK((*gpu)->set_subnet(sub));
      EXPECT_EQ((*gpu)->indices(), cpu.indices());
      EXPECT_EQ((*gpu)->trained_set_generation(), cpu.trained_set_generation());
    }
    const auto tok = make_tokens(tc.batch, tc.seq, cfg.vocab, 300 + uint32_t(s));
    const StepStats a = cpu.step(p_cpu, tok.data(), s);
    auto b = (*gpu)->step(p_gpu, tok.data(), s);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    EXPECT_EQ(b->lr, a.lr);
    EXPECT_EQ(b->tokens, a.tokens);
    EXPECT_NEAR(b->grad_norm, a.grad_norm, 1e-4 * a.grad_norm) << "step " << s;
    lc.push_back(a.loss);
    lg.push_back(b->loss);
  }
  for (size_t s = 0; s < lc.size(); ++s) EXPECT_NEAR(lg[s], lc[s], 1e-4 * lc[s]) << "step " << s;
  // On the CPU the mean loss of the last 4 steps is 0.074 below the first 4's.
  double first = 0, last = 0;
  for (size_t s = 0; s < 4; ++s) first += lg[s] / 4, last += lg[lg.size() - 4 + s] / 4;
  EXPECT_LT(last, first - 0.03) << "the GPU subnetwork did not learn";
  // Only elements held by one of the two subnetworks move: everything else is still the initial
  // θ, bit for bit.
  std::vector<uint8_t> held(init.numel(), 0);
  for (uint32_t i : trainable_indices(mixed_subnet(cfg), cfg)) held[i] = 1;
  for (uint32_t i : cpu.indices()) held[i] = 1;
  size_t moved = 0;
  for (size_t i = 0; i < init.numel(); ++i) {
    if (!held[i]) {
      ASSERT_EQ(p_gpu.data()[i], init.data()[i]) << "element " << i << " is not trained";
    } else {
      moved += p_gpu.data()[i] != init.data()[i];
    }
  }
  EXPECT_GT(moved, 0u);
}

}  // namespace
}  // namespace atl::algorithms::cuda
