// Hugging Face model directories <-> Atoll checkpoints (`atoll import hf`, `atoll export hf`).
// The tensor and config.json conversions are algorithms/model/hf_format.h; this file reads and
// writes the directories and carries the tokenizer files verbatim in the checkpoint.
#pragma once

#include <string>
#include <vector>

#include "algorithms/model/param_set.h"
#include "algorithms/model/safetensors.h"
#include "kernels/core/status.h"
#include "node/checkpoint.h"

namespace atl::node {

struct HfImported {
  // model, tokenizer files, extra "hf.architecture", "hf.config" and "hf.generation_config"
  CheckpointMeta meta;
  algorithms::ParamSet params;
  std::vector<std::string> files;  // the files read (what the checkpoint must not overwrite)
};

// Reads `dir`: config.json, the weights (model.safetensors, or model.safetensors.index.json and
// the shards it names), tokenizer.json (required), tokenizer_config.json and
// generation_config.json (optional; carried verbatim, extra "hf.generation_config" for the latter,
// and refused unless each is one JSON object with no key twice). A PEFT adapter folder (no
// config.json, an adapter_config.json) is refused with a line saying what to import instead.
// seq_len > 0 overrides max_position_embeddings as the model's context (at most that). The
// tokenizer.json must load with the tokenizer every reader of the checkpoint uses (byte-level
// BPE) and have no id beyond the model's vocabulary. Every problem is one line naming the file
// and what is wrong (hf_format.h lists the refusals).
StatusOr<HfImported> import_hf_dir(const std::string& dir, int seq_len = 0);

// The checkpoint's tokenizer as a Hugging Face tokenizer.json: an imported one as it was, the
// byte tokenizer (an empty blob, with a vocabulary of at least its 256 ids) as
// algorithms::data::byte_tokenizer_json(); "" for Atoll's own
// BPE, which has no exact tokenizer.json form (its text chunking, atoll-chunks-1, is not one of
// the pre-tokenizers tokenizer.json can name).
std::string hf_tokenizer_json_of(const std::string& tokenizer_blob, int64_t vocab);

// Writes `dir` (created if missing): config.json, model.safetensors (F32 or BF16) and the
// tokenizer file(s): tokenizer.json when hf_tokenizer_json_of has one (so that `atoll import hf`
// and `transformers` read the export back), tokenizer_config.json and generation_config.json
// when the checkpoint carries them. Files are replaced atomically. `written`, when given,
// receives the names of the files written, in that order.
Status export_hf_dir(const LoadedCheckpoint& checkpoint, const std::string& dir,
                     algorithms::DType dtype, std::vector<std::string>* written = nullptr);

}  // namespace atl::node
