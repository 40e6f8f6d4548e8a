// MoE ops (kernels/cpu/moe_ops.h): finite-difference checks in double for every op and for the
// whole layer (router included), the permuted path against a naive per-token loop (forward and
// backward), routing semantics (ties, stable groups) and 1-vs-2-thread bitwise equality.
// Inputs are random but seeded; top-k gaps are far above the FD step, so no selection flips.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/moe_ops.h"
#include "moe_naive.h"

namespace atl::kernels::cpu::testing {
namespace {

TEST(MoeGradCheck, Scores) {
  const int N = 5, E = 6;
  for (MoeScore fn : {MoeScore::kSoftmax, MoeScore::kSigmoid}) {
    auto logits = random_vec<double>(size_t(N) * E, 1, -2, 2);
    auto R = random_vec<double>(logits.size(), 2);
    std::vector<double> s(logits.size());
    auto loss = [&] {
      moe_scores_forward(s.data(), logits.data(), N, E, fn);
      return dot(s, R);
    };
    loss();
    std::vector<double> dl(logits.size(), 0.0);
    moe_scores_backward(dl.data(), R.data(), s.data(), N, E, fn);
    expect_grad_matches(fn == MoeScore::kSoftmax ? "softmax dlogits" : "sigmoid dlogits", logits,
                        dl, loss);
  }
}

TEST(MoeGradCheck, TopK) {
  const int N = 6, E = 7, K = 3;
  for (bool renorm : {true, false}) {
    auto scores = random_vec<double>(size_t(N) * E, 3, 0.05, 1.0);
    auto R = random_vec<double>(size_t(N) * K, 4);
    std::vector<int32_t> idx(size_t(N) * K), idx0;
    std::vector<double> w(idx.size());
    auto loss = [&] {
      moe_topk_forward(idx.data(), w.data(), scores.data(), N, E, K, renorm);
      return dot(w, R);
    };
    loss();
    idx0 = idx;
    std::vector<double> ds(scores.size(), 0.0);
    moe_topk_backward(ds.data(), R.data(), scores.data(), idx.data(), N, E, K, renorm);
    expect_grad_matches(renorm ? "topk renormalized dscores" : "topk dscores", scores, ds, loss);
    loss();
    EXPECT_EQ(idx, idx0) << "selection changed under the FD steps: near-tie in the inputs";
  }
}

// Past 64 experts (a bit per expert, not a scan of the taken ids), and past 4096 (on the heap):
// the K highest scores in descending order, ties to the lower id, as a stable sort gives them.
TEST(MoeRouting, TopKOfManyExpertsIsTheStableSortsFirstK) {
  for (const auto& [E, K] : std::vector<std::pair<int, int>>{{200, 50}, {256, 256}, {4100, 9}}) {
    const int N = 5;
    std::vector<double> s = random_vec<double>(size_t(N) * E, 11, 0.0, 1.0);
    for (int e = 0; e < E; e += 7) s[size_t(e)] = 0.5;  // ties in row 0
    std::vector<int32_t> idx(size_t(N) * K);
    std::vector<double> w(idx.size());
    moe_topk_forward(idx.data(), w.data(), s.data(), N, E, K, false);
    for (int n = 0; n < N; ++n) {
      std::vector<int32_t> order(static_cast<size_t>(E));
      for (int e = 0; e < E; ++e) order[size_t(e)] = e;
      const double* row = s.data() + size_t(n) * E;
      std::stable_sort(order.begin(), order.end(),
                       [row](int32_t a, int32_t b) { return row[a] > row[b]; });
      for (int k = 0; k < K; ++k) {
        ASSERT_EQ(idx[size_t(n) * K + k], order[size_t(k)]) << "E " << E << " row " << n;
        EXPECT_EQ(w[size_t(n) * K + k], row[order[size_t(k)]]);
      }
    }
  }
}

TEST(MoeRouting, TopKTiesPickLowerIdAndPlanIsStable) {
  // Row 0 ties experts 1, 2, 3; row 1 ties everything.
  const int N = 3, E = 4, K = 2;
  std::vector<double> s = {0.1, 0.3, 0.3, 0.3, 0.25, 0.25, 0.25, 0.25, 0.4, 0.1, 0.2, 0.3};
  std::vector<int32_t> idx(N * K);
  std::vector<double> w(N * K);
  moe_topk_forward(idx.data(), w.data(), s.data(), N, E, K, true);
  EXPECT_EQ(idx, (std::vector<int32_t>{1, 2, 0, 1, 0, 3}));
  EXPECT_DOUBLE_EQ(w[0], 0.5);
  EXPECT_DOUBLE_EQ(w[4], 0.4 / 0.7);
  MoePlan p;
  moe_plan(p, idx.data(), N, E, K);
  EXPECT_EQ(p.offsets, (std::vector<int32_t>{0, 2, 4, 5, 6}));
  // Expert 0: tokens 1, 2; expert 1: tokens 0, 1; expert 2: token 0; expert 3: token 2.
  EXPECT_EQ(p.row_token, (std::vector<int32_t>{1, 2, 0, 1, 0, 2}));
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      const int r = p.slot[n * K + k];
      EXPECT_EQ(p.row_token[r], n);
      EXPECT_TRUE(r >= p.offsets[idx[n * K + k]] && r < p.offsets[idx[n * K + k] + 1]);
    }
}

// A plan with an empty expert (3) and uneven groups.
MoePlan test_plan(int& N, int& E, int& K) {
  N = 5;
  E = 4;
  K = 2;
  static const std::vector<int32_t> idx = {0, 1, 1, 2, 0, 2, 1, 0, 2, 1};
  MoePlan p;
  moe_plan(p, idx.data(), N, E, K);
  return p;
}

TEST(MoeGradCheck, GatherGroupedMatmulCombine) {
  int N, E, K;
  const MoePlan p = test_plan(N, E, K);
  const int C = 4, OC = 3, M = N * K;
  {  // gather
    auto x = random_vec<double>(size_t(N) * C, 5);
    auto R = random_vec<double>(size_t(M) * C, 6);
    std::vector<double> xp(R.size());
    auto loss = [&] {
      moe_gather_forward(xp.data(), x.data(), p, C);
      return dot(xp, R);
    };
    std::vector<double> dx(x.size(), 0.0);
    moe_gather_backward(dx.data(), R.data(), p, C);
    expect_grad_matches("gather dx", x, dx, loss);
  }
  {  // grouped GEMM, weights with a stride larger than one matrix
    const size_t stride = size_t(OC) * C + 5;
    auto x = random_vec<double>(size_t(M) * C, 7);
    auto w = random_vec<double>(stride * E, 8);
    auto R = random_vec<double>(size_t(M) * OC, 9);
    std::vector<double> out(R.size());
    auto loss = [&] {
      moe_grouped_matmul_forward(out.data(), x.data(), w.data(), stride, p, C, OC);
      return dot(out, R);
    };
    std::vector<double> dx(x.size(), 0.0), dw(w.size(), 0.0);
    moe_grouped_matmul_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), stride, p, C,
                                OC);
    expect_grad_matches("grouped dx", x, dx, loss);
    expect_grad_matches("grouped dw", w, dw, loss);
    for (size_t i = 3 * stride; i < 4 * stride; ++i) EXPECT_EQ(dw[i], 0.0) << "empty expert 3";
  }
  {  // combine
    auto yp = random_vec<double>(size_t(M) * C, 10);
    auto w = random_vec<double>(size_t(M), 11);
    auto R = random_vec<double>(size_t(N) * C, 12);
    std::vector<double> out(R.size());
    auto loss = [&] {
      moe_combine_forward(out.data(), yp.data(), w.data(), p, C);
      return dot(out, R);
    };
    std::vector<double> dyp(yp.size(), 0.0), dw(w.size(), 0.0);
    moe_combine_backward(dyp.data(), dw.data(), R.data(), yp.data(), w.data(), p, C);
    expect_grad_matches("combine dyp", yp, dyp, loss);
    expect_grad_matches("combine dw", w, dw, loss);
  }
}

