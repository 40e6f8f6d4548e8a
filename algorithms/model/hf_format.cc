#include "algorithms/model/hf_format.h"

#include <boost/json.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string_view>

#include "kernels/formats/convert.h"

namespace atl::algorithms {

namespace json = boost::json;

namespace {

constexpr const char* kSupported =
    "atoll import hf reads LlamaForCausalLM, Qwen2ForCausalLM and MistralForCausalLM";

StatusOr<json::object> parse_object(const std::string& text, const std::string& what) {
  json::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) return InvalidArgument(what + " is not valid JSON: " + ec.message());
  if (!v.is_object()) return InvalidArgument(what + " is not a JSON object");
  return std::move(v.as_object());
}

// An integer field (JSON integers only; 1.0 is refused like any other non-integer).
StatusOr<int64_t> int_field(const json::object& o, const char* key, int64_t min, int64_t max) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return InvalidArgument(std::string("config.json has no ") + key);
  int64_t x = 0;
  if (v->is_int64()) {
    x = v->as_int64();
  } else if (v->is_uint64() && v->as_uint64() <= uint64_t(INT64_MAX)) {
    x = int64_t(v->as_uint64());
  } else {
    return InvalidArgument(std::string("config.json: ") + key + " must be an integer, got " +
                           json::serialize(*v));
  }
  if (x < min || x > max)
    return InvalidArgument(std::string("config.json: ") + key + " = " + std::to_string(x) +
                           " is outside [" + std::to_string(min) + ", " + std::to_string(max) +
                           "]");
  return x;
}

StatusOr<double> number_field(const json::object& o, const char* key, double fallback) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_number())
    return InvalidArgument(std::string("config.json: ") + key + " must be a number, got " +
                           json::serialize(*v));
  return v->to_number<double>();
}

StatusOr<bool> bool_field(const json::object& o, const char* key, bool fallback) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_bool())
    return InvalidArgument(std::string("config.json: ") + key + " must be true or false, got " +
                           json::serialize(*v));
  return v->as_bool();
}

// rope_scaling (transformers v4) and rope_parameters (v5, which moved rope_theta into it): absent,
// null or rope_type "default" is plain RoPE; any other type (linear, dynamic, yarn, llama3, ...)
// rescales the frequencies, which Atoll does not.
Status check_plain_rope(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return Status::Ok();
  const json::value* type = nullptr;
  if (v->is_object()) {
    type = v->as_object().if_contains("rope_type");
    if (!type) type = v->as_object().if_contains("type");  // the older spelling
  }
  // rope_parameters without a type is plain RoPE (transformers fills in "default").
  const bool plain =
      v->is_object() && ((!type && std::string_view(key) == "rope_parameters") ||
                         (type && type->is_string() && type->as_string() == "default"));
  if (plain) return Status::Ok();
  return InvalidArgument(std::string("config.json sets ") + key + " (" + json::serialize(*v) +
                         "): Atoll implements plain RoPE only; import a model without it");
}

// rope_theta: rope_parameters.rope_theta (transformers v5), else the top-level key (v4), else
// Hugging Face's default 10000.
StatusOr<double> rope_theta(const json::object& o) {
  if (const json::value* rp = o.if_contains("rope_parameters"); rp && rp->is_object()) {
    const json::object& p = rp->as_object();
    if (const json::value* t = p.if_contains("rope_theta"); t && !t->is_null()) {
      if (!t->is_number())
        return InvalidArgument("config.json: rope_parameters.rope_theta must be a number, got " +
                               json::serialize(*t));
      return t->to_number<double>();
    }
  }
  return number_field(o, "rope_theta", 10000.0);
}

