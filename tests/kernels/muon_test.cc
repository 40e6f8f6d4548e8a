// Muon (kernels/cpu/ops.h): the Newton-Schulz iteration against a double-precision loop, the
// same bits for any thread count, and a few steps against PyTorch running Keller Jordan's
// muon.py (tests/kernels/muon_reference.py; skips when torch is missing).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/ops.h"
#include "tests/tools/torch_reference.h"

namespace atl::kernels::cpu::testing {
namespace {

namespace fs = std::filesystem;

// x (rows, cols) -> the iteration in double, plain loops, the orientation handled by transposing.
std::vector<double> newton_schulz_double(const std::vector<float>& x, int rows, int cols,
                                         int steps) {
  const bool tr = rows > cols;
  const int R = tr ? cols : rows, C = tr ? rows : cols;
  std::vector<double> X(size_t(R) * C);
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double inv = 1.0 / (std::sqrt(ss) + 1e-7);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      (tr ? X[size_t(j) * rows + i] : X[size_t(i) * cols + j]) = x[size_t(i) * cols + j] * inv;
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  for (int s = 0; s < steps; ++s) {
    std::vector<double> A(size_t(R) * R, 0.0), B(size_t(R) * R, 0.0), Y(size_t(R) * C, 0.0);
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < R; ++j)
        for (int k = 0; k < C; ++k) A[size_t(i) * R + j] += X[size_t(i) * C + k] * X[size_t(j) * C + k];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < R; ++j) {
        double aa = 0;
        for (int k = 0; k < R; ++k) aa += A[size_t(i) * R + k] * A[size_t(k) * R + j];
        B[size_t(i) * R + j] = b * A[size_t(i) * R + j] + c * aa;
      }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < C; ++j) {
        double bx = 0;
        for (int k = 0; k < R; ++k) bx += B[size_t(i) * R + k] * X[size_t(k) * C + j];
        Y[size_t(i) * C + j] = a * X[size_t(i) * C + j] + bx;
      }
    X = Y;
  }
  std::vector<double> out(x.size());
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      out[size_t(i) * cols + j] = tr ? X[size_t(j) * rows + i] : X[size_t(i) * cols + j];
  return out;
}

TEST(Muon, NewtonSchulzMatchesDoubleAndOrthogonalizes) {
  for (auto [rows, cols] : {std::pair{24, 72}, std::pair{72, 24}, std::pair{40, 40}}) {
    const auto x = random_vec<float>(size_t(rows) * cols, 7 + rows, -1.0, 1.0);
    std::vector<float> o = x, scratch;
    newton_schulz_orthogonalize(o.data(), rows, cols, 5, scratch);
    const auto ref = newton_schulz_double(x, rows, cols, 5);
    EXPECT_LT(atl::testing::rel_err(o.data(), ref.data(), o.size()), 1e-5) << rows << "x" << cols;
    // Orthogonal in the small orientation: the Gram matrix of the R <= C lines is near the
    // identity (singular values in the quintic's band around 1; a random matrix's are spread
    // over more than a factor of 10 here).
    const bool tr = rows > cols;
    const int R = tr ? cols : rows, C = tr ? rows : cols;
    auto at = [&](int i, int k) { return double(tr ? o[size_t(k) * cols + i] : o[size_t(i) * cols + k]); };
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < R; ++j) {
        double g = 0;
        for (int k = 0; k < C; ++k) g += at(i, k) * at(j, k);
        if (i == j) {
          EXPECT_GT(g, 0.4) << rows << "x" << cols << " line " << i;
          EXPECT_LT(g, 1.6) << rows << "x" << cols << " line " << i;
        } else {
          EXPECT_LT(std::fabs(g), 0.35) << rows << "x" << cols << " lines " << i << ", " << j;
        }
      }
  }
}