TEST(MoeGradCheck, AuxAndZLoss) {
  int N, E, K;
  const MoePlan p = test_plan(N, E, K);
  for (MoeScore fn : {MoeScore::kSoftmax, MoeScore::kSigmoid}) {
    // The plan fixes f_e (not differentiable); the gradient is the one through P_e.
    auto scores = random_vec<double>(size_t(N) * E, 13, 0.05, 1.0);
    auto loss = [&] { return moe_aux_loss_forward(scores.data(), p, fn); };
    std::vector<double> ds(scores.size(), 0.0);
    moe_aux_loss_backward(ds.data(), scores.data(), p, fn, 1.0);
    expect_grad_matches("aux dscores", scores, ds, loss);
  }
  auto logits = random_vec<double>(size_t(N) * E, 14, -3, 3);
  auto zl = [&] { return moe_z_loss_forward(logits.data(), N, E); };
  std::vector<double> dl(logits.size(), 0.0);
  moe_z_loss_backward(dl.data(), logits.data(), N, E, 1.0);
  expect_grad_matches("z-loss dlogits", logits, dl, zl);
}

TEST(MoeLoss, BalancedValues) {
  // Uniform probabilities and perfectly balanced assignments give L_aux = 1 for any K; all-zero
  // logits give L_z = log(E)².
  const int N = 4, E = 4, K = 2;
  std::vector<double> logits(N * E, 0.0), s(N * E);
  moe_scores_forward(s.data(), logits.data(), N, E, MoeScore::kSoftmax);
  std::vector<int32_t> idx = {0, 1, 2, 3, 0, 1, 2, 3};
  MoePlan p;
  moe_plan(p, idx.data(), N, E, K);
  EXPECT_NEAR(moe_aux_loss_forward(s.data(), p, MoeScore::kSoftmax), 1.0, 1e-15);
  EXPECT_NEAR(moe_z_loss_forward(logits.data(), N, E), std::log(4.0) * std::log(4.0), 1e-14);
  // All assignments on expert 0 with uniform probabilities: E · 1 · 1/E = 1 too, but sharper
  // probabilities on the loaded expert raise it.
  std::vector<int32_t> idx0 = {0, 1, 0, 1, 0, 1, 0, 1};
  moe_plan(p, idx0.data(), N, E, K);
  std::vector<double> sharp(N * E);
  for (int n = 0; n < N; ++n) logits[n * E] = logits[n * E + 1] = 3.0;
  moe_scores_forward(sharp.data(), logits.data(), N, E, MoeScore::kSoftmax);
  EXPECT_GT(moe_aux_loss_forward(sharp.data(), p, MoeScore::kSoftmax), 1.5);
}

