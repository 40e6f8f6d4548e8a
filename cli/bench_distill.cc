// `atoll bench distill-loss`: time and peak extra memory of the fused, tiled distillation loss
// (algorithms/distill/loss.h) against the unfused loss that materializes the N×V logits.
//
// Every variant computes the same thing: student logits from (h, W), teacher logits from the
// teacher's own head (h_t, W_t), loss forward and backward into dh and dW. The teacher head GEMM
// is part of the timed work in every variant (co-located distillation); the unfused variants
// hold its N×V output, the fused ones compute it tile by tile.
//   fused R×S        FusedDistillLoss, R rows per tile, S vocabulary shards
//   fused top-k      the same with top-k teacher targets (built beforehand; build time apart)
//   unfused          the same code with R = N and S = 1: student and teacher (N, V) buffers
//   reference        reference_loss: plain per-row log-softmax in double over (N, V) buffers
// Memory: `extra_bytes` counts what each variant allocates beyond its inputs and outputs;
// `maxrss_growth_bytes` is the growth of the process's peak RSS over the inputs, measured with
// the variants run in increasing order of extra_bytes (the peak only ever rises).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "algorithms/distill/loss.h"
#include "algorithms/distill/reference.h"
#include "algorithms/distill/topk.h"
#include "cli/bench_common.h"
#include "cli/flags.h"
#include "kernels/core/philox.h"
#include "kernels/cpu/ops.h"

namespace atl::cli {

namespace {

namespace dst = atl::algorithms::distill;

long long peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<long long>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

struct Variant {
  std::string name;
  int R = 0, S = 0;
  int k = 0;               // top-k ids per row (top-k variant only)
  bool reference = false;  // plain reference_loss
  size_t extra_bytes = 0;
  double ms = 0, loss = 0;
  long long rss_growth = 0;
};

// Parses "256x8,64x4" into (R, S) pairs.
StatusOr<std::vector<std::pair<int, int>>> parse_tiles(const std::string& s) {
  std::vector<std::pair<int, int>> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t end = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, end - pos);
    int r = 0, sh = 0;
    char extra = 0;
    if (std::sscanf(item.c_str(), "%dx%d%c", &r, &sh, &extra) != 2 || r <= 0 || sh <= 0)
      return InvalidArgument("--tiles: '" + item + "' is not ROWSxSHARDS (e.g. 256x8)");
    out.emplace_back(r, sh);
    pos = end + 1;
  }
  return out;
}

}  // namespace

