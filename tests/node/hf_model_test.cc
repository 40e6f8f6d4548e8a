// `atoll import hf` / `atoll export hf` (node/hf_model.h, algorithms/model/hf_format.h).
// Tiny Hugging Face model directories are written here in the Hugging Face layout (rotate-half
// q/k rows) with random weights; the imported model must give the logits of an independent
// PyTorch implementation of the Hugging Face semantics (tests/tools/torch_llama.py hf) within
// 1e-5 relative and the same greedy continuation, and import -> export must give back every
// tensor bit for bit.
#include "node/hf_model.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "algorithms/data/tokenizer.h"
#include "algorithms/model/hf_format.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/safetensors.h"
#include "kernels/core/philox.h"
#include "kernels/formats/convert.h"
#include "node/checkpoint.h"
#include "node/site_data.h"
#include "tests/tools/hf_dir.h"
#include "tests/tools/torch_reference.h"
#include "tools/temp_dir.h"

namespace atl::node {
namespace {

namespace fs = std::filesystem;
using algorithms::DType;
using algorithms::ModelConfig;
using algorithms::Safetensors;
using algorithms::StTensor;
using atl::testing::HfSpec;
using atl::testing::random_hf_tensors;
using atl::testing::write_hf_dir;

std::string write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
  return text;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Runs the PyTorch Hugging Face reference on model directory `dir` and checks the Atoll model
// (m, params) against it: logits of a random batch within 1e-5 relative, and the same greedy
// 8-token continuation of a prompt.
void expect_matches_hf_reference(const fs::path& dir, const ModelConfig& m,
                                 const algorithms::ParamSet& params, const std::string& label) {
  const std::string why = atl::testing::torch_unavailable_reason();
  ASSERT_TRUE(why.empty()) << why;
  atl::testing::TempDir tmp;
  const int B = 2, T = 24, kGen = 8;
  std::vector<int32_t> inputs(B * T), prompt = {3, 17, 42, 5, 60};
  const Philox rng(11, 3);
  for (int i = 0; i < B * T; ++i) inputs[i] = int32_t(rng.below(uint64_t(i), uint64_t(m.vocab)));
  Safetensors in;
  in.tensors.push_back(algorithms::make_tensor("batch.inputs", {B, T}, inputs.data()));
  in.tensors.push_back(
      algorithms::make_tensor("gen.prompt", {int64_t(prompt.size())}, prompt.data()));
  in.metadata["gen_tokens"] = std::to_string(kGen);
  const fs::path in_path = tmp.sub("in.safetensors"), out_path = tmp.sub("out.safetensors");
  atl::testing::write_safetensors_file(in_path, in);
  const std::vector<std::string> args = {"hf", dir.string(), in_path.string(), out_path.string()};
  ASSERT_EQ(atl::testing::run_torch_llama(args), 0)
      << "failed: " << atl::testing::torch_llama_command(args);
  const std::string out_bytes = read_text(out_path);
  auto ref = algorithms::decode_safetensors(reinterpret_cast<const uint8_t*>(out_bytes.data()),
                                            out_bytes.size());
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  ASSERT_NE(ref->find("logits"), nullptr);
  ASSERT_NE(ref->find("gen.tokens"), nullptr);
  const std::vector<float> ref_logits = ref->find("logits")->to_f32();
  const std::vector<int32_t> ref_gen = ref->find("gen.tokens")->to_i32();

  algorithms::Llama model(m);
  model.forward(params, inputs.data(), nullptr, B, T);
  ASSERT_EQ(ref_logits.size(), size_t(B) * T * m.vocab);
  const double err = atl::testing::rel_err(model.logits(), ref_logits.data(), ref_logits.size());
  std::printf("  %s: logits rel err vs the Hugging Face reference %.3g\n", label.c_str(), err);
  EXPECT_LT(err, 1e-5);
  auto gen = model.generate(params, prompt, kGen, 0.0f, 0, 1);
  ASSERT_TRUE(gen.ok()) << gen.status().message();
  EXPECT_EQ(*gen, ref_gen) << "greedy continuations differ";
}

// Imports spec's directory and compares it with the PyTorch Hugging Face reference.
void compare_import_with_hf_reference(const HfSpec& spec) {
  atl::testing::TempDir tmp;
  const fs::path dir = tmp.sub("model");
  write_hf_dir(dir, spec);
  auto imported = import_hf_dir(dir.string());
  ASSERT_TRUE(imported.ok()) << imported.status().message();
  const ModelConfig& m = imported->meta.model;
  EXPECT_EQ(algorithms::num_kv_heads(m), spec.kv_heads);
  EXPECT_EQ(m.tie_word_embeddings, spec.tied);
  EXPECT_EQ(m.attention_bias, spec.architecture == "Qwen2ForCausalLM");
  EXPECT_EQ(m.rope_base, 500000.0);
  EXPECT_EQ(m.norm_eps, 1e-6);
  expect_matches_hf_reference(dir, m, imported->params, spec.architecture);
}

TEST(HfImport, LlamaGroupedQueryUntiedFp32MatchesHfReference) {
  compare_import_with_hf_reference(HfSpec{});
}

TEST(HfImport, Qwen2BiasesTiedBf16ShardedMatchesHfReference) {
  HfSpec s;
  s.architecture = "Qwen2ForCausalLM";
  s.kv_heads = 1;
  s.tied = true;
  s.dtype = DType::kBF16;
  s.shards = 3;
  s.extra_config = ", \"use_sliding_window\": false, \"sliding_window\": 16";
  compare_import_with_hf_reference(s);
}

TEST(HfImport, MistralFp16WithLongWindowMatchesHfReference) {
  HfSpec s;
  s.architecture = "MistralForCausalLM";
  s.kv_heads = 4;  // plain multi-head attention
  s.dtype = DType::kF16;
  s.extra_config = ", \"sliding_window\": 4096";
  compare_import_with_hf_reference(s);
}

// import -> checkpoint file -> export: every tensor bit for bit, the tokenizer files byte for
// byte, and a config.json that imports to the same model.
void round_trip(const HfSpec& spec) {
  atl::testing::TempDir tmp;
  const fs::path src = tmp.sub("src"), out = tmp.sub("out");
  const std::vector<StTensor> written = write_hf_dir(src, spec);
  auto imported = import_hf_dir(src.string());
  ASSERT_TRUE(imported.ok()) << imported.status().message();
  const std::string ckpt = tmp.sub("model.safetensors");
  ASSERT_TRUE(save_checkpoint(ckpt, imported->meta, imported->params, nullptr).ok());
  auto loaded = load_checkpoint(ckpt);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->meta.tokenizer, read_text(src / "tokenizer.json"));
  EXPECT_EQ(loaded->meta.hf_tokenizer_config_json, read_text(src / "tokenizer_config.json"));
  EXPECT_TRUE(algorithms::model_differences(loaded->meta.model, imported->meta.model).empty());

