// Hugging Face Llama-family models (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM) in
// memory: config.json <-> ModelConfig, and their safetensors tensors <-> an Atoll ParamSet.
// Files are the caller's business (node/hf_model.h reads and writes the directories).
//
// The one difference in the weights is RoPE's pairing. Atoll rotates adjacent pairs
// (x[2i], x[2i+1]) of a head; Hugging Face's rotate_half rotates (x[i], x[i + D/2]), both by
// pos·θ^(-2i/D). So within every head of q_proj and k_proj (rows, and the biases likewise):
//   atoll row h·D + 2i     = hf row h·D + i
//   atoll row h·D + 2i + 1 = hf row h·D + D/2 + i          (0 <= i < D/2)
// a permutation, so import followed by export gives back the same bits.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "algorithms/model/safetensors.h"
#include "kernels/core/status.h"

namespace atl::algorithms {

// What a config.json describes, in Atoll's terms.
struct HfModelInfo {
  ModelConfig model;         // seq_len = max_position_embeddings unless overridden
  std::string architecture;  // "LlamaForCausalLM", "Qwen2ForCausalLM" or "MistralForCausalLM"
};

// Parses config.json. seq_len_override > 0 replaces max_position_embeddings as Atoll's context.
// One line for each refusal: a key twice, unsupported architecture, a model_type other than the
// architecture's, quantization_config, partial_rotary_factor other than 1, rope_scaling present,
// hidden_act other than silu, a sliding window shorter than the context on a layer that uses it
// (read per architecture as transformers does: none for Llama, Mistral's sliding_window, Qwen2's
// with use_sliding_window on the layers from max_window_layers or those layer_types marks), a
// head_dim that is not hidden_size / num_attention_heads, an o_proj or MLP bias, a
// bos/eos/pad_token_id outside [0, vocab_size), or a missing / malformed field.
StatusOr<HfModelInfo> parse_hf_config(const std::string& config_json, int seq_len_override = 0);

// Whether `text` is one JSON object with no key twice in any object (what transformers can read
// from tokenizer_config.json or generation_config.json, meaning one thing); else one line naming
// `what`.
Status check_hf_json_object(const std::string& text, const std::string& what);

// config.json for `cfg`: `base_json` (the config the model was imported from, "" for none)
// with every model field rewritten from cfg, architecture, hidden_act "silu" and torch_dtype
// ("float32" or "bfloat16"); max_position_embeddings stays the base's (the model's context; an
// import's --seq-len only shortens what Atoll trains on) unless cfg.seq_len is longer or there is
// no base. architecture "" picks Qwen2ForCausalLM for a model with q/k/v biases, else
// LlamaForCausalLM.
StatusOr<std::string> hf_config_json(const ModelConfig& cfg, const std::string& architecture,
                                     const std::string& base_json, const std::string& torch_dtype);

// model.safetensors.index.json: weight_map (tensor name -> shard file) and the shard files, in
// order of first appearance in weight_map.
struct HfIndex {
  std::vector<std::string> files;
  std::map<std::string, std::string> weight_map;
};
StatusOr<HfIndex> parse_hf_index(const std::string& index_json);

// Whether the shards (in index.files order) hold what weight_map says: one line naming the first
// tensor weight_map lists in a shard that does not hold it, or a tensor of a shard that weight_map
// does not list there.
Status check_hf_index(const HfIndex& index, const std::vector<Safetensors>& shards);

// In place, rows (heads·head_dim, cols): Hugging Face rotate-half order -> Atoll pair order.
void rope_rows_from_hf(float* rows, int heads, int head_dim, int64_t cols);
// The inverse: Atoll pair order -> rotate-half order.
void rope_rows_to_hf(float* rows, int heads, int head_dim, int64_t cols);

// Fills `params` (layout make_layout(cfg)) from the tensors of one or more shards, converting
// F32 / BF16 / F16 to fp32 and q/k rows to the pair layout. Refuses, naming the tensor: a
// missing tensor, a mis-shaped one, one in another dtype, one present twice, one holding a NaN
// or infinity (its first, by index and value), or one the model has no place for
// (rotary_emb.inv_freq buffers and, for a tied model, an lm_head.weight are ignored).
Status params_from_hf(const std::vector<const Safetensors*>& shards, const ModelConfig& cfg,
                      ParamSet& params);

// The parameters as Hugging Face tensors (rotate-half q/k rows), F32 or BF16 (round to nearest
// even), in layout order; metadata {"format": "pt"}. No lm_head.weight for a tied model.
StatusOr<Safetensors> params_to_hf(const ParamSet& params, const ModelConfig& cfg, DType dtype);

}  // namespace atl::algorithms
