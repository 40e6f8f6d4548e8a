// The precision recipes on the CUDA path (algorithms/cuda/precision_cuda.h) against the CPU's
// PrecisionGemm (algorithms/model/precision.h), from one operand up to training steps:
// - every operand role of every recipe (and the bf16 high-precision sites): the dequantized
//   values are the CPU's bits (the quantizers are bit for bit the CPU encoders, the transposes
//   and the Hadamard transform move or add the same floats in the same order, stochastic
//   rounding draws the same Philox counters);
// - the GEMMs built on them (dense and grouped): the CPU's values up to the fp32 GEMM's summation
//   order (rtol 1e-4, atol 1e-4, as the grouped-GEMM op test);
// - the whole model (dense and MoE layers): one forward + backward under each recipe is much
//   closer to the CPU model under the same recipe than the CPU's fp32 model is (the recipe is
//   applied, and applied the same way), see recipe_model_vs_cpu;
// - training steps track the CPU trainer under the recipe, and the same nvfp4 run (stochastic
//   rounding) twice gives the same bits.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "algorithms/cuda/cuda_trainer.h"
#include "algorithms/cuda/llama_cuda.h"
#include "algorithms/cuda/precision_cuda.h"
#include "algorithms/data/dataset.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/precision.h"
#include "cuda/cuda_test_util.h"
#include "cuda/model_test_util.h"
#include "kernels/cpu/moe_ops.h"
#include "kernels/cuda/moe_ops.h"
#include "kernels/cuda/ops.h"