  Status s = export_hf_dir(*loaded, out.string(), spec.dtype);
  ASSERT_TRUE(s.ok()) << s.message();
  const std::string bytes = read_text(out / "model.safetensors");
  auto back =
      algorithms::decode_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->tensors.size(), written.size());
  for (const StTensor& t : written) {
    const StTensor* b = back->find(t.name);
    ASSERT_NE(b, nullptr) << t.name;
    EXPECT_EQ(b->dtype, t.dtype) << t.name;
    EXPECT_EQ(b->shape, t.shape) << t.name;
    EXPECT_TRUE(b->data == t.data) << t.name << " differs after import -> export";
  }
  EXPECT_EQ(read_text(out / "tokenizer.json"), read_text(src / "tokenizer.json"));
  EXPECT_EQ(read_text(out / "tokenizer_config.json"), read_text(src / "tokenizer_config.json"));
  auto again = algorithms::parse_hf_config(read_text(out / "config.json"));
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->architecture, spec.architecture);
  EXPECT_TRUE(algorithms::model_differences(again->model, imported->meta.model).empty());
  EXPECT_NE(read_text(out / "config.json").find("\"bos_token_id\":1"), std::string::npos)
      << "fields Atoll does not use are kept from the imported config.json";
}

// A model trained by Atoll (no imported config.json) exports to a directory that the Hugging
// Face semantics read as the same network: Llama with GQA and an untied head, and Qwen2 (biases).
TEST(HfExport, AtollModelExportsToTheSameHuggingFaceNetwork) {
  for (bool qwen2 : {false, true}) {
    ModelConfig m;
    m.vocab = 80;
    m.dim = 32;
    m.layers = 2;
    m.heads = 4;
    m.kv_heads = 2;
    m.ffn_hidden = 40;
    m.seq_len = 48;
    m.rope_base = 20000.0;
    m.attention_bias = qwen2;
    m.tie_word_embeddings = qwen2;
    LoadedCheckpoint ck;
    ck.meta.model = m;
    ck.params = algorithms::ParamSet(algorithms::make_layout(m));
    algorithms::init_params(ck.params, m, 77);
    const Philox rng(8, 8);
    for (size_t i = 0; i < ck.params.numel(); ++i)  // away from init: biases, gains, scale
      ck.params.data()[i] += static_cast<float>(0.05 * rng.normal(i));
    atl::testing::TempDir tmp;
    const fs::path out = tmp.sub("out");
    Status s = export_hf_dir(ck, out.string(), DType::kF32);
    ASSERT_TRUE(s.ok()) << s.message();
    auto cfg = algorithms::parse_hf_config(read_text(out / "config.json"));
    ASSERT_TRUE(cfg.ok()) << cfg.status().message();
    EXPECT_EQ(cfg->architecture, qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
    EXPECT_TRUE(algorithms::model_differences(cfg->model, m).empty());
    // The checkpoint carries none, and the byte tokenizer's 256 ids do not fit a vocab of 80.
    EXPECT_FALSE(fs::exists(out / "tokenizer.json"));
    expect_matches_hf_reference(out, m, ck.params, "export " + cfg->architecture);
  }
}

// A model Atoll trained in bytes exported without a tokenizer, so `atoll import hf` refused the
// folder. The export now writes the byte tokenizer as a tokenizer.json with no merges: importing
// it gives the same parameters and a tokenizer that maps every byte to its own id.
TEST(HfExport, AByteModelExportsItsTokenizerAndImportsBack) {
  ModelConfig m;
  m.vocab = 256;
  m.dim = 32;
  m.layers = 1;
  m.heads = 2;
  m.ffn_hidden = 40;
  m.seq_len = 16;
  LoadedCheckpoint ck;
  ck.meta.model = m;
  ck.params = algorithms::ParamSet(algorithms::make_layout(m));
  algorithms::init_params(ck.params, m, 5);
  atl::testing::TempDir tmp;
  const fs::path out = tmp.sub("out");
  ASSERT_TRUE(export_hf_dir(ck, out.string(), DType::kF32).ok());
  ASSERT_TRUE(fs::exists(out / "tokenizer.json"));
  auto imported = import_hf_dir(out.string());
  ASSERT_TRUE(imported.ok()) << imported.status().message();
  EXPECT_EQ(imported->params.fingerprint(), ck.params.fingerprint());
  auto tok = tokenizer_from_blob(imported->meta.tokenizer);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ((*tok)->vocab_size(), 256);
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(static_cast<char>(b));
  const std::string text = "The jury said \xc3\xa9t\xc3\xa9, \xff\xfe " + every_byte;
  const std::vector<int32_t> ids = (*tok)->encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i)
    EXPECT_EQ(ids[i], static_cast<unsigned char>(text[i])) << i;
  EXPECT_EQ((*tok)->decode(ids), text);

  // Atoll's own BPE has no exact tokenizer.json: none is written (a previous one is removed).
  std::vector<std::string_view> corpus = {"the cat sat on the mat, the cat sat"};
  auto bpe = algorithms::data::BpeTokenizer::train(corpus, 260);
  ASSERT_TRUE(bpe.ok());
  ck.meta.tokenizer = bpe->serialize();
  ASSERT_TRUE(export_hf_dir(ck, out.string(), DType::kF32).ok());
  EXPECT_FALSE(fs::exists(out / "tokenizer.json"));
}

