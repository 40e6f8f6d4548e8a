// LoRA checkpoints out to Hugging Face PEFT (`atoll export peft CKPT --out DIR`) and merged into
// plain weights (`atoll export hf CKPT --merge-lora`). docs/model.md, "LoRA".
#pragma once

#include <string>

#include "algorithms/model/lora.h"
#include "algorithms/model/safetensors.h"
#include "kernels/core/status.h"
#include "node/checkpoint.h"

namespace atl::node {

// The adapters as PEFT tensors, F32, in layout order: "base_model.model." + Atoll's name
// (base_model.model.model.layers.{l}.self_attn.q_proj.lora_A.weight, ...). lora_B of q_proj and
// k_proj has its rows converted to Hugging Face's rotate-half order (per head, k per KV head);
// every lora_A, and lora_B of the other projections, is unchanged (A acts on the input).
StatusOr<algorithms::Safetensors> lora_to_peft(const algorithms::ParamSet& adapters,
                                               const algorithms::LoraConfig& lora,
                                               const algorithms::ModelConfig& model);

// adapter_config.json: peft_type LORA, task_type CAUSAL_LM, r, lora_alpha, target_modules
// (q_proj, ...), lora_dropout 0, bias "none", base_model_name_or_path (null when "").
std::string peft_adapter_config_json(const algorithms::LoraConfig& lora,
                                     const std::string& base_model_name_or_path);

// Writes dir/adapter_config.json and dir/adapter_model.safetensors (created if missing; files
// replaced atomically) for a LoRA checkpoint. base_model_name_or_path is the imported
// config.json's _name_or_path when the checkpoint has one.
Status export_peft_dir(const LoadedCheckpoint& checkpoint, const std::string& dir);

// The checkpoint with its adapters merged into the base (W + (alpha/r)·B·A) and no LoRA left:
// what `atoll export hf --merge-lora` writes.
StatusOr<LoadedCheckpoint> merge_lora_checkpoint(const LoadedCheckpoint& checkpoint);

// For readers that take a plain model (--init-from, distillation teachers): a LoRA checkpoint
// merged, any other returned as it is.
StatusOr<LoadedCheckpoint> merged_if_lora(LoadedCheckpoint checkpoint);

}  // namespace atl::node