namespace atl::algorithms::cuda {
namespace {

namespace kc = atl::kernels::cuda;
using kc::testing::close;
using kc::testing::CudaTest;
using kc::testing::randn;
using kc::testing::same_bits;
using testing::make_tokens;
using testing::moe_model;
using testing::small_model;
using testing::small_trainer;

constexpr Precision kRecipes[] = {Precision::kBf16, Precision::kFp8, Precision::kMxfp8,
                                  Precision::kNvfp4};
constexpr Operand kRoles[] = {Operand::kFwdX,   Operand::kFwdW,    Operand::kDgradDy,
                              Operand::kDgradW, Operand::kWgradDy, Operand::kWgradX};

using CudaPrecisionTest = CudaTest;

// a within the fp32 GEMM's rounding of b: rtol 1e-4 and an absolute 2e-5 of b's largest
// magnitude (sums of up to 100 terms whose products reach ~|b|max: cancellation leaves that much).
::testing::AssertionResult gemm_close(const std::vector<float>& a, const std::vector<float>& b) {
  double mx = 0;
  for (float v : b) mx = std::max(mx, double(std::abs(v)));
  return close(a, b, 1e-4, 2e-5 * mx + 1e-30);
}

// Random values with a spread of magnitudes (so block scales differ) and a few outliers.
std::vector<float> spread(size_t n, uint32_t seed) {
  std::vector<float> v = randn(n, seed);
  for (size_t i = 0; i < n; ++i) v[i] *= std::ldexp(1.0f, int(i % 7) - 3);
  if (n > 5) v[n / 3] = 40.0f, v[n / 2] = -75.0f;
  return v;
}

TEST_F(CudaPrecisionTest, QuantizedOperandsAreTheCpuBits) {
  // (rows, cols): whole 16/32-element blocks and ragged ones; 37 rows = two Hadamard groups and
  // a tail of 5.
  const int shapes[][2] = {{37, 48}, {40, 20}, {16, 64}};
  for (Precision p : kRecipes) {
    for (bool hp : {false, true}) {
      for (const auto& sh : shapes) {
        const int rows = sh[0], cols = sh[1];
        const size_t n = size_t(rows) * cols;
        const auto m = spread(n, 40u + uint32_t(rows));
        PrecisionGemm cpu;
        cpu.configure(p, 77);
        cpu.begin_step(3);
        CudaPrecisionGemm gpu(ctx());
        gpu.configure(p, 77);
        gpu.begin_step(3);
        const GemmSite site{9, hp};
        auto d_m = to_device(m);
        auto d_out = to_device(std::vector<float>(n, 0.0f));
        for (Operand role : kRoles) {
          SCOPED_TRACE(std::string(precision_name(p)) + (hp ? " high-precision" : "") + " role " +
                       std::to_string(int(role)) + " shape " + std::to_string(rows) + "x" +
                       std::to_string(cols));
          std::vector<float> want(n);
          cpu.quantize_operand(m.data(), rows, cols, role, site, want.data(), 123);
          ASSERT_OK(gpu.quantize_operand(d_m.data(), rows, cols, role, site, d_out.data(), 123));
          EXPECT_TRUE(same_bits(to_host(d_out, n), want));
        }
      }
    }
  }
}

TEST_F(CudaPrecisionTest, DenseAndGroupedGemmsMatchTheCpuRecipe) {
  const int N = 50, IC = 24, OC = 20, E = 4, K = 2;
  const size_t M = size_t(N) * K, stride = size_t(OC) * IC + 7;  // a padded expert stride
  for (Precision p : kRecipes) {
    SCOPED_TRACE(precision_name(p));
    PrecisionGemm cpu;
    cpu.configure(p, 5);
    cpu.begin_step(1);
    CudaPrecisionGemm gpu(ctx());
    gpu.configure(p, 5);
    gpu.begin_step(1);
    const GemmSite site{6, false};
    // Dense.
    const auto x = spread(size_t(N) * IC, 1), w = spread(size_t(OC) * IC, 2),
               dy = spread(size_t(N) * OC, 3);
    std::vector<float> out(size_t(N) * OC), dx = randn(size_t(N) * IC, 4),
                                            dw = randn(size_t(OC) * IC, 5);
    auto d_x = to_device(x), d_w = to_device(w), d_dy = to_device(dy), d_out = to_device(out),
         d_dx = to_device(dx), d_dw = to_device(dw);
    cpu.forward(out.data(), x.data(), w.data(), N, IC, OC, site);
    cpu.backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), N, IC, OC, site);
    ASSERT_OK(gpu.forward(d_out.data(), d_x.data(), d_w.data(), N, IC, OC, site));
    ASSERT_OK(gpu.backward(d_dx.data(), d_dw.data(), d_dy.data(), d_x.data(), d_w.data(), N, IC, OC,
                           site));
    EXPECT_TRUE(gemm_close(to_host(d_out, out.size()), out)) << "forward";
    EXPECT_TRUE(gemm_close(to_host(d_dx, dx.size()), dx)) << "dgrad";
    EXPECT_TRUE(gemm_close(to_host(d_dw, dw.size()), dw)) << "wgrad";

    // Grouped, over a plan with uneven groups (expert 3 gets none).
    std::vector<int32_t> idx(M);
    for (int n = 0; n < N; ++n) {  // two distinct experts of {0, 1, 2}
      idx[size_t(n) * K] = n % 3;
      idx[size_t(n) * K + 1] = (n % 3 + 1 + (n / 3) % 2) % 3;
    }
    kernels::cpu::MoePlan plan;
    kernels::cpu::moe_plan(plan, idx.data(), N, E, K);
    kc::MoeDevicePlan dplan;
    auto d_idx = to_device(idx);
    ASSERT_OK(kc::moe_plan(ctx(), dplan, d_idx.data(), N, E, K));
    const auto gx = spread(M * IC, 11), gw = spread(E * stride, 12), gdy = spread(M * OC, 13);
    std::vector<float> gout(M * OC), gdx = randn(M * IC, 14), gdw = randn(E * stride, 15);
    auto d_gx = to_device(gx), d_gw = to_device(gw), d_gdy = to_device(gdy),
         d_gout = to_device(gout), d_gdx = to_device(gdx), d_gdw = to_device(gdw);
    cpu.grouped_forward(gout.data(), gx.data(), gw.data(), stride, plan, IC, OC, site);
    cpu.grouped_backward(gdx.data(), gdw.data(), gdy.data(), gx.data(), gw.data(), stride, plan, IC,
                         OC, site);
    ASSERT_OK(
        gpu.grouped_forward(d_gout.data(), d_gx.data(), d_gw.data(), stride, dplan, IC, OC, site));
    ASSERT_OK(gpu.grouped_backward(d_gdx.data(), d_gdw.data(), d_gdy.data(), d_gx.data(),
                                   d_gw.data(), stride, dplan, IC, OC, site));
    EXPECT_TRUE(gemm_close(to_host(d_gout, gout.size()), gout)) << "grouped forward";
    EXPECT_TRUE(gemm_close(to_host(d_gdx, gdx.size()), gdx)) << "grouped dgrad";
    EXPECT_TRUE(gemm_close(to_host(d_gdw, gdw.size()), gdw)) << "grouped wgrad";
  }
}

