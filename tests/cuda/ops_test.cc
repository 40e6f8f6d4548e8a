// Every op of the CUDA op table against the CPU op on random inputs (ggml's test-backend-ops
// pattern), plus bitwise run-to-run reproducibility. Skips without a GPU.
#include "kernels/cpu/ops.h"

#include "cuda/cuda_test_util.h"
#include "kernels/cuda/ops.h"
#include "kernels/formats/scalar.h"

namespace atl::kernels::cuda {
namespace {

namespace cpu = atl::kernels::cpu;
using testing::close;
using testing::CudaTest;
using testing::randn;
using testing::same_bits;

using OpsTest = CudaTest;

std::vector<int32_t> random_tokens(int N, int V, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(static_cast<size_t>(N));
  // Small id range relative to N: many repeated tokens (the case atomics would make racy).
  for (auto& x : t) x = int32_t(g() % uint32_t(V));
  return t;
}

TEST_F(OpsTest, EmbeddingForwardAndBackwardAreBitwiseEqualToCpu) {
  const int N = 1000, V = 37, C = 130;
  const auto tokens = random_tokens(N, V, 1);
  const auto table = randn(size_t(V) * C, 2);
  const auto dout = randn(size_t(N) * C, 3);
  auto dtable0 = randn(size_t(V) * C, 4);
  std::vector<float> out_ref(size_t(N) * C), dtable_ref = dtable0;
  cpu::embedding_forward(out_ref.data(), tokens.data(), table.data(), N, V, C);
  cpu::embedding_backward(dtable_ref.data(), dout.data(), tokens.data(), N, V, C);
  auto d_tok = to_device(tokens);
  auto d_table = to_device(table);
  auto d_out = to_device(std::vector<float>(size_t(N) * C));
  auto d_dout = to_device(dout);
  auto d_dtable = to_device(dtable0);
  ASSERT_OK(embedding_forward(ctx(), d_out.data(), d_tok.data(), d_table.data(), N, V, C));
  ASSERT_OK(embedding_backward(ctx(), d_dtable.data(), d_dout.data(), d_tok.data(), N, V, C));
  EXPECT_TRUE(same_bits(to_host(d_out, out_ref.size()), out_ref));
  EXPECT_TRUE(same_bits(to_host(d_dtable, dtable_ref.size()), dtable_ref));
}

TEST_F(OpsTest, RmsNormMatchesCpu) {
  const int N = 300, C = 520;
  const auto x = randn(size_t(N) * C, 5), w = randn(C, 6), dout = randn(size_t(N) * C, 7);
  std::vector<float> out(size_t(N) * C), rstd(N), dx = randn(size_t(N) * C, 8), dw = randn(C, 9);
  auto d_x = to_device(x), d_w = to_device(w), d_dout = to_device(dout);
  auto d_out = to_device(out), d_rstd = to_device(rstd), d_dx = to_device(dx), d_dw = to_device(dw);
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);
  cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  ASSERT_OK(
      rmsnorm_forward(ctx(), d_out.data(), d_rstd.data(), d_x.data(), d_w.data(), N, C, 1e-5));
  ASSERT_OK(rmsnorm_backward(ctx(), d_dx.data(), d_dw.data(), d_dout.data(), d_x.data(), d_w.data(),
                             d_rstd.data(), N, C));
  EXPECT_TRUE(close(to_host(d_out, out.size()), out, 1e-5, 1e-6));
  EXPECT_TRUE(close(to_host(d_rstd, rstd.size()), rstd, 1e-5, 1e-7));
  EXPECT_TRUE(close(to_host(d_dx, dx.size()), dx, 1e-4, 1e-5));
  EXPECT_TRUE(close(to_host(d_dw, dw.size()), dw, 1e-4, 1e-3));
}

TEST_F(OpsTest, MatmulForwardAndBackwardMatchCpu) {
  const int N = 96, IC = 200, OC = 72;
  const auto x = randn(size_t(N) * IC, 10), w = randn(size_t(OC) * IC, 11);
  const auto dout = randn(size_t(N) * OC, 12);
  std::vector<float> out(size_t(N) * OC), dx = randn(size_t(N) * IC, 13),
                                          dw = randn(size_t(OC) * IC, 14);
  auto d_x = to_device(x), d_w = to_device(w), d_dout = to_device(dout), d_out = to_device(out),
       d_dx = to_device(dx), d_dw = to_device(dw);
  cpu::matmul_forward(out.data(), x.data(), w.data(), N, IC, OC);
  cpu::matmul_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), N, IC, OC);
  ASSERT_OK(matmul_forward(ctx(), d_out.data(), d_x.data(), d_w.data(), N, IC, OC));
  ASSERT_OK(matmul_backward(ctx(), d_dx.data(), d_dw.data(), d_dout.data(), d_x.data(), d_w.data(),
                            N, IC, OC));
  EXPECT_TRUE(close(to_host(d_out, out.size()), out, 1e-4, 1e-4));
  EXPECT_TRUE(close(to_host(d_dx, dx.size()), dx, 1e-4, 1e-4));
  EXPECT_TRUE(close(to_host(d_dw, dw.size()), dw, 1e-4, 1e-4));
}

