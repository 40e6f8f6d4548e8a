#include "node/base_model.h"

#include <utility>

#include "node/checkpoint.h"

namespace atl::node {

StatusOr<BaseModel> load_base_model(const std::string& path, const std::string& what) {
  auto ck = load_checkpoint(path);
  if (!ck.ok()) return InvalidArgument(what + " " + path + ": " + ck.status().message());
  if (algorithms::lora_enabled(ck->meta.lora))
    return InvalidArgument(what + " " + path +
                           " is a LoRA checkpoint: merge it first (atoll export hf --merge-lora, "
                           "then atoll import hf) and use the result as the base");
  BaseModel b;
  b.path = path;
  b.model = ck->meta.model;
  b.fingerprint = ck->params.fingerprint();
  b.meta = std::move(ck->meta);
  b.params = std::make_shared<const algorithms::ParamSet>(std::move(ck->params));
  return b;
}

std::shared_ptr<const algorithms::FrozenBase> BaseModel::frozen(algorithms::BaseStorage storage,
                                                                bool release_fp32) const {
  std::lock_guard<std::mutex> lock(converted_->mu);
  if (storage == algorithms::BaseStorage::kFp32 && params)
    return algorithms::FrozenBase::fp32(params);
  if (!converted_->bf16) converted_->bf16 = algorithms::FrozenBase::bf16(*params);
  if (storage == algorithms::BaseStorage::kFp32)  // released earlier: widen the copy
    return algorithms::FrozenBase::fp32(
        std::make_shared<const algorithms::ParamSet>(converted_->bf16->widened()));
  if (release_fp32) params.reset();
  return converted_->bf16;
}

std::shared_ptr<const algorithms::ParamSet> BaseModel::fp32() const {
  if (params) return params;
  std::lock_guard<std::mutex> lock(converted_->mu);
  return std::make_shared<const algorithms::ParamSet>(converted_->bf16->widened());
}

Status check_base_model(const BaseModel* base, const SiteConfig& site) {
  if (!site.lora_enabled()) return Status::Ok();
  const std::string want = site.base_fingerprint.substr(0, 16);
  if (base == nullptr)
    return FailedPrecondition(
        "this experiment fine-tunes LoRA adapters over a frozen base (sha256 " + want +
        "...): pass --base CKPT with that base checkpoint");
  if (base->fingerprint != site.base_fingerprint)
    return FailedPrecondition("--base " + base->path + " has sha256 " +
                              base->fingerprint.substr(0, 16) +
                              "..., the experiment's base has sha256 " + want +
                              "...: pass the experiment's base checkpoint");
  // seq_len and the MoE loss weights do not change what the parameters compute.
  for (const auto& d : algorithms::model_differences(base->model, site.model)) {
    if (d.field == "seq_len" || d.field == "moe_aux_coef" || d.field == "moe_z_coef") continue;
    return FailedPrecondition("--base " + base->path + ": its model has " + d.field + " = " + d.a +
                              ", the experiment's " + d.b);
  }
  return Status::Ok();
}

}  // namespace atl::node
