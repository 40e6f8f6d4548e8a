#include "measure/distill_loss.h"

#include <algorithm>
#include <cmath>

#include "algorithms/distill/reference.h"
#include "algorithms/distill/topk.h"
#include "kernels/core/philox.h"
#include "kernels/cpu/ops.h"
#include "measure/timing.h"

namespace atl::measure {

namespace {

namespace dst = atl::algorithms::distill;
using Setup = DistillLossSetup;
using Variant = DistillLossVariant;

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
    const auto t0 = Clock::now();
    dst::build_topk(src, N, V, k, st.base.tau, 64, 32, in.k_ids.data(), in.k_logits.data(),
                    in.k_tail.data());
    in.topk_build_ms = seconds_since(t0) * 1e3;
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
    const auto t0 = Clock::now();
    ATOLL_RETURN_IF_ERROR(once().status());
    ms.push_back(seconds_since(t0) * 1e3);
  }
  v.ms = median(ms);  // robust to bursts of other work on a shared machine
  return Status::Ok();
}

}  // namespace

Status validate(const DistillLossSetup& st) {
  if (static_cast<long long>(st.N) * st.V > (1LL << 31) - 1)
    return InvalidArgument("N·V must stay below 2^31 (the unfused loss holds N×V)");
  if (st.k > st.V) return InvalidArgument("--topk must be at most --vocab");
  return Status::Ok();
}

StatusOr<DistillLossReport> measure_distill_loss(const DistillLossSetup& st) {
  ATOLL_RETURN_IF_ERROR(validate(st));
  kernels::cpu::set_num_threads(st.threads);
  Inputs in = make_inputs(st);
  warm_up(in, st);
  const long long rss0 = peak_rss_bytes();
  DistillLossReport report;
  report.variants = plan_variants(st);
  for (Variant& v : report.variants)
    if (Status s = time_variant(v, in, st, rss0); !s.ok())
      return Status(s.code(), v.name + ": " + s.message());
  report.topk_build_ms = in.topk_build_ms;
  report.threads = kernels::cpu::num_threads();
  return report;
}

}  // namespace atl::measure
