// The CUDA model path (algorithms/cuda) against the CPU model, the reference: one forward +
// backward, 20 training steps, run-to-run bits, and the 2-GPU worker against one GPU on the
// same batch; the same for models with MoE layers (softmax and sigmoid routers, with and without
// a shared expert, mixed with dense layers). GPU tests skip with "no CUDA device: ..." without one;
// the refusals run anywhere.
//
// Tolerances. The CUDA ops compute the CPU ops' arithmetic in fp32 but sum in other orders
// (cuBLASLt's GEMM tiling, fixed-tree block reductions) and use the GPU's expf/logf, each a few
// ulps from the host's. For this model every reduction is at most max(N, V, C, F) = 64 terms
// long, so one op's relative error is bounded by ~64·2⁻²⁴ ≈ 4e-6 of the magnitudes it sums, and
// backward chains ~12 such ops per layer over 2 layers; we allow 2e-4 of each tensor's largest
// gradient (about 2x that bound, far below any real bug: a wrong op, sign, scale or missed
// accumulation changes gradients by O(1) of their magnitude) and 1e-5 relative on the loss.
#include "algorithms/cuda/llama_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "algorithms/cuda/cuda_trainer.h"
#include "algorithms/data/dataset.h"
#include "algorithms/model/llama.h"
#include "algorithms/optim/inner_trainer.h"
#include "cuda/cuda_test_util.h"
#include "cuda/model_test_util.h"
#include "kernels/cuda/nccl_group.h"
#include "kernels/cuda/ops.h"

