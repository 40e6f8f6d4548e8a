// AdamW against PyTorch itself (python3-torch): 10 steps with weight decay on gradients spanning
// six orders of magnitude must give the same bits for p, m and v. Skips when torch is missing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
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

TEST(AdamWTorch, BitwiseEqualToTorchOptimAdamW) {
  const size_t n = 20011;
  const int steps = 10;
  AdamWParams hp;
  hp.lr = 1e-3;
  hp.beta1 = 0.9;
  hp.beta2 = 0.95;
  hp.eps = 1e-8;
  hp.weight_decay = 0.1;
  auto p0 = random_vec<float>(n, 90, -2.0, 2.0);
  std::vector<float> grads(n * steps);
  std::mt19937_64 rng(91);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> expo(-6, 0);
  for (auto& g : grads) g = float(normal(rng) * std::pow(10.0, expo(rng)));

  const fs::path dir = fs::temp_directory_path() / ("atoll_adamw_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path in = dir / "in.bin", out = dir / "out.bin";
  {
    std::ofstream f(in, std::ios::binary);
    const uint64_t n64 = n;
    const int32_t s32 = steps;
    const double hps[5] = {hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay};
    f.write(reinterpret_cast<const char*>(&n64), 8);
    f.write(reinterpret_cast<const char*>(&s32), 4);
    f.write(reinterpret_cast<const char*>(hps), sizeof(hps));
    f.write(reinterpret_cast<const char*>(p0.data()), std::streamsize(4 * n));
    f.write(reinterpret_cast<const char*>(grads.data()), std::streamsize(4 * n * steps));
  }
  const std::string script = std::string(ATOLL_SOURCE_DIR) + "/tests/kernels/adamw_reference.py";
  const std::string cmd = std::string(ATOLL_PYTHON) + " " + script + " " + in.string() + " " +
                          out.string();  // what run_python_reference runs, for the message
  const int code = atl::testing::run_python_reference(script, {in.string(), out.string()});
  if (code == 77) {
    fs::remove_all(dir);
    GTEST_SKIP() << "python3-torch is not installed; AdamW not compared with PyTorch";
  }
  ASSERT_EQ(code, 0) << "reference script failed: " << cmd;
  std::vector<float> ref(3 * n);
  {
    std::ifstream f(out, std::ios::binary);
    f.read(reinterpret_cast<char*>(ref.data()), std::streamsize(4 * 3 * n));
    ASSERT_EQ(f.gcount(), std::streamsize(4 * 3 * n));
  }
  fs::remove_all(dir);

  std::vector<float> p = p0, m(n, 0.f), v(n, 0.f);
  for (int s = 1; s <= steps; ++s) {
    adamw_update(p.data(), grads.data() + n * (s - 1), m.data(), v.data(), n, hp, s);
  }
  const std::vector<float>* ours[3] = {&p, &m, &v};
  const char* names[3] = {"p", "m", "v"};
  for (int k = 0; k < 3; ++k) {
    size_t differ = 0;
    for (size_t i = 0; i < n; ++i) differ += (*ours[k])[i] != ref[k * n + i];
    EXPECT_EQ(differ, 0u) << names[k] << ": " << differ << " of " << n << " differ from PyTorch";
  }
}

}  // namespace
}  // namespace atl::kernels::cpu::testing
