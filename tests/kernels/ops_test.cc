// Properties of the forward ops: float agrees with double, RoPE layout and angles, causality,
// in-place cross-entropy, backward ops accumulating, hand-checked values.
#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/vec_math.h"

namespace atl::kernels::cpu::testing {
namespace {

// max |a − b| / (|b| + floor) over all elements.
double max_rel_err(const std::vector<float>& a, const std::vector<double>& b, double floor) {
  double worst = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / (std::abs(b[i]) + floor));
  }
  return worst;
}

TEST(FloatVsDouble, ForwardOpsAgree) {
  const int B = 2, T = 70, H = 2, D = 16, C = H * D, F = 24, V = 50;
  const int N = B * T;
  auto xf = random_vec<float>(size_t(N) * C, 20);
  auto xd = cast_vec<double>(xf);
  auto wf = random_vec<float>(C, 21, 0.5, 1.5);
  auto wd = cast_vec<double>(wf);
  {  // rmsnorm
    std::vector<float> of(xf.size()), rf(N);
    std::vector<double> od(xd.size()), rd(N);
    rmsnorm_forward(of.data(), rf.data(), xf.data(), wf.data(), N, C, 1e-5);
    rmsnorm_forward(od.data(), rd.data(), xd.data(), wd.data(), N, C, 1e-5);
    EXPECT_LT(max_rel_err(of, od, 1e-3), 1e-5);
    EXPECT_LT(max_rel_err(rf, rd, 1e-3), 1e-5);
  }
  {  // matmul
    const int OC = 3 * C;
    auto mf = random_vec<float>(size_t(OC) * C, 22);
    auto md = cast_vec<double>(mf);
    std::vector<float> of(size_t(N) * OC);
    std::vector<double> od(of.size());
    matmul_forward(of.data(), xf.data(), mf.data(), N, C, OC);
    matmul_forward(od.data(), xd.data(), md.data(), N, C, OC);
    EXPECT_LT(max_rel_err(of, od, 1.0), 1e-5);
  }
  {  // rope + attention on a qkv buffer
    auto qf = random_vec<float>(size_t(N) * 3 * C, 23, -2.0, 2.0);
    auto qd = cast_vec<double>(qf);
    rope_forward(qf.data(), B, T, 2 * H, D, 3 * C, 10000.0);
    rope_forward(qd.data(), B, T, 2 * H, D, 3 * C, 10000.0);
    EXPECT_LT(max_rel_err(qf, qd, 1.0), 1e-6);
    std::vector<float> of(size_t(N) * C), af(size_t(B) * H * T * T);
    std::vector<double> od(of.size()), ad(af.size());
    attention_forward(of.data(), af.data(), qf.data(), B, T, H, D);
    attention_forward(od.data(), ad.data(), qd.data(), B, T, H, D);
    EXPECT_LT(max_rel_err(of, od, 1.0), 1e-5);
    EXPECT_LT(max_rel_err(af, ad, 1.0), 1e-5);
  }
  {  // swiglu
    auto gf = random_vec<float>(size_t(N) * 2 * F, 24, -8.0, 8.0);
    auto gd = cast_vec<double>(gf);
    std::vector<float> of(size_t(N) * F);
    std::vector<double> od(of.size());
    swiglu_forward(of.data(), gf.data(), N, F);
    swiglu_forward(od.data(), gd.data(), N, F);
    EXPECT_LT(max_rel_err(of, od, 1e-3), 1e-5);
  }
  {  // softmax + cross-entropy
    auto lf = random_vec<float>(size_t(N) * V, 25, -10.0, 10.0);
    auto ld = cast_vec<double>(lf);
    auto tg = random_tokens(N, V, 26);
    std::vector<float> lossf(N), df(lf.size());
    std::vector<double> lossd(N), dd(ld.size());
    softmax_xent(lossf.data(), df.data(), lf.data(), tg.data(), N, V, 1.0 / N);
    softmax_xent(lossd.data(), dd.data(), ld.data(), tg.data(), N, V, 1.0 / N);
    EXPECT_LT(max_rel_err(lossf, lossd, 1e-3), 1e-5);
    EXPECT_LT(max_rel_err(df, dd, 1e-3 / N), 1e-5);
  }
  {  // embedding and add are exact
    auto tf = random_vec<float>(size_t(V) * C, 27);
    auto tok = random_tokens(N, V, 28);
    std::vector<float> of(size_t(N) * C), sum(of.size());
    embedding_forward(of.data(), tok.data(), tf.data(), N, V, C);
    for (int n = 0; n < N; ++n) {
      for (int c = 0; c < C; ++c) ASSERT_EQ(of[size_t(n) * C + c], tf[size_t(tok[n]) * C + c]);
    }
    add_forward(sum.data(), of.data(), xf.data(), sum.size());
    for (size_t i = 0; i < sum.size(); ++i) ASSERT_EQ(sum[i], of[i] + xf[i]);
  }
}

