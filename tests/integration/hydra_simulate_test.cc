// `atoll simulate --algorithm hydra` against `atoll demo --algorithm hydra`: the same flags and
// seed must commit the same θ in every round, bit for bit, whether the four sites (budgets 1.0,
// 0.5, 0.25, 0.25) are node processes over mTLS gRPC or threads of one process exchanging the
// same messages in memory.
#include <string>
#include <vector>

#include "tests/integration/committed_rounds.h"
#include "tests/integration/cli_test_util.h"

namespace atl::testing {
namespace {

constexpr uint64_t kRounds = 3;

// A small, fast Hydra experiment: a short base model, two layers of two FFN blocks.
std::vector<std::string> small_hydra(const std::string& command, const std::string& run_dir) {
  std::vector<std::string> args = {command, "--algorithm", "hydra", "--rounds",
                                   std::to_string(kRounds)};
  for (const char* flag_value :
       {"--inner-steps=3", "--base-steps=20", "--dim=32", "--layers=2", "--heads=2", "--ffn=64",
        "--ffn-blocks=2", "--seq=32", "--batch=2", "--eval-tokens=512", "--seed=77", "--http=off"})
    args.push_back(flag_value);
  args.push_back("--store=" + run_dir);
  return args;
}

TEST(HydraSimulate, CommitsTheSameThetaAsNodeProcesses) {
  TempDir dir;
  auto demo =
      run_atoll(small_hydra("demo", dir / "demo"), dir / "demo.log", std::chrono::seconds(240));
  ASSERT_EQ(demo.exit_code, 0) << demo.output;
  auto sim =
      run_atoll(small_hydra("simulate", dir / "sim"), dir / "sim.log", std::chrono::seconds(240));
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  EXPECT_NE(demo.output.find("TLS 1.3 mTLS"), std::string::npos) << demo.output;
  EXPECT_NE(sim.output.find("coordinator in-process"), std::string::npos) << sim.output;
  for (const auto* out : {&demo.output, &sim.output}) {
    EXPECT_NE(out->find("finished after 3 rounds"), std::string::npos) << *out;
    EXPECT_NE(out->find("site-j: brown:j, budget 0.25"), std::string::npos) << *out;
  }

  expect_same_committed_theta(dir / "demo/store", dir / "sim/store", "hydra-demo", kRounds,
                              demo.output, sim.output);
}

TEST(HydraSimulate, RefusesInsecure) {
  TempDir dir;
  auto r = run_atoll({"simulate", "--algorithm", "hydra", "--insecure"}, dir / "a.log",
                     std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--insecure has no meaning here"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace atl::testing