// Random layer weights (double); router scaled so that the scores are well separated.
struct LayerData {
  MoeFfnShape s;
  int N;
  std::vector<double> x, router, experts, sgu, sdown, dout;
};
LayerData make_layer(int N, MoeFfnShape s, uint64_t seed) {
  LayerData d{s, N, {}, {}, {}, {}, {}, {}};
  d.x = random_vec<double>(size_t(N) * s.C, seed);
  d.router = random_vec<double>(size_t(s.E) * s.C, seed + 1, -1.5, 1.5);
  d.experts = random_vec<double>(size_t(s.E) * 3 * s.F * s.C, seed + 2, -0.7, 0.7);
  d.sgu = random_vec<double>(size_t(2) * s.Fs * s.C, seed + 3, -0.7, 0.7);
  d.sdown = random_vec<double>(size_t(s.C) * s.Fs, seed + 4, -0.7, 0.7);
  d.dout = random_vec<double>(size_t(N) * s.C, seed + 5);
  return d;
}

const double kAux = 0.3, kZ = 0.05;

TEST(MoeLayer, GradCheckWholeLayer) {
  for (MoeScore fn : {MoeScore::kSoftmax, MoeScore::kSigmoid}) {
    MoeFfnShape s{5, 4, 2, 3, fn == MoeScore::kSoftmax ? 4 : 0, fn, true};
    LayerData d = make_layer(6, s, 20 + int(fn));
    const int N = d.N;
    double* sg = s.Fs ? d.sgu.data() : nullptr;
    double* sd = s.Fs ? d.sdown.data() : nullptr;
    MoeFfnWork<double> ws;
    std::vector<double> out(size_t(N) * s.C);
    std::vector<int32_t> idx0;
    auto loss = [&] {
      moe_ffn_forward(ws, out.data(), d.x.data(), d.router.data(), d.experts.data(), sg, sd, N, s);
      return dot(out, d.dout) + kAux * ws.aux_loss + kZ * ws.z_loss;
    };
    loss();
    idx0.assign(ws.idx.begin(), ws.idx.begin() + N * s.K);
    std::vector<double> dx(d.x.size(), 0.0), dr(d.router.size(), 0.0), de(d.experts.size(), 0.0),
        dsg(d.sgu.size(), 0.0), dsd(d.sdown.size(), 0.0);
    moe_ffn_backward(ws, dx.data(), dr.data(), de.data(), s.Fs ? dsg.data() : nullptr,
                     s.Fs ? dsd.data() : nullptr, d.dout.data(), d.x.data(), d.router.data(),
                     d.experts.data(), sg, sd, s, kAux, kZ);
    expect_grad_matches("layer dx", d.x, dx, loss);
    expect_grad_matches("layer drouter", d.router, dr, loss);
    expect_grad_matches("layer dexperts", d.experts, de, loss);
    if (s.Fs) {
      expect_grad_matches("layer dshared_gu", d.sgu, dsg, loss);
      expect_grad_matches("layer dshared_down", d.sdown, dsd, loss);
    }
    loss();
    EXPECT_EQ(std::vector<int32_t>(ws.idx.begin(), ws.idx.begin() + N * s.K), idx0)
        << "top-k changed under the FD steps: near-tie in the inputs";
  }
}

