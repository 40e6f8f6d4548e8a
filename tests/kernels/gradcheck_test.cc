// Finite-difference gradient checks, double precision, for every op with a backward.
// Objective: L = Σ out ⊙ R with a fixed random R, so dL/dout = R.
#include <gtest/gtest.h>

#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/ops.h"

namespace atl::kernels::cpu::testing {
namespace {

TEST(GradCheck, Embedding) {
  const int N = 7, V = 5, C = 3;
  std::vector<int32_t> tokens = {0, 3, 3, 1, 4, 3, 0};  // repeats must add up
  auto table = random_vec<double>(size_t(V) * C, 1);
  auto R = random_vec<double>(size_t(N) * C, 2);
  std::vector<double> out(size_t(N) * C);
  auto loss = [&] {
    embedding_forward(out.data(), tokens.data(), table.data(), N, V, C);
    return dot(out, R);
  };
  std::vector<double> dtable(table.size(), 0.0);
  embedding_backward(dtable.data(), R.data(), tokens.data(), N, V, C);
  expect_grad_matches("dtable", table, dtable, loss);
}

TEST(GradCheck, RMSNorm) {
  const int N = 4, C = 6;
  auto x = random_vec<double>(size_t(N) * C, 3);
  auto w = random_vec<double>(C, 4, 0.5, 1.5);
  auto R = random_vec<double>(size_t(N) * C, 5);
  std::vector<double> out(x.size()), rstd(N);
  auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);
    return dot(out, R);
  };
  loss();
  std::vector<double> dx(x.size(), 0.0), dw(w.size(), 0.0);
  rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
  expect_grad_matches("dx", x, dx, loss);
  expect_grad_matches("dw", w, dw, loss);
}

TEST(GradCheck, Matmul) {
  const int N = 5, IC = 4, OC = 3;
  auto x = random_vec<double>(size_t(N) * IC, 6);
  auto w = random_vec<double>(size_t(OC) * IC, 7);
  auto R = random_vec<double>(size_t(N) * OC, 8);
  std::vector<double> out(size_t(N) * OC);
  auto loss = [&] {
    matmul_forward(out.data(), x.data(), w.data(), N, IC, OC);
    return dot(out, R);
  };
  std::vector<double> dx(x.size(), 0.0), dw(w.size(), 0.0);
  matmul_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), N, IC, OC);
  expect_grad_matches("dx", x, dx, loss);
  expect_grad_matches("dw", w, dw, loss);
}

TEST(GradCheck, RopeInsideStridedRows) {
  // x (B, T, H, D) inside rows of 2·H·D + 3 elements, like q|k inside a qkv buffer.
  const int B = 2, T = 4, H = 2, D = 6, stride = 2 * H * D + 3;
  auto x = random_vec<double>(size_t(B) * T * stride, 9);
  auto R = random_vec<double>(x.size(), 10);
  std::vector<double> y(x.size());
  auto loss = [&] {
    y = x;
    rope_forward(y.data(), B, T, 2 * H, D, stride, 10000.0);  // q and k heads together
    return dot(y, R);
  };
  std::vector<double> dx = R;
  rope_backward(dx.data(), B, T, 2 * H, D, stride, 10000.0);
  expect_grad_matches("dx", x, dx, loss);
}

void attention_gradcheck(int B, int T, int H, int D, uint64_t seed) {
  const int C = H * D;
  auto qkv = random_vec<double>(size_t(B) * T * 3 * C, seed);
  auto R = random_vec<double>(size_t(B) * T * C, seed + 1);
  std::vector<double> out(size_t(B) * T * C), att(size_t(B) * H * T * T);
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, H, D);
    return dot(out, R);
  };
  loss();
  std::vector<double> dqkv(qkv.size(), 0.0);
  attention_backward(dqkv.data(), R.data(), qkv.data(), att.data(), B, T, H, D);
  expect_grad_matches("dqkv", qkv, dqkv, loss);
}

TEST(GradCheck, AttentionCausal) {
  attention_gradcheck(2, 5, 2, 4, 11);
}

// More rows than one query block (64), and a partial last block.
TEST(GradCheck, AttentionSeveralQueryBlocks) {
  attention_gradcheck(1, 70, 1, 2, 13);
}

