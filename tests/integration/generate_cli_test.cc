// `atoll generate` as a user runs it on a checkpoint `atoll train` wrote: greedy output equals an
// independent greedy loop over the model's forward, runs repeat exactly (greedy, and sampling
// with a seed), and bad flags are one line.
#include <algorithm>
#include <fstream>

#include "algorithms/data/hf_tokenizer.h"
#include "algorithms/model/llama.h"
#include "node/checkpoint.h"
#include "node/site_data.h"
#include "tests/integration/cli_test_util.h"

namespace atl::testing {
namespace {

// Trains a tiny model for 30 steps (a second or two) and returns its checkpoint.
std::string train_tiny(const TempDir& dir, const std::string& tokenizer) {
  auto r = run_atoll({"train",   "--dim",         "32",       "--layers", "2",       "--heads",
                      "2",       "--ffn",         "64",       "--seq",    "32",      "--batch",
                      "4",       "--threads",     "1",        "--steps",  "30",      "--lr",
                      "1e-2",    "--eval-tokens", "512",      "--data",   "brown:a", "--tokenizer",
                      tokenizer, "--out",         dir / "run"},
                     dir / "train.log");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return dir / "run/checkpoint.safetensors";
}

// Greedy decoding written out here: the whole context (its last seq_len tokens) through
// forward, the largest logit of the last position (lowest id among equals), appended.
std::string independent_greedy(const std::string& checkpoint, const std::string& prompt, int n) {
  auto ck = node::load_checkpoint(checkpoint);
  EXPECT_TRUE(ck.ok()) << ck.status().to_string();
  if (!ck.ok()) return "";
  auto tok = node::tokenizer_from_blob(ck->meta.tokenizer);
  EXPECT_TRUE(tok.ok());
  if (!tok.ok()) return "";
  const algorithms::ModelConfig& cfg = ck->meta.model;
  algorithms::Llama model(cfg);
  std::vector<int32_t> ctx = (*tok)->encode(prompt);
  const size_t prompt_len = ctx.size();
  for (int step = 0; step < n; ++step) {
    const int T = static_cast<int>(std::min<size_t>(ctx.size(), cfg.seq_len));
    model.forward(ck->params, ctx.data() + (ctx.size() - T), nullptr, 1, T);
    const float* last = model.logits() + static_cast<size_t>(T - 1) * cfg.vocab;
    int32_t best = 0;
    for (int32_t v = 1; v < cfg.vocab; ++v)
      if (last[v] > last[best]) best = v;
    ctx.push_back(best);
  }
  return prompt + (*tok)->decode(std::span<const int32_t>(ctx).subspan(prompt_len)) + "\n";
}

void expect_greedy_matches(const std::string& tokenizer, const TempDir& dir) {
  const std::string ck = train_tiny(dir, tokenizer);
  const std::vector<std::string> args = {"generate", "--checkpoint",  ck,
                                         "--prompt", "The jury said", "--tokens",
                                         "40",       "--temperature", "0"};
  auto a = run_atoll(args, dir / "a.log");
  auto b = run_atoll(args, dir / "b.log");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_EQ(a.output, independent_greedy(ck, "The jury said", 40)) << tokenizer;
  EXPECT_GT(a.output.size(), std::string("The jury said").size() + 10);
}

TEST(GenerateCli, GreedyIsDeterministicAndMatchesAnIndependentLoopWithBytes) {
  TempDir dir;
  expect_greedy_matches("bytes", dir);
}

TEST(GenerateCli, GreedyMatchesAnIndependentLoopWithTheCheckpointsBpe) {
  TempDir dir;
  expect_greedy_matches("bpe:300", dir);
}

// A GPT-2-style tokenizer.json (all 256 bytes and a few English merges): the checkpoint carries
// its text, and generate decodes with it.
TEST(GenerateCli, GreedyMatchesAnIndependentLoopWithATokenizerJson) {
  TempDir dir;
  write_byte_level_tokenizer_json(dir / "tokenizer.json");
  expect_greedy_matches("hf:" + (dir / "tokenizer.json"), dir);
  auto ck = node::load_checkpoint(dir / "run/checkpoint.safetensors");
  ASSERT_TRUE(ck.ok());
  EXPECT_EQ(ck->meta.tokenizer, read_text(dir / "tokenizer.json"));
  EXPECT_EQ(ck->meta.model.vocab, 256 + 6 + 1);
}

TEST(GenerateCli, SamplingWithASeedRepeatsAndTheSeedMatters) {
  TempDir dir;
  const std::string ck = train_tiny(dir, "bytes");
  auto sample = [&](const std::string& seed, const std::string& log) {
    return run_atoll({"generate", "--checkpoint", ck, "--prompt", "It was", "--tokens", "60",
                      "--temperature", "1.0", "--top-k", "0", "--seed", seed},
                     dir / log);
  };
  auto a = sample("5", "a.log"), b = sample("5", "b.log"), c = sample("6", "c.log");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_NE(a.output, c.output);
  EXPECT_NE(a.output, independent_greedy(ck, "It was", 60));
}

// The output is the decoded bytes, NUL bytes included: a model with every parameter 0 has equal
// logits, so greedy decoding picks id 0, the byte 0.
TEST(GenerateCli, OutputKeepsNulBytes) {
  TempDir dir;
  const std::string ck = zero_checkpoint(dir);
  auto r = run_atoll(
      {"generate", "--checkpoint", ck, "--prompt", "ab", "--tokens", "3", "--temperature", "0"},
      dir / "gen.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, std::string("ab\0\0\0\n", 6));
}

TEST(GenerateCli, BadFlagsAreOneClearLine) {
  TempDir dir;
  { std::ofstream(dir / "junk.safetensors") << "not a checkpoint"; }
  const std::string bytes_model = zero_checkpoint(dir);  // a byte-level model: 256 tokens
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"generate", "--prompt", "x"}, "--checkpoint is required"},
      {{"generate", "--checkpoint", dir / "junk.safetensors", "--tokens", "0"},
       "--tokens 0 is out of range"},
      {{"generate", "--checkpoint", dir / "junk.safetensors", "--temperature", "-1"},
       "--temperature -1"},
      {{"generate", "--checkpoint", dir / "junk.safetensors", "--tokens", "ten"},
       "is not an integer"},
      {{"generate", "--checkpoint", dir / "junk.safetensors", "--temprature", "0"},
       "unknown flag --temprature"},
      {{"generate", "--checkpoint", dir / "missing.safetensors"}, "missing.safetensors"},
      {{"generate", "--checkpoint", dir / "junk.safetensors"}, "junk.safetensors"},
      {{"generate", "--checkpoint", bytes_model, "--top-k", "257"},
       "--top-k 257 is more than the model's 256 tokens (give at most that, or 0 to sample among "
       "all)"},
  };
  int i = 0;
  for (const Case& c : cases) {
    auto r = run_atoll(c.args, dir / ("bad" + std::to_string(i++) + ".log"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_EQ(r.output.rfind("atoll generate: ", 0), 0u) << r.output;
  }
}

}  // namespace
}  // namespace atl::testing
