// The frozen base of a federated LoRA experiment (docs/federated-finetuning.md): the model
// every site fine-tunes adapters over, read from a checkpoint (`atoll train` or `atoll import
// hf` writes one) by the coordinator at experiment creation and by every node (`atoll node
// --base CKPT`). θ of such an experiment is the adapter set only; the base never travels, so
// each side checks that it holds the same one by the SHA-256 fingerprint of its parameters.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "algorithms/model/frozen_base.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"
#include "node/checkpoint.h"
#include "node/site_config.h"

namespace atl::node {

struct BaseModel {
  std::string path;                                    // where it was read from
  algorithms::ModelConfig model;                       // the checkpoint's model config
  // make_layout(model); mutable: frozen(kBf16, release_fp32 = true) lets go of it.
  mutable std::shared_ptr<const algorithms::ParamSet> params;
  std::string fingerprint;  // SHA-256 of params (ParamSet::fingerprint)
  // Its metadata but the parameters' (tokenizer blob, "" = bytes; the Hugging Face files of an
  // import): what checkpoints made from the base carry over (carry_base_meta).
  CheckpointMeta meta;

  // The base held as an experiment's [lora] base_dtype says (algorithms/model/frozen_base.h),
  // shared by every site of this process that asks: fp32 shares `params`; bf16 is converted
  // once. With `release_fp32` (a process whose only user of the base is one site: `atoll node`)
  // the bf16 conversion also lets go of `params` here, so the process holds 2 bytes a
  // parameter; `params` is then null and fp32() widens the bf16 copy.
  std::shared_ptr<const algorithms::FrozenBase> frozen(algorithms::BaseStorage storage,
                                                       bool release_fp32) const;
  // The fp32 parameters: `params`, or after a release the bf16 copy widened (a new buffer).
  std::shared_ptr<const algorithms::ParamSet> fp32() const;

 private:
  struct Converted {
    std::mutex mu;
    std::shared_ptr<const algorithms::FrozenBase> bf16;
  };
  std::shared_ptr<Converted> converted_ = std::make_shared<Converted>();
};

// Reads and verifies a base checkpoint (its recorded fingerprint is checked on load). A LoRA
// checkpoint is refused with one line: adapters fine-tune a plain model (merge it first).
// Messages start with `what` and the path ("--base PATH: ...", "lora.base PATH: ...").
StatusOr<BaseModel> load_base_model(const std::string& path, const std::string& what = "--base");

// Whether `base` is the frozen base `site` fine-tunes: OK when the experiment has no adapters
// (the base, if any, is unused); else one line saying to pass --base (null base), or naming both
// fingerprints (a different base), or the model field that differs.
Status check_base_model(const BaseModel* base, const SiteConfig& site);

}  // namespace atl::node
