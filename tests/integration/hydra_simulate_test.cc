// `atoll simulate --algorithm hydra` against `atoll demo --algorithm hydra`: the same flags and
// seed must commit the same θ in every round, bit for bit, whether the four sites (budgets 1.0,
// 0.5, 0.25, 0.25) are node processes over mTLS gRPC or threads of one process exchanging the
// same messages in memory. And every site keeps the same θ (node/kept_theta.h: by default the
// best of the global θ of every round and its own θ_local, on its held-out documents) either way.
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "tests/integration/cli_test_util.h"
#include "tests/integration/committed_rounds.h"
#include "tests/integration/imported_qwen2.h"

namespace atl::testing {
namespace {

constexpr uint64_t kRounds = 3;

// Each site's "kept ..." line (what it kept, its bpb and the SHA-256 of the kept θ), by site log
// file (run_dir/<site>.log, the same names for node processes and virtual sites).
std::map<std::string, std::string> kept_lines(const std::string& run_dir) {
  std::map<std::string, std::string> kept;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir)) {
    if (entry.path().extension() != ".log") continue;
    const std::string text = read_text(entry.path().string());
    const size_t at = text.find("kept global θ");
    const size_t own = text.find("kept own θ_local");
    const size_t start = std::min(at, own);
    if (start == std::string::npos) continue;
    kept[entry.path().filename().string()] = text.substr(start, text.find('\n', start) - start);
  }
  return kept;
}

// A small, fast Hydra experiment: a short base model, two layers of two FFN blocks; `extra`
// flags are appended. FFN 128: the budget-0.25 sites must afford the cheapest subnetwork that
// trains anything (0.19 of the full model here; 0.26 with FFN 64, and the join is refused).
std::vector<std::string> small_hydra(const std::string& command, const std::string& run_dir,
                                     const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {command, "--algorithm", "hydra", "--rounds",
                                   std::to_string(kRounds)};
  for (const char* flag_value :
       {"--inner-steps=3", "--base-steps=20", "--dim=32", "--layers=2", "--heads=2", "--ffn=128",
        "--ffn-blocks=2", "--seq=32", "--batch=2", "--eval-tokens=512", "--seed=77", "--http=off"})
    args.push_back(flag_value);
  args.push_back("--store=" + run_dir);
  args.insert(args.end(), extra.begin(), extra.end());
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
  const auto demo_kept = kept_lines(dir / "demo"), sim_kept = kept_lines(dir / "sim");
  EXPECT_EQ(demo_kept.size(), 4u) << demo.output;
  EXPECT_EQ(demo_kept, sim_kept);
}

