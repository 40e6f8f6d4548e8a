// OpenBLAS's kernels on a CPU it does not know (kernels/cpu/backend_info.h): the real atoll
// binary, started with and without the user's own OPENBLAS_CORETYPE.
#include <gtest/gtest.h>

#include <string>

#include "integration/cli_test_util.h"
#include "kernels/cpu/backend_info.h"

namespace atl {
namespace {

using kernels::cpu::feature_blas_kernels;

TEST(BlasKernels, ChosenByTheCpuFeaturesAsLaterOpenBlasReleasesDo) {
  const std::string avx512 = " avx avx2 fma avx512f avx512cd avx512bw avx512dq avx512vl ";
  EXPECT_EQ(feature_blas_kernels(avx512 + "avx512_bf16 amx_tile"), "Cooperlake");
  EXPECT_EQ(feature_blas_kernels(avx512), "SkylakeX");
  // AVX-512F alone (e.g. Knights Landing) is not enough for the SkylakeX kernels.
  EXPECT_EQ(feature_blas_kernels("avx avx2 fma avx512f avx512cd"), "Haswell");
  EXPECT_EQ(feature_blas_kernels("sse4_2 avx avx2"), "SandyBridge");  // AVX2 without FMA
  EXPECT_EQ(feature_blas_kernels("sse sse2 sse3 ssse3"), "");
  EXPECT_EQ(feature_blas_kernels("avx512_bf16"), "");  // a name inside another is no match
  EXPECT_EQ(feature_blas_kernels(""), "");
}

// The kernels line of `atoll --version` run through `env ARGS...`.
std::string kernels_line(const testing::TempDir& dir, const std::vector<std::string>& env_args) {
  static int runs = 0;
  std::vector<std::string> argv = {"/usr/bin/env"};
  argv.insert(argv.end(), env_args.begin(), env_args.end());
  argv.push_back(ATOLL_BINARY);
  argv.push_back("--version");
  const std::string log = dir / ("version-" + std::to_string(++runs) + ".log");  // one per run
  auto p = node::Subprocess::spawn(argv, log);
  EXPECT_TRUE(p.ok()) << p.status().message();
  if (!p.ok()) return "";
  const auto code = p->wait_for(std::chrono::seconds(60));
  EXPECT_TRUE(code && *code == 0);
  const std::string out = testing::read_text(log);
  const size_t at = out.find("OpenBLAS kernels ");
  EXPECT_NE(at, std::string::npos) << out;
  if (at == std::string::npos) return "";
  return out.substr(at + 17, out.find(';', at) - at - 17);
}

TEST(BlasKernels, AtollNeverRunsTheGenericKernelsOnACpuWithAvx) {
  if (feature_blas_kernels(kernels::cpu::cpuinfo_field("flags")).empty()) GTEST_SKIP() << "this CPU has no AVX";
  testing::TempDir dir;
  const std::string chosen = kernels_line(dir, {"-u", "OPENBLAS_CORETYPE"});
  EXPECT_NE(chosen, "");
  EXPECT_NE(chosen, "Prescott") << "OpenBLAS's generic kernels on a CPU with AVX";
}

TEST(BlasKernels, TheUsersOwnChoiceIsKept) {
  testing::TempDir dir;
  EXPECT_EQ(kernels_line(dir, {"OPENBLAS_CORETYPE=Prescott"}), "Prescott");
  EXPECT_EQ(kernels_line(dir, {"OPENBLAS_CORETYPE=Haswell"}), "Haswell");
}

}  // namespace
}  // namespace atl
