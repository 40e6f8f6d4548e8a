#include "algorithms/model/hf_format.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string_view>

#include "algorithms/data/json_duplicates.h"
#include "kernels/core/number_text.h"
#include "kernels/formats/convert.h"

namespace atl::algorithms {

namespace json = boost::json;

namespace {

constexpr const char* kSupported =
    "atoll import hf reads LlamaForCausalLM, Qwen2ForCausalLM and MistralForCausalLM";

// A JSON object, refusing a key that appears twice in one object: boost::json (and Python's
// json) keep the last copy, so the file would mean what its later line says without a word.
StatusOr<json::object> parse_object(const std::string& text, const std::string& what) {
  if (const std::string key = first_duplicate_key(text); !key.empty())
    return InvalidArgument(what + " has the key " + json::serialize(json::string_view(key)) +
                           " twice: keep one");
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

// The model_type transformers gives each architecture (AutoConfig and AutoModel pick the class by
// model_type, not by architectures).
const char* model_type_of(const std::string& architecture) {
  return architecture == "Qwen2ForCausalLM"     ? "qwen2"
         : architecture == "MistralForCausalLM" ? "mistral"
                                                : "llama";
}

// Keys that make the checkpoint another model than the one Atoll computes: quantized weights,
// RoPE on part of each head, a model_type naming another model than architectures does.
Status check_model_kind(const json::object& o, const std::string& architecture) {
  if (const json::value* q = o.if_contains("quantization_config"); q && !q->is_null()) {
    std::string method;
    if (q->is_object())
      if (const json::value* m = q->as_object().if_contains("quant_method"); m && m->is_string())
        method = " (quant_method " + json::serialize(*m) + ")";
    return InvalidArgument(
        "config.json has quantization_config" + method +
        ": quantized checkpoints are not supported: dequantize first (save the "
        "model in bfloat16 or float32 with transformers) and import that folder");
  }
  // transformers reads partial_rotary_factor at the top level and (v5) in rope_parameters.
  std::vector<std::pair<const json::value*, std::string>> rotary = {
      {o.if_contains("partial_rotary_factor"), "partial_rotary_factor"}};
  if (const json::value* rp = o.if_contains("rope_parameters"); rp && rp->is_object())
    rotary.emplace_back(rp->as_object().if_contains("partial_rotary_factor"),
                        "rope_parameters.partial_rotary_factor");
  for (const auto& [v, key] : rotary) {
    if (!v || v->is_null()) continue;
    if (!v->is_number())
      return InvalidArgument("config.json: " + key + " must be a number, got " +
                             json::serialize(*v));
    if (v->to_number<double>() != 1.0)
      return InvalidArgument("config.json: " + key + " = " +
                             shortest_decimal(v->to_number<double>()) +
                             " applies RoPE to part of each head, which Atoll does not implement "
                             "(it rotates the whole head); import a model without it");
  }
  if (const json::value* mt = o.if_contains("model_type"); mt && !mt->is_null()) {
    const std::string expected = model_type_of(architecture);
    if (!mt->is_string() || mt->as_string() != expected)
      return InvalidArgument("config.json: model_type " + json::serialize(*mt) +
                             " contradicts architectures " + architecture + " (model_type \"" +
                             expected + "\"; transformers builds the model model_type names): " +
                             "fix whichever of the two is wrong");
  }
  return Status::Ok();
}

// bos_token_id, eos_token_id, pad_token_id: null or an id below vocab_size (eos_token_id may be a
// list of ids, as transformers allows); an id past the embedding fails at generation time.
Status check_token_ids(const json::object& o, int64_t vocab) {
  for (const std::string key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    const json::value* v = o.if_contains(key);
    if (!v || v->is_null()) continue;
    const bool list_allowed = key == "eos_token_id";
    std::vector<const json::value*> ids;
    if (list_allowed && v->is_array())
      for (const json::value& id : v->as_array()) ids.push_back(&id);
    else
      ids.push_back(v);
    for (const json::value* id : ids) {
      if (!id->is_int64() && !id->is_uint64())
        return InvalidArgument("config.json: " + key + " must be a token id" +
                               (list_allowed ? " or a list of them" : "") + " (or null), got " +
                               json::serialize(*v));
      const bool inside = id->is_int64() ? id->as_int64() >= 0 && id->as_int64() < vocab
                                         : id->as_uint64() < uint64_t(vocab);
      if (!inside)
        return InvalidArgument("config.json: " + key + " " + json::serialize(*id) +
                               " is not a token of the model (ids are 0 .. " +
                               std::to_string(vocab - 1) + " for vocab_size " +
                               std::to_string(vocab) + "): fix the id or vocab_size");
    }
  }
  return Status::Ok();
}

// Which of a Qwen2 model's layers attend through the sliding window (use_sliding_window being
// true): those layer_types marks "sliding_attention", else those with index >= max_window_layers
// (default 28), as Qwen2Config builds layer_types.
StatusOr<std::vector<bool>> qwen2_sliding_layers(const json::object& o, int64_t layers) {
  std::vector<bool> sliding(size_t(layers), false);
  if (const json::value* types = o.if_contains("layer_types"); types && !types->is_null()) {
    bool valid = types->is_array() && int64_t(types->as_array().size()) == layers;
    for (size_t i = 0; valid && i < sliding.size(); ++i) {
      const json::value& t = types->as_array()[i];
      sliding[i] = t.is_string() && t.as_string() == "sliding_attention";
      valid = sliding[i] || (t.is_string() && t.as_string() == "full_attention");
    }
    if (!valid)
      return InvalidArgument(
          "config.json: layer_types must give \"full_attention\" or \"sliding_attention\" for "
          "each of the " +
          std::to_string(layers) + " layers, got " + json::serialize(*types));
    return sliding;
  }
  int64_t max_window_layers = 28;  // Qwen2Config's default
  if (const json::value* v = o.if_contains("max_window_layers"); v && !v->is_null()) {
    ATOLL_ASSIGN_OR_RETURN(max_window_layers, int_field(o, "max_window_layers", 0, INT64_MAX));
  }
  for (int64_t i = max_window_layers; i < layers; ++i) sliding[size_t(i)] = true;
  return sliding;
}

// The sliding window as transformers reads each architecture's config, refused where a layer
// attends through a window shorter than Atoll's context `ctx` (Atoll attends to the whole
// context; a window at least as long changes nothing):
//   Llama: none (LlamaConfig has no sliding window and ignores a sliding_window key).
//   Mistral: sliding_window on every layer (default 4096, null = none); use_sliding_window is
//     not a Mistral key and changes nothing.
//   Qwen2: none unless use_sliding_window is true (default false); then sliding_window (default
//     4096, null = none) on the layers qwen2_sliding_layers names.
Status check_sliding_window(const json::object& o, const std::string& architecture, int64_t layers,
                            int64_t ctx) {
  if (architecture == "LlamaForCausalLM") return Status::Ok();
  const bool qwen2 = architecture == "Qwen2ForCausalLM";
  if (qwen2) {
    ATOLL_ASSIGN_OR_RETURN(bool use_sliding_window, bool_field(o, "use_sliding_window", false));
    if (!use_sliding_window) return Status::Ok();
  }
  int64_t window = 4096;  // MistralConfig's and Qwen2Config's default
  const json::value* sw = o.if_contains("sliding_window");
  if (sw && sw->is_null()) return Status::Ok();
  if (sw) {
    ATOLL_ASSIGN_OR_RETURN(window, int_field(o, "sliding_window", 1, INT64_MAX));
  }
  if (window >= ctx) return Status::Ok();
  std::string where;  // the layers that use it, for Qwen2
  if (qwen2) {
    ATOLL_ASSIGN_OR_RETURN(std::vector<bool> sliding, qwen2_sliding_layers(o, layers));
    const auto first = std::find(sliding.begin(), sliding.end(), true);
    if (first == sliding.end()) return Status::Ok();  // every layer attends fully
    where = " on " + std::to_string(std::count(sliding.begin(), sliding.end(), true)) + " of the " +
            std::to_string(layers) + " layers, from layer " +
            std::to_string(first - sliding.begin()) +
            (o.if_contains("layer_types") && !o.at("layer_types").is_null()
                 ? " (layer_types marks them sliding_attention)"
                 : " (use_sliding_window is true and max_window_layers is " +
                       std::to_string(first - sliding.begin()) + ")");
  }
  return InvalidArgument("config.json: sliding_window " + std::to_string(window) +
                         (sw ? "" : " (transformers' default; config.json does not set it)") +
                         " is shorter than the context " + std::to_string(ctx) + where +
                         "; Atoll attends to the full context (import with --seq-len " +
                         std::to_string(window) + " or less)");
}

// The first NaN or infinity among a tensor's values (in its stored row-major order): a model with
// one computes nan everywhere, so it is refused at import rather than found by eval or training.
Status check_finite(const std::string& name, const std::vector<int64_t>& shape, const float* x,
                    size_t n) {
  const float* bad = std::find_if(x, x + n, [](float e) { return !std::isfinite(e); });
  if (bad == x + n) return Status::Ok();
  std::vector<int64_t> index(shape.size());
  for (size_t flat = size_t(bad - x), d = shape.size(); d-- > 0; flat /= size_t(shape[d]))
    index[d] = int64_t(flat % size_t(shape[d]));
  const std::string value = std::isnan(*bad) ? "nan" : *bad > 0 ? "inf" : "-inf";
  return InvalidArgument("tensor " + name + " " + shape_text(shape) + " holds " + value +
                         " at index " + shape_text(index) +
                         ": non-finite weights make every output nan; import the model as it was "
                         "before its weights diverged or were damaged");
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
  ATOLL_RETURN_IF_ERROR(check_model_kind(o, info.architecture));
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
  ATOLL_RETURN_IF_ERROR(check_sliding_window(o, info.architecture, layers, ctx));
  ATOLL_RETURN_IF_ERROR(check_token_ids(o, vocab));
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

Status check_hf_json_object(const std::string& text, const std::string& what) {
  return parse_object(text, what).status();
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
  o["model_type"] = model_type_of(arch);
  o["vocab_size"] = cfg.vocab;
  o["hidden_size"] = cfg.dim;
  o["num_hidden_layers"] = cfg.layers;
  o["num_attention_heads"] = cfg.heads;
  o["num_key_value_heads"] = num_kv_heads(cfg);
  o["intermediate_size"] = cfg.ffn_hidden;
  // The source's max_position_embeddings is the model's context as trained by its makers: an
  // import with a shorter --seq-len trains Atoll on fewer tokens, the model is the same one.
  const json::value* source_context = o.if_contains("max_position_embeddings");
  if (!source_context || !source_context->is_int64() || source_context->as_int64() < cfg.seq_len)
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
    ATOLL_RETURN_IF_ERROR(check_finite(v.name, v.shape, dst, n));
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
