// LoRA checkpoints (node/checkpoint.h) and their exports (node/peft_export.h): the checkpoint
// round trip, PEFT tensor names, shapes and rotate-half rows, adapter_config.json, and the merged
// Hugging Face export equal to base + (alpha/r)·B·A applied in the Hugging Face layout.
#include "node/peft_export.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/model/hf_format.h"
#include "algorithms/model/llama.h"
#include "kernels/core/file_io.h"
#include "kernels/core/philox.h"
#include "node/checkpoint.h"
#include "node/data_source.h"
#include "tools/temp_dir.h"

namespace atl::node {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using algorithms::LoraConfig;
using algorithms::ModelConfig;
using algorithms::ParamSet;

ModelConfig small_gqa() {
  ModelConfig c;
  c.vocab = 40;
  c.dim = 16;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn_hidden = 24;
  c.seq_len = 16;
  return c;
}

// A LoRA checkpoint with random base and adapters (B != 0) and an adapter-layout optimizer.
LoadedCheckpoint lora_checkpoint(const ModelConfig& c, const LoraConfig& l) {
  LoadedCheckpoint ck;
  ck.meta.model = c;
  ck.meta.lora = l;
  ck.params = ParamSet(algorithms::make_layout(c));
  algorithms::init_params(ck.params, c, 5);
  ck.adapters = ParamSet(algorithms::make_lora_layout(l, c));
  const Philox r(6, 1);
  for (size_t i = 0; i < ck.adapters.numel(); ++i)
    ck.adapters.data()[i] = static_cast<float>(0.1 * r.normal(i));
  return ck;
}

LoraConfig qkvo_down(int rank) {
  LoraConfig l;
  l.rank = rank;
  l.alpha = 2.0 * rank;
  l.targets = {"q", "k", "v", "o", "down"};
  return l;
}

TEST(LoraCheckpoint, RoundTripsAdaptersConfigAndOptimizer) {
  const ModelConfig c = small_gqa();
  const LoraConfig l = qkvo_down(3);
  LoadedCheckpoint ck = lora_checkpoint(c, l);
  algorithms::AdamW opt(ck.adapters.layout(), {});
  for (size_t i = 0; i < opt.m().numel(); ++i) opt.m().data()[i] = 0.01f * float(i % 7);
  opt.set_step_count(9);
  auto bytes = encode_checkpoint(ck.meta, ck.params, &opt, &ck.adapters);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto back = decode_checkpoint(*bytes, "ck");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->meta.lora.rank, 3);
  EXPECT_EQ(back->meta.lora.alpha, 6.0);
  EXPECT_EQ(back->meta.lora.targets, l.targets);
  EXPECT_EQ(back->params.vec(), ck.params.vec());
  EXPECT_EQ(back->adapters.vec(), ck.adapters.vec());
  ASSERT_TRUE(back->has_optimizer);
  EXPECT_EQ(back->m.layout(), ck.adapters.layout());
  EXPECT_EQ(back->m.vec(), opt.m().vec());
  EXPECT_EQ(back->optimizer_step, 9);
  // A LoRA checkpoint without its adapters is refused; a plain one carries no LoRA keys.
  EXPECT_FALSE(encode_checkpoint(ck.meta, ck.params, nullptr, nullptr).ok());
  CheckpointMeta plain = ck.meta;
  plain.lora = {};
  auto plain_bytes = encode_checkpoint(plain, ck.params, nullptr);
  ASSERT_TRUE(plain_bytes.ok());
  EXPECT_EQ(plain_bytes->find("atoll.lora"), std::string::npos);
  auto plain_back = decode_checkpoint(*plain_bytes, "plain");
  ASSERT_TRUE(plain_back.ok());
  EXPECT_FALSE(algorithms::lora_enabled(plain_back->meta.lora));
  EXPECT_EQ(plain_back->adapters.numel(), 0u);
  // A flipped bit in the adapters is caught by their fingerprint.
  std::string damaged = *bytes;
  const size_t at = damaged.size() - 4 * opt.m().numel() * 2 - 5;  // inside the adapters' data
  damaged[at] ^= 0x10;
  auto bad = decode_checkpoint(damaged, "damaged");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("LoRA adapters do not match the recorded SHA-256"),
            std::string::npos)
      << bad.status().message();
}