// bf16 / FP8 GEMMs against the CPU GEMM of the decoded operands (fp32 accumulation on both).
TEST_F(OpsTest, LowPrecisionMatmulsMatchCpuOnDecodedOperands) {
  const int N = 64, IC = 128, OC = 48;
  const auto x = randn(size_t(N) * IC, 15), w = randn(size_t(OC) * IC, 16);
  std::vector<uint16_t> xb(x.size()), wb(w.size());
  std::vector<float> xd(x.size()), wd(w.size()), ref(size_t(N) * OC);
  for (size_t i = 0; i < x.size(); ++i) {
    xb[i] = uint16_t(std::bit_cast<uint32_t>(x[i]) >> 16);  // truncation: any bf16 code will do
    xd[i] = std::bit_cast<float>(uint32_t(xb[i]) << 16);
  }
  for (size_t i = 0; i < w.size(); ++i) {
    wb[i] = uint16_t(std::bit_cast<uint32_t>(w[i]) >> 16);
    wd[i] = std::bit_cast<float>(uint32_t(wb[i]) << 16);
  }
  cpu::matmul_forward(ref.data(), xd.data(), wd.data(), N, IC, OC);
  auto d_xb = to_device(xb), d_wb = to_device(wb);
  auto d_out = to_device(std::vector<float>(ref.size()));
  ASSERT_OK(matmul_bf16(ctx(), d_out.data(), d_xb.data(), d_wb.data(), N, IC, OC, false));
  EXPECT_TRUE(close(to_host(d_out, ref.size()), ref, 1e-4, 1e-4));

  if (ctx().cc_major() * 10 + ctx().cc_minor() < 89) GTEST_SKIP() << "no FP8 on this GPU";
  // FP8 operands whose products and partial sums are small integers: Hopper's FP8 tensor cores
  // add products in a narrower format than fp32 (about 14 significant bits before cuBLASLt
  // promotes to fp32), so random full-range codes would differ from the fp32 CPU sum by more
  // than any useful tolerance. Integer codes of |v| <= 8 give products <= 64 and sums over
  // IC = 128 of at most 8192 in magnitude, exact in any accumulator of >= 14 bits, and
  // power-of-two scales keep them exact: the result must equal the CPU's up to the sign of zero.
  // This still checks what is ours: the TN layout, both operand types (E4M3 x E4M3 and
  // E5M2 x E4M3), the scale pointers (which scale goes with which operand) and beta.
  std::mt19937 g(17);
  auto integer_codes = [&g](std::vector<uint8_t>& codes, bool e5m2) {
    for (auto& c : codes) {
      for (;;) {
        c = uint8_t(g());
        const float v = e5m2 ? formats::f32_from_e5m2(c) : formats::f32_from_e4m3(c);
        if (std::isfinite(v) && std::abs(v) <= 8.0f && v == std::trunc(v)) break;
      }
    }
  };
  std::vector<uint8_t> x8(x.size()), w8(w.size());
  const float xs = 0.5f, ws = 0.25f;
  auto d_scales = to_device(std::vector<float>{xs, ws});
  for (const bool x_e5m2 : {false, true}) {
    SCOPED_TRACE(x_e5m2 ? "x E5M2, w E4M3" : "x E4M3, w E4M3");
    integer_codes(x8, x_e5m2);
    integer_codes(w8, false);
    for (size_t i = 0; i < x8.size(); ++i)
      xd[i] = (x_e5m2 ? formats::f32_from_e5m2(x8[i]) : formats::f32_from_e4m3(x8[i])) * xs;
    for (size_t i = 0; i < w8.size(); ++i) wd[i] = formats::f32_from_e4m3(w8[i]) * ws;
    cpu::matmul_forward(ref.data(), xd.data(), wd.data(), N, IC, OC);
    auto d_x8 = to_device(x8), d_w8 = to_device(w8);
    const Fp8Format xf = x_e5m2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
    ASSERT_OK(matmul_fp8(ctx(), d_out.data(), d_x8.data(), xf, d_scales.data(), d_w8.data(),
                         Fp8Format::kE4M3, d_scales.data() + 1, N, IC, OC, false));
    EXPECT_TRUE(close(to_host(d_out, ref.size()), ref, 0.0, 1e-6));
    // accumulate: out += the same product, still exact.
    ASSERT_OK(matmul_fp8(ctx(), d_out.data(), d_x8.data(), xf, d_scales.data(), d_w8.data(),
                         Fp8Format::kE4M3, d_scales.data() + 1, N, IC, OC, true));
    std::vector<float> twice(ref);
    for (auto& v : twice) v *= 2.0f;
    EXPECT_TRUE(close(to_host(d_out, ref.size()), twice, 0.0, 1e-6));
  }
  // Misaligned shapes and E5M2 x E5M2 are refused with a message, not run.
  auto d_x8 = to_device(x8), d_w8 = to_device(w8);
  const Status bad =
      matmul_fp8(ctx(), d_out.data(), d_x8.data(), Fp8Format::kE4M3, d_scales.data(), d_w8.data(),
                 Fp8Format::kE4M3, d_scales.data() + 1, N, IC - 1, OC, false);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  const Status both_e5m2 =
      matmul_fp8(ctx(), d_out.data(), d_x8.data(), Fp8Format::kE5M2, d_scales.data(), d_w8.data(),
                 Fp8Format::kE5M2, d_scales.data() + 1, N, IC, OC, false);
  EXPECT_EQ(both_e5m2.code(), StatusCode::kInvalidArgument);
}

