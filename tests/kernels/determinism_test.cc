// Every op gives the same bits with 1 and 2 threads (sizes large enough that both OpenMP and
// OpenBLAS actually split the work).
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/ops.h"

namespace atl::kernels::cpu::testing {
namespace {

// Runs `op` (which fills the buffers it returns) with 1 and with 2 threads; all bits equal.
void expect_thread_invariant(const char* what,
                             const std::function<std::vector<std::vector<float>>()>& op) {
  std::vector<std::vector<float>> one, two;
  {
    ScopedThreads s(1);
    one = op();
  }
  {
    ScopedThreads s(2);
    two = op();
  }
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_TRUE(same_bits(one[i], two[i])) << what << ": output " << i << " differs";
  }
}

constexpr int B = 4, T = 130, H = 4, D = 32, C = H * D, N = B * T, V = 256, F = 3 * C;

TEST(Determinism, OneThreadEqualsTwo) {
  auto x = random_vec<float>(size_t(N) * C, 50);
  auto w = random_vec<float>(C, 51);
  auto dout = random_vec<float>(size_t(N) * C, 52);
  auto tok = random_tokens(N, V, 53);
  auto table = random_vec<float>(size_t(V) * C, 54);
  expect_thread_invariant("embedding", [&] {
    std::vector<float> out(size_t(N) * C), dt(table.size(), 0.5f);
    embedding_forward(out.data(), tok.data(), table.data(), N, V, C);
    embedding_backward(dt.data(), dout.data(), tok.data(), N, V, C);
    return std::vector<std::vector<float>>{out, dt};
  });
  expect_thread_invariant("rmsnorm", [&] {
    std::vector<float> out(x.size()), rstd(N), dx(x.size(), 0.f), dw(C, 0.f);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);
    rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    return std::vector<std::vector<float>>{out, rstd, dx, dw};
  });
  auto mw = random_vec<float>(size_t(F) * C, 55);
  auto mdout = random_vec<float>(size_t(N) * F, 56);
  expect_thread_invariant("matmul", [&] {
    std::vector<float> out(size_t(N) * F), dx(x.size(), 0.f), dw(mw.size(), 0.f);
    matmul_forward(out.data(), x.data(), mw.data(), N, C, F);
    matmul_backward(dx.data(), dw.data(), mdout.data(), x.data(), mw.data(), N, C, F);
    return std::vector<std::vector<float>>{out, dx, dw};
  });
  auto qkv = random_vec<float>(size_t(N) * 3 * C, 57);
  expect_thread_invariant("rope+attention", [&] {
    std::vector<float> q = qkv, out(size_t(N) * C), att(size_t(B) * H * T * T);
    rope_forward(q.data(), B, T, 2 * H, D, 3 * C, 10000.0);
    attention_forward(out.data(), att.data(), q.data(), B, T, H, D);
    std::vector<float> dq(q.size(), 0.f);
    attention_backward(dq.data(), dout.data(), q.data(), att.data(), B, T, H, D);
    rope_backward(dq.data(), B, T, 2 * H, D, 3 * C, 10000.0);
    return std::vector<std::vector<float>>{q, out, att, dq};
  });
  auto gu = random_vec<float>(size_t(N) * 2 * F, 58, -6.0, 6.0);
  auto sdout = random_vec<float>(size_t(N) * F, 59);
  expect_thread_invariant("swiglu+add", [&] {
    std::vector<float> out(size_t(N) * F), dgu(gu.size(), 0.f), sum(out.size());
    swiglu_forward(out.data(), gu.data(), N, F);
    swiglu_backward(dgu.data(), sdout.data(), gu.data(), N, F);
    add_forward(sum.data(), out.data(), sdout.data(), sum.size());
    return std::vector<std::vector<float>>{out, dgu, sum};
  });
  auto logits = random_vec<float>(size_t(N) * V, 60, -8.0, 8.0);
  expect_thread_invariant("softmax_xent", [&] {
    std::vector<float> losses(N), d(logits.size());
    softmax_xent(losses.data(), d.data(), logits.data(), tok.data(), N, V, 1.0 / N);
    return std::vector<std::vector<float>>{losses, d};
  });
  const size_t P = 1'000'003;
  auto g = random_vec<float>(P, 61);
  expect_thread_invariant("optimizer", [&] {
    std::vector<float> p(P, 0.1f), m(P, 0.f), v(P, 0.f), gg = g;
    const double norm = global_norm(gg.data(), P);
    clip_by_global_norm(gg.data(), P, norm, 1.0);
    AdamWParams hp;
    hp.weight_decay = 0.1;
    for (int step = 1; step <= 2; ++step)
      adamw_update(p.data(), gg.data(), m.data(), v.data(), P, hp, step);
    return std::vector<std::vector<float>>{
        {float(norm), float(norm - double(float(norm)))}, gg, p, m, v};
  });
}

}  // namespace
}  // namespace atl::kernels::cpu::testing