TEST(HfImport, ImportExportIsBitwiseForFp32Sources) {
  round_trip(HfSpec{});
}

TEST(HfImport, ImportExportIsBitwiseForBf16Sources) {
  HfSpec s;
  s.architecture = "Qwen2ForCausalLM";
  s.dtype = DType::kBF16;
  s.shards = 2;
  round_trip(s);
}

// The RoPE row permutation: pair order row 2i <- half-split row i, 2i+1 <- D/2 + i, per head.
TEST(HfImport, RopeRowPermutationPerHead) {
  const int heads = 2, D = 4, cols = 3;
  std::vector<float> rows(size_t(heads) * D * cols), orig;
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = float(i);
  orig = rows;
  algorithms::rope_rows_from_hf(rows.data(), heads, D, cols);
  const int expect_src[D] = {0, 2, 1, 3};  // atoll row r comes from hf row expect_src[r]
  for (int h = 0; h < heads; ++h)
    for (int r = 0; r < D; ++r)
      for (int c = 0; c < cols; ++c)
        EXPECT_EQ(rows[size_t(h * D + r) * cols + c],
                  orig[size_t(h * D + expect_src[r]) * cols + c]);
  algorithms::rope_rows_to_hf(rows.data(), heads, D, cols);
  EXPECT_EQ(rows, orig);
}

// Each refusal is one line that names the problem.
void expect_import_error(const HfSpec& spec, const std::string& needle,
                         void (*damage)(const fs::path&) = nullptr) {
  atl::testing::TempDir tmp;
  const fs::path dir = tmp.sub("m");
  write_hf_dir(dir, spec);
  if (damage) damage(dir);
  auto r = import_hf_dir(dir.string());
  ASSERT_FALSE(r.ok()) << "expected an error containing: " << needle;
  const std::string msg = r.status().message();
  EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
}

TEST(HfImport, RefusesWithOneClearLine) {
  HfSpec arch;
  arch.architecture = "GPT2LMHeadModel";
  expect_import_error(arch, "unsupported architecture GPT2LMHeadModel");
  HfSpec scaling;
  scaling.extra_config = ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}";
  expect_import_error(scaling, "rope_scaling");
  expect_import_error(HfSpec{}, "hidden_act", [](const fs::path& d) {
    std::string c = read_text(d / "config.json");
    c.replace(c.find("\"silu\""), 6, "\"gelu\"");
    write_text(d / "config.json", c);
  });
  HfSpec window;
  window.architecture = "MistralForCausalLM";
  window.extra_config = ", \"sliding_window\": 32";  // context 64
  expect_import_error(window, "sliding_window 32 is shorter than the context 64");
  HfSpec head_dim;
  head_dim.extra_config = ", \"head_dim\": 16";  // 48 / 4 = 12
  expect_import_error(head_dim, "head_dim 16");
  expect_import_error(
      HfSpec{}, "missing tensor model.layers.1.mlp.up_proj.weight", [](const fs::path& d) {
        const std::string b = read_text(d / "model.safetensors");
        auto st =
            algorithms::decode_safetensors(reinterpret_cast<const uint8_t*>(b.data()), b.size());
        std::erase_if(st->tensors, [](const StTensor& t) {
          return t.name == "model.layers.1.mlp.up_proj.weight";
        });
        atl::testing::write_safetensors_file(d / "model.safetensors", *st);
      });
  expect_import_error(HfSpec{}, "tensor model.layers.0.self_attn.k_proj.weight has shape (24, 48)",
                      [](const fs::path& d) {
                        // num_key_value_heads 1 in config.json, weights written for 2.
                        std::string c = read_text(d / "config.json");
                        c.replace(c.find("\"num_key_value_heads\": 2"), 24,
                                  "\"num_key_value_heads\": 1");
                        write_text(d / "config.json", c);
                      });
  expect_import_error(HfSpec{}, "dtype I8", [](const fs::path& d) {
    const std::string b = read_text(d / "model.safetensors");
    auto st = algorithms::decode_safetensors(reinterpret_cast<const uint8_t*>(b.data()), b.size());
    for (StTensor& t : st->tensors)
      if (t.name == "model.norm.weight") {
        t.dtype = DType::kI8;
        t.data.resize(t.numel());
      }
    atl::testing::write_safetensors_file(d / "model.safetensors", *st);
  });
  expect_import_error(HfSpec{}, "no tokenizer.json",
                      [](const fs::path& d) { fs::remove(d / "tokenizer.json"); });
  HfSpec bias;
  bias.extra_config = ", \"attention_bias\": true";
  expect_import_error(bias, "o_proj bias");
}