TEST_F(OpsTest, RopeForwardAndBackwardMatchCpu) {
  const int B = 2, T = 33, H = 3, D = 16, C = H * D, stride = 3 * C;
  auto x = randn(size_t(B) * T * stride, 18);
  auto d_x = to_device(x);
  std::vector<float> ref = x;
  cpu::rope_forward(ref.data(), B, T, 2 * H, D, stride, 10000.0);
  ASSERT_OK(rope_forward(ctx(), d_x.data(), B, T, 2 * H, D, stride, 10000.0));
  EXPECT_TRUE(close(to_host(d_x, ref.size()), ref, 1e-5, 1e-6));
  cpu::rope_backward(ref.data(), B, T, 2 * H, D, stride, 10000.0);
  ASSERT_OK(rope_backward(ctx(), d_x.data(), B, T, 2 * H, D, stride, 10000.0));
  const auto back = to_host(d_x, ref.size());
  EXPECT_TRUE(close(back, ref, 1e-5, 1e-6));
  EXPECT_TRUE(close(back, x, 1e-5, 1e-5));  // inverse rotation: back where it started
}

TEST_F(OpsTest, AttentionForwardAndBackwardMatchCpu) {
  const int B = 2, T = 70, H = 3, D = 24, C = H * D;
  const auto qkv = randn(size_t(B) * T * 3 * C, 19);
  const auto dout = randn(size_t(B) * T * C, 20);
  std::vector<float> out(size_t(B) * T * C), att(size_t(B) * H * T * T);
  std::vector<float> dqkv = randn(qkv.size(), 21);
  auto d_qkv = to_device(qkv), d_dout = to_device(dout), d_out = to_device(out),
       d_att = to_device(att), d_dqkv = to_device(dqkv);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, H, D);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, H, D);
  ASSERT_OK(attention_forward(ctx(), d_out.data(), d_att.data(), d_qkv.data(), B, T, H, D));
  ASSERT_OK(attention_backward(ctx(), d_dqkv.data(), d_dout.data(), d_qkv.data(), d_att.data(), B,
                               T, H, D));
  EXPECT_TRUE(close(to_host(d_att, att.size()), att, 1e-4, 1e-6));
  EXPECT_TRUE(close(to_host(d_out, out.size()), out, 1e-4, 1e-5));
  EXPECT_TRUE(close(to_host(d_dqkv, dqkv.size()), dqkv, 1e-4, 1e-4));
}

