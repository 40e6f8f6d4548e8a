#include "node/checkpoint.h"

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "algorithms/model/safetensors.h"
#include "kernels/core/file_io.h"
#include "node/data_source.h"

namespace atl::node {

using algorithms::ParamSet;

namespace {

constexpr const char* kFormat = "atoll-checkpoint-1";

StatusOr<int64_t> meta_int(const std::map<std::string, std::string>& md, const std::string& key,
                           const std::string& what) {
  auto it = md.find(key);
  if (it == md.end()) return InvalidArgument(what + ": metadata key " + key + " is missing");
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno || it->second.empty() || *end != '\0')
    return InvalidArgument(what + ": metadata " + key + " = '" + it->second +
                           "' is not an integer");
  return static_cast<int64_t>(v);
}

// A seed: any uint64 (a site's derived seed is often >= 2^63, which meta_int refused).
StatusOr<uint64_t> meta_uint64(const std::map<std::string, std::string>& md, const std::string& key,
                               const std::string& what) {
  auto it = md.find(key);
  if (it == md.end()) return InvalidArgument(what + ": metadata key " + key + " is missing");
  errno = 0;
  char* end = nullptr;
  const std::string& text = it->second;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  // strtoull reads "-1" as 2^64 - 1: only digits are a uint64.
  if (errno || text.empty() || text[0] < '0' || text[0] > '9' || *end != '\0')
    return InvalidArgument(what + ": metadata " + key + " = '" + text +
                           "' is not an unsigned 64-bit integer");
  return static_cast<uint64_t>(v);
}

StatusOr<double> meta_double(const std::map<std::string, std::string>& md, const std::string& key,
                             const std::string& what) {
  auto it = md.find(key);
  if (it == md.end()) return InvalidArgument(what + ": metadata key " + key + " is missing");
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0')
    return InvalidArgument(what + ": metadata " + key + " = '" + it->second + "' is not a number");
  return v;
}

// "true" / "false", or `fallback` when the key is absent.
StatusOr<bool> meta_bool(const std::map<std::string, std::string>& md, const std::string& key,
                         bool fallback, const std::string& what) {
  auto it = md.find(key);
  if (it == md.end()) return fallback;
  if (it->second == "true") return true;
  if (it->second == "false") return false;
  return InvalidArgument(what + ": metadata " + key + " = '" + it->second +
                         "' is not true or false");
}

// SHA-256 over the moments m then v, so a damaged optimizer state is caught like damaged θ.
std::string optimizer_fingerprint(const ParamSet& m, const ParamSet& v) {
  Sha256 h;
  h.update(m.data(), m.numel() * sizeof(float));
  h.update(v.data(), v.numel() * sizeof(float));
  return to_hex(h.finish());
}

std::string exact(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// The LoRA part of a checkpoint (see checkpoint.h), if its metadata has atoll.lora.rank.
Status decode_lora(const algorithms::Safetensors& st, const std::string& what,
                   LoadedCheckpoint& ck) {
  const auto& md = st.metadata;
  if (!md.count("atoll.lora.rank")) return Status::Ok();
  auto& lora = ck.meta.lora;
  ATOLL_ASSIGN_OR_RETURN(int64_t rank, meta_int(md, "atoll.lora.rank", what));
  if (rank < 1 || rank > 4096) return InvalidArgument(what + ": atoll.lora.rank out of range");
  lora.rank = static_cast<int>(rank);
  ATOLL_ASSIGN_OR_RETURN(lora.alpha, meta_double(md, "atoll.lora.alpha", what));
  auto targets = md.find("atoll.lora.targets");
  if (targets == md.end()) return InvalidArgument(what + ": metadata atoll.lora.targets missing");
  auto parsed = algorithms::parse_lora_targets(targets->second);
  if (!parsed.ok()) return InvalidArgument(what + ": " + parsed.status().message());
  lora.targets = *parsed;
  if (Status s = algorithms::validate(lora, ck.meta.model); !s.ok())
    return InvalidArgument(what + ": " + s.message());
  if (auto dtype = md.find("atoll.lora.base_dtype"); dtype != md.end()) {
    auto storage = algorithms::parse_base_storage(dtype->second);
    if (!storage.ok())
      return InvalidArgument(what + ": atoll.lora.base_dtype: " + storage.status().message());
    lora.base_storage = *storage;
  }
  ck.adapters = ParamSet(algorithms::make_lora_layout(lora, ck.meta.model));
  if (Status s = algorithms::read_params(st, ck.adapters, "", false); !s.ok())
    return InvalidArgument(what + ": " + s.message());
  auto fp = md.find("atoll.lora.fingerprint");
  if (fp == md.end() || fp->second != ck.adapters.fingerprint())
    return DataLoss(what +
                    ": LoRA adapters do not match the recorded SHA-256 fingerprint (the "
                    "file is damaged)");
  return Status::Ok();
}

}  // namespace

int training_window(const CheckpointMeta& meta) {
  return meta.window > 0 ? meta.window : meta.model.seq_len;
}

void carry_base_meta(const CheckpointMeta& base, CheckpointMeta& meta) {
  meta.tokenizer = base.tokenizer;
  meta.token_ids_only = base.token_ids_only;
  meta.hf_tokenizer_config_json = base.hf_tokenizer_config_json;
  for (const char* key : {"hf.config", "hf.architecture", "hf.generation_config"})
    if (auto it = base.extra.find(key); it != base.extra.end()) meta.extra[key] = it->second;
  if (base.model.seq_len > meta.model.seq_len) {
    if (meta.window == 0) meta.window = meta.model.seq_len;
    meta.model.seq_len = base.model.seq_len;
  }
}

StatusOr<std::string> encode_checkpoint(const CheckpointMeta& meta, const ParamSet& params,
                                        const algorithms::AdamW* optimizer,
                                        const ParamSet* adapters) {
  algorithms::Safetensors st;
  algorithms::append_params(st, params);
  auto& md = st.metadata;
  md["format"] = kFormat;
  const auto& m = meta.model;
  md["atoll.model.vocab"] = std::to_string(m.vocab);
  md["atoll.model.dim"] = std::to_string(m.dim);
  md["atoll.model.layers"] = std::to_string(m.layers);
  md["atoll.model.heads"] = std::to_string(m.heads);
  md["atoll.model.ffn_hidden"] = std::to_string(m.ffn_hidden);
  md["atoll.model.seq_len"] = std::to_string(m.seq_len);
  md["atoll.model.rope_base"] = exact(m.rope_base);
  if (m.moe_experts > 0) {  // MoE keys only for MoE models (dense checkpoints stay as they were)
    md["atoll.model.moe_experts"] = std::to_string(m.moe_experts);
    md["atoll.model.moe_top_k"] = std::to_string(m.moe_top_k);
    md["atoll.model.moe_hidden"] = std::to_string(m.moe_hidden);
    md["atoll.model.moe_every"] = std::to_string(m.moe_every);
    md["atoll.model.moe_score"] = m.moe_score;
    md["atoll.model.moe_shared_hidden"] = std::to_string(m.moe_shared_hidden);
    md["atoll.model.moe_aux_coef"] = exact(m.moe_aux_coef);
    md["atoll.model.moe_z_coef"] = exact(m.moe_z_coef);
  }
  md["atoll.model.norm_eps"] = exact(m.norm_eps);
  if (algorithms::num_kv_heads(m) != m.heads)
    md["atoll.model.kv_heads"] = std::to_string(algorithms::num_kv_heads(m));
  if (!m.tie_word_embeddings) md["atoll.model.tie_word_embeddings"] = "false";
  if (m.attention_bias) md["atoll.model.attention_bias"] = "true";
  if (!meta.hf_tokenizer_config_json.empty())
    md["atoll.tokenizer.hf_config_json"] = meta.hf_tokenizer_config_json;
  md["atoll.step"] = std::to_string(meta.step);
  md["atoll.seed"] = std::to_string(meta.seed);
  md["atoll.tokenizer"] = meta.tokenizer;
  if (meta.token_ids_only) md["atoll.tokenizer.none"] = "token ids";
  md["atoll.experiment"] = meta.experiment;
  md["atoll.round"] = std::to_string(meta.round);
  if (meta.window > 0 && meta.window < m.seq_len) md["atoll.window"] = std::to_string(meta.window);
  md["atoll.fingerprint"] = params.fingerprint();
  for (const auto& [k, v] : meta.extra) md["atoll.x." + k] = v;
  if (algorithms::lora_enabled(meta.lora)) {
    ATOLL_RETURN_IF_ERROR(algorithms::validate(meta.lora, m));
    if (!adapters || !(adapters->layout() == algorithms::make_lora_layout(meta.lora, m)))
      return InvalidArgument("a LoRA checkpoint needs adapters matching its LoRA config");
    algorithms::append_params(st, *adapters);
    md["atoll.lora.rank"] = std::to_string(meta.lora.rank);
    md["atoll.lora.alpha"] = exact(meta.lora.alpha);
    md["atoll.lora.targets"] = algorithms::lora_targets_csv(meta.lora);
    if (meta.lora.base_storage != algorithms::BaseStorage::kFp32)  // older readers: fp32
      md["atoll.lora.base_dtype"] = algorithms::base_storage_name(meta.lora.base_storage);
    md["atoll.lora.fingerprint"] = adapters->fingerprint();
  }
  if (optimizer) {
    algorithms::append_params(st, optimizer->m(), "optimizer.m.");
    algorithms::append_params(st, optimizer->v(), "optimizer.v.");
    md["atoll.optimizer.step"] = std::to_string(optimizer->step_count());
    md["atoll.optimizer.fingerprint"] = optimizer_fingerprint(optimizer->m(), optimizer->v());
  }
  ATOLL_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, algorithms::encode_safetensors(st));
  return std::string(bytes.begin(), bytes.end());
}

