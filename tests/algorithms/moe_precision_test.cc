// Precision recipes on the MoE experts: the grouped expert GEMMs (forward, dgrad, wgrad) equal
// "quantize each expert group's operands with the format code, dequantize, fp32 GEMM" bit for
// bit; a group's result does not depend on the other groups (per-group scales); fp32 is the
// plain grouped GEMM; MoE training under every recipe stays finite, learns, and is bitwise the
// same with 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/model/precision.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/philox.h"
#include "kernels/cpu/moe_ops.h"
#include "kernels/cpu/ops.h"
#include "tests/algorithms/precision_reference.h"

namespace atl::algorithms {
namespace {

namespace ops = atl::kernels::cpu;
using namespace precision_ref;  // NOLINT: the reference quantizers

constexpr Precision kRecipes[] = {Precision::kFp32, Precision::kBf16, Precision::kFp8,
                                  Precision::kMxfp8, Precision::kNvfp4};

// A routing plan of N tokens over E = 4 experts, K = 2, expert 2 never chosen (an empty group),
// group sizes uneven (expert 0 takes most tokens): offsets e.g. 0 | 37 | 60 | 60 | 74.
ops::MoePlan uneven_plan(int N) {
  const int E = 4, K = 2;
  std::vector<int32_t> idx(size_t(N) * K);
  for (int n = 0; n < N; ++n) {
    idx[size_t(n) * K] = n % 5 == 4 ? 3 : 0;
    idx[size_t(n) * K + 1] = n % 3 == 0 ? 3 : 1;
  }
  ops::MoePlan plan;
  ops::moe_plan(plan, idx.data(), N, E, K);
  return plan;
}

// The grouped GEMMs against the explicit per-group recipe. W_e sits at e·stride with a stride
// larger than OC·IC, as the expert blocks of the model (gate|up|down) do.
TEST(MoePrecision, GroupedGemmEqualsPerGroupQuantizeDequantizeGemm) {
  const int N = 37, IC = 40, OC = 24;  // odd group sizes: block and Hadamard tails
  const ops::MoePlan plan = uneven_plan(N);
  ASSERT_EQ(plan.offsets[2], plan.offsets[3]) << "the plan should have an empty group";
  const int M = N * plan.K, E = plan.E;
  const size_t stride = size_t(OC) * IC + 9, wsz = size_t(OC) * IC;
  const Mat x = random_mat(M, IC, 1), w = random_mat(E * stride, 1, 2, 0.05),
            dy = random_mat(M, OC, 3, 1e-3);
  for (Precision p : kRecipes)
    for (bool high : {false, true}) {
      SCOPED_TRACE(std::string(precision_name(p)) + (high ? " high" : ""));
      PrecisionGemm g;
      g.configure(p, 77);
      g.begin_step(5);
      const GemmSite site{6, high};
      Mat out(size_t(M) * OC, 0.0f), want(size_t(M) * OC, 0.0f);
      Mat dx = random_mat(M, IC, 4), dw = random_mat(E * stride, 1, 5);  // accumulate onto these
      Mat dx_want = dx, dw_want = dw;
      g.grouped_forward(out.data(), x.data(), w.data(), stride, plan, IC, OC, site);
      g.grouped_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), stride, plan, IC, OC,
                         site);
      for (int e = 0; e < E; ++e) {
        const int r0 = plan.offsets[e], rows = plan.offsets[e + 1] - r0;
        if (rows == 0) continue;
        const Mat xe(x.begin() + size_t(r0) * IC, x.begin() + size_t(r0 + rows) * IC);
        const Mat dye(dy.begin() + size_t(r0) * OC, dy.begin() + size_t(r0 + rows) * OC);
        const Mat we(w.begin() + e * stride, w.begin() + e * stride + wsz);
        const uint64_t fx = uint64_t(r0) * IC, fy = uint64_t(r0) * OC;
        const Mat xq = reference(g, p, xe, rows, IC, Operand::kFwdX, site, fx);
        const Mat wq = reference(g, p, we, OC, IC, Operand::kFwdW, site);
        ops::matmul_forward(want.data() + size_t(r0) * OC, xq.data(), wq.data(), rows, IC, OC);
        const Mat dq = reference(g, p, dye, rows, OC, Operand::kDgradDy, site, fy);
        const Mat wq2 = reference(g, p, we, OC, IC, Operand::kDgradW, site);
        const Mat gq = reference(g, p, dye, rows, OC, Operand::kWgradDy, site, fy);
        const Mat xq2 = reference(g, p, xe, rows, IC, Operand::kWgradX, site, fx);
        ops::matmul_backward(dx_want.data() + size_t(r0) * IC, static_cast<float*>(nullptr),
                             dq.data(), static_cast<const float*>(nullptr), wq2.data(), rows, IC,
                             OC);
        ops::matmul_backward(static_cast<float*>(nullptr), dw_want.data() + e * stride, gq.data(),
                             xq2.data(), static_cast<const float*>(nullptr), rows, IC, OC);
        if (p != Precision::kFp32) {
          EXPECT_FALSE(same_bits(xq, xe));  // something was quantized
        }
      }
      EXPECT_TRUE(same_bits(out, want));
      EXPECT_TRUE(same_bits(dx, dx_want));
      EXPECT_TRUE(same_bits(dw, dw_want));  // the padding between experts untouched too
    }
}