TEST(Rope, RotatesAdjacentPairsByPosTimesBasePower) {
  // D = 4: pair 0 angle = pos, pair 1 angle = pos · 10000^(-2/4) = pos / 100.
  const int T = 3, D = 4;
  std::vector<double> x(size_t(T) * D);
  for (int t = 0; t < T; ++t) {
    for (int d = 0; d < D; ++d) x[size_t(t) * D + d] = d + 1;
  }
  rope_forward(x.data(), 1, T, 1, D, D, 10000.0);
  // pos 0 is the identity.
  for (int d = 0; d < D; ++d) EXPECT_EQ(x[d], d + 1.0);
  // pos 2: (1,2) rotated by 2 rad, (3,4) by 0.02 rad (values from an independent computation).
  const double* r = x.data() + 2 * D;
  EXPECT_NEAR(r[0], -2.234741690198506, 1e-14);
  EXPECT_NEAR(r[1], 0.0770037537313969, 1e-14);
  EXPECT_NEAR(r[2], 2.919405353226401, 1e-14);
  EXPECT_NEAR(r[3], 4.05919602674631, 1e-14);
  // backward is the inverse rotation.
  rope_backward(x.data(), 1, T, 1, D, D, 10000.0);
  for (int t = 0; t < T; ++t) {
    for (int d = 0; d < D; ++d) EXPECT_NEAR(x[size_t(t) * D + d], d + 1.0, 1e-14);
  }
}

TEST(Rope, LeavesTheRestOfTheRowAlone) {
  const int T = 3, H = 2, D = 4, stride = 3 * H * D;
  auto x = random_vec<float>(size_t(T) * stride, 30);
  auto y = x;
  rope_forward(y.data(), 1, T, H, D, stride, 10000.0);  // rotates the first H·D of each row
  for (int t = 0; t < T; ++t) {
    for (int c = H * D; c < stride; ++c)
      EXPECT_EQ(y[size_t(t) * stride + c], x[size_t(t) * stride + c]);
  }
  EXPECT_NE(y[size_t(2) * stride], x[size_t(2) * stride]);
}

