// `atoll bench moe`: forward + backward time of the CPU MoE FFN layer (kernels/cpu/moe_ops.h)
// against a dense SwiGLU FFN of equal active FLOPs (hidden size K·Fe, so each token runs the
// same expert GEMM work; the MoE layer adds the router GEMM (E·C per token), the permutation,
// the combine and the router losses).
//
// Every configuration runs on N tokens of random inputs; each variant is timed as the fastest
// of repeated forward+backward passes over at least --seconds (fastest: the least disturbed by
// other work on the machine), MoE and dense passes alternating so both see the same load.
// Gradients are zeroed outside the timed region.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cli/bench_common.h"
#include "cli/flags.h"
#include "kernels/core/philox.h"
#include "kernels/cpu/moe_ops.h"
#include "kernels/cpu/ops.h"

namespace atl::cli {

namespace {

namespace ops = kernels::cpu;
using Clock = std::chrono::steady_clock;

std::vector<float> randn(size_t n, uint64_t stream, double sd) {
  std::vector<float> v(n);
  const Philox rng(77, stream);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(sd * rng.normal(i));
  return v;
}

struct Timing {
  double fwd_ms = 1e30, bwd_ms = 1e30;
  int reps = 0;
};

// One timed variant: zero() (untimed) then fwd() and bwd(), the fastest of each kept.
struct Variant {
  std::function<void()> fwd, bwd, zero;
  Timing t;
};

// Alternates the two variants until min_s has passed (at least 3 rounds), so both see the same
// load from whatever else runs on the machine.
void time_pair(double min_s, Variant& a, Variant& b) {
  const auto start = Clock::now();
  int rounds = 0;
  while (rounds < 3 || std::chrono::duration<double>(Clock::now() - start).count() < min_s) {
    for (Variant* v : {&a, &b}) {
      v->zero();
      const auto t0 = Clock::now();
      v->fwd();
      const auto t1 = Clock::now();
      v->bwd();
      const auto t2 = Clock::now();
      v->t.fwd_ms =
          std::min(v->t.fwd_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
      v->t.bwd_ms =
          std::min(v->t.bwd_ms, std::chrono::duration<double, std::milli>(t2 - t1).count());
      ++v->t.reps;
    }
    ++rounds;
  }
}

struct Config {
  int E, K, Fe;
};

}  // namespace

int bench_moe(const Args& args) {
  Flags flags("bench moe",
              {{"tokens", true, "tokens per pass N (B·T)", "2048"},
               {"dim", true, "model width C", "256"},
               {"configs", true, "MoE shapes E:K:Fe, comma separated", "8:2:384,32:4:192,64:8:96"},
               {"seconds", true, "minimum time per variant", "1.0"},
               {"threads", true, "CPU threads (0 = all cores)", "1"},
               {"json", false, "one JSON object per configuration", ""}});
  if (Status s = flags.parse(args); !s.ok()) return fail("bench moe", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto N = flags.get_int("tokens", 2048, 1, 1 << 20);
  auto C = flags.get_int("dim", 256, 2, 1 << 14);
  auto secs = flags.get_double("seconds", 1.0, 0.0, 600.0);
  auto th = flags.get_int("threads", 1, 0, 1024);
  for (const Status& s : {N.status(), C.status(), secs.status(), th.status()})
    if (!s.ok()) return fail("bench moe", s.message(), 2);
  std::vector<Config> configs;
  const std::string list = flags.get_or("configs", "8:2:384,32:4:192,64:8:96");
  for (size_t pos = 0; pos <= list.size();) {
    const size_t end = std::min(list.find(',', pos), list.size());
    Config c{};
    if (std::sscanf(list.substr(pos, end - pos).c_str(), "%d:%d:%d", &c.E, &c.K, &c.Fe) != 3 ||
        c.E < 1 || c.K < 1 || c.K > c.E || c.Fe < 1)
      return fail("bench moe",
                  "--configs: '" + list.substr(pos, end - pos) +
                      "' is not E:K:Fe with 1 <= K <= E and Fe >= 1 (e.g. 8:2:384)",
                  2);
    configs.push_back(c);
    pos = end + 1;
  }
  ops::set_num_threads(static_cast<int>(*th));
  const int n = static_cast<int>(*N), c = static_cast<int>(*C);
  const std::vector<float> x = randn(size_t(n) * c, 1, 1.0), dout = randn(size_t(n) * c, 2, 1.0);

  for (const Config& cf : configs) {
    // MoE layer.
    ops::MoeFfnShape s{c, cf.E, cf.K, cf.Fe, 0, ops::MoeScore::kSoftmax, true};
    const std::vector<float> router = randn(size_t(cf.E) * c, 3, 0.02),
                             experts = randn(size_t(cf.E) * 3 * cf.Fe * c, 4, 0.02);
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
               },
               {}};
    // Dense SwiGLU FFN with hidden K·Fe: the same expert GEMM FLOPs per token.
    const int F = cf.K * cf.Fe;
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
                 ops::matmul_backward(dswi.data(), dwd.data(), dout.data(), swi.data(), wd.data(),
                                      n, F, c);
                 ops::zero_fill(dgu.data(), dgu.size());
                 ops::swiglu_backward(dgu.data(), dswi.data(), gu.data(), n, F);
                 ops::matmul_backward(dx.data(), dwgu.data(), dgu.data(), x.data(), wgu.data(), n,
                                      c, 2 * F);
               },
               [&] {
                 ops::zero_fill(dx.data(), dx.size());
                 ops::zero_fill(dwgu.data(), dwgu.size());
                 ops::zero_fill(dwd.data(), dwd.size());
               },
               {}};
    time_pair(*secs, vm, vd);
    const Timing &tm = vm.t, &td = vd.t;
    // Balance of the routing in the timed passes (random weights route unevenly).
    int max_group = 0;
    for (int e = 0; e < cf.E; ++e)
      max_group = std::max(max_group, ws.plan.offsets[e + 1] - ws.plan.offsets[e]);
    const double moe_ms = tm.fwd_ms + tm.bwd_ms, dense_ms = td.fwd_ms + td.bwd_ms;
    // Active training FLOPs per pass (forward 2·, backward 4· per multiply-add), MoE: experts and
    // router; dense: its three matrices.
    const double dense_flops = 6.0 * n * 3.0 * F * c,
                 moe_flops = dense_flops + 6.0 * n * double(cf.E) * c;
    if (flags.has("json")) {
      std::printf(
          "{\"bench\":\"moe\",\"tokens\":%d,\"dim\":%d,\"experts\":%d,\"top_k\":%d,"
          "\"expert_hidden\":%d,\"dense_hidden\":%d,\"threads\":%d,\"moe_fwd_ms\":%.3f,"
          "\"moe_bwd_ms\":%.3f,\"dense_fwd_ms\":%.3f,\"dense_bwd_ms\":%.3f,\"moe_over_dense\":%.3f,"
          "\"moe_gflops\":%.2f,\"dense_gflops\":%.2f,\"largest_group\":%d,\"reps\":%d}\n",
          n, c, cf.E, cf.K, cf.Fe, F, ops::num_threads(), tm.fwd_ms, tm.bwd_ms, td.fwd_ms,
          td.bwd_ms, moe_ms / dense_ms, moe_flops / moe_ms * 1e-6, dense_flops / dense_ms * 1e-6,
          max_group, tm.reps);
    } else {
      std::printf(
          "E=%-3d K=%-2d Fe=%-4d | MoE fwd %7.2f ms bwd %7.2f ms | dense F=%-4d fwd %7.2f ms bwd "
          "%7.2f ms | MoE/dense %.2fx | largest group %d of %d rows\n",
          cf.E, cf.K, cf.Fe, tm.fwd_ms, tm.bwd_ms, F, td.fwd_ms, td.bwd_ms, moe_ms / dense_ms,
          max_group, n * cf.K);
    }
  }
  return 0;
}

}  // namespace atl::cli
