// `atoll demo` end to end, small: embedded coordinator, dev CA, real node processes over mTLS,
// the summary JSON with the data-parallel baseline.
#include <boost/json.hpp>
#include <cmath>

#include "tests/integration/cli_test_util.h"

namespace atl::testing {
namespace {

TEST(Demo, SmallRunWritesASummaryAndBeatsTheInitialModel) {
  TempDir dir;
  const std::string summary = dir / "summary.json";
  auto r = run_atoll({"demo",
                      "--nodes",
                      "3",
                      "--rounds",
                      "3",
                      "--inner-steps",
                      "6",
                      "--dim",
                      "32",
                      "--layers",
                      "2",
                      "--heads",
                      "2",
                      "--ffn",
                      "64",
                      "--seq",
                      "32",
                      "--batch",
                      "4",
                      "--lr",
                      "1e-2",
                      "--eval-tokens",
                      "4096",
                      "--store",
                      dir / "run",
                      "--baseline",
                      "--summary-json",
                      summary},
                     dir / "demo.log", std::chrono::seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Progress per round and a summary a person can read.
  EXPECT_NE(r.output.find("round   3/3 | val bpb"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("summary: 3 nodes, 3 rounds x 6 inner steps, TLS 1.3 mTLS"),
            std::string::npos)
      << r.output;
  // Pulls and pushes took the coordinator's bulk lane: a node that could not reach it says so
  // in its log.
  EXPECT_NE(r.output.find(", bulk lane port "), std::string::npos) << r.output;
  for (const char* node : {"node-1.log", "node-2.log", "node-3.log"}) {
    const std::string log = read_text(dir / ("run/" + std::string(node)));
    EXPECT_NE(log.find("joined"), std::string::npos) << node << ":\n" << log;
    EXPECT_EQ(log.find("stay on gRPC"), std::string::npos) << node << ":\n" << log;
  }
  boost::system::error_code ec;
  auto v = boost::json::parse(read_text(summary), ec);
  ASSERT_FALSE(ec) << read_text(summary);
  const auto& o = v.as_object();
  for (const char* key :
       {"initial_val_bpb", "final_val_bpb", "baseline_val_bpb", "bytes_sent",
        "ddp_bytes_equivalent", "tls", "nodes", "rounds", "inner_steps", "wall_s"})
    EXPECT_TRUE(o.contains(key)) << key;
  const double initial = o.at("initial_val_bpb").to_number<double>();
  const double final_bpb = o.at("final_val_bpb").to_number<double>();
  const double baseline = o.at("baseline_val_bpb").to_number<double>();
  EXPECT_LT(final_bpb, initial - 1.0);
  EXPECT_LT(baseline, initial - 1.0);
  EXPECT_TRUE(o.at("tls").as_bool());
  EXPECT_EQ(o.at("nodes").to_number<int>(), 3);
  EXPECT_EQ(o.at("rounds").to_number<int>(), 3);
  // Each round every node pulls θ (the full θ once, then int3:256+zstd updates) and pushes Δ
  // (int3:256+zstd), plus framing; data-parallel would all-reduce gradients on each of the 18
  // inner steps.
  const double sent = o.at("bytes_sent").to_number<double>();
  const double ddp = o.at("ddp_bytes_equivalent").to_number<double>();
  EXPECT_GT(sent, 0);
  EXPECT_GT(ddp / sent, 3.0);
  // Pulls of θ plus pushes of Δ, reported apart too.
  EXPECT_EQ(o.at("bytes_up").to_number<double>() + o.at("bytes_down").to_number<double>(), sent);
  EXPECT_TRUE(o.at("error_feedback").as_bool());
}

// Streaming DiLoCo from the demo: P = 4 fragments, tau = 1; the summary reports the peak bytes
// per sync beside plain DiLoCo's, about a quarter of it.
TEST(Demo, StreamingReportsPeakBytesPerSync) {
  TempDir dir;
  const std::string summary = dir / "summary.json";
  auto r = run_atoll(
      {"demo", "--nodes",   "2", "--rounds", "2",         "--inner-steps",  "8",    "--dim",
       "32",   "--layers",  "2", "--heads",  "2",         "--ffn",          "64",   "--seq",
       "32",   "--batch",   "4", "--lr",     "1e-2",      "--eval-tokens",  "4096", "--fragments",
       "4",    "--overlap", "1", "--store",  dir / "run", "--summary-json", summary},
      dir / "demo.log", std::chrono::seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("round   2/2 | val bpb"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("streaming        4 fragments, overlap 1 steps"), std::string::npos)
      << r.output;
  boost::system::error_code ec;
  auto v = boost::json::parse(read_text(summary), ec);
  ASSERT_FALSE(ec) << read_text(summary);
  const auto& o = v.as_object();
  EXPECT_EQ(o.at("fragments").to_number<int>(), 4);
  EXPECT_EQ(o.at("syncs").to_number<int>(), 8);
  EXPECT_EQ(o.at("rounds").to_number<int>(), 2);
  const double peak = o.at("peak_bytes_per_sync").to_number<double>();
  const double plain = o.at("plain_peak_bytes_per_sync").to_number<double>();
  EXPECT_GT(peak, 0.15 * plain) << read_text(summary);
  EXPECT_LT(peak, 0.4 * plain) << read_text(summary);
  // The same bytes per outer round as plain DiLoCo, spread over P syncs; streaming also pulls
  // the result of every sync but the very last, (1 − 1/P)·θ more per node: ~1.19x here.
  EXPECT_LT(o.at("bytes_sent").to_number<double>(),
            1.3 * o.at("plain_bytes_sent").to_number<double>());
  EXPECT_LT(o.at("final_val_bpb").to_number<double>(),
            o.at("initial_val_bpb").to_number<double>() - 0.5);
}

// A warm start: `atoll train` writes a checkpoint, the demo starts DiLoCo and its data-parallel
// baseline from it. Two inner steps cannot undo 60 steps of training, so both end near the
// checkpoint's bpb, far below a random init's ~8 bits per byte. A checkpoint of another model
// shape is refused with one line naming the field.
TEST(Demo, WarmStartsFromATrainCheckpoint) {
  TempDir dir;
  const std::vector<std::string> model = {"--dim", "32", "--layers", "2",  "--heads", "2",
                                          "--ffn", "64", "--seq",    "32", "--batch", "4"};
  std::vector<std::string> train = {"train",     "--steps", "60",           "--lr", "1e-2",
                                    "--threads", "1",       "--eval-every", "0",    "--eval-tokens",
                                    "4096",      "--out",   dir / "base"};
  train.insert(train.end(), model.begin(), model.end());
  auto t = run_atoll(train, dir / "train.log", std::chrono::seconds(120));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const std::string ckpt = dir / "base/checkpoint.safetensors";

  const std::string summary = dir / "summary.json";
  std::vector<std::string> demo = {
      "demo",          "--nodes",     "2",         "--rounds",       "1",
      "--inner-steps", "2",           "--lr",      "1e-3",           "--eval-tokens",
      "4096",          "--store",     dir / "run", "--baseline",     "--http",
      "off",           "--init-from", ckpt,        "--summary-json", summary};
  demo.insert(demo.end(), model.begin(), model.end());
  auto r = run_atoll(demo, dir / "demo.log", std::chrono::seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  boost::system::error_code ec;
  auto v = boost::json::parse(read_text(summary), ec);
  ASSERT_FALSE(ec) << read_text(summary);
  const auto& o = v.as_object();
  EXPECT_TRUE(o.at("warm_start").as_bool());
  const double initial = o.at("initial_val_bpb").to_number<double>();
  EXPECT_LT(initial, 6.0) << r.output;  // a random init of this model: ~8
  EXPECT_LT(std::abs(o.at("final_val_bpb").to_number<double>() - initial), 0.3) << r.output;
  EXPECT_LT(std::abs(o.at("baseline_val_bpb").to_number<double>() - initial), 0.3) << r.output;

  auto bad = run_atoll({"demo", "--dim", "64", "--init-from", ckpt, "--store", dir / "bad"},
                       dir / "bad.log");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("the checkpoint's model has dim = 32, the experiment's has 64"),
            std::string::npos)
      << bad.output;
  auto missing = run_atoll({"demo", "--init-from", dir / "nope.safetensors"}, dir / "m.log");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("--init-from " + dir / "nope.safetensors"), std::string::npos)
      << missing.output;
}

TEST(Demo, BadFlagsFailFast) {
  TempDir dir;
  auto r = run_atoll({"demo", "--nodes", "0"}, dir / "a.log");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--nodes 0 is out of range"), std::string::npos) << r.output;
  auto c = run_atoll({"demo", "--codec", "zip"}, dir / "b.log");
  EXPECT_NE(c.exit_code, 0);
  EXPECT_NE(c.output.find("zip"), std::string::npos) << c.output;
  auto f = run_atoll({"demo", "--fragments", "3", "--inner-steps", "25"}, dir / "c.log");
  EXPECT_EQ(f.exit_code, 2);
  EXPECT_NE(
      f.output.find("diloco.inner_steps = 25 must be a multiple of diloco.streaming_fragments = 3"),
      std::string::npos)
      << f.output;
  auto g = run_atoll({"demo", "--error-feedback", "maybe"}, dir / "d.log");
  EXPECT_EQ(g.exit_code, 2);
  EXPECT_NE(g.output.find("--error-feedback must be on or off"), std::string::npos) << g.output;
  auto h = run_atoll({"demo", "--split", "random"}, dir / "e.log");
  EXPECT_EQ(h.exit_code, 2);
  EXPECT_NE(h.output.find("--split must be genre or iid"), std::string::npos) << h.output;
  auto l = run_atoll({"demo", "--bulk-lane", "maybe"}, dir / "f.log");
  EXPECT_EQ(l.exit_code, 2);
  EXPECT_NE(l.output.find("--bulk-lane must be on or off, not maybe"), std::string::npos)
      << l.output;
}

}  // namespace
}  // namespace atl::testing
