// The MoE top-k row logic of the CUDA kernel (kernels/cuda/moe_rows.cuh), run on the HOST
// against the CPU op (kernels/cpu/moe.cc): expert ids and weights bit for bit, with exact ties,
// E past the CPU op's 64-bit mask, and NaN scores. Runs on every machine (no GPU needed);
// tests/cuda/moe_test.cc checks the kernel itself on a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/moe_ops.h"
#include "kernels/cuda/moe_rows.cuh"

namespace atl::kernels::cuda {
namespace {

namespace cpu = atl::kernels::cpu;

// Scores from 8 levels (many exact ties); nan_every > 0 puts a NaN in every nan_every-th row
// and makes row 3 all NaN.
std::vector<float> scores(int N, int E, uint32_t seed, int nan_every) {
  std::mt19937 g(seed);
  std::vector<float> s(size_t(N) * E);
  for (auto& v : s) v = float(g() % 8) / 8.0f + 0.0625f;
  if (nan_every > 0) {
    for (int n = 0; n < N; n += nan_every) s[size_t(n) * E + size_t(n % E)] = std::nanf("");
    for (int e = 0; e < E; ++e) s[size_t(3) * E + size_t(e)] = std::nanf("");
  }
  return s;
}

TEST(MoeRowsHostTest, TopkRowIsTheCpuOp) {
  const int N = 300;
  for (int E : {8, 100}) {
    for (int K : {1, 2, 5}) {
      for (bool renorm : {true, false}) {
        for (int nan_every : {0, 7}) {
          SCOPED_TRACE("E=" + std::to_string(E) + " K=" + std::to_string(K) + " renorm=" +
                       std::to_string(renorm) + " nan_every=" + std::to_string(nan_every));
          const auto s = scores(N, E, uint32_t(E * 10 + K), nan_every);
          std::vector<int32_t> idx(size_t(N) * K), got_idx(idx.size(), -7);
          std::vector<float> w(idx.size()), got_w(idx.size());
          cpu::moe_topk_forward(idx.data(), w.data(), s.data(), N, E, K, renorm);
          for (int n = 0; n < N; ++n) {
            rows::topk_row(s.data() + size_t(n) * E, E, K, renorm, got_idx.data() + size_t(n) * K,
                           got_w.data() + size_t(n) * K);
          }
          ASSERT_EQ(got_idx, idx);
          for (size_t i = 0; i < w.size(); ++i) {
            ASSERT_GE(got_idx[i], 0);
            ASSERT_LT(got_idx[i], E);
            if (std::isnan(w[i]) && std::isnan(got_w[i])) continue;
            ASSERT_EQ(std::bit_cast<uint32_t>(got_w[i]), std::bit_cast<uint32_t>(w[i])) << i;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace atl::kernels::cuda
