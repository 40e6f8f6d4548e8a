// `atoll simulate --algorithm distill` against `atoll demo --algorithm distill`: with the same
// flags and seed the students commit the same θ in every round, bit for bit, whether each site
// is an `atoll node --teacher ...` process over mTLS or a site worker thread of one process
// (the teacher served over mTLS by a process in the demo, from the simulating process in the
// simulation).
#include <boost/json.hpp>
#include <string>
#include <vector>

#include "tests/integration/committed_rounds.h"
#include "tests/integration/cli_test_util.h"

namespace atl::testing {
namespace {


std::vector<std::string> students(const std::string& command, const std::string& teacher,
                                  const std::string& run_dir) {
  return {command,
          "--algorithm",
          "distill",
          "--teacher-checkpoint",
          teacher,
          "--sites",
          "2",
          "--rounds",
          "3",
          "--inner-steps",
          "3",
          "--dim",
          "16",
          "--layers",
          "1",
          "--heads",
          "2",
          "--ffn",
          "32",
          "--seq",
          "32",
          "--batch",
          "4",
          "--alpha",
          "0.7",
          "--tau",
          "2",
          "--eval-tokens",
          "256",
          "--seed",
          "77",
          "--store",
          run_dir,
          "--summary-json",
          run_dir + ".json"};
}

boost::json::object summary(const std::string& path) {
  boost::system::error_code ec;
  auto v = boost::json::parse(read_text(path), ec);
  EXPECT_FALSE(ec) << read_text(path);
  return ec || !v.is_object() ? boost::json::object() : v.as_object();
}

TEST(DistillSimulate, StudentsCommitTheSameThetaAsNodeProcesses) {
  TempDir dir;
  const std::string teacher = train_tiny_teacher(dir);
  auto demo = run_atoll(students("demo", teacher, dir / "demo"), dir / "demo.log",
                        std::chrono::seconds(240));
  ASSERT_EQ(demo.exit_code, 0) << demo.output;
  auto sim = run_atoll(students("simulate", teacher, dir / "sim"), dir / "sim.log",
                       std::chrono::seconds(240));
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  EXPECT_NE(demo.output.find(", TLS 1.3 mTLS, run dir"), std::string::npos) << demo.output;
  EXPECT_NE(sim.output.find("in-process students, teacher over TLS 1.3 mTLS"), std::string::npos)
      << sim.output;

  const auto demo_rounds =
      expect_same_committed_theta(dir / "demo/store-distill", dir / "sim/store-distill",
                                  "demo-distill-distill", 3, demo.output, sim.output);
  ASSERT_EQ(demo_rounds.size(), 3u);

  // Both distilled: the in-process sites fetched their targets from the teacher too (bf16: 256
  // logits of 2 bytes per token, as each site reported with its rounds), and learned.
  for (const std::string run : {"demo", "sim"}) {
    const auto s = summary(dir / (run + ".json"));
    ASSERT_TRUE(s.contains("teacher_bytes_per_token")) << run;
    EXPECT_DOUBLE_EQ(s.at("teacher_bytes_per_token").to_number<double>(), 512.0) << run;
    EXPECT_LT(s.at("final_val_bpb").to_number<double>(),
              s.at("initial_val_bpb").to_number<double>())
        << run;
    EXPECT_EQ(s.at("final_fingerprint").as_string(), demo_rounds.back()) << run;
    // A given teacher is evaluated too (it was null), and its link is TLS in both modes.
    ASSERT_TRUE(s.at("teacher_val_bpb").is_number()) << run;
    EXPECT_GT(s.at("teacher_val_bpb").to_number<double>(), 0.0) << run;
    EXPECT_TRUE(s.at("teacher_tls").as_bool()) << run;
    for (const char* site : {"site-1", "site-2"}) {
      const std::string log = read_text(dir / (run + "/distill-" + site + ".log"));
      EXPECT_NE(log.find("distilling from teachers 127.0.0.1:"), std::string::npos) << log;
    }
  }
  EXPECT_EQ(summary(dir / "sim.json").at("site_mode").as_string(), "in-process");
}

// A teacher of another vocabulary (a BPE of 320 ids for byte-level students) was reported as
// "no answer from the teachers within --teacher-wait 60.0 s" although it answered at once.
TEST(DistillSimulate, ATeacherOfAnotherVocabularyIsSaidAsIs) {
  TempDir dir;
  auto trained = run_atoll(
      {"train",    "--dim",  "16",      "--layers",      "1",   "--heads",   "2", "--ffn",
       "32",       "--seq",  "32",      "--batch",       "4",   "--steps",   "3", "--tokenizer",
       "bpe:320",  "--data", "brown:a", "--eval-tokens", "256", "--threads", "1", "--out",
       dir / "bpe"},
      dir / "train.log");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  auto r = run_atoll(students("simulate", dir / "bpe/checkpoint.safetensors", dir / "run"),
                     dir / "run.log", std::chrono::seconds(120));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("has vocabulary 320, the student 256"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("within --teacher-wait"), std::string::npos) << r.output;
}

TEST(DistillSimulate, BadFlagsSayWhatIsWrong) {
  TempDir dir;
  auto r = run_atoll({"simulate", "--algorithm", "distill", "--codec", "int8"}, dir / "a.log");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--codec int8 must be bf16 or topk:K"), std::string::npos) << r.output;
  r = run_atoll({"simulate", "--algorithm=distill", "--sites", "0"}, dir / "b.log");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--sites 0 is out of range"), std::string::npos) << r.output;
  // topk:300 of 256 ids was taken, at four times bf16's bytes per token.
  r = run_atoll({"simulate", "--algorithm", "distill", "--codec", "topk:300"}, dir / "c.log");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--codec topk:300 keeps at least the students' whole vocabulary of 256 "
                          "ids: use K < 256, or bf16 for every id"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace atl::testing