// The command line: import and export exit 0 and write their files; a bad directory is one line
// on stderr and exit 1.
// A model folder passed where a checkpoint file belongs gets the command that converts it.
TEST(HfImport, ModelFolderAsCheckpointSaysHowToConvertIt) {
  testing::TempDir dir;
  const fs::path folder = dir / "model";
  write_hf_dir(folder, HfSpec{});
  auto loaded = load_checkpoint(folder.string());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(loaded.status().message(),
            folder.string() +
                " is a Hugging Face model folder, not a checkpoint: convert it with "
                "`atoll import hf " +
                folder.string() + " --out MODEL.safetensors` and pass that file");
  auto plain = load_checkpoint(dir.path());  // a folder with no config.json
  EXPECT_EQ(plain.status().message(), dir.path() + " is a directory, not a file");
}

TEST(HfImport, CommandLineImportAndExport) {
  atl::testing::TempDir tmp;
  const fs::path src = tmp.sub("src"), out = tmp.sub("out");
  write_hf_dir(src, HfSpec{});
  const std::string bin = ATOLL_BINARY, ckpt = tmp.sub("ck.safetensors");
  const std::string imp = atl::testing::shell_quote(bin) + " import hf " +
                          atl::testing::shell_quote(src.string()) + " --out " +
                          atl::testing::shell_quote(ckpt) + " >/dev/null";
  ASSERT_EQ(std::system(imp.c_str()), 0) << imp;
  const std::string exp = atl::testing::shell_quote(bin) + " export hf " +
                          atl::testing::shell_quote(ckpt) + " --out " +
                          atl::testing::shell_quote(out.string()) + " --dtype bf16 >/dev/null";
  ASSERT_EQ(std::system(exp.c_str()), 0) << exp;
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
  EXPECT_NE(read_text(out / "config.json").find("\"torch_dtype\":\"bfloat16\""), std::string::npos);
  const std::string err_path = tmp.sub("err.txt");
  const std::string bad = atl::testing::shell_quote(bin) + " import hf " +
                          atl::testing::shell_quote(tmp.sub("nope")) + " --out " +
                          atl::testing::shell_quote(tmp.sub("x.safetensors")) + " 2>" +
                          atl::testing::shell_quote(err_path);
  const int rc = std::system(bad.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 1);
  const std::string err = read_text(err_path);
  EXPECT_NE(err.find("is not a directory"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

// transformers v5 keeps rope_theta in rope_parameters: read it there (rope_type "default" is
// plain RoPE), and refuse any other rope_type with the line rope_scaling gets. Export writes the
// theta back where the imported config keeps it.
TEST(HfImport, RopeParametersGiveTheThetaAndOtherRopeTypesAreRefused) {
  atl::testing::TempDir tmp;
  const fs::path dir = tmp.sub("m");
  write_hf_dir(dir, HfSpec{});
  std::string c = read_text(dir / "config.json");
  c.replace(c.find("\"rope_theta\": 500000.0"), 22,
            "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 250000.0}");
  write_text(dir / "config.json", c);
  auto imported = import_hf_dir(dir.string());
  ASSERT_TRUE(imported.ok()) << imported.status().message();
  EXPECT_EQ(imported->meta.model.rope_base, 250000.0);
  auto exported =
      algorithms::hf_config_json(imported->meta.model, "LlamaForCausalLM", c, "float32");
  ASSERT_TRUE(exported.ok());
  const boost::json::object o = boost::json::parse(*exported).as_object();
  EXPECT_EQ(o.at("rope_parameters").at("rope_theta").to_number<double>(), 250000.0) << *exported;
  EXPECT_FALSE(o.contains("rope_theta")) << *exported;

  expect_import_error(HfSpec{}, "config.json sets rope_parameters", [](const fs::path& d) {
    std::string c = read_text(d / "config.json");
    c.replace(c.find("\"rope_theta\": 500000.0"), 22,
              "\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
              "\"rope_theta\": 500000.0}");
    write_text(d / "config.json", c);
  });
  HfSpec yarn;
  yarn.extra_config = ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0}";
  expect_import_error(yarn, "Atoll implements plain RoPE only");
}

// tokenizer.json is loaded at import by the loader every reader uses: what it cannot read, or a
// tokenizer with ids beyond the model's vocabulary, is one line at import, not at the first run.
TEST(HfImport, TokenizersTheLoaderCannotReadAreRefusedAtImport) {
  expect_import_error(HfSpec{}, "tokenizer.json is not valid JSON",
                      [](const fs::path& d) { write_text(d / "tokenizer.json", "{\"model\": "); });
  expect_import_error(HfSpec{}, "model type 'WordPiece' is not supported", [](const fs::path& d) {
    write_text(d / "tokenizer.json",
               "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}");
  });
  expect_import_error(HfSpec{}, "BPE byte_fallback is not supported", [](const fs::path& d) {
    std::string t = read_text(d / "tokenizer.json");
    t.replace(t.find("\"type\":\"BPE\""), 12, "\"type\":\"BPE\",\"byte_fallback\":true");
    write_text(d / "tokenizer.json", t);
  });
  HfSpec small;
  small.vocab = 200;  // the tokenizer has 263 ids
  expect_import_error(small, "has ids up to 262, beyond config.json's vocab_size 200");
}

// config.json's problems name config.json's keys; --seq-len is checked against the context.
TEST(HfImport, ConfigErrorsNameConfigJsonKeys) {
  HfSpec kv;
  kv.kv_heads = 3;  // does not divide 4 heads
  expect_import_error(kv, "num_key_value_heads 3 must divide num_attention_heads 4");
  HfSpec theta;
  theta.extra_config = ", \"rope_parameters\": {\"rope_theta\": 0.5}";
  expect_import_error(theta, "config.json: rope_theta must be a finite number > 1");
  expect_import_error(HfSpec{}, "rms_norm_eps must be a finite number > 0", [](const fs::path& d) {
    std::string c = read_text(d / "config.json");
    c.replace(c.find("\"rms_norm_eps\": 1e-06"), 21, "\"rms_norm_eps\": 0");
    write_text(d / "config.json", c);
  });
  expect_import_error(
      HfSpec{}, "hidden_size 48 is not divisible by num_attention_heads 5", [](const fs::path& d) {
        std::string c = read_text(d / "config.json");
        c.replace(c.find("\"num_attention_heads\": 4"), 24, "\"num_attention_heads\": 5");
        write_text(d / "config.json", c);
      });
  expect_import_error(HfSpec{},
                      "no max_position_embeddings: give the model's context with --seq-len",
                      [](const fs::path& d) {
                        std::string c = read_text(d / "config.json");
                        const std::string key = "\"max_position_embeddings\": 64, ";
                        c.replace(c.find(key), key.size(), "");
                        write_text(d / "config.json", c);
                      });
  atl::testing::TempDir tmp;
  write_hf_dir(tmp.sub("m"), HfSpec{});
  auto longer = import_hf_dir(tmp.sub("m"), 65);
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.status().message().find(
                "--seq-len 65 is longer than config.json's max_position_embeddings 64"),
            std::string::npos)
      << longer.status().message();
  auto shorter = import_hf_dir(tmp.sub("m"), 32);
  ASSERT_TRUE(shorter.ok()) << shorter.status().message();
  EXPECT_EQ(shorter->meta.model.seq_len, 32);
  // transformers maps hidden_act "swish" to the same SiLU.
  std::string c = read_text(fs::path(tmp.sub("m")) / "config.json");
  c.replace(c.find("\"silu\""), 6, "\"swish\"");
  write_text(fs::path(tmp.sub("m")) / "config.json", c);
  EXPECT_TRUE(import_hf_dir(tmp.sub("m")).ok());
}

// model.safetensors.index.json must say where each tensor is: a tensor it places in the wrong
// shard, one it does not list, or one no shard holds is one line.
TEST(HfImport, ShardedIndexMustMatchItsShards) {
  HfSpec sharded;
  sharded.shards = 2;
  // Tensors alternate between the shards: model.embed_tokens.weight is in shard 1.
  expect_import_error(sharded,
                      "weight_map puts tensor model.embed_tokens.weight in "
                      "model-00002.safetensors, but model-00001.safetensors holds it",
                      [](const fs::path& d) {
                        std::string ix = read_text(d / "model.safetensors.index.json");
                        const std::string from =
                            "\"model.embed_tokens.weight\": \"model-00001.safetensors\"";
                        ix.replace(ix.find(from), from.size(),
                                   "\"model.embed_tokens.weight\": \"model-00002.safetensors\"");
                        write_text(d / "model.safetensors.index.json", ix);
                      });
  expect_import_error(sharded,
                      "tensor model.embed_tokens.weight of model-00001.safetensors is not in "
                      "weight_map",
                      [](const fs::path& d) {
                        std::string ix = read_text(d / "model.safetensors.index.json");
                        const std::string from =
                            "\"model.embed_tokens.weight\": \"model-00001.safetensors\", ";
                        ix.replace(ix.find(from), from.size(), "");
                        write_text(d / "model.safetensors.index.json", ix);
                      });
  expect_import_error(sharded,
                      "weight_map names tensor model.extra.weight in model-00002.safetensors, "
                      "which does not hold it",
                      [](const fs::path& d) {
                        std::string ix = read_text(d / "model.safetensors.index.json");
                        ix.replace(ix.find("\"weight_map\": {") + 15, 0,
                                   "\"model.extra.weight\": \"model-00002.safetensors\", ");
                        write_text(d / "model.safetensors.index.json", ix);
                      });
}

// Export writes into a new or empty folder or over a previous export (whose tokenizer files this
// checkpoint lacks are removed); a folder holding anything else is refused, untouched.
TEST(HfExport, FolderHoldingOtherFilesIsRefusedAndAPreviousExportIsReplaced) {
  atl::testing::TempDir tmp;
  write_hf_dir(tmp.sub("m"), HfSpec{});
  auto imported = import_hf_dir(tmp.sub("m"));
  ASSERT_TRUE(imported.ok()) << imported.status().message();
  LoadedCheckpoint ck;
  ck.meta = imported->meta;
  ck.params = imported->params;
  const fs::path out = tmp.sub("out");
  ASSERT_TRUE(export_hf_dir(ck, out.string(), DType::kF32).ok());
  ASSERT_TRUE(fs::exists(out / "tokenizer_config.json"));
  ck.meta.hf_tokenizer_config_json.clear();
  ASSERT_TRUE(export_hf_dir(ck, out.string(), DType::kF32).ok());
  EXPECT_FALSE(fs::exists(out / "tokenizer_config.json"));
  EXPECT_TRUE(fs::exists(out / "tokenizer.json"));

  write_text(out / "model-00001-of-00002.safetensors", "stale");
  Status s = export_hf_dir(ck, out.string(), DType::kF32);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("holds model-00001-of-00002.safetensors, which an export does not "
                             "write"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(read_text(out / "model-00001-of-00002.safetensors"), "stale");
}

// --out naming a file the import reads would overwrite the model's own weights: refused with one
// line, exit 2, the folder untouched.
TEST(HfImport, OutputOverASourceFileIsRefused) {
  atl::testing::TempDir tmp;
  const fs::path src = tmp.sub("src");
  write_hf_dir(src, HfSpec{});
  const std::string before = read_text(src / "model.safetensors");
  for (const std::string& out :
       {(src / "model.safetensors").string(), (src / "." / "tokenizer.json").string()}) {
    const std::string err = tmp.sub("err.txt");
    const std::string cmd = atl::testing::shell_quote(ATOLL_BINARY) + " import hf " +
                            atl::testing::shell_quote(src.string()) + " --out " +
                            atl::testing::shell_quote(out) + " 2>" + atl::testing::shell_quote(err);
    const int rc = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 2) << cmd;
    const std::string msg = read_text(err);
    EXPECT_NE(msg.find("a file the import reads"), std::string::npos) << msg;
    EXPECT_EQ(std::count(msg.begin(), msg.end(), '\n'), 1) << msg;
  }
  EXPECT_EQ(read_text(src / "model.safetensors"), before);
  EXPECT_TRUE(import_hf_dir(src.string()).ok());
}

// `atoll import hf` / `atoll export hf` run as a user runs them: the exit status and stderr.
struct CliResult {
  int exit_code = -1;
  std::string stderr_text;
};
CliResult run_atoll_cli(const std::vector<std::string>& args, const atl::testing::TempDir& tmp) {
  std::string cmd = atl::testing::shell_quote(ATOLL_BINARY);
  for (const std::string& a : args) cmd.append(" ").append(atl::testing::shell_quote(a));
  const std::string err = tmp.sub("stderr.txt");
  cmd += " >/dev/null 2>";
  cmd += atl::testing::shell_quote(err);
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read_text(err)};
}

