#include "algorithms/distill/topk.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/core/check.h"

namespace atl::algorithms::distill {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
}  // namespace

template <typename T>
void build_topk(TeacherLogits<T>& teacher, int N, int V, int k, double tau, int rows, int shards,
                int32_t* ids, T* logits, T* tail_lse) {
  if (k < 1 || k > V || rows < 1 || shards < 1 || !(tau > 0))
    internal_error("build_topk: bad k=" + std::to_string(k) + " rows=" + std::to_string(rows) +
                   " shards=" + std::to_string(shards));
  const int R = std::min(rows, std::max(N, 1)), S = std::min(shards, V);
  const int vs_max = (V + S - 1) / S;
  std::vector<T> tile(size_t(R) * vs_max);
  // Per row: candidates (value, id), at most k + Vs, and the tail (max, Σ e^(z/τ − max)).
  using Cand = std::pair<T, int32_t>;
  std::vector<std::vector<Cand>> cand(R);
  std::vector<double> tm(R), ts(R);
  // Larger value first; equal values: lower id first (a total order: deterministic output).
  auto better = [](const Cand& a, const Cand& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  for (int r0 = 0; r0 < N; r0 += R) {
    const int Rr = std::min(R, N - r0);
    for (int r = 0; r < Rr; ++r) {
      cand[r].clear();
      cand[r].reserve(size_t(k) + vs_max);
      tm[r] = kNegInf;
      ts[r] = 0.0;
    }
    for (int s = 0; s < S; ++s) {
      const VocabRange vr = shard_range(V, S, s);
      const int Vs = vr.v1 - vr.v0;
      teacher.tile(r0, r0 + Rr, vr.v0, vr.v1, tile.data(), Vs);
#pragma omp parallel for schedule(static) if (double(Rr) * Vs > 32768.0)
      for (int r = 0; r < Rr; ++r) {
        std::vector<Cand>& c = cand[r];
        const T* z = tile.data() + size_t(r) * Vs;
        for (int j = 0; j < Vs; ++j) c.emplace_back(z[j], vr.v0 + j);
        if (static_cast<int>(c.size()) <= k) continue;
        std::nth_element(c.begin(), c.begin() + k, c.end(), better);
        // Everything after position k leaves for the tail, merged online.
        double m = kNegInf;
        for (size_t i = k; i < c.size(); ++i) m = std::max(m, double(c[i].first) / tau);
        if (m != kNegInf) {
          double sum = 0.0;
          for (size_t i = k; i < c.size(); ++i) sum += std::exp(double(c[i].first) / tau - m);
          const double mn = std::max(tm[r], m);
          ts[r] = ts[r] * std::exp(tm[r] - mn) + sum * std::exp(m - mn);
          tm[r] = mn;
        }
        c.resize(k);
      }
    }
    for (int r = 0; r < Rr; ++r) {
      std::vector<Cand>& c = cand[r];
      std::sort(c.begin(), c.end(), better);
      for (int i = 0; i < k; ++i) {
        logits[size_t(r0 + r) * k + i] = c[i].first;
        ids[size_t(r0 + r) * k + i] = c[i].second;
      }
      tail_lse[r0 + r] = ts[r] > 0.0 ? T(tm[r] + std::log(ts[r])) : T(kNegInf);
    }
  }
}

template void build_topk<float>(TeacherLogits<float>&, int, int, int, double, int, int, int32_t*,
                                float*, float*);
template void build_topk<double>(TeacherLogits<double>&, int, int, int, double, int, int, int32_t*,
                                 double*, double*);

}  // namespace atl::algorithms::distill