// Permutes each head's rows: to_atoll ? hf -> atoll : atoll -> hf (see the header).
void permute_rope_rows(float* rows, int heads, int D, int64_t cols, bool to_atoll) {
  std::vector<float> head(static_cast<size_t>(D) * cols);
  const size_t row_bytes = sizeof(float) * size_t(cols);
  for (int h = 0; h < heads; ++h) {
    float* base = rows + size_t(h) * D * cols;
    std::memcpy(head.data(), base, head.size() * sizeof(float));
    for (int i = 0; i < D / 2; ++i)
      for (int half = 0; half < 2; ++half) {
        const size_t pair_row = size_t(2 * i + half), split_row = size_t(half * (D / 2) + i);
        const size_t dst = to_atoll ? pair_row : split_row, src = to_atoll ? split_row : pair_row;
        std::memcpy(base + dst * cols, head.data() + src * cols, row_bytes);
      }
  }
}

// Heads whose rows a tensor holds, when RoPE applies to it (q and k, weight or bias); else 0.
int rope_heads(const std::string& name, const ModelConfig& cfg) {
  const bool q =
      name.ends_with("self_attn.q_proj.weight") || name.ends_with("self_attn.q_proj.bias");
  const bool k =
      name.ends_with("self_attn.k_proj.weight") || name.ends_with("self_attn.k_proj.bias");
  return q ? cfg.heads : k ? num_kv_heads(cfg) : 0;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + ")";
}

}  // namespace