TEST(Attention, IsCausal) {
  const int B = 2, T = 80, H = 2, D = 8, C = H * D;
  auto qkv = random_vec<float>(size_t(B) * T * 3 * C, 31);
  std::vector<float> out1(size_t(B) * T * C), att1(size_t(B) * H * T * T);
  attention_forward(out1.data(), att1.data(), qkv.data(), B, T, H, D);
  const int t_change = 67;
  for (int b = 0; b < B; ++b) {
    for (int c = 0; c < 3 * C; ++c) qkv[(size_t(b) * T + t_change) * 3 * C + c] += 0.5f;
  }
  std::vector<float> out2(out1.size()), att2(att1.size());
  attention_forward(out2.data(), att2.data(), qkv.data(), B, T, H, D);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      bool same = true;
      for (int c = 0; c < C; ++c) {
        same = same && out1[(size_t(b) * T + t) * C + c] == out2[(size_t(b) * T + t) * C + c];
      }
      if (t < t_change) {
        EXPECT_TRUE(same) << "b " << b << " t " << t << " saw a future token";
      } else {
        EXPECT_FALSE(same) << "b " << b << " t " << t << " did not see token " << t_change;
      }
    }
  }
  // Probabilities: zero above the diagonal, rows sum to 1.
  for (int bh = 0; bh < B * H; ++bh) {
    for (int t = 0; t < T; ++t) {
      const float* row = att1.data() + (size_t(bh) * T + t) * T;
      double s = 0;
      for (int j = 0; j < T; ++j) {
        if (j > t) {
          ASSERT_EQ(row[j], 0.0f);
        }
        s += row[j];
      }
      EXPECT_NEAR(s, 1.0, 1e-5);
    }
  }
}

TEST(Attention, FirstTokenCopiesItsValue) {
  const int B = 1, T = 3, H = 2, D = 4, C = H * D;
  auto qkv = random_vec<double>(size_t(T) * 3 * C, 32);
  std::vector<double> out(size_t(T) * C), att(size_t(H) * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, H, D);
  for (int c = 0; c < C; ++c) EXPECT_DOUBLE_EQ(out[c], qkv[2 * C + c]);
}

TEST(SoftmaxXent, InPlaceEqualsSeparateBuffer) {
  const int N = 33, V = 100;
  auto logits = random_vec<float>(size_t(N) * V, 33, -5.0, 5.0);
  auto tg = random_tokens(N, V, 34);
  tg[3] = -1;
  std::vector<float> l1(N), l2(N), d1(logits.size());
  softmax_xent(l1.data(), d1.data(), logits.data(), tg.data(), N, V, 0.25);
  std::vector<float> inplace = logits;
  softmax_xent(l2.data(), inplace.data(), inplace.data(), tg.data(), N, V, 0.25);
  EXPECT_TRUE(same_bits(l1, l2));
  EXPECT_TRUE(same_bits(d1, inplace));
  // Loss by definition, without gradient.
  std::vector<float> l3(N);
  softmax_xent<float>(l3.data(), nullptr, logits.data(), tg.data(), N, V, 1.0);
  for (int n = 0; n < N; ++n) {
    if (tg[n] < 0) {
      EXPECT_EQ(l3[n], 0.0f);
      continue;
    }
    double mx = -1e30, s = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, double(logits[size_t(n) * V + j]));
    for (int j = 0; j < V; ++j) s += std::exp(double(logits[size_t(n) * V + j]) - mx);
    const double ref = mx + std::log(s) - logits[size_t(n) * V + tg[n]];
    EXPECT_NEAR(l3[n], ref, 1e-5 * std::abs(ref) + 1e-6);
    EXPECT_EQ(l1[n], l3[n]);
  }
}

TEST(SoftmaxXent, LargeLogitsStayFinite) {
  std::vector<float> logits = {1000.f, -1000.f, 999.f, 0.f};
  std::vector<int32_t> tg = {2};
  float loss = 0;
  std::vector<float> d(4);
  softmax_xent(&loss, d.data(), logits.data(), tg.data(), 1, 4, 1.0);
  EXPECT_NEAR(loss, 1.0 + std::log1p(std::exp(-1.0)), 1e-5);
  for (float v : d) EXPECT_TRUE(std::isfinite(v));
}

