// The MoE top-k row logic of the CUDA kernel (kernels/cuda/moe_rows.cuh), run on the HOST
// against the CPU op (kernels/cpu/moe.cc): expert ids and weights bit for bit, with exact ties,
// E past the CPU op's 64-bit mask, and NaN scores. Also the launch-grid functions of common.cuh.
// Runs on every machine (no GPU needed); tests/cuda/moe_test.cc checks the kernel on a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/moe_ops.h"
#include "kernels/cuda/common.cuh"
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

// A kernel with one thread per item and no grid-stride loop needs blocks_exact: blocks_for's cap
// (for grid-stride kernels) leaves items uncovered past 65535·16 blocks.
TEST(LaunchGridHostTest, BlocksExactCoversEveryItem) {
  for (size_t n : {size_t(1), size_t(255), size_t(256), size_t(257), size_t(300'000'000),
                   size_t(0x7fffffff)}) {
    const size_t blocks = detail::blocks_exact(n, 256);
    EXPECT_GE(blocks * 256, n) << n;
    EXPECT_LT((blocks - 1) * 256, n) << n;
  }
  EXPECT_EQ(detail::blocks_exact(0, 256), 1u);  // never an empty grid
  EXPECT_LT(size_t(detail::blocks_for(300'000'000, 256)) * 256, size_t(300'000'000));  // capped
}

}  // namespace
}  // namespace atl::kernels::cuda