TEST_F(OpsTest, SwigluAddZeroFillMatchCpu) {
  const int N = 50, F = 300;
  const auto gu = randn(size_t(N) * 2 * F, 22, 3.0f), dout = randn(size_t(N) * F, 23);
  std::vector<float> out(size_t(N) * F), dgu = randn(gu.size(), 24);
  auto d_gu = to_device(gu), d_dout = to_device(dout), d_out = to_device(out),
       d_dgu = to_device(dgu);
  cpu::swiglu_forward(out.data(), gu.data(), N, F);
  cpu::swiglu_backward(dgu.data(), dout.data(), gu.data(), N, F);
  ASSERT_OK(swiglu_forward(ctx(), d_out.data(), d_gu.data(), N, F));
  ASSERT_OK(swiglu_backward(ctx(), d_dgu.data(), d_dout.data(), d_gu.data(), N, F));
  EXPECT_TRUE(close(to_host(d_out, out.size()), out, 1e-5, 1e-6));
  EXPECT_TRUE(close(to_host(d_dgu, dgu.size()), dgu, 1e-5, 1e-5));
  // add: bitwise (one rounding); odd length and an offset pointer take the scalar paths.
  const size_t n = 1001;
  const auto a = randn(n, 25), b = randn(n, 26);
  std::vector<float> sum(n);
  cpu::add_forward(sum.data(), a.data(), b.data(), n);
  auto d_a = to_device(a), d_b = to_device(b), d_s = to_device(std::vector<float>(n));
  ASSERT_OK(add_forward(ctx(), d_s.data(), d_a.data(), d_b.data(), n));
  EXPECT_TRUE(same_bits(to_host(d_s, n), sum));
  ASSERT_OK(add_forward(ctx(), d_s.data() + 1, d_a.data() + 1, d_b.data() + 1, n - 1));
  EXPECT_TRUE(same_bits(to_host(d_s, n), sum));
  ASSERT_OK(zero_fill(ctx(), d_s.data(), n));
  EXPECT_TRUE(same_bits(to_host(d_s, n), std::vector<float>(n, 0.0f)));
}

TEST_F(OpsTest, SoftmaxXentMatchesCpuInPlace) {
  const int N = 40, V = 3001;
  const auto logits = randn(size_t(N) * V, 27, 4.0f);
  std::vector<int32_t> targets(N);
  for (int n = 0; n < N; ++n) targets[n] = n % 7 == 3 ? -1 : (n * 977) % V;
  std::vector<float> losses(N), grad = logits;
  cpu::softmax_xent(losses.data(), grad.data(), grad.data(), targets.data(), N, V, 1.0 / N);
  auto d_logits = to_device(logits);
  auto d_t = to_device(targets);
  auto d_loss = to_device(std::vector<float>(N, 7.0f));
  ASSERT_OK(softmax_xent(ctx(), d_loss.data(), d_logits.data(), d_logits.data(), d_t.data(), N, V,
                         1.0 / N));
  EXPECT_TRUE(close(to_host(d_loss, N), losses, 1e-5, 1e-5));
  EXPECT_TRUE(close(to_host(d_logits, grad.size()), grad, 1e-4, 1e-9));
}