Status save_checkpoint(const std::string& path, const CheckpointMeta& meta, const ParamSet& params,
                       const algorithms::AdamW* optimizer, const ParamSet* adapters) {
  ATOLL_ASSIGN_OR_RETURN(std::string bytes, encode_checkpoint(meta, params, optimizer, adapters));
  return write_file_atomic(path, bytes);
}

StatusOr<LoadedCheckpoint> decode_checkpoint(const std::string& bytes, const std::string& what) {
  ATOLL_ASSIGN_OR_RETURN(
      algorithms::Safetensors st,
      algorithms::decode_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  const auto& md = st.metadata;
  auto fmt = md.find("format");
  if (fmt == md.end() || fmt->second != kFormat)
    return InvalidArgument(what +
                           " is a safetensors file but not an Atoll checkpoint (no "
                           "format = " +
                           std::string(kFormat) + " in its metadata)");
  LoadedCheckpoint ck;
  auto& m = ck.meta.model;
  ATOLL_ASSIGN_OR_RETURN(int64_t vocab, meta_int(md, "atoll.model.vocab", what));
  ATOLL_ASSIGN_OR_RETURN(int64_t dim, meta_int(md, "atoll.model.dim", what));
  ATOLL_ASSIGN_OR_RETURN(int64_t layers, meta_int(md, "atoll.model.layers", what));
  ATOLL_ASSIGN_OR_RETURN(int64_t heads, meta_int(md, "atoll.model.heads", what));
  ATOLL_ASSIGN_OR_RETURN(int64_t ffn, meta_int(md, "atoll.model.ffn_hidden", what));
  ATOLL_ASSIGN_OR_RETURN(int64_t seq, meta_int(md, "atoll.model.seq_len", what));
  ATOLL_ASSIGN_OR_RETURN(m.rope_base, meta_double(md, "atoll.model.rope_base", what));
  ATOLL_ASSIGN_OR_RETURN(m.norm_eps, meta_double(md, "atoll.model.norm_eps", what));
  const int64_t kMaxDim = 1 << 20;
  for (int64_t v : {vocab, dim, layers, heads, ffn, seq})
    if (v <= 0 || v > kMaxDim) return InvalidArgument(what + ": model metadata out of range");
  m.vocab = static_cast<int>(vocab);
  m.dim = static_cast<int>(dim);
  m.layers = static_cast<int>(layers);
  m.heads = static_cast<int>(heads);
  m.ffn_hidden = static_cast<int>(ffn);
  m.seq_len = static_cast<int>(seq);
  if (md.count("atoll.model.moe_experts")) {
    int64_t v[5];
    const char* keys[5] = {"atoll.model.moe_experts", "atoll.model.moe_top_k",
                           "atoll.model.moe_hidden", "atoll.model.moe_every",
                           "atoll.model.moe_shared_hidden"};
    for (int i = 0; i < 5; ++i) {
      ATOLL_ASSIGN_OR_RETURN(v[i], meta_int(md, keys[i], what));
      if (v[i] < 0 || v[i] > kMaxDim)
        return InvalidArgument(what + ": model metadata out of range");
    }
    m.moe_experts = static_cast<int>(v[0]);
    m.moe_top_k = static_cast<int>(v[1]);
    m.moe_hidden = static_cast<int>(v[2]);
    m.moe_every = static_cast<int>(v[3]);
    m.moe_shared_hidden = static_cast<int>(v[4]);
    auto sc = md.find("atoll.model.moe_score");
    if (sc == md.end()) return InvalidArgument(what + ": metadata atoll.model.moe_score missing");
    m.moe_score = sc->second;
    ATOLL_ASSIGN_OR_RETURN(m.moe_aux_coef, meta_double(md, "atoll.model.moe_aux_coef", what));
    ATOLL_ASSIGN_OR_RETURN(m.moe_z_coef, meta_double(md, "atoll.model.moe_z_coef", what));
  }
  if (md.count("atoll.model.kv_heads")) {
    ATOLL_ASSIGN_OR_RETURN(int64_t kv, meta_int(md, "atoll.model.kv_heads", what));
    if (kv <= 0 || kv > kMaxDim) return InvalidArgument(what + ": model metadata out of range");
    m.kv_heads = static_cast<int>(kv);
  }
  ATOLL_ASSIGN_OR_RETURN(m.tie_word_embeddings,
                         meta_bool(md, "atoll.model.tie_word_embeddings", true, what));
  ATOLL_ASSIGN_OR_RETURN(m.attention_bias,
                         meta_bool(md, "atoll.model.attention_bias", false, what));
  if (Status s = algorithms::validate(m); !s.ok())
    return InvalidArgument(what + ": " + s.message());
  ATOLL_ASSIGN_OR_RETURN(ck.meta.step, meta_int(md, "atoll.step", what));
  ATOLL_ASSIGN_OR_RETURN(ck.meta.seed, meta_uint64(md, "atoll.seed", what));
  ATOLL_ASSIGN_OR_RETURN(ck.meta.round, meta_int(md, "atoll.round", what));
  if (md.count("atoll.window")) {
    ATOLL_ASSIGN_OR_RETURN(int64_t window, meta_int(md, "atoll.window", what));
    if (window < 1 || window > m.seq_len)
      return InvalidArgument(what + ": atoll.window " + std::to_string(window) +
                             " is not within the model's context of " + std::to_string(m.seq_len));
    ck.meta.window = static_cast<int>(window);
  }
  if (auto it = md.find("atoll.tokenizer"); it != md.end()) ck.meta.tokenizer = it->second;
  ck.meta.token_ids_only = md.count("atoll.tokenizer.none") > 0;
  if (auto it = md.find("atoll.experiment"); it != md.end()) ck.meta.experiment = it->second;
  if (auto it = md.find("atoll.tokenizer.hf_config_json"); it != md.end())
    ck.meta.hf_tokenizer_config_json = it->second;
  for (const auto& [k, v] : md)
    if (k.rfind("atoll.x.", 0) == 0) ck.meta.extra[k.substr(8)] = v;

  const auto layout = algorithms::make_layout(m);
  ck.params = ParamSet(layout);
  // Not strict: the optimizer moments live under their own prefixes in the same file.
  if (Status s = algorithms::read_params(st, ck.params, "", false); !s.ok())
    return InvalidArgument(what + ": " + s.message());
  auto fp = md.find("atoll.fingerprint");
  if (fp == md.end()) return InvalidArgument(what + ": metadata atoll.fingerprint is missing");
  ck.meta.fingerprint = fp->second;
  if (ck.params.fingerprint() != fp->second)
    return DataLoss(what +
                    ": parameters do not match the recorded SHA-256 fingerprint (the "
                    "file is damaged)");
  ATOLL_RETURN_IF_ERROR(decode_lora(st, what, ck));
  const auto& trained_layout =
      algorithms::lora_enabled(ck.meta.lora) ? ck.adapters.layout() : layout;
  if (md.count("atoll.optimizer.step")) {
    ck.has_optimizer = true;
    ATOLL_ASSIGN_OR_RETURN(ck.optimizer_step, meta_int(md, "atoll.optimizer.step", what));
    ck.m = ParamSet(trained_layout);
    ck.v = ParamSet(trained_layout);
    if (Status s = algorithms::read_params(st, ck.m, "optimizer.m.", false); !s.ok())
      return InvalidArgument(what + ": " + s.message());
    if (Status s = algorithms::read_params(st, ck.v, "optimizer.v.", false); !s.ok())
      return InvalidArgument(what + ": " + s.message());
    auto ofp = md.find("atoll.optimizer.fingerprint");
    if (ofp == md.end() || ofp->second != optimizer_fingerprint(ck.m, ck.v))
      return DataLoss(what +
                      ": optimizer state does not match the recorded SHA-256 fingerprint "
                      "(the file is damaged)");
  }
  return ck;
}

StatusOr<LoadedCheckpoint> load_checkpoint(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec) &&
      std::filesystem::exists(std::filesystem::path(path) / "config.json", ec))
    return InvalidArgument(path +
                           " is a Hugging Face model folder, not a checkpoint: convert it "
                           "with `atoll import hf " +
                           path + " --out MODEL.safetensors` and pass that file");
  ATOLL_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  return decode_checkpoint(bytes, path);
}

}  // namespace atl::node