// Per-group scaling: multiplying one expert's tokens by 1000 changes no other group's output
// (a per-tensor scale over the permuted tensor would crush the other groups' values).
TEST(MoePrecision, EachGroupIsQuantizedOnItsOwn) {
  const int N = 37, IC = 32, OC = 16;
  const ops::MoePlan plan = uneven_plan(N);
  const int M = N * plan.K;
  const size_t stride = size_t(OC) * IC;
  const Mat x = random_mat(M, IC, 1), w = random_mat(plan.E * stride, 1, 2, 0.05);
  Mat loud = x;
  const int r0 = plan.offsets[1], r1 = plan.offsets[2];  // expert 1's rows
  for (size_t i = size_t(r0) * IC; i < size_t(r1) * IC; ++i) loud[i] *= 1000.0f;
  for (Precision p : {Precision::kFp8, Precision::kMxfp8, Precision::kNvfp4}) {
    SCOPED_TRACE(precision_name(p));
    PrecisionGemm g;
    g.configure(p, 3);
    Mat a(size_t(M) * OC), b(size_t(M) * OC);
    g.grouped_forward(a.data(), x.data(), w.data(), stride, plan, IC, OC, GemmSite{1, false});
    g.grouped_forward(b.data(), loud.data(), w.data(), stride, plan, IC, OC, GemmSite{1, false});
    for (int e : {0, 3}) {
      const size_t lo = size_t(plan.offsets[e]) * OC, hi = size_t(plan.offsets[e + 1]) * OC;
      ASSERT_LT(lo, hi);
      EXPECT_TRUE(
          same_bits(Mat(a.begin() + lo, a.begin() + hi), Mat(b.begin() + lo, b.begin() + hi)))
          << "expert " << e << " changed with expert 1's range";
    }
  }
}

TEST(MoePrecision, Fp32IsThePlainGroupedGemm) {
  const int N = 21, IC = 16, OC = 12;
  const ops::MoePlan plan = uneven_plan(N);
  const int M = N * plan.K;
  const size_t stride = size_t(OC) * IC + 3;
  const Mat x = random_mat(M, IC, 1), w = random_mat(plan.E * stride, 1, 2),
            dy = random_mat(M, OC, 3);
  PrecisionGemm g;  // default recipe: fp32
  Mat out(size_t(M) * OC), want(size_t(M) * OC);
  Mat dx(size_t(M) * IC, 0.5f), dw(plan.E * stride, 0.25f), dx_want = dx, dw_want = dw;
  g.grouped_forward(out.data(), x.data(), w.data(), stride, plan, IC, OC, GemmSite{});
  ops::moe_grouped_matmul_forward(want.data(), x.data(), w.data(), stride, plan, IC, OC);
  g.grouped_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), stride, plan, IC, OC,
                     GemmSite{});
  ops::moe_grouped_matmul_backward(dx_want.data(), dw_want.data(), dy.data(), x.data(), w.data(),
                                   stride, plan, IC, OC);
  EXPECT_TRUE(same_bits(out, want));
  EXPECT_TRUE(same_bits(dx, dx_want));
  EXPECT_TRUE(same_bits(dw, dw_want));
}