TEST_F(OpsTest, AdamwIsBitwiseEqualToCpuAndNormClipMatch) {
  const size_t n = 10007;
  auto p = randn(n, 28), g = randn(n, 29, 0.1f);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  auto d_p = to_device(p), d_g = to_device(g), d_m = to_device(m), d_v = to_device(v);
  cpu::AdamWParams chp;
  chp.lr = 1e-3;
  chp.weight_decay = 0.1;
  AdamWParams ghp;
  ghp.lr = chp.lr;
  ghp.weight_decay = chp.weight_decay;
  for (int step = 1; step <= 10; ++step) {
    cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, chp, step);
    ASSERT_OK(adamw_update(ctx(), d_p.data(), d_g.data(), d_m.data(), d_v.data(), n, ghp, step));
  }
  EXPECT_TRUE(same_bits(to_host(d_m, n), m));
  EXPECT_TRUE(same_bits(to_host(d_v, n), v));
  EXPECT_TRUE(same_bits(to_host(d_p, n), p));

  const double ref = cpu::global_norm(g.data(), n);
  auto norm = global_norm_host(ctx(), d_g.data(), n);
  ASSERT_TRUE(norm.ok()) << norm.status().to_string();
  EXPECT_NEAR(*norm, ref, 1e-12 * ref);
  const float want = cpu::clip_by_global_norm(g.data(), n, ref, 1.0);
  // Given the same norm, the scale and the scaled gradient are bitwise the CPU's.
  auto got = clip_by_global_norm(ctx(), d_g.data(), n, ref, 1.0);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, want);
  EXPECT_LT(want, 1.0f);
  EXPECT_TRUE(same_bits(to_host(d_g, n), g));
}

// The same inputs give the same bits on every run (no atomics, fixed reduction trees).
TEST_F(OpsTest, BackwardOpsAreBitwiseReproducible) {
  const int B = 2, T = 64, H = 2, D = 32, C = H * D, N = B * T, V = 50;
  const auto qkv = randn(size_t(N) * 3 * C, 30), dout = randn(size_t(N) * C, 31);
  const auto tokens = random_tokens(N, V, 32);
  auto d_qkv = to_device(qkv), d_dout = to_device(dout);
  auto d_tok = to_device(tokens);
  auto d_att = to_device(std::vector<float>(size_t(B) * H * T * T));
  auto d_out = to_device(std::vector<float>(size_t(N) * C));
  auto d_norm = DeviceBuffer<double>::alloc(1);
  ASSERT_TRUE(d_norm.ok());
  std::vector<std::vector<float>> runs[3];
  for (int r = 0; r < 2; ++r) {
    auto d_dqkv = to_device(std::vector<float>(qkv.size(), 0.0f));
    auto d_dtable = to_device(std::vector<float>(size_t(V) * C, 0.0f));
    auto d_dw = to_device(std::vector<float>(C, 0.0f));
    auto d_rstd = to_device(std::vector<float>(N));
    ASSERT_OK(attention_forward(ctx(), d_out.data(), d_att.data(), d_qkv.data(), B, T, H, D));
    ASSERT_OK(attention_backward(ctx(), d_dqkv.data(), d_dout.data(), d_qkv.data(), d_att.data(), B,
                                 T, H, D));
    ASSERT_OK(embedding_backward(ctx(), d_dtable.data(), d_dout.data(), d_tok.data(), N, V, C));
    ASSERT_OK(rmsnorm_forward(ctx(), d_out.data(), d_rstd.data(), d_dout.data(), d_dw.data(), N, C,
                              1e-5));
    ASSERT_OK(rmsnorm_backward(ctx(), nullptr, d_dw.data(), d_dout.data(), d_dout.data(),
                               d_dout.data(), d_rstd.data(), N, C));
    runs[0].push_back(to_host(d_dqkv, qkv.size()));
    runs[1].push_back(to_host(d_dtable, size_t(V) * C));
    runs[2].push_back(to_host(d_dw, C));
  }
  for (auto& r : runs) EXPECT_TRUE(same_bits(r[0], r[1]));
}

TEST_F(OpsTest, BadShapesAreRefused) {
  EXPECT_EQ(attention_forward(ctx(), nullptr, nullptr, nullptr, 1, 4, 1, 2000).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(rope_forward(ctx(), nullptr, 1, 1, 1, 3, 3, 1e4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(adamw_update(ctx(), nullptr, nullptr, nullptr, nullptr, 1, {}, 0).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace atl::kernels::cuda
