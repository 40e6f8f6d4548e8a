#include "measure/moe.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/core/philox.h"
#include "kernels/cpu/moe_ops.h"
#include "kernels/cpu/ops.h"
#include "measure/timing.h"

namespace atl::measure {

namespace {

namespace ops = kernels::cpu;

std::vector<float> randn(size_t n, uint64_t stream, double sd) {
  std::vector<float> v(n);
  const Philox rng(77, stream);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(sd * rng.normal(i));
  return v;
}

// One timed variant: zero() (untimed) then fwd() and bwd(), the fastest of each kept.
struct Variant {
  std::function<void()> fwd, bwd, zero;
  double fwd_ms = 1e30, bwd_ms = 1e30;
  int reps = 0;
};

// Alternates the two variants until min_s has passed (at least 3 rounds), so both see the same
// load from whatever else runs on the machine.
void time_pair(double min_s, Variant& a, Variant& b) {
  const auto start = Clock::now();
  int rounds = 0;
  while (rounds < 3 || seconds_since(start) < min_s) {
    for (Variant* v : {&a, &b}) {
      v->zero();
      const auto t0 = Clock::now();
      v->fwd();
      const double fwd_s = seconds_since(t0);
      const auto t1 = Clock::now();
      v->bwd();
      const double bwd_s = seconds_since(t1);
      v->fwd_ms = std::min(v->fwd_ms, fwd_s * 1e3);
      v->bwd_ms = std::min(v->bwd_ms, bwd_s * 1e3);
      ++v->reps;
    }
    ++rounds;
  }
}

}  // namespace

MoeTiming time_moe_against_dense(int tokens, int dim, const MoeShape& shape, double min_seconds) {
  const int n = tokens, c = dim, E = shape.experts, K = shape.top_k, Fe = shape.expert_hidden;
  const std::vector<float> x = randn(size_t(n) * c, 1, 1.0), dout = randn(size_t(n) * c, 2, 1.0);

  // MoE layer.
  ops::MoeFfnShape s{c, E, K, Fe, 0, ops::MoeScore::kSoftmax, true};
  const std::vector<float> router = randn(size_t(E) * c, 3, 0.02),
                           experts = randn(size_t(E) * 3 * Fe * c, 4, 0.02);
  std::vector<float> out(size_t(n) * c), dx(out.size()), dr(router.size()), de(experts.size());
  ops::MoeFfnWork<float> ws;
  Variant vm{[&] {
               ops::moe_ffn_forward<float>(ws, out.data(), x.data(), router.data(),
                                           experts.data(), nullptr, nullptr, n, s);
             },
             [&] {
               ops::moe_ffn_backward<float>(ws, dx.data(), dr.data(), de.data(), nullptr, nullptr,
                                            dout.data(), x.data(), router.data(), experts.data(),
                                            nullptr, nullptr, s, 0.01, 0.001);
             },
             [&] {
               ops::zero_fill(dx.data(), dx.size());
               ops::zero_fill(dr.data(), dr.size());
               ops::zero_fill(de.data(), de.size());
             }};
  // Dense SwiGLU FFN with hidden K·Fe: the same expert GEMM FLOPs per token.
  const int F = K * Fe;
  const std::vector<float> wgu = randn(size_t(2) * F * c, 5, 0.02),
                           wd = randn(size_t(c) * F, 6, 0.02);
  std::vector<float> gu(size_t(n) * 2 * F), swi(size_t(n) * F), dgu(gu.size()), dswi(swi.size()),
      dwgu(wgu.size()), dwd(wd.size());
  Variant vd{[&] {
               ops::matmul_forward(gu.data(), x.data(), wgu.data(), n, c, 2 * F);
               ops::swiglu_forward(swi.data(), gu.data(), n, F);
               ops::matmul_forward(out.data(), swi.data(), wd.data(), n, F, c);
             },
             [&] {
               ops::zero_fill(dswi.data(), dswi.size());
               ops::matmul_backward(dswi.data(), dwd.data(), dout.data(), swi.data(), wd.data(), n,
                                    F, c);
               ops::zero_fill(dgu.data(), dgu.size());
               ops::swiglu_backward(dgu.data(), dswi.data(), gu.data(), n, F);
               ops::matmul_backward(dx.data(), dwgu.data(), dgu.data(), x.data(), wgu.data(), n, c,
                                    2 * F);
             },
             [&] {
               ops::zero_fill(dx.data(), dx.size());
               ops::zero_fill(dwgu.data(), dwgu.size());
               ops::zero_fill(dwd.data(), dwd.size());
             }};
  time_pair(min_seconds, vm, vd);

  MoeTiming t;
  t.moe_fwd_ms = vm.fwd_ms;
  t.moe_bwd_ms = vm.bwd_ms;
  t.dense_fwd_ms = vd.fwd_ms;
  t.dense_bwd_ms = vd.bwd_ms;
  t.dense_hidden = F;
  t.reps = vm.reps;
  // Balance of the routing in the timed passes (random weights route unevenly).
  for (int e = 0; e < E; ++e)
    t.largest_group = std::max(t.largest_group, ws.plan.offsets[e + 1] - ws.plan.offsets[e]);
  // Active training FLOPs per pass (forward 2·, backward 4· per multiply-add), MoE: experts and
  // router; dense: its three matrices.
  const double dense_flops = 6.0 * n * 3.0 * F * c, moe_flops = dense_flops + 6.0 * n * double(E) * c;
  t.moe_gflops = moe_flops / (t.moe_fwd_ms + t.moe_bwd_ms) * 1e-6;
  t.dense_gflops = dense_flops / (t.dense_fwd_ms + t.dense_bwd_ms) * 1e-6;
  return t;
}

}  // namespace atl::measure