// hydra.forward_share_power = 0 (each site's update weighs its tokens alone; the demos' default
// is 2, tokens × φ², φ its share of the model's forward FLOPs): node processes over mTLS and
// virtual sites still commit the same θ in every round, and it is not the θ of the default
// weighting, so p reached the coordinator's aggregation.
TEST(HydraSimulate, ForwardSharePowerCommitsTheSameThetaAsNodeProcesses) {
  TempDir dir;
  const std::vector<std::string> p0 = {"--forward-share-power=0"};
  auto demo =
      run_atoll(small_hydra("demo", dir / "demo", p0), dir / "demo.log", std::chrono::seconds(240));
  ASSERT_EQ(demo.exit_code, 0) << demo.output;
  auto sim = run_atoll(small_hydra("simulate", dir / "sim", p0), dir / "sim.log",
                       std::chrono::seconds(240));
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  const auto p0_rounds = expect_same_committed_theta(
      dir / "demo/store", dir / "sim/store", "hydra-demo", kRounds, demo.output, sim.output);
  EXPECT_EQ(kept_lines(dir / "demo"), kept_lines(dir / "sim"));

  auto plain = run_atoll(small_hydra("simulate", dir / "plain"), dir / "plain.log",
                         std::chrono::seconds(240));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const auto plain_rounds = committed_fingerprints(dir / "plain/store", "hydra-demo", kRounds);
  ASSERT_EQ(plain_rounds.size(), kRounds);
  ASSERT_EQ(p0_rounds.size(), kRounds);
  EXPECT_NE(plain_rounds.front(), p0_rounds.front())
      << "p = 0 and the default p = 2 committed the same θ in round 0: every site's forward "
         "share was 1?";

  auto bad = run_atoll(small_hydra("simulate", dir / "bad", {"--forward-share-power=9"}),
                       dir / "bad.log", std::chrono::seconds(30));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--forward-share-power 9 is out of range [0"), std::string::npos)
      << bad.output;
}

// Hydra over the user's own model (`--base`): an imported grouped-query Qwen2 checkpoint (2 KV
// heads for 4 query heads, biases, untied head, its own BPE tokenizer) is θ_0; the head unit of
// a subnetwork is a KV group, so each layer's head mask has 2 entries, not 4. Node processes
// over mTLS and in-process sites commit the same θ, and keep the same θ, in every round.
TEST(HydraSimulate, AnImportedGroupedQueryModelIsFineTunedAsItsOwnBase) {
  TempDir dir;
  HfSpec spec;
  // FFN 128: the budget-0.25 sites must afford the cheapest subnetwork that trains anything
  // (0.19 of the full model; 0.26 with FFN 64, and their joins are refused).
  ASSERT_NO_FATAL_FAILURE(import_small_qwen2(dir, spec, 128));
  auto with_base = [&](const std::string& command) {
    std::vector<std::string> args = {
        command,  "--algorithm",           "hydra", "--rounds", std::to_string(kRounds),
        "--base", dir / "base.safetensors"};
    for (const char* flag_value : {"--inner-steps=3", "--ffn-blocks=2", "--seq=32", "--batch=2",
                                   "--eval-tokens=512", "--seed=77", "--http=off"})
      args.push_back(flag_value);
    args.push_back("--store=" + (dir / command));
    return args;
  };
  auto demo = run_atoll(with_base("demo"), dir / "demo.log", std::chrono::seconds(240));
  ASSERT_EQ(demo.exit_code, 0) << demo.output;
  auto sim = run_atoll(with_base("simulate"), dir / "sim.log", std::chrono::seconds(240));
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  for (const auto* out : {&demo.output, &sim.output}) {
    EXPECT_NE(out->find("base model " + (dir / "base.safetensors")), std::string::npos) << *out;
    EXPECT_EQ(out->find("base step"), std::string::npos) << *out;  // nothing trained first
    EXPECT_NE(out->find("finished after 3 rounds"), std::string::npos) << *out;
    // site-j (budget 0.25): per layer T|F, then one entry per KV group, then the FFN blocks.
    EXPECT_TRUE(std::regex_search(
        *out, std::regex("site-j budget 0\\.25 \\| FLOPs [0-9.]+ \\| bpb [0-9.]+ \\(base "
                         "[0-9.]+\\) \\| [TF]:[01]{2}:[01]{2}\\|[TF]:[01]{2}:[01]{2}\n")))
        << *out;
  }
  expect_same_committed_theta(dir / "demo/store", dir / "simulate/store", "hydra-demo", kRounds,
                              demo.output, sim.output);
  const auto demo_kept = kept_lines(dir / "demo"), sim_kept = kept_lines(dir / "simulate");
  EXPECT_EQ(demo_kept.size(), 4u) << demo.output;
  EXPECT_EQ(demo_kept, sim_kept);
  // The full-budget site reads its genre better after the rounds than the imported model did.
  const std::regex site_a(
      "site-a budget 1\\.00 \\| FLOPs [0-9.]+ \\| bpb ([0-9.]+) \\(base ([0-9.]+)\\)");
  double last_bpb = 0, base_bpb = 0;
  for (auto it = std::sregex_iterator(sim.output.begin(), sim.output.end(), site_a);
       it != std::sregex_iterator(); ++it)
    last_bpb = std::stod((*it)[1].str()), base_bpb = std::stod((*it)[2].str());
  EXPECT_GT(base_bpb, 0) << sim.output;
  EXPECT_LT(last_bpb, base_bpb) << sim.output;

  auto model_flag = run_atoll(
      {"simulate", "--algorithm", "hydra", "--base", dir / "base.safetensors", "--dim", "64"},
      dir / "dim.log", std::chrono::seconds(30));
  EXPECT_EQ(model_flag.exit_code, 2);
  EXPECT_NE(model_flag.output.find("--dim does not apply with --base: the model is the "
                                   "checkpoint's (drop --dim)"),
            std::string::npos)
      << model_flag.output;
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