TEST(Muon, SameBitsForAnyThreadCount) {
  // Large enough that the fixed-tile GEMMs split (> 2^18 multiply-adds per product).
  const int rows = 256, cols = 768;
  const auto g = random_vec<float>(size_t(rows) * cols, 31, -1.0, 1.0);
  const auto p0 = random_vec<float>(size_t(rows) * cols, 32, -1.0, 1.0);
  MuonParams hp;
  hp.lr = 0.01;
  hp.weight_decay = 0.1;
  std::vector<float> first;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::vector<float> p = p0, m(p.size(), 0.0f);
    MuonScratch scratch;
    muon_update(p.data(), g.data(), m.data(), rows, cols, hp, scratch);
    muon_update(p.data(), g.data(), m.data(), rows, cols, hp, scratch);
    if (first.empty()) {
      first = p;
    } else {
      EXPECT_EQ(std::memcmp(first.data(), p.data(), 4 * p.size()), 0) << threads << " threads";
    }
  }
  set_num_threads(1);
}

TEST(Muon, MatchesPyTorchReference) {
  for (auto [rows, cols] : {std::pair{48, 80}, std::pair{80, 48}}) {
    const int steps = 4, ns_steps = 5;
    MuonParams hp;
    hp.lr = 0.02;
    hp.momentum = 0.95;
    hp.weight_decay = 0.1;
    hp.ns_steps = ns_steps;
    const size_t n = size_t(rows) * cols;
    const auto p0 = random_vec<float>(n, 90 + rows, -1.0, 1.0);
    std::vector<float> grads(n * steps);
    std::mt19937_64 rng(91);
    std::normal_distribution<double> normal;
    for (auto& v : grads) v = float(normal(rng) * 1e-2);

    const fs::path dir = fs::temp_directory_path() / ("atoll_muon_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path in = dir / "in.bin", out = dir / "out.bin";
    {
      std::ofstream f(in, std::ios::binary);
      const int32_t ints[4] = {rows, cols, steps, ns_steps};
      const double hps[3] = {hp.lr, hp.momentum, hp.weight_decay};
      f.write(reinterpret_cast<const char*>(ints), sizeof(ints));
      f.write(reinterpret_cast<const char*>(hps), sizeof(hps));
      f.write(reinterpret_cast<const char*>(p0.data()), std::streamsize(4 * n));
      f.write(reinterpret_cast<const char*>(grads.data()), std::streamsize(4 * n * steps));
    }
    const std::string script = std::string(ATOLL_SOURCE_DIR) + "/tests/kernels/muon_reference.py";
    const int code = atl::testing::run_python_reference(script, {in.string(), out.string()});
    if (code == 77) {
      fs::remove_all(dir);
      GTEST_SKIP() << "python3-torch is not installed; Muon not compared with PyTorch";
    }
    ASSERT_EQ(code, 0) << "reference script failed: " << script;
    std::vector<float> ref(2 * n);
    {
      std::ifstream f(out, std::ios::binary);
      f.read(reinterpret_cast<char*>(ref.data()), std::streamsize(4 * 2 * n));
      ASSERT_EQ(f.gcount(), std::streamsize(4 * 2 * n));
    }
    fs::remove_all(dir);

    std::vector<float> p = p0, m(n, 0.0f);
    MuonScratch scratch;
    for (int s = 0; s < steps; ++s)
      muon_update(p.data(), grads.data() + n * s, m.data(), rows, cols, hp, scratch);
    // The momentum is elementwise (lerp as torch forms it): the same bits. θ went through four
    // Newton-Schulz iterations of fp32 GEMMs summed in another order: the change θ - θ0 is
    // compared, relative to its own size (measured 4.5e-6 and 5.0e-6).
    EXPECT_EQ(std::memcmp(m.data(), ref.data() + n, 4 * n), 0) << rows << "x" << cols;
    std::vector<double> dp(n), dref(n);
    for (size_t i = 0; i < n; ++i) {
      dp[i] = double(p[i]) - p0[i];
      dref[i] = double(ref[i]) - p0[i];
    }
    EXPECT_LT(atl::testing::rel_err(dp.data(), dref.data(), n), 3e-5) << rows << "x" << cols;
  }
}

}  // namespace
}  // namespace atl::kernels::cpu::testing
