#include "node/peft_export.h"

#include <boost/json.hpp>
#include <cmath>
#include <filesystem>

#include "algorithms/model/hf_format.h"
#include "kernels/core/file_io.h"

namespace atl::node {

namespace json = boost::json;
namespace fs = std::filesystem;
using algorithms::ParamSet;

StatusOr<algorithms::Safetensors> lora_to_peft(const ParamSet& adapters,
                                               const algorithms::LoraConfig& lora,
                                               const algorithms::ModelConfig& model) {
  ATOLL_RETURN_IF_ERROR(algorithms::validate(lora, model));
  if (!(adapters.layout() == algorithms::make_lora_layout(lora, model)))
    return InvalidArgument("the adapters do not match the LoRA config");
  const int D = model.dim / model.heads;
  algorithms::Safetensors st;
  st.metadata["format"] = "pt";
  for (const auto& a : algorithms::lora_adapters(lora, model)) {
    for (const std::string* name : {&a.a_name, &a.b_name}) {
      const algorithms::ParamView* v = adapters.layout().find(*name);
      std::vector<float> values(adapters.data() + v->offset,
                                adapters.data() + v->offset + v->numel());
      const bool rope_rows = name == &a.b_name && (a.target == "q" || a.target == "k");
      if (rope_rows)
        algorithms::rope_rows_to_hf(values.data(),
                                    a.target == "q" ? model.heads : algorithms::num_kv_heads(model),
                                    D, lora.rank);
      st.tensors.push_back(
          algorithms::make_tensor("base_model.model." + *name, v->shape, values.data()));
    }
  }
  return st;
}

std::string peft_adapter_config_json(const algorithms::LoraConfig& lora,
                                     const std::string& base_model_name_or_path) {
  json::object o;
  o["peft_type"] = "LORA";
  o["task_type"] = "CAUSAL_LM";
  o["r"] = lora.rank;
  // An integral alpha as an integer, as PEFT writes it (16, not 1.6E1).
  if (lora.alpha == std::floor(lora.alpha) && std::fabs(lora.alpha) < 1e15)
    o["lora_alpha"] = static_cast<int64_t>(lora.alpha);
  else
    o["lora_alpha"] = lora.alpha;
  json::array targets;
  for (const auto& t : lora.targets) targets.emplace_back(algorithms::lora_module_name(t));
  o["target_modules"] = std::move(targets);
  o["lora_dropout"] = 0.0;
  o["bias"] = "none";
  o["fan_in_fan_out"] = false;
  o["inference_mode"] = true;
  o["init_lora_weights"] = true;
  o["use_rslora"] = false;
  o["use_dora"] = false;
  o["modules_to_save"] = nullptr;
  if (base_model_name_or_path.empty())
    o["base_model_name_or_path"] = nullptr;
  else
    o["base_model_name_or_path"] = base_model_name_or_path;
  return json::serialize(o) + "\n";
}

namespace {

// _name_or_path of the config.json the base was imported from, or "".
std::string imported_name_or_path(const LoadedCheckpoint& ck) {
  auto it = ck.meta.extra.find("hf.config");
  if (it == ck.meta.extra.end()) return "";
  json::error_code ec;
  json::value v = json::parse(it->second, ec);
  if (ec || !v.is_object()) return "";
  const json::value* name = v.as_object().if_contains("_name_or_path");
  return name && name->is_string() ? std::string(name->as_string()) : "";
}

}  // namespace

Status export_peft_dir(const LoadedCheckpoint& ck, const std::string& dir_text) {
  if (!algorithms::lora_enabled(ck.meta.lora))
    return InvalidArgument(
        "the checkpoint has no LoRA adapters (train with --lora-rank R to "
        "get some; `atoll export hf` writes full models)");
  ATOLL_ASSIGN_OR_RETURN(algorithms::Safetensors st,
                         lora_to_peft(ck.adapters, ck.meta.lora, ck.meta.model));
  ATOLL_ASSIGN_OR_RETURN(std::vector<uint8_t> weights, algorithms::encode_safetensors(st));
  const fs::path dir(dir_text);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("cannot create " + dir_text + ": " + ec.message());
  ATOLL_RETURN_IF_ERROR(
      write_file_atomic((dir / "adapter_config.json").string(),
                        peft_adapter_config_json(ck.meta.lora, imported_name_or_path(ck))));
  return write_file_atomic(
      (dir / "adapter_model.safetensors").string(),
      std::string_view(reinterpret_cast<const char*>(weights.data()), weights.size()));
}

StatusOr<LoadedCheckpoint> merge_lora_checkpoint(const LoadedCheckpoint& ck) {
  if (!algorithms::lora_enabled(ck.meta.lora))
    return InvalidArgument("the checkpoint has no LoRA adapters to merge");
  LoadedCheckpoint out;
  out.meta = ck.meta;
  out.meta.lora = {};
  ATOLL_ASSIGN_OR_RETURN(
      out.params, algorithms::merge_lora(ck.params, ck.adapters, ck.meta.lora, ck.meta.model));
  out.meta.fingerprint = out.params.fingerprint();
  return out;
}

StatusOr<LoadedCheckpoint> merged_if_lora(LoadedCheckpoint ck) {
  if (!algorithms::lora_enabled(ck.meta.lora)) return ck;
  return merge_lora_checkpoint(ck);
}

}  // namespace atl::node