namespace atl::algorithms::cuda {
namespace {

using kernels::cuda::testing::CudaTest;
using kernels::cuda::testing::same_bits;

using testing::make_tokens;
using testing::moe_model;
using testing::small_model;
using testing::small_trainer;
using testing::views_close;

using kernels::cuda::DeviceBuffer;

TEST(CudaModelSupport, AcceptsMoeAndEveryPrecisionAndRefusesBadConfigsWithOneLine) {
  const ModelConfig moe = moe_model("sigmoid", 24, 2);
  EXPECT_TRUE(check_supported(moe).ok()) << check_supported(moe).to_string();
  EXPECT_TRUE(check_supported(moe, small_trainer(4)).ok());
  for (Precision p : {Precision::kBf16, Precision::kFp8, Precision::kMxfp8, Precision::kNvfp4}) {
    TrainerConfig t = small_trainer(4);
    t.precision = p;
    EXPECT_TRUE(check_supported(moe, t).ok()) << precision_name(p);
  }
  ModelConfig bad = moe;
  bad.moe_top_k = 5;  // > moe_experts: validate()'s line
  const Status a = check_supported(bad);
  EXPECT_EQ(a.code(), StatusCode::kInvalidArgument) << a.to_string();
  EXPECT_NE(a.message().find("moe_top_k"), std::string::npos) << a.message();
  EXPECT_EQ(a.message().find('\n'), std::string::npos);
  TrainerConfig long_rows = small_trainer(4);
  long_rows.seq = 17;  // > seq_len
  EXPECT_FALSE(check_supported(small_model(), long_rows).ok());
  // More devices than rows is refused before any device is touched.
  auto t = CudaTrainer::create(small_model(), small_trainer(1), {0, 1});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("fewer rows than"), std::string::npos);
}

// The Hugging Face variants run on the CPU model only for now: refused when the config is read,
// one line naming the fields (CudaLlama::create and CudaTrainer::create call check_supported).
TEST(CudaModelSupport, RefusesGroupedQueryBiasesAndUntiedHeadWithOneLine) {
  for (int variant = 0; variant < 3; ++variant) {
    ModelConfig c = small_model();
    if (variant == 0) c.kv_heads = 1;
    if (variant == 1) c.attention_bias = true;
    if (variant == 2) c.tie_word_embeddings = false;
    ASSERT_TRUE(validate(c).ok()) << variant;
    const Status s = check_supported(c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << variant;
    EXPECT_NE(s.message().find("the CUDA model does not support grouped-query attention"),
              std::string::npos)
        << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
    EXPECT_FALSE(check_supported(c, small_trainer(4)).ok()) << variant;
  }
}

class CudaModelTest : public CudaTest {};

// One forward + backward of `cfg` on (B, T) against the CPU model.
void forward_backward_vs_cpu(kernels::cuda::Context& ctx_ref, const ModelConfig& cfg, int B,
                             int T) {
  auto ctx = [&]() -> kernels::cuda::Context& { return ctx_ref; };
  ParamSet params(make_layout(cfg));
  init_params(params, cfg, 7);
  const auto tok = make_tokens(B, T, cfg.vocab, 1);
  std::vector<int32_t> in, tg;
  data::split_inputs_targets(tok.data(), B, T, in, tg);
  tg[5] = -1;  // an ignored target

  Llama cpu(cfg);
  const float cpu_loss = cpu.forward(params, in.data(), tg.data(), B, T);
  ParamSet cpu_g(params.layout());
  cpu.backward(params, cpu_g);

  auto model = CudaLlama::create(cfg, ctx());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const size_t P = params.numel();
  auto dp = DeviceBuffer<float>::alloc(P);
  auto dg = DeviceBuffer<float>::alloc(P);
  ASSERT_TRUE(dp.ok() && dg.ok());
  ASSERT_TRUE(h2d(ctx(), dp->data(), params.data(), P * sizeof(float)).ok());
  ASSERT_TRUE(kernels::cuda::zero_fill(ctx(), dg->data(), P).ok());
  ASSERT_TRUE((*model)->forward(dp->data(), in.data(), tg.data(), B, T).ok());
  auto loss = (*model)->loss();
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  EXPECT_EQ((*model)->num_targets(), cpu.num_targets());
  EXPECT_NEAR(*loss, cpu_loss, 1e-5 * cpu_loss);
  // MoE router losses (0 and 0 for a dense model): the CPU model's values.
  double bal = -1, zl = -1;
  ASSERT_TRUE((*model)->router_loss_sums(bal, zl).ok());
  EXPECT_NEAR(bal, cpu.balance_loss_sum(), 1e-5 * cpu.balance_loss_sum());
  EXPECT_NEAR(zl, cpu.z_loss_sum(), 1e-5 * cpu.z_loss_sum());
  auto aux = (*model)->aux_loss();
  ASSERT_TRUE(aux.ok()) << aux.status().to_string();
  EXPECT_NEAR(*aux, cpu.aux_loss(), 1e-5 * cpu.aux_loss());
  if (cfg.moe_experts > 0) {
    EXPECT_GT(bal, 0.0);
  }
  // Logits before backward overwrites them.
  std::vector<float> logits(size_t(B) * T * cfg.vocab);
  ASSERT_TRUE(d2h(ctx(), logits.data(), (*model)->logits(), logits.size() * 4).ok());
  const std::vector<float> cpu_logits(cpu.logits(), cpu.logits() + logits.size());
  EXPECT_TRUE(kernels::cuda::testing::close(logits, cpu_logits, 1e-4, 1e-5));

  ASSERT_TRUE((*model)->backward(dp->data(), dg->data()).ok());
  ParamSet gpu_g(params.layout());
  ASSERT_TRUE(d2h(ctx(), gpu_g.data(), dg->data(), P * sizeof(float)).ok());
  EXPECT_TRUE(views_close(gpu_g, cpu_g, 2e-4));
}

TEST_F(CudaModelTest, ForwardBackwardMatchesTheCpuModel) {
  forward_backward_vs_cpu(ctx(), small_model(), 4, 16);
}

// Odd sizes: C = 30 puts weights after the norm gains at as little as 8-byte alignment (cuBLASLt
// must be told), V = 61, D = 10, F = 46, N = 3·13 = 39 (activation views padded to 256 bytes).
TEST_F(CudaModelTest, ForwardBackwardMatchesTheCpuModelAtOddSizes) {
  ModelConfig c = small_model();
  c.vocab = 61;
  c.dim = 30;
  c.heads = 3;
  c.ffn_hidden = 46;
  forward_backward_vs_cpu(ctx(), c, 3, 13);
}

TEST_F(CudaModelTest, TwentyStepsTrackTheCpuTrainer) {
  const ModelConfig cfg = small_model();
  const TrainerConfig tc = small_trainer(4);
  ParamSet p_cpu(make_layout(cfg));
  init_params(p_cpu, cfg, 11);
  ParamSet p_gpu = p_cpu;
  InnerTrainer cpu(cfg, tc);
  auto gpu = CudaTrainer::create(cfg, tc, {0});
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  std::vector<float> lc, lg;
  for (int s = 0; s < 20; ++s) {
    const auto tok = make_tokens(tc.batch, tc.seq, cfg.vocab, 100 + uint32_t(s));
    const StepStats a = cpu.step(p_cpu, tok.data(), s);
    auto b = (*gpu)->step(p_gpu, tok.data(), s);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    EXPECT_EQ(b->lr, a.lr);  // the same schedule function
    EXPECT_NEAR(b->grad_norm, a.grad_norm, 1e-4 * a.grad_norm) << "step " << s;
    lc.push_back(a.loss);
    lg.push_back(b->loss);
  }
  // Rounding differences do not grow much over 20 steps here: on the CPU, parameters perturbed
  // by a few ulps (relative 4e-7) move the loss by at most 1.3e-7 relative over these 20 steps.
  // The GPU's per-step differences are ~1e-6 relative; 1e-4 leaves two orders of margin.
  for (int s = 0; s < 20; ++s) EXPECT_NEAR(lg[s], lc[s], 1e-4 * lc[s]) << "step " << s;
  double first = 0, last = 0;
  for (int s = 0; s < 5; ++s) first += lg[size_t(s)] / 5, last += lg[size_t(15 + s)] / 5;
  EXPECT_LT(last, first - 0.3) << "the GPU path did not learn";
  EXPECT_EQ((*gpu)->adam_steps(), 20);
}

// Trains cfg twice from the same θ on the same batches (`steps` CUDA trainer steps, batch seeds
// token_seed + step): the losses and the final θ are the same bits, and θ moved.
void expect_two_runs_bitwise_equal(const ModelConfig& cfg, int steps, uint32_t token_seed) {
  const TrainerConfig tc = small_trainer(4);
  ParamSet init(make_layout(cfg));
  init_params(init, cfg, 3);
  std::vector<ParamSet> out;
  std::vector<std::vector<float>> losses(2);
  for (int run = 0; run < 2; ++run) {
    ParamSet p = init;
    auto t = CudaTrainer::create(cfg, tc, {0});
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    for (int s = 0; s < steps; ++s) {
      const auto tok = make_tokens(tc.batch, tc.seq, cfg.vocab, token_seed + uint32_t(s));
      auto st = (*t)->step(p, tok.data(), s);
      ASSERT_TRUE(st.ok()) << st.status().to_string();
      losses[size_t(run)].push_back(st->loss);
    }
    out.push_back(std::move(p));
  }
  EXPECT_TRUE(same_bits(losses[0], losses[1]));
  EXPECT_TRUE(same_bits(out[0].vec(), out[1].vec()));
  EXPECT_NE(out[0].fingerprint(), init.fingerprint());
}

TEST_F(CudaModelTest, SameRunTwiceIsBitwiseEqual) {
  expect_two_runs_bitwise_equal(small_model(), 6, 500);
}

// A node's round snapshot on a GPU (node/round_snapshot.h): the AdamW moments and step count
// downloaded after some steps and uploaded again make the next steps repeat bit for bit; the
// steps from the advanced state do not.
TEST_F(CudaModelTest, MomentsUploadedAgainRedoTheStepsBitwise) {
  const ModelConfig cfg = small_model();
  const TrainerConfig tc = small_trainer(4);
  ParamSet p(make_layout(cfg));
  init_params(p, cfg, 5);
  auto t = CudaTrainer::create(cfg, tc, {0});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto steps = [&](int first, ParamSet& params) {
    for (int s = first; s < first + 3; ++s) {
      const auto tok = make_tokens(tc.batch, tc.seq, cfg.vocab, 700 + uint32_t(s));
      auto st = (*t)->step(params, tok.data(), s);
      ASSERT_TRUE(st.ok()) << st.status().to_string();
    }
  };
  steps(0, p);
  ParamSet m(make_layout(cfg)), v(make_layout(cfg));
  ASSERT_TRUE((*t)->download_moments(m, v).ok());
  const int64_t adam_steps = (*t)->adam_steps();
  ASSERT_EQ(adam_steps, 3);
  const ParamSet start = p;
  steps(3, p);
  const ParamSet first = p;
  p = start;
  steps(3, p);
  EXPECT_FALSE(same_bits(p.vec(), first.vec())) << "the advanced state repeated the steps";
  ASSERT_TRUE((*t)->upload_moments(m, v, adam_steps).ok());
  EXPECT_EQ((*t)->adam_steps(), 3);
  p = start;
  steps(3, p);
  EXPECT_TRUE(same_bits(p.vec(), first.vec()));
  EXPECT_FALSE((*t)->upload_moments(ParamSet(), v, 0).ok());  // not the model's layout
}

// ---- MoE layers (llama_cuda_moe.h) against the CPU MoE block ----------------------------------
// Same tolerances as the dense model: the MoE ops add reductions of at most max(E, K, Fe, Fs, C)
// <= 64 terms. Top-k is a discontinuous choice: the CPU and the GPU pick the same experts unless
// two scores of a token lie within rounding of each other (probability ~1e-6 per comparison for
// these random weights), so one forward could in principle differ by a whole expert; a failure
// of that kind shows up as O(1) differences in one expert's gradient and is not a tolerance
// problem.

TEST_F(CudaModelTest, MoeSoftmaxMixedWithDenseLayersMatchesTheCpuModel) {
  forward_backward_vs_cpu(ctx(), moe_model("softmax", 0, 2), 4, 16);  // layer 1 MoE
}

TEST_F(CudaModelTest, MoeSigmoidWithSharedExpertMixedWithDenseLayersMatchesTheCpuModel) {
  forward_backward_vs_cpu(ctx(), moe_model("sigmoid", 24, 2), 4, 16);
}

// Every layer MoE, odd sizes (E = 8, K = 3, Fe = 12, Fs = 20, N = 39) and router-loss weights
// 10x the defaults, so a wrong balance- or z-loss gradient cannot hide under the tolerance.
TEST_F(CudaModelTest, MoeEveryLayerSharedExpertOddSizesStrongRouterLossesMatchTheCpuModel) {
  ModelConfig c = moe_model("softmax", 20, 1);
  c.moe_experts = 8;
  c.moe_top_k = 3;
  c.moe_hidden = 12;
  c.moe_aux_coef = 0.1;
  c.moe_z_coef = 0.01;
  forward_backward_vs_cpu(ctx(), c, 3, 13);
}

TEST_F(CudaModelTest, MoeSigmoidTopOneEveryLayerMatchesTheCpuModel) {
  ModelConfig c = moe_model("sigmoid", 0, 1);
  c.moe_top_k = 1;
  c.moe_aux_coef = 0.05;
  forward_backward_vs_cpu(ctx(), c, 4, 16);
}

TEST_F(CudaModelTest, MoeTenStepsTrackTheCpuTrainer) {
  for (const ModelConfig& cfg : {moe_model("softmax", 0, 2), moe_model("sigmoid", 24, 1)}) {
    SCOPED_TRACE(cfg.moe_score);
    const TrainerConfig tc = small_trainer(4);
    ParamSet p_cpu(make_layout(cfg));
    init_params(p_cpu, cfg, 13);
    ParamSet p_gpu = p_cpu;
    InnerTrainer cpu(cfg, tc);
    auto gpu = CudaTrainer::create(cfg, tc, {0});
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    for (int s = 0; s < 10; ++s) {
      const auto tok = make_tokens(tc.batch, tc.seq, cfg.vocab, 300 + uint32_t(s));
      const StepStats a = cpu.step(p_cpu, tok.data(), s);
      auto b = (*gpu)->step(p_gpu, tok.data(), s);
      ASSERT_TRUE(b.ok()) << b.status().to_string();
      EXPECT_NEAR(b->grad_norm, a.grad_norm, 1e-4 * a.grad_norm) << "step " << s;
      EXPECT_NEAR(b->loss, a.loss, 1e-4 * a.loss) << "step " << s;
    }
  }
}

TEST_F(CudaModelTest, MoeSameRunTwiceIsBitwiseEqual) {
  expect_two_runs_bitwise_equal(moe_model("sigmoid", 16, 1), 4, 700);
}

TEST_F(CudaModelTest, TwoDevicesEqualOneDeviceOnTheConcatenatedBatch) {
  auto n = kernels::cuda::device_count();
  if (!n.ok() || *n < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  if (!kernels::cuda::nccl_available()) GTEST_SKIP() << "built without NCCL";
  const ModelConfig cfg = small_model();
  const TrainerConfig tc = small_trainer(5);  // 5 rows: 3 on rank 0, 2 on rank 1
  ParamSet init(make_layout(cfg));
  init_params(init, cfg, 5);
  const auto tok = make_tokens(tc.batch, tc.seq, cfg.vocab, 9);
  ParamSet p1 = init, p2 = init;
  auto one = CudaTrainer::create(cfg, tc, {0});
  auto two = CudaTrainer::create(cfg, tc, {0, 1});
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  auto a = (*one)->step(p1, tok.data(), 0);
  auto b = (*two)->step(p2, tok.data(), 0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(b->loss, a->loss, 1e-5 * a->loss);
  EXPECT_NEAR(b->grad_norm, a->grad_norm, 1e-4 * a->grad_norm);
  ParamSet g1(init.layout()), g2r0(init.layout()), g2r1(init.layout());
  ASSERT_TRUE((*one)->download_grads(g1).ok());
  ASSERT_TRUE((*two)->download_grads(g2r0, 0).ok());
  ASSERT_TRUE((*two)->download_grads(g2r1, 1).ok());
  EXPECT_TRUE(same_bits(g2r0.vec(), g2r1.vec())) << "the ranks' gradients differ";
  EXPECT_TRUE(views_close(g2r0, g1, 2e-4));
  // Same gradients => the same AdamW step. Its first update is ≈ lr·g/(|g| + eps), so an element
  // whose gradient is within rounding of 0 may move by up to 2·lr the other way: no element may
  // differ by more than that, and under 1% of them by more than lr/100.
  size_t far = 0, apart = 0;
  for (size_t i = 0; i < init.numel(); ++i) {
    const double d = std::abs(double(p2.data()[i]) - double(p1.data()[i]));
    far += d > 2 * tc.lr;
    apart += d > tc.lr / 100;
  }
  EXPECT_EQ(far, 0u);
  EXPECT_LT(apart, init.numel() / 100);
  EXPECT_NE(p2.fingerprint(), init.fingerprint());
  // The replicas stay identical: rank 1's θ has rank 0's bits.
  ParamSet r1(init.layout());
  ASSERT_TRUE((*two)->store_params(r1, 1).ok());
  EXPECT_TRUE(same_bits(r1.vec(), p2.vec()));
}

}  // namespace
}  // namespace atl::algorithms::cuda