// Every backward adds into its gradient buffers: G0 + grad, not grad.
TEST(Backward, Accumulates) {
  const int N = 6, C = 8, V = 5, OC = 4, B = 1, T = 6, H = 2, D = 4, F = 8;
  auto check = [](const char* what, const std::vector<double>& g0, const std::vector<double>& fresh,
                  const std::vector<double>& acc) {
    for (size_t i = 0; i < g0.size(); ++i) {
      ASSERT_NEAR(acc[i], g0[i] + fresh[i], 1e-12) << what << "[" << i << "]";
    }
  };
  auto run_both = [&](const char* what, size_t n, auto&& backward) {
    std::vector<double> fresh(n, 0.0);
    auto acc = random_vec<double>(n, 40);
    const auto g0 = acc;
    backward(fresh.data());
    backward(acc.data());
    check(what, g0, fresh, acc);
  };
  auto x = random_vec<double>(size_t(N) * C, 41);
  auto w = random_vec<double>(C, 42);
  auto dout = random_vec<double>(size_t(N) * C, 43);
  std::vector<int32_t> tok = {1, 1, 4, 0, 1, 2};
  run_both("embedding", size_t(V) * C,
           [&](double* g) { embedding_backward(g, dout.data(), tok.data(), N, V, C); });
  std::vector<double> out(x.size()), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);
  run_both("rmsnorm dx", x.size(), [&](double* g) {
    rmsnorm_backward<double>(g, nullptr, dout.data(), x.data(), w.data(), rstd.data(), N, C);
  });
  run_both("rmsnorm dw", w.size(), [&](double* g) {
    rmsnorm_backward<double>(nullptr, g, dout.data(), x.data(), w.data(), rstd.data(), N, C);
  });
  auto mw = random_vec<double>(size_t(OC) * C, 44);
  auto mdout = random_vec<double>(size_t(N) * OC, 45);
  run_both("matmul dx", x.size(), [&](double* g) {
    matmul_backward<double>(g, nullptr, mdout.data(), x.data(), mw.data(), N, C, OC);
  });
  run_both("matmul dw", mw.size(), [&](double* g) {
    matmul_backward<double>(nullptr, g, mdout.data(), x.data(), mw.data(), N, C, OC);
  });
  const int AC = H * D;
  auto qkv = random_vec<double>(size_t(B) * T * 3 * AC, 46);
  std::vector<double> aout(size_t(B) * T * AC), att(size_t(B) * H * T * T);
  attention_forward(aout.data(), att.data(), qkv.data(), B, T, H, D);
  auto adout = random_vec<double>(aout.size(), 47);
  run_both("attention", qkv.size(), [&](double* g) {
    attention_backward(g, adout.data(), qkv.data(), att.data(), B, T, H, D);
  });
  auto gu = random_vec<double>(size_t(N) * 2 * F, 48);
  auto sdout = random_vec<double>(size_t(N) * F, 49);
  run_both("swiglu", gu.size(),
           [&](double* g) { swiglu_backward(g, sdout.data(), gu.data(), N, F); });
}

// The vectorizable float exp against exp in double, over the whole float range.
TEST(VecMath, ExpWithinTwoUlp) {
  int worst_ulp = 0;
  for (double x = -104.5; x <= 89.0; x += 1.3e-4) {
    const float xf = float(x);
    const float got = detail::exp_vec(xf);
    const double want = std::exp(double(xf));
    const float want_f = float(want);
    if (!std::isfinite(want_f) || want_f < std::numeric_limits<float>::min()) {
      // Overflow, or subnormal results: within one subnormal step.
      if (std::isinf(want_f)) {
        ASSERT_TRUE(std::isinf(got)) << xf;
      } else {
        ASSERT_NEAR(got, want, 2 * std::numeric_limits<float>::denorm_min()) << xf;
      }
      continue;
    }
    int32_t a, b;
    std::memcpy(&a, &got, 4);
    std::memcpy(&b, &want_f, 4);
    worst_ulp = std::max(worst_ulp, std::abs(a - b));
  }
  EXPECT_LE(worst_ulp, 2);
  EXPECT_EQ(detail::exp_vec(0.0f), 1.0f);
  EXPECT_EQ(detail::exp_vec(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isinf(detail::exp_vec(INFINITY)));
  EXPECT_TRUE(std::isnan(detail::exp_vec(NAN)));
}

}  // namespace
}  // namespace atl::kernels::cpu::testing