TEST(PeftExport, NamesShapesRotateHalfRowsAndConfig) {
  const ModelConfig c = small_gqa();
  const LoraConfig l = qkvo_down(4);
  LoadedCheckpoint ck = lora_checkpoint(c, l);
  auto st = lora_to_peft(ck.adapters, l, c);
  ASSERT_TRUE(st.ok()) << st.status().message();
  ASSERT_EQ(st->tensors.size(), size_t(2 * 5 * c.layers));
  const int D = c.dim / c.heads;
  for (const auto& v : ck.adapters.layout().views()) {
    const algorithms::StTensor* t = st->find("base_model.model." + v.name);
    ASSERT_NE(t, nullptr) << v.name;
    EXPECT_EQ(t->shape, v.shape) << v.name;
    std::vector<float> got = t->to_f32();
    const std::vector<float> mine(ck.adapters.data() + v.offset,
                                  ck.adapters.data() + v.offset + v.numel());
    const bool q = v.name.find("q_proj.lora_B") != std::string::npos;
    const bool k = v.name.find("k_proj.lora_B") != std::string::npos;
    if (q || k) {
      EXPECT_NE(got, mine) << v.name << ": rows should be in rotate-half order";
      algorithms::rope_rows_from_hf(got.data(), q ? c.heads : 2, D, l.rank);
    }
    EXPECT_EQ(got, mine) << v.name;
  }
  EXPECT_NE(st->find("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"), nullptr);
  EXPECT_EQ(st->find("base_model.model.model.layers.0.mlp.up_proj.lora_A.weight"), nullptr);

  ck.meta.extra["hf.config"] = R"({"_name_or_path": "org/tiny-llama", "hidden_size": 16})";
  atl::testing::TempDir tmp;
  const std::string dir = tmp.path() + "/peft";
  ASSERT_TRUE(export_peft_dir(ck, dir).ok());
  auto cfg_text = read_file(dir + "/adapter_config.json");
  ASSERT_TRUE(cfg_text.ok());
  const json::object cfg = json::parse(*cfg_text).as_object();
  EXPECT_EQ(cfg.at("peft_type").as_string(), "LORA");
  EXPECT_EQ(cfg.at("task_type").as_string(), "CAUSAL_LM");
  EXPECT_EQ(cfg.at("r").as_int64(), 4);
  EXPECT_EQ(cfg.at("lora_alpha").as_int64(), 8);
  EXPECT_EQ(cfg.at("bias").as_string(), "none");
  EXPECT_EQ(cfg.at("lora_dropout").as_double(), 0.0);
  EXPECT_EQ(cfg.at("base_model_name_or_path").as_string(), "org/tiny-llama");
  const json::array& tm = cfg.at("target_modules").as_array();
  std::vector<std::string> modules;
  for (const auto& m : tm) modules.emplace_back(m.as_string());
  EXPECT_EQ(modules,
            (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "down_proj"}));
  auto weights = read_file(dir + "/adapter_model.safetensors");
  ASSERT_TRUE(weights.ok());
  auto file = algorithms::decode_safetensors(reinterpret_cast<const uint8_t*>(weights->data()),
                                             weights->size());
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->tensors.size(), st->tensors.size());
  // A checkpoint without adapters is refused with one line.
  LoadedCheckpoint plain = ck;
  plain.meta.lora = {};
  EXPECT_NE(export_peft_dir(plain, dir).message().find("no LoRA adapters"), std::string::npos);
}

// PEFT semantics on the Hugging Face side: W_hf + (alpha/r)·B_peft·A_peft for every target must
// be the merged export's tensor (q/k included: B's rows carry the rotate-half permutation).
TEST(PeftExport, MergedExportIsBasePlusScaledBAInTheHuggingFaceLayout) {
  const ModelConfig c = small_gqa();
  LoraConfig l = qkvo_down(2);
  l.targets = {"q", "k", "v", "o", "gate", "up", "down"};
  LoadedCheckpoint ck = lora_checkpoint(c, l);
  auto merged = merge_lora_checkpoint(ck);
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  EXPECT_FALSE(algorithms::lora_enabled(merged->meta.lora));
  auto merged_hf = algorithms::params_to_hf(merged->params, c, algorithms::DType::kF32);
  auto base_hf = algorithms::params_to_hf(ck.params, c, algorithms::DType::kF32);
  auto peft = lora_to_peft(ck.adapters, l, c);
  ASSERT_TRUE(merged_hf.ok() && base_hf.ok() && peft.ok());
  const double scale = l.alpha / l.rank;
  int checked = 0;
  for (const auto& a : algorithms::lora_adapters(l, c)) {
    const std::string w = a.a_name.substr(0, a.a_name.size() - 14) + ".weight";
    const auto W = base_hf->find(w)->to_f32();
    const auto M = merged_hf->find(w)->to_f32();
    const auto A = peft->find("base_model.model." + a.a_name)->to_f32();
    const auto B = peft->find("base_model.model." + a.b_name)->to_f32();
    double worst = 0, delta = 0;
    for (int o = 0; o < a.out; ++o)
      for (int i = 0; i < a.in; ++i) {
        double s = 0;
        for (int k = 0; k < l.rank; ++k) s += double(B[o * l.rank + k]) * A[k * a.in + i];
        const double want = W[o * a.in + i] + scale * s;
        worst = std::max(worst, std::fabs(want - M[o * a.in + i]));
        delta = std::max(delta, std::fabs(scale * s));
      }
    EXPECT_LT(worst, 1e-6) << w;
    EXPECT_GT(delta, 1e-3) << w << ": the adapter should change the weight";
    ++checked;
  }
  EXPECT_EQ(checked, 7 * c.layers);
  // Tensors without adapters are the base's, bit for bit.
  EXPECT_EQ(merged_hf->find("model.embed_tokens.weight")->to_f32(),
            base_hf->find("model.embed_tokens.weight")->to_f32());
}

}  // namespace
}  // namespace atl::node