// Grouped-query attention as the model runs it: repeat_kv, then attention over the full heads.
// dk and dv of each KV head must sum the gradients of the query heads that share it.
void gqa_attention_gradcheck(int B, int T, int H, int KV, int D, uint64_t seed) {
  const int C = H * D, QKV = (H + 2 * KV) * D, N = B * T;
  auto qkv = random_vec<double>(size_t(N) * QKV, seed);
  auto R = random_vec<double>(size_t(N) * C, seed + 1);
  std::vector<double> full(size_t(N) * 3 * C), out(size_t(N) * C), att(size_t(B) * H * T * T);
  auto loss = [&] {
    repeat_kv_forward(full.data(), qkv.data(), N, H, KV, D);
    attention_forward(out.data(), att.data(), full.data(), B, T, H, D);
    return dot(out, R);
  };
  loss();
  std::vector<double> dfull(full.size(), 0.0), dqkv(qkv.size(), 0.0);
  attention_backward(dfull.data(), R.data(), full.data(), att.data(), B, T, H, D);
  repeat_kv_backward(dqkv.data(), dfull.data(), N, H, KV, D);
  expect_grad_matches("dqkv", qkv, dqkv, loss);
}

TEST(GradCheck, GroupedQueryAttention) {
  gqa_attention_gradcheck(2, 5, 4, 2, 4, 31);  // 2 query heads per KV head
  gqa_attention_gradcheck(1, 6, 3, 1, 2, 33);  // multi-query: one KV head
}

TEST(GradCheck, RepeatKvWithOneGroupIsTheIdentity) {
  const int N = 3, H = 2, D = 4;
  auto qkv = random_vec<double>(size_t(N) * 3 * H * D, 35);
  std::vector<double> full(qkv.size()), back(qkv.size(), 0.0);
  repeat_kv_forward(full.data(), qkv.data(), N, H, H, D);
  EXPECT_EQ(full, qkv);
  repeat_kv_backward(back.data(), qkv.data(), N, H, H, D);
  EXPECT_EQ(back, qkv);
}

TEST(GradCheck, Bias) {
  const int N = 5, OC = 70;  // more than one 64-column block
  auto b = random_vec<double>(OC, 36);
  auto x = random_vec<double>(size_t(N) * OC, 37);
  auto R = random_vec<double>(size_t(N) * OC, 38);
  std::vector<double> out(x.size());
  auto loss = [&] {
    out = x;
    bias_forward(out.data(), b.data(), N, OC);
    return dot(out, R);
  };
  std::vector<double> db(OC, 0.0);
  bias_backward(db.data(), R.data(), N, OC);
  expect_grad_matches("db", b, db, loss);
}

TEST(GradCheck, SwiGLU) {
  const int N = 3, F = 5;
  auto gu = random_vec<double>(size_t(N) * 2 * F, 14, -3.0, 3.0);
  auto R = random_vec<double>(size_t(N) * F, 15);
  std::vector<double> out(size_t(N) * F);
  auto loss = [&] {
    swiglu_forward(out.data(), gu.data(), N, F);
    return dot(out, R);
  };
  std::vector<double> dgu(gu.size(), 0.0);
  swiglu_backward(dgu.data(), R.data(), gu.data(), N, F);
  expect_grad_matches("dgu", gu, dgu, loss);
}

TEST(GradCheck, SoftmaxXentWithIgnoredTargets) {
  const int N = 5, V = 7;
  auto logits = random_vec<double>(size_t(N) * V, 16, -3.0, 3.0);
  std::vector<int32_t> targets = {2, -1, 0, 6, -1};
  const double dloss = 0.37;  // e.g. 1 / (number of counted targets)
  std::vector<double> losses(N);
  auto loss = [&] {
    softmax_xent<double>(losses.data(), nullptr, logits.data(), targets.data(), N, V, dloss);
    double s = 0;
    for (double l : losses) s += dloss * l;
    return s;
  };
  std::vector<double> dlogits(logits.size(), 123.0);  // written, not accumulated
  softmax_xent(losses.data(), dlogits.data(), logits.data(), targets.data(), N, V, dloss);
  EXPECT_EQ(losses[1], 0.0);
  EXPECT_EQ(losses[4], 0.0);
  for (int j = 0; j < V; ++j) {
    EXPECT_EQ(dlogits[size_t(1) * V + j], 0.0);
    EXPECT_EQ(dlogits[size_t(4) * V + j], 0.0);
  }
  expect_grad_matches("dlogits", logits, dlogits, loss);
}

}  // namespace
}  // namespace atl::kernels::cpu::testing