StatusOr<HfModelInfo> parse_hf_config(const std::string& config_json, int seq_len_override) {
  ATOLL_ASSIGN_OR_RETURN(json::object o, parse_object(config_json, "config.json"));
  HfModelInfo info;
  const json::value* arch = o.if_contains("architectures");
  if (!arch || !arch->is_array() || arch->as_array().size() != 1 ||
      !arch->as_array()[0].is_string())
    return InvalidArgument("config.json: architectures must list exactly one architecture; " +
                           std::string(kSupported));
  info.architecture = std::string(arch->as_array()[0].as_string());
  const bool llama = info.architecture == "LlamaForCausalLM",
             qwen2 = info.architecture == "Qwen2ForCausalLM",
             mistral = info.architecture == "MistralForCausalLM";
  if (!llama && !qwen2 && !mistral)
    return InvalidArgument("unsupported architecture " + info.architecture + ": " + kSupported);
  ATOLL_RETURN_IF_ERROR(check_plain_rope(o, "rope_scaling"));
  ATOLL_RETURN_IF_ERROR(check_plain_rope(o, "rope_parameters"));
  // "swish" is transformers' other name for the same function (ACT2FN maps both to SiLU).
  if (const json::value* act = o.if_contains("hidden_act");
      act && !(act->is_string() && (act->as_string() == "silu" || act->as_string() == "swish")))
    return InvalidArgument("config.json: hidden_act is " + json::serialize(*act) +
                           ", Atoll's SwiGLU needs \"silu\"");
  ATOLL_ASSIGN_OR_RETURN(bool o_bias, bool_field(o, "attention_bias", false));
  ATOLL_ASSIGN_OR_RETURN(bool mlp_bias, bool_field(o, "mlp_bias", false));
  if (!qwen2 && o_bias)
    return InvalidArgument(
        "config.json: attention_bias = true gives " + info.architecture +
        " an o_proj bias, which Atoll does not have (only Qwen2's q/k/v biases)");
  if (mlp_bias) return InvalidArgument("config.json: mlp_bias = true is not supported");

  ModelConfig& m = info.model;
  constexpr int64_t kMax = 1 << 20;
  ATOLL_ASSIGN_OR_RETURN(int64_t vocab, int_field(o, "vocab_size", 1, 1 << 24));
  ATOLL_ASSIGN_OR_RETURN(int64_t dim, int_field(o, "hidden_size", 1, kMax));
  ATOLL_ASSIGN_OR_RETURN(int64_t layers, int_field(o, "num_hidden_layers", 1, kMax));
  ATOLL_ASSIGN_OR_RETURN(int64_t heads, int_field(o, "num_attention_heads", 1, kMax));
  ATOLL_ASSIGN_OR_RETURN(int64_t ffn, int_field(o, "intermediate_size", 1, kMax));
  int64_t kv = heads;  // HF Llama's default (None = num_attention_heads)
  if (const json::value* v = o.if_contains("num_key_value_heads"); v && !v->is_null()) {
    ATOLL_ASSIGN_OR_RETURN(kv, int_field(o, "num_key_value_heads", 1, kMax));
  }
  int64_t ctx = seq_len_override;
  if (const json::value* mpe = o.if_contains("max_position_embeddings"); mpe && !mpe->is_null()) {
    ATOLL_ASSIGN_OR_RETURN(int64_t max_pos, int_field(o, "max_position_embeddings", 1, kMax));
    if (ctx > max_pos)
      return InvalidArgument("--seq-len " + std::to_string(ctx) +
                             " is longer than config.json's max_position_embeddings " +
                             std::to_string(max_pos) + ": give at most " + std::to_string(max_pos));
    if (ctx <= 0) ctx = max_pos;
  } else if (ctx <= 0) {
    return InvalidArgument(
        "config.json has no max_position_embeddings: give the model's context with --seq-len N");
  }
  if (const json::value* hd = o.if_contains("head_dim"); hd && !hd->is_null()) {
    ATOLL_ASSIGN_OR_RETURN(int64_t head_dim, int_field(o, "head_dim", 1, kMax));
    if (head_dim * heads != dim)
      return InvalidArgument("config.json: head_dim " + std::to_string(head_dim) +
                             " is not hidden_size / num_attention_heads = " + std::to_string(dim) +
                             " / " + std::to_string(heads) + "; Atoll needs C = heads · head_dim");
  }
  // A sliding window at least as long as the context changes nothing; a shorter one would.
  const json::value* sw = o.if_contains("sliding_window");
  ATOLL_ASSIGN_OR_RETURN(bool use_sw, bool_field(o, "use_sliding_window", !qwen2));
  if (sw && !sw->is_null() && use_sw) {
    ATOLL_ASSIGN_OR_RETURN(int64_t window, int_field(o, "sliding_window", 1, INT64_MAX));
    if (window < ctx)
      return InvalidArgument("config.json: sliding_window " + std::to_string(window) +
                             " is shorter than the context " + std::to_string(ctx) +
                             "; Atoll attends to the full context (import with --seq-len " +
                             std::to_string(window) + " or less)");
  }
  m.vocab = int(vocab);
  m.dim = int(dim);
  m.layers = int(layers);
  m.heads = int(heads);
  m.kv_heads = kv == heads ? 0 : int(kv);
  m.ffn_hidden = int(ffn);
  m.seq_len = int(ctx);
  ATOLL_ASSIGN_OR_RETURN(m.rope_base, rope_theta(o));
  ATOLL_ASSIGN_OR_RETURN(m.norm_eps, number_field(o, "rms_norm_eps", 1e-6));
  // LlamaConfig, Qwen2Config and MistralConfig all default to an untied head.
  ATOLL_ASSIGN_OR_RETURN(m.tie_word_embeddings, bool_field(o, "tie_word_embeddings", false));
  m.attention_bias = qwen2;  // Qwen2 always has q/k/v biases
  // Messages name config.json's keys (--seq-len sets the context when it is given).
  static const ModelFieldNames kHfNames = {.vocab = "vocab_size",
                                           .dim = "hidden_size",
                                           .layers = "num_hidden_layers",
                                           .heads = "num_attention_heads",
                                           .kv_heads = "num_key_value_heads",
                                           .ffn_hidden = "intermediate_size",
                                           .seq_len = "max_position_embeddings",
                                           .rope_base = "rope_theta",
                                           .norm_eps = "rms_norm_eps"};
  if (Status s = validate(m, kHfNames); !s.ok())
    return InvalidArgument("config.json: " + s.message());
  return info;
}