double l2(const float* a, const float* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = double(a[i]) - (b ? double(b[i]) : 0.0);
    s += d * d;
  }
  return std::sqrt(s);
}

// One forward + backward of cfg under recipe p on the GPU against the CPU model under p (the
// reference) and under fp32 (the yardstick). Quantization is discontinuous: an operand that
// differs from the CPU's by an fp32 rounding can land in the neighbouring quantization bin, so
// the GPU is not within fp32 rounding of the CPU recipe. But such flips are rare (the input
// must lie within ~1e-6 relative of a bin edge) while the recipe moves every element, so per
// tensor the GPU's distance to the CPU recipe must be a small part (1/4) of fp32's distance to
// it, or within the fp32 tests' tolerance (2e-4 of the tensor's norm); and over the whole model
// fp32 must be 10x farther from the recipe than the GPU is (the recipe really is applied).
void recipe_model_vs_cpu(kc::Context& ctx, const ModelConfig& cfg, Precision p) {
  SCOPED_TRACE(std::string(precision_name(p)) + (cfg.moe_experts ? " MoE" : " dense"));
  const int B = 4, T = 16;
  ParamSet params(make_layout(cfg));
  init_params(params, cfg, 7);
  const auto tok = make_tokens(B, T, cfg.vocab, 2);
  std::vector<int32_t> in, tg;
  data::split_inputs_targets(tok.data(), B, T, in, tg);

  auto cpu_run = [&](Precision q, ParamSet& g) {
    Llama m(cfg);
    m.set_precision(q, 99);
    m.gemm().begin_step(4);
    const float loss = m.forward(params, in.data(), tg.data(), B, T);
    m.backward(params, g);
    return loss;
  };
  ParamSet g_p(params.layout()), g_32(params.layout()), g_gpu(params.layout());
  const float loss_p = cpu_run(p, g_p), loss_32 = cpu_run(Precision::kFp32, g_32);

  auto model = CudaLlama::create(cfg, ctx);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  (*model)->set_precision(p, 99);
  (*model)->gemm().begin_step(4);
  const size_t P = params.numel();
  auto dp = kc::DeviceBuffer<float>::alloc(P);
  auto dg = kc::DeviceBuffer<float>::alloc(P);
  ASSERT_TRUE(dp.ok() && dg.ok());
  ASSERT_TRUE(h2d(ctx, dp->data(), params.data(), P * sizeof(float)).ok());
  ASSERT_TRUE(kc::zero_fill(ctx, dg->data(), P).ok());
  ASSERT_TRUE((*model)->forward(dp->data(), in.data(), tg.data(), B, T).ok());
  auto loss = (*model)->loss();
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  ASSERT_TRUE((*model)->backward(dp->data(), dg->data()).ok());
  ASSERT_TRUE(d2h(ctx, g_gpu.data(), dg->data(), P * sizeof(float)).ok());

  EXPECT_LE(std::abs(*loss - loss_p), 0.25 * std::abs(loss_32 - loss_p) + 1e-5 * loss_p)
      << "gpu " << *loss << ", cpu " << loss_p << ", cpu fp32 " << loss_32;
  double sum_gpu = 0, sum_32 = 0;
  for (const ParamView& v : params.layout().views()) {
    const float* a = g_gpu.data() + v.offset;
    const float* b = g_p.data() + v.offset;
    const float* c = g_32.data() + v.offset;
    const double d_gpu = l2(a, b, v.numel()), d_32 = l2(c, b, v.numel());
    const double norm = l2(b, nullptr, v.numel());
    sum_gpu += d_gpu;
    sum_32 += d_32;
    EXPECT_LE(d_gpu, std::max(0.25 * d_32, 2e-4 * norm))
        << v.name << ": |gpu - cpu| " << d_gpu << ", |fp32 - cpu| " << d_32 << ", |cpu| " << norm;
  }
  EXPECT_GT(sum_32, 10 * sum_gpu) << "the recipe changes the CPU's gradients too little, or the "
                                     "GPU does not apply it";
}