// Rewrites one tensor of a single-file model folder.
void edit_tensor(const fs::path& dir, const std::string& name,
                 const std::function<void(StTensor&)>& edit) {
  const std::string b = read_text(dir / "model.safetensors");
  auto st = algorithms::decode_safetensors(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  ASSERT_TRUE(st.ok()) << st.status().message();
  bool found = false;
  for (StTensor& t : st->tensors)
    if (t.name == name) edit(t), found = true;
  ASSERT_TRUE(found) << name;
  atl::testing::write_safetensors_file(dir / "model.safetensors", *st);
}

// A NaN or infinity in the weights made eval print nan and generate NUL bytes: the import now
// refuses it, naming the tensor, the index of its first bad element in the stored (Hugging Face)
// layout, and the value; the command exits 2 with that one line.
TEST(HfImport, NonFiniteWeightsAreRefusedNamingTheFirstBadElement) {
  // q_proj row 1 is a rotate-half row (Atoll's row 2): the index is the file's, before the
  // RoPE permutation.
  expect_import_error(HfSpec{},
                      "tensor model.layers.1.self_attn.q_proj.weight (48, 48) holds nan "
                      "at index (1, 5)",
                      [](const fs::path& d) {
                        edit_tensor(d, "model.layers.1.self_attn.q_proj.weight", [](StTensor& t) {
                          const float nan = std::nanf("");
                          std::memcpy(t.data.data() + (48 + 5) * sizeof(float), &nan, 4);
                        });
                      });
  HfSpec bf16;
  bf16.dtype = DType::kBF16;
  expect_import_error(bf16, "tensor model.norm.weight (48) holds -inf at index (7)",
                      [](const fs::path& d) {
                        edit_tensor(d, "model.norm.weight", [](StTensor& t) {
                          const uint16_t minus_inf = 0xFF80;
                          std::memcpy(t.data.data() + 7 * 2, &minus_inf, 2);
                          std::memcpy(t.data.data() + 9 * 2, &minus_inf, 2);  // not the first
                        });
                      });
  atl::testing::TempDir tmp;
  write_hf_dir(tmp.sub("m"), HfSpec{});
  edit_tensor(tmp.sub("m"), "model.layers.0.mlp.down_proj.weight", [](StTensor& t) {
    const float inf = INFINITY;
    std::memcpy(t.data.data() + (3 * 80 + 70) * sizeof(float), &inf, 4);
  });
  const CliResult r =
      run_atoll_cli({"import", "hf", tmp.sub("m"), "--out", tmp.sub("ck.safetensors")}, tmp);
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("tensor model.layers.0.mlp.down_proj.weight (48, 80) holds inf at "
                               "index (3, 70): non-finite weights make every output nan"),
            std::string::npos)
      << r.stderr_text;
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
  EXPECT_FALSE(fs::exists(tmp.sub("ck.safetensors")));
}