void expect_near_vec(const char* what, const std::vector<double>& a, const std::vector<double>& b,
                     double tol) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], tol * (1 + std::abs(b[i]))) << what << "[" << i << "]";
}

TEST(MoeLayer, PermutedPathEqualsNaivePerTokenLoop) {
  for (MoeScore fn : {MoeScore::kSoftmax, MoeScore::kSigmoid})
    for (bool renorm : {true, false}) {
      MoeFfnShape s{8, 6, 2, 5, 3, fn, renorm};
      LayerData d = make_layer(13, s, 40 + 2 * int(fn) + renorm);
      const int N = d.N;
      MoeFfnWork<double> ws;
      std::vector<double> out(size_t(N) * s.C);
      moe_ffn_forward(ws, out.data(), d.x.data(), d.router.data(), d.experts.data(), d.sgu.data(),
                      d.sdown.data(), N, s);
      std::vector<double> dx(d.x.size(), 0.0), dr(d.router.size(), 0.0), de(d.experts.size(), 0.0),
          dsg(d.sgu.size(), 0.0), dsd(d.sdown.size(), 0.0);
      moe_ffn_backward(ws, dx.data(), dr.data(), de.data(), dsg.data(), dsd.data(), d.dout.data(),
                       d.x.data(), d.router.data(), d.experts.data(), d.sgu.data(), d.sdown.data(),
                       s, kAux, kZ);
      const NaiveMoeResult ref =
          naive_moe(d.x, d.router, d.experts, d.sgu, d.sdown, d.dout, N, s, kAux, kZ);
      expect_near_vec("out", out, ref.out, 1e-12);
      EXPECT_NEAR(ws.aux_loss, ref.aux, 1e-13);
      EXPECT_NEAR(ws.z_loss, ref.z, 1e-13);
      expect_near_vec("dx", dx, ref.g.dx, 1e-12);
      expect_near_vec("drouter", dr, ref.g.drouter, 1e-12);
      expect_near_vec("dexperts", de, ref.g.dexperts, 1e-12);
      expect_near_vec("dshared_gu", dsg, ref.g.dsgu, 1e-12);
      expect_near_vec("dshared_down", dsd, ref.g.dsdown, 1e-12);
    }
}

TEST(MoeLayer, OneThreadEqualsTwoAndFloatTracksDouble) {
  // Large enough that the GEMM groups tile and the token loops split over threads.
  MoeFfnShape s{64, 8, 2, 96, 64, MoeScore::kSoftmax, true};
  const int N = 260;
  LayerData d = make_layer(N, s, 60);
  auto f = [](const std::vector<double>& v) { return cast_vec<float>(v); };
  const auto x = f(d.x), r = f(d.router), e = f(d.experts), g = f(d.sgu), dn = f(d.sdown),
             dout = f(d.dout);
  auto run = [&] {
    MoeFfnWork<float> ws;
    std::vector<float> out(size_t(N) * s.C), dx(x.size(), 0.f), dr(r.size(), 0.f),
        de(e.size(), 0.f), dg(g.size(), 0.f), dd(dn.size(), 0.f);
    moe_ffn_forward(ws, out.data(), x.data(), r.data(), e.data(), g.data(), dn.data(), N, s);
    moe_ffn_backward(ws, dx.data(), dr.data(), de.data(), dg.data(), dd.data(), dout.data(),
                     x.data(), r.data(), e.data(), g.data(), dn.data(), s, kAux, kZ);
    return std::vector<std::vector<float>>{out, dx, dr, de, dg, dd, {float(ws.aux_loss)}};
  };
  std::vector<std::vector<float>> one, two;
  {
    ScopedThreads t(1);
    one = run();
  }
  {
    ScopedThreads t(2);
    two = run();
  }
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_TRUE(same_bits(one[i], two[i])) << "output " << i << " differs between 1 and 2 threads";
  // Float against the double path on the same inputs.
  MoeFfnWork<double> wsd;
  std::vector<double> outd(size_t(N) * s.C);
  moe_ffn_forward(wsd, outd.data(), d.x.data(), d.router.data(), d.experts.data(), d.sgu.data(),
                  d.sdown.data(), N, s);
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < outd.size(); ++i) {
    max_err = std::max(max_err, std::abs(double(one[0][i]) - outd[i]));
    max_ref = std::max(max_ref, std::abs(outd[i]));
  }
  EXPECT_LT(max_err, 1e-5 * max_ref) << "float path drifts from double";
  EXPECT_GT(max_ref, 0.1);
}

}  // namespace
}  // namespace atl::kernels::cpu::testing
