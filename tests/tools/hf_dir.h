// A tiny Hugging Face model directory for tests: config.json, model.safetensors (or shards with
// model.safetensors.index.json), tokenizer.json, with random weights in the Hugging Face layout
// (rotate-half q/k rows). Used by the import/export tests (tests/node/hf_model_test.cc) and by
// the federated fine-tuning tests that start from an imported model.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/data/hf_tokenizer.h"
#include "algorithms/model/hf_format.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/safetensors.h"
#include "kernels/core/philox.h"
#include "kernels/formats/convert.h"

namespace atl::testing {

// A small Hugging Face tokenizer.json: byte-level BPE (GPT-2 split pattern), the 256 single
// bytes as ids 0..255, six merges (th, the, " the", " a", in, " s") as ids 256..261, and
// "<|endoftext|>" as special token 262. Vocabulary size 263.
inline std::string byte_level_tokenizer_json() {
  using algorithms::data::bytes_to_byte_level;
  std::string vocab, merges;
  int id = 0;
  for (int b = 0; b < 256; ++b) {
    const std::string key = bytes_to_byte_level(std::string(1, static_cast<char>(b)));
    const std::string escaped = key == "\\" ? "\\\\" : key == "\"" ? "\\\"" : key;
    vocab += std::string(b ? "," : "") + "\"" + escaped + "\":" + std::to_string(b);
    ++id;
  }
  for (auto [l, r] : std::vector<std::pair<std::string, std::string>>{
           {"t", "h"}, {"th", "e"}, {" ", "the"}, {" ", "a"}, {"i", "n"}, {" ", "s"}}) {
    vocab += ",\"" + bytes_to_byte_level(l + r) + "\":" + std::to_string(id++);
    merges += std::string(merges.empty() ? "" : ",") + "\"" + bytes_to_byte_level(l) + " " +
              bytes_to_byte_level(r) + "\"";
  }
  return "{\"added_tokens\":[{\"id\":" + std::to_string(id) +
         ",\"content\":\"<|endoftext|>\",\"special\":true}],\"normalizer\":null,"
         "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
         "\"use_regex\":true},\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{"
         "\"type\":\"BPE\",\"vocab\":{" +
         vocab + "},\"merges\":[" + merges + "]}}";
}

// A tiny Hugging Face model: its config.json fields and how its weights are stored.
struct HfSpec {
  std::string architecture = "LlamaForCausalLM";
  // vocab 263: byte_level_tokenizer_json's ids (import refuses a tokenizer beyond vocab_size).
  int vocab = 263, dim = 48, layers = 2, heads = 4, kv_heads = 2, ffn = 80, ctx = 64;
  bool tied = false;
  algorithms::DType dtype = algorithms::DType::kF32;
  int shards = 1;            // > 1: model.safetensors.index.json and that many files
  std::string extra_config;  // appended inside config.json's object (",\"key\": value")
  std::string tokenizer_json = byte_level_tokenizer_json();
};

inline std::string hf_config_json(const HfSpec& s) {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "{\"architectures\": [\"%s\"], \"vocab_size\": %d, \"hidden_size\": %d, "
                "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
                "\"num_key_value_heads\": %d, \"intermediate_size\": %d, "
                "\"max_position_embeddings\": %d, \"rms_norm_eps\": 1e-06, "
                "\"rope_theta\": 500000.0, \"hidden_act\": \"silu\", "
                "\"tie_word_embeddings\": %s, \"bos_token_id\": 1, \"eos_token_id\": 2",
                s.architecture.c_str(), s.vocab, s.dim, s.layers, s.heads, s.kv_heads, s.ffn, s.ctx,
                s.tied ? "true" : "false");
  return std::string(buf) + s.extra_config + "}";
}

// The Atoll model that spec describes (its tensor names and shapes are the Hugging Face ones).
inline algorithms::ModelConfig hf_model_of(const HfSpec& s) {
  algorithms::ModelConfig m;
  m.vocab = s.vocab;
  m.dim = s.dim;
  m.layers = s.layers;
  m.heads = s.heads;
  m.kv_heads = s.kv_heads == s.heads ? 0 : s.kv_heads;
  m.ffn_hidden = s.ffn;
  m.seq_len = s.ctx;
  m.tie_word_embeddings = s.tied;
  m.attention_bias = s.architecture == "Qwen2ForCausalLM";
  return m;
}

// Random tensors in the stored dtype: matrices N(0, 0.08), norm gains 1 ± 0.2, biases N(0, 0.1).
inline std::vector<algorithms::StTensor> random_hf_tensors(const HfSpec& s, uint64_t seed) {
  std::vector<algorithms::StTensor> out;
  const auto layout = algorithms::make_layout(hf_model_of(s));
  uint64_t k = 0;
  const Philox rng(seed, 7);
  for (const auto& v : layout.views()) {
    std::vector<float> x(v.numel());
    const bool bias = v.name.ends_with(".bias");
    for (float& e : x)
      e = static_cast<float>(v.shape.size() == 2 ? 0.08 * rng.normal(k++)
                             : bias              ? 0.1 * rng.normal(k++)
                                                 : 1.0 + 0.2 * rng.normal(k++));
    if (s.dtype == algorithms::DType::kF32) {
      out.push_back(algorithms::make_tensor(v.name, v.shape, x.data()));
      continue;
    }
    std::vector<uint16_t> bits(x.size());
    if (s.dtype == algorithms::DType::kBF16)
      kernels::formats::quantize_bf16(x, bits);
    else
      kernels::formats::quantize_fp16(x, bits);
    algorithms::StTensor t;
    t.name = v.name;
    t.dtype = s.dtype;
    t.shape = v.shape;
    t.data.resize(bits.size() * 2);
    std::memcpy(t.data.data(), bits.data(), t.data.size());
    out.push_back(std::move(t));
  }
  return out;
}

inline void write_safetensors_file(const std::filesystem::path& p, const algorithms::Safetensors& st) {
  auto bytes = algorithms::encode_safetensors(st);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes->data()), std::streamsize(bytes->size()));
}

// Writes the directory; returns the tensors written (in the stored dtype).
inline std::vector<algorithms::StTensor> write_hf_dir(const std::filesystem::path& dir, const HfSpec& s,
                                                     uint64_t seed = 5) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json", std::ios::binary) << hf_config_json(s);
  std::ofstream(dir / "tokenizer.json", std::ios::binary) << s.tokenizer_json;
  std::ofstream(dir / "tokenizer_config.json", std::ios::binary) << "{\"add_bos_token\": true}\n";
  std::vector<algorithms::StTensor> tensors = random_hf_tensors(s, seed);
  if (s.shards <= 1) {
    algorithms::Safetensors st;
    st.tensors = tensors;
    write_safetensors_file(dir / "model.safetensors", st);
    return tensors;
  }
  std::vector<algorithms::Safetensors> shards(size_t(s.shards));
  std::string map;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t f = i % shards.size();
    shards[f].tensors.push_back(tensors[i]);
    map += (i ? ", \"" : "\"") + tensors[i].name + "\": \"model-0000" + std::to_string(f + 1) +
           ".safetensors\"";
  }
  for (size_t f = 0; f < shards.size(); ++f)
    write_safetensors_file(dir / ("model-0000" + std::to_string(f + 1) + ".safetensors"), shards[f]);
  std::ofstream(dir / "model.safetensors.index.json", std::ios::binary)
      << ("{\"metadata\": {\"total_size\": 0}, \"weight_map\": {" + map + "}}");
  return tensors;
}

}  // namespace atl::testing