void expect_imports(const HfSpec& spec, int seq_len = 0) {
  atl::testing::TempDir tmp;
  write_hf_dir(tmp.sub("m"), spec);
  auto r = import_hf_dir(tmp.sub("m"), seq_len);
  EXPECT_TRUE(r.ok()) << spec.architecture << spec.extra_config << ": " << r.status().message();
}

// The sliding window as transformers reads each architecture (context 64, 2 layers): Qwen2 slides
// only with use_sliding_window and only on layers from max_window_layers (default 28) or those
// layer_types marks; Mistral slides every layer by sliding_window (default 4096) whatever
// use_sliding_window says; LlamaConfig has no sliding window and ignores the key.
TEST(HfImport, SlidingWindowIsReadPerArchitectureAsTransformersDoes) {
  HfSpec qwen2;
  qwen2.architecture = "Qwen2ForCausalLM";
  const std::string window = ", \"use_sliding_window\": true, \"sliding_window\": 8";
  for (const std::string& full_attention :
       {window + ", \"max_window_layers\": 2",  // layers 0 and 1 are below max_window_layers
        window,                                 // max_window_layers' default, 28
        std::string(", \"use_sliding_window\": false, \"sliding_window\": 8, "
                    "\"max_window_layers\": 0"),
        window + ", \"max_window_layers\": 0, \"layer_types\": [\"full_attention\", "
                 "\"full_attention\"]"}) {
    qwen2.extra_config = full_attention;
    expect_imports(qwen2);
  }
  qwen2.extra_config = window + ", \"max_window_layers\": 1";
  expect_import_error(qwen2,
                      "config.json: sliding_window 8 is shorter than the context 64 on 1 of the "
                      "2 layers, from layer 1 (use_sliding_window is true and max_window_layers "
                      "is 1); Atoll attends to the full context (import with --seq-len 8 or less)");
  expect_imports(qwen2, 8);
  qwen2.extra_config = window +
                       ", \"max_window_layers\": 2, \"layer_types\": [\"sliding_attention\", "
                       "\"full_attention\"]";
  expect_import_error(qwen2, "on 1 of the 2 layers, from layer 0 (layer_types marks them");
  qwen2.extra_config = window + ", \"layer_types\": [\"full_attention\"]";
  expect_import_error(qwen2,
                      "layer_types must give \"full_attention\" or \"sliding_attention\" "
                      "for each of the 2 layers");

  HfSpec mistral;
  mistral.architecture = "MistralForCausalLM";
  mistral.extra_config = ", \"use_sliding_window\": false, \"sliding_window\": 8";
  expect_import_error(mistral, "config.json: sliding_window 8 is shorter than the context 64;");
  mistral.extra_config = ", \"sliding_window\": null";
  expect_imports(mistral);
  mistral.extra_config = ", \"sliding_window\": 64";
  expect_imports(mistral);
  // Without the key MistralConfig slides by 4096: a longer context is refused.
  mistral.extra_config = "";
  mistral.ctx = 8192;
  auto long_context = algorithms::parse_hf_config(atl::testing::hf_config_json(mistral));
  ASSERT_FALSE(long_context.ok());
  EXPECT_NE(long_context.status().message().find(
                "sliding_window 4096 (transformers' default; config.json does not set it) is "
                "shorter than the context 8192"),
            std::string::npos)
      << long_context.status().message();

  HfSpec llama;
  llama.extra_config = ", \"use_sliding_window\": true, \"sliding_window\": 8";
  expect_imports(llama);
}

