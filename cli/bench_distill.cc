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

std::vector<FlagSpec> bench_flags() {
  return {{"n", true, "rows N (tokens)", "2048"},
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
          {"json", false, "print one JSON line", ""}};
}

// The flags, checked.
struct Setup {
  int N = 0, C = 0, Ct = 0, V = 0;  // rows, student and teacher hidden sizes, vocabulary
  dst::LossConfig base;             // α, τ (R, S per variant)
  int k = 0;                        // top-k variant's k (0: none)
  int64_t reps = 3;
  int threads = 0;
  uint64_t seed = 0;
  std::vector<std::pair<int, int>> tiles;  // fused (R, S)
  bool reference = false;
};

StatusOr<Setup> read_setup(const Flags& flags) {
  Setup st;
  ATOLL_ASSIGN_OR_RETURN(const int64_t n, flags.get_int("n", 2048, 1, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(const int64_t dim, flags.get_int("dim", 256, 1, 1 << 16));
  ATOLL_ASSIGN_OR_RETURN(const int64_t tdim, flags.get_int("teacher-dim", 256, 1, 1 << 16));
  ATOLL_ASSIGN_OR_RETURN(const int64_t vocab, flags.get_int("vocab", 32768, 2, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(const double alpha, flags.get_double("alpha", 0.5, 0.0, 1.0));
  ATOLL_ASSIGN_OR_RETURN(const double tau, flags.get_double("tau", 2.0, 1e-3, 1e3));
  ATOLL_ASSIGN_OR_RETURN(const int64_t topk, flags.get_int("topk", 64, 0, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(st.reps, flags.get_int("reps", 3, 1, 1000));
  ATOLL_ASSIGN_OR_RETURN(const int64_t threads, flags.get_int("threads", 0, 0, 1024));
  ATOLL_ASSIGN_OR_RETURN(const int64_t seed, flags.get_int("seed", 0, 0, 1LL << 62));
  ATOLL_ASSIGN_OR_RETURN(st.tiles, parse_tiles(flags.get_or("tiles", "256x8,256x1")));
  st.N = static_cast<int>(n);
  st.C = static_cast<int>(dim);
  st.Ct = static_cast<int>(tdim);
  st.V = static_cast<int>(vocab);
  if (static_cast<long long>(st.N) * st.V > (1LL << 31) - 1)
    return InvalidArgument("N·V must stay below 2^31 (the unfused loss holds N×V)");
  if (topk > st.V) return InvalidArgument("--topk must be at most --vocab");
  st.base = dst::LossConfig{alpha, tau, 256, 8};
  st.k = static_cast<int>(topk);
  st.threads = static_cast<int>(threads);
  st.seed = static_cast<uint64_t>(seed);
  st.reference = flags.has("reference");
  return st;
}

// Synthetic inputs, and the top-k targets built from the teacher head.
struct Inputs {
  std::vector<float> h, W, ht, Wt;  // (N, C), (V, C), (N, Ct), (V, Ct)
  std::vector<int32_t> y;           // (N)
  std::vector<float> dh, dW;        // gradients, like h and W
  std::vector<int32_t> k_ids;       // (N, k)
  std::vector<float> k_logits, k_tail;
  double topk_build_ms = 0;
};

// Hidden states of unit scale, heads scaled so logits span a few nats. Top-k targets: the
// teacher side's work (and its wire payload), built once from the teacher head in small tiles
// (64 rows × V/32), before the memory baseline: the student's loss receives them as input.
Inputs make_inputs(const Setup& st) {
  const int N = st.N, C = st.C, Ct = st.Ct, V = st.V;
  const uint64_t s0 = st.seed;
  const Philox rng(s0, 11);
  auto fill = [s0](std::vector<float>& v, uint64_t stream, double sd) {
    const Philox r(s0, stream);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(sd * r.normal(i));
  };
  Inputs in;
  in.h.resize(size_t(N) * C);
  in.W.resize(size_t(V) * C);
  in.ht.resize(size_t(N) * Ct);
  in.Wt.resize(size_t(V) * Ct);
  fill(in.h, 1, 1.0);
  fill(in.W, 2, 2.0 / std::sqrt(double(C)));
  fill(in.ht, 3, 1.0);
  fill(in.Wt, 4, 3.0 / std::sqrt(double(Ct)));
  in.y.resize(N);
  for (int i = 0; i < N; ++i) in.y[i] = static_cast<int32_t>(rng.below(uint64_t(i) + 1000, V));
  in.dh.resize(in.h.size());
  in.dW.resize(in.W.size());
  kernels::cpu::zero_fill(in.dh.data(), in.dh.size());
  kernels::cpu::zero_fill(in.dW.data(), in.dW.size());
  const int k = st.k;
  if (k > 0 && st.base.alpha > 0) {
    in.k_ids.resize(size_t(N) * k);
    in.k_logits.resize(size_t(N) * k);
    in.k_tail.resize(N);
    dst::HeadTeacherLogits<float> src(in.ht.data(), in.Wt.data(), Ct);
    const auto t0 = std::chrono::steady_clock::now();
    dst::build_topk(src, N, V, k, st.base.tau, 64, 32, in.k_ids.data(), in.k_logits.data(),
                    in.k_tail.data());
    in.topk_build_ms =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
  }
  return in;
}

// One tiny fused run first, so OpenMP's threads and OpenBLAS's buffers exist before the
// baseline: the peak-RSS growth then counts the variants' own buffers.
void warm_up(Inputs& in, const Setup& st) {
  const int n0 = std::min(st.N, 8);
  dst::FusedDistillLoss<float> warm({st.base.alpha, st.base.tau, n0, std::min(st.V, 64)});
  dst::HeadTeacherLogits<float> teacher(in.ht.data(), in.Wt.data(), st.Ct);
  (void)warm.run(in.h.data(), in.W.data(), n0, st.C, st.V, in.y.data(), &teacher, in.dh.data(),
                 in.dW.data());
  kernels::cpu::zero_fill(in.dh.data(), in.dh.size());
  kernels::cpu::zero_fill(in.dW.data(), in.dW.size());
}

// The variants with their extra memory, in increasing order of it, so each variant's peak RSS
// is a new high-water mark.
std::vector<Variant> plan_variants(const Setup& st) {
  const int N = st.N, V = st.V;
  const dst::LossConfig& base = st.base;
  std::vector<Variant> vs;
  for (auto [R, S] : st.tiles) {
    Variant v;
    v.name = "fused";
    v.R = std::min(R, N);
    v.S = std::min(S, V);
    dst::FusedDistillLoss<float> l({base.alpha, base.tau, v.R, v.S});
    v.extra_bytes = l.workspace_bytes(N, V, base.alpha > 0);
    vs.push_back(v);
  }
  if (st.k > 0 && base.alpha > 0) {
    Variant v;
    v.name = "fused_topk";
    v.R = vs.empty() ? std::min(256, N) : vs[0].R;
    v.S = vs.empty() ? std::min(8, V) : vs[0].S;
    v.k = st.k;
    dst::FusedDistillLoss<float> l({base.alpha, base.tau, v.R, v.S});
    v.extra_bytes = l.workspace_bytes(N, V, false, st.k);
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
  if (st.reference) {
    Variant v;
    v.name = "reference";
    v.reference = true;
    // Student logits/gradient (N, V) + teacher logits (N, V) + three V-long double rows per
    // thread.
    v.extra_bytes = size_t(N) * V * sizeof(float) * 2 +
                    size_t(kernels::cpu::num_threads()) * 4 * V * sizeof(double);
    vs.push_back(v);
  }
  std::stable_sort(vs.begin(), vs.end(), [](const Variant& a, const Variant& b) {
    return a.extra_bytes < b.extra_bytes;
  });
  return vs;
}

// One warm-up run (which sets the variant's peak RSS), then the median of st.reps timed runs.
Status time_variant(Variant& v, Inputs& in, const Setup& st, long long rss0) {
  const int N = st.N, C = st.C, Ct = st.Ct, V = st.V;
  const dst::LossConfig& base = st.base;
  dst::FusedDistillLoss<float> loss({base.alpha, base.tau, std::max(v.R, 1), std::max(v.S, 1)});
  std::vector<float> zt_full;
  auto once = [&]() -> StatusOr<double> {
    if (v.reference) {
      zt_full.resize(size_t(N) * V);
      kernels::cpu::matmul_forward(zt_full.data(), in.ht.data(), in.Wt.data(), N, Ct, V);
      const auto r = dst::reference_loss(base, in.h.data(), in.W.data(), N, C, V, in.y.data(),
                                         zt_full.data(), in.dh.data(), in.dW.data());
      std::vector<float>().swap(zt_full);
      return r.loss;
    }
    if (v.k > 0) {
      const dst::TopKTargets<float> t{v.k, in.k_ids.data(), in.k_logits.data(), in.k_tail.data()};
      ATOLL_ASSIGN_OR_RETURN(const auto r,
                             loss.run_topk(in.h.data(), in.W.data(), N, C, V, in.y.data(), t,
                                           in.dh.data(), in.dW.data()));
      return r.loss;
    }
    dst::HeadTeacherLogits<float> teacher(in.ht.data(), in.Wt.data(), Ct);
    ATOLL_ASSIGN_OR_RETURN(const auto r, loss.run(in.h.data(), in.W.data(), N, C, V, in.y.data(),
                                                  &teacher, in.dh.data(), in.dW.data()));
    return r.loss;
  };
  ATOLL_ASSIGN_OR_RETURN(v.loss, once());
  v.rss_growth = std::max(0LL, peak_rss_bytes() - rss0);
  std::vector<double> ms;
  for (int64_t i = 0; i < st.reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ATOLL_RETURN_IF_ERROR(once().status());
    ms.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() *
                 1e3);
  }
  std::sort(ms.begin(), ms.end());
  v.ms = ms[ms.size() / 2];  // median: robust to bursts of other work on a shared machine
  return Status::Ok();
}

void print_json(const std::vector<Variant>& vs, const Inputs& in, const Setup& st) {
  std::printf(
      "{\"bench\":\"distill_loss\",\"n\":%d,\"dim\":%d,\"teacher_dim\":%d,\"vocab\":%d,"
      "\"alpha\":%g,\"tau\":%g,\"threads\":%d,\"reps\":%lld,\"topk_build_ms\":%.1f,"
      "\"variants\":[",
      st.N, st.C, st.Ct, st.V, st.base.alpha, st.base.tau, kernels::cpu::num_threads(),
      static_cast<long long>(st.reps), in.topk_build_ms);
  for (size_t i = 0; i < vs.size(); ++i) {
    const Variant& v = vs[i];
    std::printf(
        "%s{\"variant\":\"%s\",\"rows\":%d,\"shards\":%d,\"k\":%d,\"ms\":%.1f,"
        "\"extra_bytes\":%zu,\"maxrss_growth_bytes\":%lld,\"loss\":%.6f}",
        i ? "," : "", v.name.c_str(), v.R, v.S, v.k, v.ms, v.extra_bytes, v.rss_growth, v.loss);
  }
  std::printf("]}\n");
}

void print_table(const std::vector<Variant>& vs, const Inputs& in, const Setup& st) {
  std::printf(
      "distill loss N=%d C=%d Ct=%d V=%d alpha=%g tau=%g threads=%d (fwd+bwd, median of "
      "%lld)\n",
      st.N, st.C, st.Ct, st.V, st.base.alpha, st.base.tau, kernels::cpu::num_threads(),
      static_cast<long long>(st.reps));
  for (const Variant& v : vs)
    std::printf(
        "  %-11s R=%-5d S=%-3d k=%-4d %9.1f ms  extra %8.1f MiB  peak RSS +%8.1f MiB  "
        "loss %.6f\n",
        v.name.c_str(), v.R, v.S, v.k, v.ms, v.extra_bytes / 1048576.0, v.rss_growth / 1048576.0,
        v.loss);
  if (st.k > 0) std::printf("  top-k targets built in %.1f ms (teacher side)\n", in.topk_build_ms);
}

}  // namespace

int bench_distill_loss(const Args& args) {
  Flags flags("bench distill-loss", bench_flags());
  if (Status s = flags.parse(args); !s.ok()) return fail("bench distill-loss", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto setup = read_setup(flags);
  if (!setup.ok()) return fail("bench distill-loss", setup.status().message(), 2);
  kernels::cpu::set_num_threads(setup->threads);
  Inputs in = make_inputs(*setup);
  warm_up(in, *setup);
  const long long rss0 = peak_rss_bytes();
  std::vector<Variant> vs = plan_variants(*setup);
  for (Variant& v : vs)
    if (Status s = time_variant(v, in, *setup, rss0); !s.ok())
      return fail("bench distill-loss", v.name + ": " + s.message());
  if (flags.has("json"))
    print_json(vs, in, *setup);
  else
    print_table(vs, in, *setup);
  return 0;
}

}  // namespace atl::cli