// ---- MoE training under each recipe -----------------------------------------------------------
ModelConfig moe_tiny() {
  ModelConfig c;
  c.vocab = 64;
  c.dim = 32;
  c.layers = 2;  // layer 0 MoE (quantized under nvfp4), layer 1 MoE (nvfp4's bf16 tail)
  c.heads = 2;
  c.ffn_hidden = 64;
  c.seq_len = 32;
  c.moe_experts = 4;
  c.moe_top_k = 2;
  c.moe_hidden = 32;
  c.moe_every = 1;
  c.moe_shared_hidden = 16;
  return c;
}

// Params after `steps` steps of recipe p on the MoE model (precision_ref::train_recipe).
ParamSet train(Precision p, int threads, int steps, std::vector<float>* losses) {
  return precision_ref::train_recipe(moe_tiny(), p, 9, threads, steps, losses);
}

TEST(MoePrecision, EveryRecipeTrainsTheMoeModel) {
  const ParamSet fp32 = train(Precision::kFp32, 1, 3, nullptr);
  for (Precision p : kRecipes) {
    SCOPED_TRACE(precision_name(p));
    std::vector<float> losses;
    const ParamSet a = train(p, 1, 30, &losses);
    for (float l : losses) ASSERT_TRUE(std::isfinite(l));
    EXPECT_LT(losses.back(), 0.8f * losses.front()) << losses.front() << " -> " << losses.back();
    const ParamSet one = train(p, 1, 3, nullptr), two = train(p, 2, 3, nullptr);
    EXPECT_EQ(one.fingerprint(), two.fingerprint()) << "depends on the thread count";
    if (p != Precision::kFp32) {
      EXPECT_NE(one.fingerprint(), fp32.fingerprint()) << "the recipe changed nothing";
    }
  }
}

// The recipe reaches the routed and the shared experts: their weight gradients under bf16 differ
// from fp32 while staying close (bf16 operands carry a relative error of at most 2^-9 each; the
// 5 % bound leaves room for the error compounding through the layers).
TEST(MoePrecision, ExpertGradientsFollowTheRecipe) {
  ModelConfig c = moe_tiny();
  c.layers = 1;
  Llama fp(c), bf(c);
  bf.set_precision(Precision::kBf16, 1);
  ParamSet params(make_layout(c));
  init_params(params, c, 3);
  std::vector<int32_t> x(64), y(64);
  for (int i = 0; i < 64; ++i) x[i] = (i * 7) % 64, y[i] = (i * 7 + 1) % 64;
  auto grads = [&](Llama& m) {
    ParamSet g(make_layout(c));
    g.zero();
    m.forward(params, x.data(), y.data(), 2, 32);
    m.backward(params, g);
    return g;
  };
  const ParamSet gf = grads(fp), gb = grads(bf);
  for (const char* name : {"model.layers.0.mlp.experts.1.down_proj.weight",
                           "model.layers.0.mlp.shared_expert.gate_proj.weight"}) {
    SCOPED_TRACE(name);
    const ParamView* v = gf.layout().find(name);
    ASSERT_NE(v, nullptr);
    double diff = 0, norm = 0;
    bool any = false;
    for (size_t i = 0; i < v->numel(); ++i) {
      const double a = gf.data()[v->offset + i], b = gb.data()[v->offset + i];
      any |= a != b;
      diff += (a - b) * (a - b);
      norm += a * a;
    }
    EXPECT_TRUE(any);
    EXPECT_GT(norm, 0.0);
    EXPECT_LT(std::sqrt(diff / norm), 0.05);
  }
}

}  // namespace
}  // namespace atl::algorithms