TEST_F(CudaPrecisionTest, DenseModelMatchesTheCpuModelUnderEveryRecipe) {
  for (Precision p : kRecipes) recipe_model_vs_cpu(ctx(), small_model(), p);
}

TEST_F(CudaPrecisionTest, MoeModelMatchesTheCpuModelUnderEveryRecipe) {
  for (Precision p : kRecipes) recipe_model_vs_cpu(ctx(), moe_model("sigmoid", 24, 2), p);
}

// The trainer under a recipe: the CPU trainer's losses and gradient norms step by step (1e-2
// relative: bin flips, see above, move a step's values by far less; a missing recipe, wrong
// step key or precision seed moves them by the recipe's whole effect on the first step already).
TEST_F(CudaPrecisionTest, StepsTrackTheCpuTrainerUnderARecipe) {
  for (Precision p : {Precision::kBf16, Precision::kNvfp4}) {
    SCOPED_TRACE(precision_name(p));
    const ModelConfig cfg = moe_model("softmax", 16, 2);
    TrainerConfig tc = small_trainer(4);
    tc.precision = p;
    tc.precision_seed = 21;
    ParamSet p_cpu(make_layout(cfg));
    init_params(p_cpu, cfg, 17);
    ParamSet p_gpu = p_cpu;
    InnerTrainer cpu(cfg, tc);
    auto gpu = CudaTrainer::create(cfg, tc, {0});
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    for (int s = 0; s < 4; ++s) {
      const auto tok = make_tokens(tc.batch, tc.seq, cfg.vocab, 900 + uint32_t(s));
      const StepStats a = cpu.step(p_cpu, tok.data(), s);
      auto b = (*gpu)->step(p_gpu, tok.data(), s);
      ASSERT_TRUE(b.ok()) << b.status().to_string();
      EXPECT_NEAR(b->loss, a.loss, 1e-2 * a.loss) << "step " << s;
      EXPECT_NEAR(b->grad_norm, a.grad_norm, 1e-2 * a.grad_norm) << "step " << s;
    }
  }
}

TEST_F(CudaPrecisionTest, SameNvfp4RunTwiceIsBitwiseEqual) {
  const ModelConfig cfg = moe_model("sigmoid", 16, 1);
  TrainerConfig tc = small_trainer(4);
  tc.precision = Precision::kNvfp4;
  tc.precision_seed = 8;
  ParamSet init(make_layout(cfg));
  init_params(init, cfg, 3);
  std::vector<std::vector<float>> out;
  for (int run = 0; run < 2; ++run) {
    ParamSet p = init;
    auto t = CudaTrainer::create(cfg, tc, {0});
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    for (int s = 0; s < 3; ++s) {
      const auto tok = make_tokens(tc.batch, tc.seq, cfg.vocab, 40 + uint32_t(s));
      ASSERT_TRUE((*t)->step(p, tok.data(), s).ok());
    }
    out.push_back(p.vec());
  }
  EXPECT_TRUE(same_bits(out[0], out[1]));
}

}  // namespace
}  // namespace atl::algorithms::cuda