StatusOr<std::string> hf_config_json(const ModelConfig& cfg, const std::string& architecture,
                                     const std::string& base_json, const std::string& torch_dtype) {
  json::object o;
  if (!base_json.empty()) {
    ATOLL_ASSIGN_OR_RETURN(o, parse_object(base_json, "the imported config.json"));
  }
  std::string arch = architecture;
  if (arch.empty()) arch = cfg.attention_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  if (cfg.attention_bias && arch != "Qwen2ForCausalLM")
    return InvalidArgument("a model with q/k/v biases exports as Qwen2ForCausalLM, not " + arch);
  if (!cfg.attention_bias && arch == "Qwen2ForCausalLM")
    return InvalidArgument("Qwen2ForCausalLM has q/k/v biases; this model has none");
  if (cfg.moe_experts > 0)
    return InvalidArgument("atoll export hf writes dense models; this one has MoE layers");
  o["architectures"] = json::array{json::string(arch)};
  o["model_type"] = arch == "Qwen2ForCausalLM"     ? "qwen2"
                    : arch == "MistralForCausalLM" ? "mistral"
                                                   : "llama";
  o["vocab_size"] = cfg.vocab;
  o["hidden_size"] = cfg.dim;
  o["num_hidden_layers"] = cfg.layers;
  o["num_attention_heads"] = cfg.heads;
  o["num_key_value_heads"] = num_kv_heads(cfg);
  o["intermediate_size"] = cfg.ffn_hidden;
  o["max_position_embeddings"] = cfg.seq_len;
  // Where the imported config keeps it: rope_parameters (transformers v5) or the top level.
  if (json::value* rp = o.if_contains("rope_parameters"); rp && rp->is_object())
    rp->as_object()["rope_theta"] = cfg.rope_base;
  else
    o["rope_theta"] = cfg.rope_base;
  o["rms_norm_eps"] = cfg.norm_eps;
  o["tie_word_embeddings"] = cfg.tie_word_embeddings;
  o["hidden_act"] = "silu";
  o["torch_dtype"] = torch_dtype;
  if (arch != "Qwen2ForCausalLM") o["attention_bias"] = false;
  return json::serialize(o);
}

StatusOr<HfIndex> parse_hf_index(const std::string& index_json) {
  ATOLL_ASSIGN_OR_RETURN(json::object o, parse_object(index_json, "model.safetensors.index.json"));
  const json::value* wm = o.if_contains("weight_map");
  if (!wm || !wm->is_object())
    return InvalidArgument("model.safetensors.index.json has no weight_map object");
  HfIndex index;
  std::set<std::string> seen;
  for (const auto& kv : wm->as_object()) {
    if (!kv.value().is_string())
      return InvalidArgument("model.safetensors.index.json: weight_map[" + std::string(kv.key()) +
                             "] is not a file name");
    std::string f(kv.value().as_string());
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      return InvalidArgument("model.safetensors.index.json names shard '" + f +
                             "'; shards must be plain file names in the model directory");
    if (seen.insert(f).second) index.files.push_back(f);
    index.weight_map[std::string(kv.key())] = f;
  }
  if (index.files.empty()) return InvalidArgument("model.safetensors.index.json lists no shards");
  return index;
}

Status check_hf_index(const HfIndex& index, const std::vector<Safetensors>& shards) {
  if (shards.size() != index.files.size())
    return Internal("check_hf_index: one shard per file of the index expected");
  std::map<std::string, std::string> held;  // tensor -> the shard holding it
  for (size_t i = 0; i < shards.size(); ++i)
    for (const StTensor& t : shards[i].tensors) {
      held.emplace(t.name, index.files[i]);
      const auto it = index.weight_map.find(t.name);
      if (it == index.weight_map.end())
        return InvalidArgument("tensor " + t.name + " of " + index.files[i] +
                               " is not in weight_map: the index does not match its shards");
      if (it->second != index.files[i])
        return InvalidArgument("weight_map puts tensor " + t.name + " in " + it->second + ", but " +
                               index.files[i] + " holds it");
    }
  for (const auto& [name, file] : index.weight_map)
    if (!held.count(name))
      return InvalidArgument("weight_map names tensor " + name + " in " + file +
                             ", which does not hold it");
  return Status::Ok();
}

void rope_rows_from_hf(float* rows, int heads, int head_dim, int64_t cols) {
  permute_rope_rows(rows, heads, head_dim, cols, /*to_atoll=*/true);
}