// The source's max_position_embeddings (64) comes back in the export of a model imported with a
// shorter --seq-len (16), through a checkpoint file; re-importing the export gives the context 64.
// A model Atoll made (no source config) exports its own seq_len, as before, and so does a model
// whose context is longer than the source's.
TEST(HfExport, MaxPositionEmbeddingsIsTheSourceModelsAfterAShortImport) {
  atl::testing::TempDir tmp;
  write_hf_dir(tmp.sub("src"), HfSpec{});
  auto imported = import_hf_dir(tmp.sub("src"), 16);
  ASSERT_TRUE(imported.ok()) << imported.status().message();
  ASSERT_EQ(imported->meta.model.seq_len, 16);
  const std::string ckpt = tmp.sub("ck.safetensors");
  ASSERT_TRUE(save_checkpoint(ckpt, imported->meta, imported->params, nullptr).ok());
  auto loaded = load_checkpoint(ckpt);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->meta.model.seq_len, 16) << "Atoll's context stays what the import set";
  ASSERT_TRUE(export_hf_dir(*loaded, tmp.sub("out"), DType::kF32).ok());
  const boost::json::object o = boost::json::parse(read_text(tmp / "out/config.json")).as_object();
  EXPECT_EQ(o.at("max_position_embeddings").as_int64(), 64);
  auto again = import_hf_dir(tmp.sub("out"));
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->meta.model.seq_len, 64);
  EXPECT_EQ(again->params.fingerprint(), imported->params.fingerprint());

  ModelConfig m = imported->meta.model;
  auto own = algorithms::hf_config_json(m, "", "", "float32");
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(boost::json::parse(*own).at("max_position_embeddings").as_int64(), 16);
  m.seq_len = 128;
  auto longer = algorithms::hf_config_json(m, "", read_text(tmp / "src/config.json"), "float32");
  ASSERT_TRUE(longer.ok());
  EXPECT_EQ(boost::json::parse(*longer).at("max_position_embeddings").as_int64(), 128);
}

// tokenizer_config.json and generation_config.json travel verbatim into exports, so each must be
// one JSON object with no key twice (AutoTokenizer failed on the export of "{garbage"); the
// export lists every file it writes; config.json with a key twice is refused too.
TEST(HfImport, CarriedJsonFilesAreValidatedAndExportedVerbatim) {
  expect_import_error(HfSpec{}, "tokenizer_config.json is not valid JSON", [](const fs::path& d) {
    write_text(d / "tokenizer_config.json", "{garbage");
  });
  expect_import_error(HfSpec{},
                      "tokenizer_config.json has the key \"add_bos_token\" twice: keep one",
                      [](const fs::path& d) {
                        write_text(d / "tokenizer_config.json",
                                   "{\"add_bos_token\": true, \"add_bos_token\": false}");
                      });
  expect_import_error(HfSpec{}, "generation_config.json is not a JSON object",
                      [](const fs::path& d) { write_text(d / "generation_config.json", "[1]"); });
  expect_import_error(HfSpec{}, "config.json has the key \"num_hidden_layers\" twice",
                      [](const fs::path& d) {
                        std::string c = read_text(d / "config.json");
                        c.insert(c.size() - 1, ", \"num_hidden_layers\": 3");
                        write_text(d / "config.json", c);
                      });

  atl::testing::TempDir tmp;
  write_hf_dir(tmp.sub("src"), HfSpec{});
  const std::string generation =
      write_text(tmp / "src/generation_config.json",
                 "{\"bos_token_id\": 1, \"eos_token_id\": 2, \"temperature\": 0.7}\n");
  const std::string ckpt = tmp.sub("ck.safetensors");
  CliResult r = run_atoll_cli({"import", "hf", tmp.sub("src"), "--out", ckpt}, tmp);
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const std::string out = tmp.sub("out");
  std::string cmd = atl::testing::shell_quote(ATOLL_BINARY) + " export hf " +
                    atl::testing::shell_quote(ckpt) + " --out " + atl::testing::shell_quote(out) +
                    " > " + atl::testing::shell_quote(tmp.sub("stdout.txt"));
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_NE(read_text(tmp / "stdout.txt")
                .find("(config.json, model.safetensors fp32, tokenizer.json, "
                      "tokenizer_config.json, generation_config.json)"),
            std::string::npos)
      << read_text(tmp / "stdout.txt");
  EXPECT_EQ(read_text(fs::path(out) / "generation_config.json"), generation);
  EXPECT_EQ(read_text(fs::path(out) / "tokenizer_config.json"),
            read_text(tmp / "src/tokenizer_config.json"));
  // A checkpoint without one: a previous export's generation_config.json is removed.
  auto loaded = load_checkpoint(ckpt);
  ASSERT_TRUE(loaded.ok());
  loaded->meta.extra.erase("hf.generation_config");
  std::vector<std::string> written;
  ASSERT_TRUE(export_hf_dir(*loaded, out, DType::kF32, &written).ok());
  EXPECT_EQ(written, (std::vector<std::string>{"config.json", "model.safetensors", "tokenizer.json",
                                               "tokenizer_config.json"}));
  EXPECT_FALSE(fs::exists(fs::path(out) / "generation_config.json"));
}

