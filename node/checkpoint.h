// Checkpoints are safetensors files: the parameters under their Hugging Face Llama names (so
// the ecosystem can read them), optionally the AdamW moments under "optimizer.m." and
// "optimizer.v.", and Atoll metadata in the header (model config, step, seed, tokenizer,
// experiment, round, SHA-256 fingerprint of the parameters). The Hugging Face model fields
// (kv_heads, tie_word_embeddings, attention_bias) are written only when they differ from the
// defaults, so checkpoints of the original architecture are byte-for-byte as before.
// A LoRA checkpoint (docs/model.md, "LoRA") holds the frozen base as its parameters and the
// adapters beside them under their own names (…q_proj.lora_A.weight, …), with metadata
// atoll.lora.rank / alpha / targets / fingerprint; its optimizer moments have the adapters'
// layout. Without adapters none of these keys or tensors are written.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "algorithms/optim/adamw.h"
#include "kernels/core/status.h"

namespace atl::node {

struct CheckpointMeta {
  algorithms::ModelConfig model;
  int64_t step = 0;          // training steps completed (next step to run)
  uint64_t seed = 0;
  // The tokenizer, as node::tokenizer_from_blob reads it: "" = bytes, a serialized Atoll BPE, or
  // the verbatim text of a Hugging Face tokenizer.json (atoll import hf, --tokenizer hf:PATH).
  std::string tokenizer;
  // Trained on token ids without their tokenizer (a token file, docs/data.md): the ids stand for
  // unknown text, so there is no tokenizer to export, no text to generate or evaluate in bits
  // per byte. Metadata atoll.tokenizer.none, written only when set.
  bool token_ids_only = false;
  // tokenizer_config.json carried verbatim from a Hugging Face directory ("" = none), stored as
  // metadata atoll.tokenizer.hf_config_json and written back by atoll export hf.
  std::string hf_tokenizer_config_json;
  std::string experiment;    // DiLoCo experiment name, "" for single-site runs
  int64_t round = -1;        // DiLoCo round of θ, -1 for single-site runs
  std::string fingerprint;   // SHA-256 of the parameters (checked on load)
  std::map<std::string, std::string> extra;  // free-form ("atoll.x.*" keys)
  algorithms::LoraConfig lora;               // rank 0: no adapters
  // Tokens per row the model was trained on, when fewer than model.seq_len (its context, e.g.
  // an imported model's max_position_embeddings); 0 = model.seq_len. Metadata atoll.window,
  // written only when set, so other checkpoints are byte-for-byte as before.
  int window = 0;
};

// The window a checkpoint trains and evaluates on: meta.window, else the model's seq_len.
int training_window(const CheckpointMeta& meta);

// What a checkpoint made from a base checkpoint (atoll train --base or --resume, a LoRA
// experiment's result, a LoRA site's kept θ) carries over from it: the tokenizer, the Hugging Face
// files an import recorded (tokenizer_config.json, extra hf.config, hf.architecture and
// hf.generation_config) and the model's context. meta.model is the model as trained; when its
// seq_len is shorter than the base's context, that seq_len becomes meta.window (unless set) and
// the base's context is kept, so `atoll export hf` writes the base's max_position_embeddings.
void carry_base_meta(const CheckpointMeta& base, CheckpointMeta& meta);

// Encodes params (+ optimizer state when given) and metadata as safetensors bytes. With
// meta.lora enabled, `adapters` (make_lora_layout) are required and params is the frozen base;
// the optimizer, if given, is the adapters' AdamW.
StatusOr<std::string> encode_checkpoint(const CheckpointMeta& meta,
                                        const algorithms::ParamSet& params,
                                        const algorithms::AdamW* optimizer,
                                        const algorithms::ParamSet* adapters = nullptr);
Status save_checkpoint(const std::string& path, const CheckpointMeta& meta,
                       const algorithms::ParamSet& params, const algorithms::AdamW* optimizer,
                       const algorithms::ParamSet* adapters = nullptr);

struct LoadedCheckpoint {
  CheckpointMeta meta;
  algorithms::ParamSet params;    // the model, or the frozen base of a LoRA checkpoint
  algorithms::ParamSet adapters;  // LoRA adapters (meta.lora enabled), else empty
  bool has_optimizer = false;     // m and v: the adapters' layout for a LoRA checkpoint
  algorithms::ParamSet m, v;
  int64_t optimizer_step = 0;
};

// Validates everything: format, model config, every tensor's name and shape, the fingerprint.
StatusOr<LoadedCheckpoint> decode_checkpoint(const std::string& bytes, const std::string& what);
StatusOr<LoadedCheckpoint> load_checkpoint(const std::string& path);

}  // namespace atl::node