void rope_rows_to_hf(float* rows, int heads, int head_dim, int64_t cols) {
  permute_rope_rows(rows, heads, head_dim, cols, /*to_atoll=*/false);
}

Status params_from_hf(const std::vector<const Safetensors*>& shards, const ModelConfig& cfg,
                      ParamSet& params) {
  if (!(params.layout() == make_layout(cfg)))
    return Internal("params_from_hf: the ParamSet does not have the model's layout");
  std::map<std::string, const StTensor*> by_name;
  for (const Safetensors* st : shards)
    for (const StTensor& t : st->tensors)
      if (!by_name.emplace(t.name, &t).second)
        return InvalidArgument("tensor " + t.name + " appears in two shards");
  const ParamLayout& layout = params.layout();
  for (const auto& [name, t] : by_name) {
    if (layout.find(name) || name.ends_with("rotary_emb.inv_freq")) continue;
    if (name == "lm_head.weight" && cfg.tie_word_embeddings) continue;  // a copy of the embedding
    return InvalidArgument("unexpected tensor " + name + " " + shape_text(t->shape) +
                           ": the model described by config.json has no such parameter");
  }
  const int D = cfg.dim / cfg.heads;
  for (const ParamView& v : layout.views()) {
    auto it = by_name.find(v.name);
    if (it == by_name.end())
      return InvalidArgument("missing tensor " + v.name + " " + shape_text(v.shape) +
                             " in the model's safetensors files");
    const StTensor& t = *it->second;
    if (t.shape != v.shape)
      return InvalidArgument("tensor " + v.name + " has shape " + shape_text(t.shape) +
                             ", config.json implies " + shape_text(v.shape));
    float* dst = params.data() + v.offset;
    const size_t n = v.numel();
    switch (t.dtype) {
      case DType::kF32:
        std::memcpy(dst, t.data.data(), n * sizeof(float));
        break;
      case DType::kBF16:
      case DType::kF16: {
        std::vector<uint16_t> bits(n);
        std::memcpy(bits.data(), t.data.data(), n * sizeof(uint16_t));
        if (t.dtype == DType::kBF16)
          kernels::formats::dequantize_bf16(bits, std::span<float>(dst, n));
        else
          kernels::formats::dequantize_fp16(bits, std::span<float>(dst, n));
        break;
      }
      default:
        return InvalidArgument("tensor " + v.name + " has dtype " + dtype_name(t.dtype) +
                               "; import reads F32, BF16 and F16");
    }
    if (int heads = rope_heads(v.name, cfg))
      rope_rows_from_hf(dst, heads, D, v.shape.size() == 2 ? v.shape[1] : 1);
  }
  return Status::Ok();
}

StatusOr<Safetensors> params_to_hf(const ParamSet& params, const ModelConfig& cfg, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    return InvalidArgument(std::string("export writes F32 or BF16 tensors, not ") +
                           dtype_name(dtype));
  if (!(params.layout() == make_layout(cfg)))
    return Internal("params_to_hf: the ParamSet does not have the model's layout");
  Safetensors st;
  st.metadata["format"] = "pt";
  const int D = cfg.dim / cfg.heads;
  for (const ParamView& v : params.layout().views()) {
    std::vector<float> values(params.data() + v.offset, params.data() + v.offset + v.numel());
    if (int heads = rope_heads(v.name, cfg))
      rope_rows_to_hf(values.data(), heads, D, v.shape.size() == 2 ? v.shape[1] : 1);
    if (dtype == DType::kF32) {
      st.tensors.push_back(make_tensor(v.name, v.shape, values.data()));
      continue;
    }
    StTensor t;
    t.name = v.name;
    t.dtype = DType::kBF16;
    t.shape = v.shape;
    std::vector<uint16_t> bits(values.size());
    kernels::formats::quantize_bf16(values, bits);
    t.data.resize(bits.size() * sizeof(uint16_t));
    std::memcpy(t.data.data(), bits.data(), t.data.size());
    st.tensors.push_back(std::move(t));
  }
  return st;
}

}  // namespace atl::algorithms