// Keys transformers acts on that would make the model another one than Atoll computes, or that
// name tokens past the vocabulary (263 ids), are refused; their harmless values are accepted.
TEST(HfImport, ConfigKeysThatChangeTheModelAreRefused) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {", \"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4}",
       "config.json has quantization_config (quant_method \"gptq\"): quantized checkpoints are "
       "not supported: dequantize first"},
      {", \"partial_rotary_factor\": 0.5",
       "config.json: partial_rotary_factor = 0.5 applies RoPE to part of each head"},
      {", \"rope_parameters\": {\"rope_type\": \"default\", \"partial_rotary_factor\": 0.25}",
       "config.json: rope_parameters.partial_rotary_factor = 0.25 applies RoPE"},
      {", \"model_type\": \"gpt2\"",
       "config.json: model_type \"gpt2\" contradicts architectures LlamaForCausalLM (model_type "
       "\"llama\""},
      {", \"pad_token_id\": 263",
       "config.json: pad_token_id 263 is not a token of the model (ids are 0 .. 262 for "
       "vocab_size 263)"},
      {", \"pad_token_id\": -1", "config.json: pad_token_id -1 is not a token of the model"},
      {", \"pad_token_id\": [0]", "config.json: pad_token_id must be a token id (or null)"},
  };
  for (const auto& [extra, needle] : refused) {
    HfSpec s;
    s.extra_config = extra;
    expect_import_error(s, needle);
  }
  // bos_token_id and eos_token_id are already in the spec's config.json: replaced here.
  const auto replace_ids = [](const std::string& ids) {
    return [ids](const fs::path& d) {
      std::string c = read_text(d / "config.json");
      const std::string from = "\"bos_token_id\": 1, \"eos_token_id\": 2";
      c.replace(c.find(from), from.size(), ids);
      write_text(d / "config.json", c);
    };
  };
  for (const auto& [ids, needle] : std::vector<std::pair<std::string, std::string>>{
           {"\"bos_token_id\": 100000, \"eos_token_id\": 2", "bos_token_id 100000 is not a token"},
           {"\"bos_token_id\": 1, \"eos_token_id\": [2, 300]", "eos_token_id 300 is not a token"},
           {"\"bos_token_id\": 1.0, \"eos_token_id\": 2", "bos_token_id must be a token id"}}) {
    atl::testing::TempDir tmp;
    write_hf_dir(tmp.sub("m"), HfSpec{});
    replace_ids(ids)(tmp.sub("m"));
    auto r = import_hf_dir(tmp.sub("m"));
    ASSERT_FALSE(r.ok()) << ids;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  }
  for (const char* accepted :
       {", \"partial_rotary_factor\": 1.0, \"model_type\": \"llama\", \"pad_token_id\": null, "
        "\"quantization_config\": null",
        ", \"pad_token_id\": 262"}) {
    HfSpec s;
    s.extra_config = accepted;
    expect_imports(s);
  }
  HfSpec qwen2;
  qwen2.architecture = "Qwen2ForCausalLM";
  qwen2.extra_config = ", \"model_type\": \"qwen2\"";
  expect_imports(qwen2);
  qwen2.extra_config = ", \"model_type\": \"llama\"";
  expect_import_error(qwen2, "model_type \"llama\" contradicts architectures Qwen2ForCausalLM");
  atl::testing::TempDir tmp;
  write_hf_dir(tmp.sub("m"), HfSpec{});
  replace_ids("\"bos_token_id\": 1, \"eos_token_id\": [2, 262]")(tmp.sub("m"));
  EXPECT_TRUE(import_hf_dir(tmp.sub("m")).ok()) << "eos_token_id may list several ids";
}

// A PEFT adapter folder given to import hf says what it is and what to import instead, exit 2.
TEST(HfImport, APeftAdapterFolderSaysToImportTheBaseModel) {
  atl::testing::TempDir tmp;
  const fs::path adapter = tmp.sub("adapter");
  fs::create_directories(adapter);
  write_text(adapter / "adapter_config.json",
             "{\"peft_type\": \"LORA\", \"base_model_name_or_path\": \"org/tiny-llama\", "
             "\"r\": 8}");
  write_text(adapter / "adapter_model.safetensors", "");
  const CliResult r =
      run_atoll_cli({"import", "hf", adapter.string(), "--out", tmp.sub("ck.safetensors")}, tmp);
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find(adapter.string() +
                               " is a PEFT adapter folder (adapter_config.json, no config.json): "
                               "atoll import hf takes the base model's folder "
                               "(\"org/tiny-llama\"); Atoll trains its own LoRA adapters"),
            std::string::npos)
      << r.stderr_text;
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
}

}  // namespace
}  // namespace atl::node
