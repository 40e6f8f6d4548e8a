// `atoll bench train|sgemm|distill-loss|moe --json` on the real binary at tiny sizes: one JSON
// document per run whose figures agree with each other and with what was asked (the timing
// loops live in measure/, the commands only parse flags and print), and bad flags give one line
// with exit code 2.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "integration/cli_test_util.h"
#include "integration/json_test_util.h"

namespace atl::testing {
namespace {

// Each line of `out` parsed as one JSON object (the run's whole output must be JSON lines).
std::vector<boost::json::object> json_lines(const std::string& out) {
  std::vector<boost::json::object> objs;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(line, ec);
    if (ec || !v.is_object()) {
      ADD_FAILURE() << "not a JSON object: " << line;
      continue;
    }
    objs.push_back(v.as_object());
  }
  return objs;
}

TEST(BenchCli, TrainReportsTheModelsParametersAndConsistentRates) {
  TempDir dir;
  const RunResult r = run_atoll({"bench", "train", "--dim", "32", "--layers", "1", "--heads", "2",
                                 "--ffn", "64", "--seq", "16", "--batch", "2", "--steps", "3",
                                 "--sgemm-n", "64", "--threads", "1", "--json"},
                                dir / "log.txt", std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto objs = json_lines(r.output);
  ASSERT_EQ(objs.size(), 1u) << r.output;
  const auto& o = objs[0];
  algorithms::ModelConfig cfg;
  cfg.dim = 32;
  cfg.layers = 1;
  cfg.heads = 2;
  cfg.ffn_hidden = 64;
  cfg.seq_len = 16;
  EXPECT_EQ(number(o, "params"), static_cast<double>(algorithms::make_layout(cfg).numel()));
  EXPECT_EQ(number(o, "threads"), 1.0);
  EXPECT_EQ(number(o, "steps"), 3.0);
  const double step_ms = number(o, "step_ms"), tps = number(o, "tokens_per_s");
  ASSERT_GT(step_ms, 0.0);
  // batch · seq per median step; the tolerances are the printed digits (step_ms %.3f, rates
  // %.2f, the fraction %.3f).
  EXPECT_NEAR(tps, 2 * 16 / (step_ms / 1e3), tps * 0.0006 / step_ms + 0.1);
  const double gflops = number(o, "gflops"), sgemm = number(o, "sgemm_gflops");
  ASSERT_GT(gflops, 0.0);
  ASSERT_GT(sgemm, 0.0);
  EXPECT_NEAR(number(o, "fraction_of_sgemm"), gflops / sgemm,
              gflops / sgemm * (0.006 / gflops + 0.006 / sgemm) + 0.0006);

  const RunResult bad = run_atoll({"bench", "train", "--steps", "0"}, dir / "bad.txt");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("steps"), std::string::npos) << bad.output;
}

TEST(BenchCli, SgemmReportsAPositiveRate) {
  TempDir dir;
  const RunResult r =
      run_atoll({"bench", "sgemm", "--n", "64", "--threads", "1", "--json"}, dir / "log.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto objs = json_lines(r.output);
  ASSERT_EQ(objs.size(), 1u) << r.output;
  EXPECT_EQ(number(objs[0], "n"), 64.0);
  EXPECT_GT(number(objs[0], "gflops"), 0.0);
}

// Every variant computes the same loss (the fused tilings, the unfused loss and the plain
// reference in double), in increasing order of the memory it needs.
TEST(BenchCli, DistillLossVariantsAgreeAndComeInOrderOfMemory) {
  TempDir dir;
  const RunResult r = run_atoll({"bench", "distill-loss", "--n", "64", "--dim", "16",
                                 "--teacher-dim", "16", "--vocab", "512", "--tiles", "16x4,64x1",
                                 "--topk", "8", "--reference", "--reps", "1", "--threads", "1",
                                 "--json"},
                                dir / "log.txt", std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto objs = json_lines(r.output);
  ASSERT_EQ(objs.size(), 1u) << r.output;
  const auto& variants = objs[0].at("variants").as_array();
  ASSERT_EQ(variants.size(), 5u) << r.output;  // 2 fused tilings, top-k, unfused, reference
  double prev_bytes = -1, reference_loss = std::nan("");
  std::vector<double> exact_losses;
  for (const auto& v : variants) {
    const auto& o = v.as_object();
    const double bytes = number(o, "extra_bytes");
    EXPECT_GE(bytes, prev_bytes) << boost::json::serialize(o);
    prev_bytes = bytes;
    const std::string name(o.at("variant").as_string());
    if (name == "reference") reference_loss = number(o, "loss");
    if (name != "fused_topk") exact_losses.push_back(number(o, "loss"));
  }
  ASSERT_FALSE(std::isnan(reference_loss)) << r.output;
  ASSERT_EQ(exact_losses.size(), 4u);
  for (double l : exact_losses) EXPECT_NEAR(l, reference_loss, 1e-4 * std::fabs(reference_loss));

  const RunResult bad = run_atoll(
      {"bench", "distill-loss", "--vocab", "512", "--topk", "1000"}, dir / "bad.txt");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--topk must be at most --vocab"), std::string::npos) << bad.output;
}

TEST(BenchCli, MoeReportsEachShapeAgainstItsDenseTwin) {
  TempDir dir;
  const RunResult r =
      run_atoll({"bench", "moe", "--tokens", "64", "--dim", "16", "--configs", "4:2:8,8:1:16",
                 "--seconds", "0", "--threads", "1", "--json"},
                dir / "log.txt", std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto objs = json_lines(r.output);
  ASSERT_EQ(objs.size(), 2u) << r.output;
  const int expect[2][3] = {{4, 2, 8}, {8, 1, 16}};
  for (int i = 0; i < 2; ++i) {
    const auto& o = objs[static_cast<size_t>(i)];
    const int E = expect[i][0], K = expect[i][1], Fe = expect[i][2];
    EXPECT_EQ(number(o, "experts"), E);
    EXPECT_EQ(number(o, "top_k"), K);
    EXPECT_EQ(number(o, "dense_hidden"), K * Fe);
    EXPECT_GE(number(o, "reps"), 3.0);
    // Every token goes to K experts: the largest group holds at least the mean and at most all.
    EXPECT_GE(number(o, "largest_group"), std::ceil(64.0 * K / E));
    EXPECT_LE(number(o, "largest_group"), 64.0);
    const double moe = number(o, "moe_fwd_ms") + number(o, "moe_bwd_ms");
    const double dense = number(o, "dense_fwd_ms") + number(o, "dense_bwd_ms");
    ASSERT_GT(dense, 0.0);
    ASSERT_GT(moe, 0.0);
    // Tolerance: the printed digits (times %.3f, the ratio %.3f).
    EXPECT_NEAR(number(o, "moe_over_dense"), moe / dense,
                moe / dense * (0.0011 / moe + 0.0011 / dense) + 0.0006);
  }

  const RunResult bad =
      run_atoll({"bench", "moe", "--configs", "4:5:8"}, dir / "bad.txt");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("E:K:Fe"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace atl::testing