int bench_distill_loss(const Args& args) {
  Flags flags("bench distill-loss",
              {{"n", true, "rows N (tokens)", "2048"},
               {"dim", true, "student hidden size C", "256"},
               {"teacher-dim", true, "teacher hidden size", "256"},
               {"vocab", true, "vocabulary V", "32768"},
               {"alpha", true, "KL weight", "0.5"},
               {"tau", true, "temperature", "2"},
               {"tiles", true, "fused tilings ROWSxSHARDS, comma-separated", "256x8,256x1"},
               {"topk", true, "top-k variant's k (0: skip it)", "64"},
               {"reference", false, "also time the plain reference loss (slow)", ""},
               {"reps", true, "timed repetitions per variant (after one warm-up)", "3"},
               {"threads", true, "threads (0 = all cores)", "0"},
               {"seed", true, "seed of the synthetic inputs", "0"},
               {"json", false, "print one JSON line", ""}});
  if (Status s = flags.parse(args); !s.ok()) return fail("bench distill-loss", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto n = flags.get_int("n", 2048, 1, 1 << 20);
  auto dim = flags.get_int("dim", 256, 1, 1 << 16);
  auto tdim = flags.get_int("teacher-dim", 256, 1, 1 << 16);
  auto vocab = flags.get_int("vocab", 32768, 2, 1 << 20);
  auto alpha = flags.get_double("alpha", 0.5, 0.0, 1.0);
  auto tau = flags.get_double("tau", 2.0, 1e-3, 1e3);
  auto topk = flags.get_int("topk", 64, 0, 1 << 20);
  auto reps = flags.get_int("reps", 3, 1, 1000);
  auto threads = flags.get_int("threads", 0, 0, 1024);
  auto seed = flags.get_int("seed", 0, 0, 1LL << 62);
  for (const Status* st :
       {&n.status(), &dim.status(), &tdim.status(), &vocab.status(), &alpha.status(), &tau.status(),
        &topk.status(), &reps.status(), &threads.status(), &seed.status()})
    if (!st->ok()) return fail("bench distill-loss", st->message(), 2);
  auto tiles = parse_tiles(flags.get_or("tiles", "256x8,256x1"));
  if (!tiles.ok()) return fail("bench distill-loss", tiles.status().message(), 2);
  const int N = static_cast<int>(*n), C = static_cast<int>(*dim), Ct = static_cast<int>(*tdim),
            V = static_cast<int>(*vocab);
  if (static_cast<long long>(N) * V > (1LL << 31) - 1)
    return fail("bench distill-loss", "N·V must stay below 2^31 (the unfused loss holds N×V)", 2);
  if (*topk > V) return fail("bench distill-loss", "--topk must be at most --vocab", 2);
  kernels::cpu::set_num_threads(static_cast<int>(*threads));

  // Synthetic inputs: hidden states of unit scale, heads scaled so logits span a few nats.
  const uint64_t s0 = static_cast<uint64_t>(*seed);
  const Philox rng(s0, 11);
  auto fill = [s0](std::vector<float>& v, uint64_t stream, double sd) {
    const Philox r(s0, stream);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(sd * r.normal(i));
  };
  std::vector<float> h(size_t(N) * C), W(size_t(V) * C), ht(size_t(N) * Ct), Wt(size_t(V) * Ct);
  fill(h, 1, 1.0);
  fill(W, 2, 2.0 / std::sqrt(double(C)));
  fill(ht, 3, 1.0);
  fill(Wt, 4, 3.0 / std::sqrt(double(Ct)));
  std::vector<int32_t> y(N);
  for (int i = 0; i < N; ++i) y[i] = static_cast<int32_t>(rng.below(uint64_t(i) + 1000, V));
  std::vector<float> dh(h.size()), dW(W.size());
  kernels::cpu::zero_fill(dh.data(), dh.size());
  kernels::cpu::zero_fill(dW.data(), dW.size());
  // Top-k targets: the teacher side's work (and its wire payload), built once from the teacher
  // head in small tiles (64 rows × V/32), before the memory baseline: the student's loss
  // receives them as input.
  const int k = static_cast<int>(*topk);
  std::vector<int32_t> k_ids;
  std::vector<float> k_logits, k_tail;
  double topk_build_ms = 0;
  if (k > 0 && *alpha > 0) {
    k_ids.resize(size_t(N) * k);
    k_logits.resize(size_t(N) * k);
    k_tail.resize(N);
    dst::HeadTeacherLogits<float> src(ht.data(), Wt.data(), Ct);
    const auto t0 = std::chrono::steady_clock::now();
    dst::build_topk(src, N, V, k, *tau, 64, 32, k_ids.data(), k_logits.data(), k_tail.data());
    topk_build_ms =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
  }
  // One tiny fused run first, so OpenMP's threads and OpenBLAS's buffers exist before the
  // baseline: the peak-RSS growth then counts the variants' own buffers.
  {
    const int n0 = std::min(N, 8);
    dst::FusedDistillLoss<float> warm({*alpha, *tau, n0, std::min(V, 64)});
    dst::HeadTeacherLogits<float> teacher(ht.data(), Wt.data(), Ct);
    (void)warm.run(h.data(), W.data(), n0, C, V, y.data(), &teacher, dh.data(), dW.data());
    kernels::cpu::zero_fill(dh.data(), dh.size());
    kernels::cpu::zero_fill(dW.data(), dW.size());
  }
  const long long rss0 = peak_rss_bytes();

  const dst::LossConfig base{*alpha, *tau, 256, 8};
  std::vector<Variant> vs;
  for (auto [R, S] : *tiles) {
    Variant v;
    v.name = "fused";
    v.R = std::min(R, N);
    v.S = std::min(S, V);
    dst::FusedDistillLoss<float> l({base.alpha, base.tau, v.R, v.S});
    v.extra_bytes = l.workspace_bytes(N, V, base.alpha > 0);
    vs.push_back(v);
  }
  if (k > 0 && *alpha > 0) {
    Variant v;
    v.name = "fused_topk";
    v.R = vs.empty() ? std::min(256, N) : vs[0].R;
    v.S = vs.empty() ? std::min(8, V) : vs[0].S;
    v.k = k;
    dst::FusedDistillLoss<float> l({base.alpha, base.tau, v.R, v.S});
    v.extra_bytes = l.workspace_bytes(N, V, false, k);
    vs.push_back(v);
  }
  {
    Variant v;
    v.name = "unfused";
    v.R = N;
    v.S = 1;
    dst::FusedDistillLoss<float> l({base.alpha, base.tau, N, 1});
    v.extra_bytes = l.workspace_bytes(N, V, base.alpha > 0);
    vs.push_back(v);
  }
  if (flags.has("reference")) {
    Variant v;
    v.name = "reference";
    v.reference = true;
    // Student logits/gradient (N, V) + teacher logits (N, V) + three V-long double rows per
    // thread.
    v.extra_bytes = size_t(N) * V * sizeof(float) * 2 +
                    size_t(kernels::cpu::num_threads()) * 4 * V * sizeof(double);
    vs.push_back(v);
  }
  // Increasing extra memory, so each variant's peak RSS is a new high-water mark.
  std::stable_sort(vs.begin(), vs.end(), [](const Variant& a, const Variant& b) {
    return a.extra_bytes < b.extra_bytes;
  });

  for (Variant& v : vs) {
    dst::FusedDistillLoss<float> loss({base.alpha, base.tau, std::max(v.R, 1), std::max(v.S, 1)});
    std::vector<float> zt_full;
    auto once = [&]() -> StatusOr<double> {
      if (v.reference) {
        zt_full.resize(size_t(N) * V);
        kernels::cpu::matmul_forward(zt_full.data(), ht.data(), Wt.data(), N, Ct, V);
        const auto r = dst::reference_loss(base, h.data(), W.data(), N, C, V, y.data(),
                                           zt_full.data(), dh.data(), dW.data());
        std::vector<float>().swap(zt_full);
        return r.loss;
      }
      if (v.k > 0) {
        const dst::TopKTargets<float> t{v.k, k_ids.data(), k_logits.data(), k_tail.data()};
        auto r = loss.run_topk(h.data(), W.data(), N, C, V, y.data(), t, dh.data(), dW.data());
        if (!r.ok()) return r.status();
        return r->loss;
      }
      dst::HeadTeacherLogits<float> teacher(ht.data(), Wt.data(), Ct);
      auto r = loss.run(h.data(), W.data(), N, C, V, y.data(), &teacher, dh.data(), dW.data());
      if (!r.ok()) return r.status();
      return r->loss;
    };
    auto warm_loss = once();  // warm-up; sets the peak RSS of this variant
    if (!warm_loss.ok())
      return fail("bench distill-loss", v.name + ": " + warm_loss.status().message());
    v.loss = *warm_loss;
    v.rss_growth = std::max(0LL, peak_rss_bytes() - rss0);
    std::vector<double> ms;
    for (int64_t i = 0; i < *reps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if (auto r = once(); !r.ok())
        return fail("bench distill-loss", v.name + ": " + r.status().message());
      ms.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() *
                   1e3);
    }
    std::sort(ms.begin(), ms.end());
    v.ms = ms[ms.size() / 2];  // median: robust to bursts of other work on a shared machine
  }

  if (flags.has("json")) {
    std::printf(
        "{\"bench\":\"distill_loss\",\"n\":%d,\"dim\":%d,\"teacher_dim\":%d,\"vocab\":%d,"
        "\"alpha\":%g,\"tau\":%g,\"threads\":%d,\"reps\":%lld,\"topk_build_ms\":%.1f,"
        "\"variants\":[",
        N, C, Ct, V, base.alpha, base.tau, kernels::cpu::num_threads(),
        static_cast<long long>(*reps), topk_build_ms);
    for (size_t i = 0; i < vs.size(); ++i) {
      const Variant& v = vs[i];
      std::printf(
          "%s{\"variant\":\"%s\",\"rows\":%d,\"shards\":%d,\"k\":%d,\"ms\":%.1f,"
          "\"extra_bytes\":%zu,\"maxrss_growth_bytes\":%lld,\"loss\":%.6f}",
          i ? "," : "", v.name.c_str(), v.R, v.S, v.k, v.ms, v.extra_bytes, v.rss_growth, v.loss);
    }
    std::printf("]}\n");
  } else {
    std::printf(
        "distill loss N=%d C=%d Ct=%d V=%d alpha=%g tau=%g threads=%d (fwd+bwd, median of "
        "%lld)\n",
        N, C, Ct, V, base.alpha, base.tau, kernels::cpu::num_threads(),
        static_cast<long long>(*reps));
    for (const Variant& v : vs)
      std::printf(
          "  %-11s R=%-5d S=%-3d k=%-4d %9.1f ms  extra %8.1f MiB  peak RSS +%8.1f MiB  "
          "loss %.6f\n",
          v.name.c_str(), v.R, v.S, v.k, v.ms, v.extra_bytes / 1048576.0, v.rss_growth / 1048576.0,
          v.loss);
    if (k > 0) std::printf("  top-k targets built in %.1f ms (teacher side)\n", topk_build_ms);
  }
  return 0;
}

}  // namespace atl::cli
