#include "algorithms/model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <span>

#include "algorithms/model/subnet.h"
#include "kernels/core/check.h"
#include "kernels/core/number_text.h"
#include "kernels/core/philox.h"
#include "kernels/cpu/ops.h"

namespace atl::algorithms {

namespace ops = atl::kernels::cpu;

namespace {

std::string layer_name(int l, const char* suffix) {
  return "model.layers." + std::to_string(l) + "." + suffix;
}

}  // namespace

int num_kv_heads(const ModelConfig& c) {
  return c.kv_heads > 0 ? c.kv_heads : c.heads;
}

const char* head_param_name(const ModelConfig& c) {
  return c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
}

bool is_moe_layer(const ModelConfig& c, int l) {
  return c.moe_experts > 0 && c.moe_every > 0 && (l + 1) % c.moe_every == 0;
}

std::string moe_param_name(int l, const std::string& suffix) {
  return layer_name(l, "mlp.") + suffix;
}

// The MoE fields (docs/moe.md); only checked when moe_experts > 0, except moe_experts itself.
static Status validate_moe(const ModelConfig& c) {
  auto num = [](long long v) { return std::to_string(v); };
  if (c.moe_experts < 0)
    return InvalidArgument("moe_experts must be >= 0 (0 = dense model), got " + num(c.moe_experts));
  if (c.moe_experts == 0) return Status::Ok();
  if (c.moe_experts > 4096)
    return InvalidArgument("moe_experts must be <= 4096, got " + num(c.moe_experts));
  if (c.moe_top_k < 1 || c.moe_top_k > c.moe_experts)
    return InvalidArgument("moe_top_k must be in [1, moe_experts = " + num(c.moe_experts) +
                           "], got " + num(c.moe_top_k));
  if (c.moe_hidden < 1)
    return InvalidArgument("moe_hidden (the expert FFN hidden size) must be >= 1 when " +
                           std::string("moe_experts > 0, got ") + num(c.moe_hidden));
  if (c.moe_every < 1 || c.moe_every > c.layers)
    return InvalidArgument("moe_every must be in [1, layers = " + num(c.layers) + "], got " +
                           num(c.moe_every) + " (1 = every layer is MoE, 2 = every other)");
  if (c.moe_score != "softmax" && c.moe_score != "sigmoid")
    return InvalidArgument("moe_score must be \"softmax\" or \"sigmoid\", got \"" + c.moe_score +
                           "\"");
  if (c.moe_shared_hidden < 0)
    return InvalidArgument("moe_shared_hidden must be >= 0 (0 = no shared expert), got " +
                           num(c.moe_shared_hidden));
  if (!(c.moe_aux_coef >= 0.0) || !std::isfinite(c.moe_aux_coef))
    return InvalidArgument("moe_aux_coef must be a finite number >= 0, got " +
                           shortest_decimal(c.moe_aux_coef));
  if (!(c.moe_z_coef >= 0.0) || !std::isfinite(c.moe_z_coef))
    return InvalidArgument("moe_z_coef must be a finite number >= 0, got " +
                           shortest_decimal(c.moe_z_coef));
  const long long C = c.dim, E = c.moe_experts, Fe = c.moe_hidden, Fs = c.moe_shared_hidden;
  if (2 * Fe * C > (1LL << 31) - 1 || 2 * Fs * C > (1LL << 31) - 1 || E * C > (1LL << 31) - 1)
    return InvalidArgument("model too large: an MoE weight matrix would exceed 2^31 elements");
  return Status::Ok();
}

std::vector<ModelFieldDifference> model_differences(const ModelConfig& a, const ModelConfig& b) {
  std::vector<ModelFieldDifference> out;
  auto num = [&out](const char* field, double x, double y) {
    if (x == y) return;
    char bx[32], by[32];
    std::snprintf(bx, sizeof(bx), "%.17g", x);
    std::snprintf(by, sizeof(by), "%.17g", y);
    out.push_back({field, bx, by});
  };
  num("vocab", a.vocab, b.vocab);
  num("dim", a.dim, b.dim);
  num("layers", a.layers, b.layers);
  num("heads", a.heads, b.heads);
  num("ffn_hidden", a.ffn_hidden, b.ffn_hidden);
  num("seq_len", a.seq_len, b.seq_len);
  num("rope_base", a.rope_base, b.rope_base);
  num("norm_eps", a.norm_eps, b.norm_eps);
  num("kv_heads", num_kv_heads(a), num_kv_heads(b));
  num("tie_word_embeddings", a.tie_word_embeddings, b.tie_word_embeddings);
  num("attention_bias", a.attention_bias, b.attention_bias);
  num("moe_experts", a.moe_experts, b.moe_experts);
  num("moe_top_k", a.moe_top_k, b.moe_top_k);
  num("moe_hidden", a.moe_hidden, b.moe_hidden);
  num("moe_every", a.moe_every, b.moe_every);
  if (a.moe_score != b.moe_score) out.push_back({"moe_score", a.moe_score, b.moe_score});
  num("moe_shared_hidden", a.moe_shared_hidden, b.moe_shared_hidden);
  num("moe_aux_coef", a.moe_aux_coef, b.moe_aux_coef);
  num("moe_z_coef", a.moe_z_coef, b.moe_z_coef);
  return out;
}

Status validate(const ModelConfig& c, const ModelFieldNames& n) {
  auto pos = [](const char* name, long long v) -> Status {
    if (v <= 0)
      return InvalidArgument(std::string(name) + " must be positive, got " + std::to_string(v));
    return Status::Ok();
  };
  ATOLL_RETURN_IF_ERROR(pos(n.vocab, c.vocab));
  ATOLL_RETURN_IF_ERROR(pos(n.dim, c.dim));
  ATOLL_RETURN_IF_ERROR(pos(n.layers, c.layers));
  ATOLL_RETURN_IF_ERROR(pos(n.heads, c.heads));
  ATOLL_RETURN_IF_ERROR(pos(n.ffn_hidden, c.ffn_hidden));
  ATOLL_RETURN_IF_ERROR(pos(n.seq_len, c.seq_len));
  const std::string dim = n.dim, heads = n.heads;
  if (c.dim % c.heads != 0)
    return InvalidArgument(dim + " " + std::to_string(c.dim) + " is not divisible by " + heads +
                           " " + std::to_string(c.heads));
  const int D = c.dim / c.heads;
  if (D % 2 != 0)
    return InvalidArgument("head dim " + std::to_string(D) + " (" + dim + " " +
                           std::to_string(c.dim) + " / " + heads + " " + std::to_string(c.heads) +
                           ") must be even: RoPE rotates pairs of dimensions");
  if (c.kv_heads < 0 || (c.kv_heads > 0 && c.heads % c.kv_heads != 0))
    return InvalidArgument(std::string(n.kv_heads) + " " + std::to_string(c.kv_heads) +
                           " must divide " + heads + " " + std::to_string(c.heads) +
                           " (grouped-query attention; 0 = " + heads +
                           ", plain multi-head attention)");
  if (!(c.rope_base > 1.0) || !std::isfinite(c.rope_base))
    return InvalidArgument(std::string(n.rope_base) + " must be a finite number > 1, got " +
                           shortest_decimal(c.rope_base));
  if (!(c.norm_eps > 0.0) || !std::isfinite(c.norm_eps))
    return InvalidArgument(std::string(n.norm_eps) + " must be a finite number > 0, got " +
                           shortest_decimal(c.norm_eps));
  // Every GEMM dimension and every activation index must fit the int arguments of the op table;
  // the largest single activation is att (B, H, T, T) per layer, checked per shape at run time.
  const long long C = c.dim, V = c.vocab, F = c.ffn_hidden;
  if (V * C > (1LL << 31) - 1 || 2 * F * C > (1LL << 31) - 1 || 3 * C * C > (1LL << 31) - 1)
    return InvalidArgument("model too large: a weight matrix would exceed 2^31 elements");
  return validate_moe(c);
}

Status check_batch_shape(const ModelConfig& c, int64_t B, int64_t T, bool with_logits) {
  constexpr uint64_t kMax = (1ULL << 31) - 1;
  const uint64_t b = static_cast<uint64_t>(std::max<int64_t>(B, 0)),
                 t = static_cast<uint64_t>(std::max<int64_t>(T, 0)), N = b * t;
  // T up to 2^20 and B up to 2^20 keep every product below 2^64 for the checks' order.
  if (b > (1ULL << 20) || t > (1ULL << 20) || b * t * t > kMax / uint64_t(c.heads) ||
      (with_logits && N * uint64_t(c.vocab) > kMax) || N * 3 * uint64_t(c.dim) > kMax)
    return InvalidArgument("a batch of " + std::to_string(B) + " rows of " + std::to_string(T) +
                           " tokens is too large for this model (its attention scores, q|k|v or "
                           "logits would exceed 2^31 elements): use fewer rows or a shorter "
                           "window");
  return Status::Ok();
}

ParamLayout make_layout(const ModelConfig& c) {
  const int64_t V = c.vocab, C = c.dim, F = c.ffn_hidden;
  const int64_t Ckv = C / c.heads * num_kv_heads(c);
  ParamLayout L;
  L.add("model.embed_tokens.weight", {V, C});
  for (int l = 0; l < c.layers; ++l) {
    L.add(layer_name(l, "input_layernorm.weight"), {C});
    L.add(layer_name(l, "self_attn.q_proj.weight"), {C, C});
    L.add(layer_name(l, "self_attn.k_proj.weight"), {Ckv, C});
    L.add(layer_name(l, "self_attn.v_proj.weight"), {Ckv, C});
    if (c.attention_bias) {
      L.add(layer_name(l, "self_attn.q_proj.bias"), {C});
      L.add(layer_name(l, "self_attn.k_proj.bias"), {Ckv});
      L.add(layer_name(l, "self_attn.v_proj.bias"), {Ckv});
    }
    L.add(layer_name(l, "self_attn.o_proj.weight"), {C, C});
    L.add(layer_name(l, "post_attention_layernorm.weight"), {C});
    if (is_moe_layer(c, l)) {
      const int64_t E = c.moe_experts, Fe = c.moe_hidden, Fs = c.moe_shared_hidden;
      L.add(moe_param_name(l, "gate.weight"), {E, C});
      for (int64_t e = 0; e < E; ++e) {
        const std::string ex = "experts." + std::to_string(e) + ".";
        L.add(moe_param_name(l, ex + "gate_proj.weight"), {Fe, C});
        L.add(moe_param_name(l, ex + "up_proj.weight"), {Fe, C});
        L.add(moe_param_name(l, ex + "down_proj.weight"), {C, Fe});
      }
      if (Fs > 0) {
        L.add(moe_param_name(l, "shared_expert.gate_proj.weight"), {Fs, C});
        L.add(moe_param_name(l, "shared_expert.up_proj.weight"), {Fs, C});
        L.add(moe_param_name(l, "shared_expert.down_proj.weight"), {C, Fs});
      }
      continue;
    }
    L.add(layer_name(l, "mlp.gate_proj.weight"), {F, C});
    L.add(layer_name(l, "mlp.up_proj.weight"), {F, C});
    L.add(layer_name(l, "mlp.down_proj.weight"), {C, F});
  }
  L.add("model.norm.weight", {C});
  if (!c.tie_word_embeddings) L.add("lm_head.weight", {V, C});
  return L;
}

namespace {
// Parameters of layer l's FFN when `experts` of its routed experts count.
int64_t ffn_params(const ModelConfig& c, int l, int64_t experts) {
  const int64_t C = c.dim;
  if (!is_moe_layer(c, l)) return 3 * static_cast<int64_t>(c.ffn_hidden) * C;
  return static_cast<int64_t>(c.moe_experts) * C + experts * 3 * c.moe_hidden * C +
         3 * static_cast<int64_t>(c.moe_shared_hidden) * C;
}
int64_t params_with(const ModelConfig& c, bool active) {
  const int64_t V = c.vocab, C = c.dim, Ckv = C / c.heads * num_kv_heads(c);
  // q and o (C, C), k and v (Ckv, C): 4·C·C without grouped-query attention.
  const int64_t attn = 2 * C * C + 2 * Ckv * C + (c.attention_bias ? C + 2 * Ckv : 0);
  int64_t n = V * C + C + (c.tie_word_embeddings ? 0 : V * C);
  for (int l = 0; l < c.layers; ++l)
    n += 2 * C + attn + ffn_params(c, l, active ? c.moe_top_k : c.moe_experts);
  return n;
}
}  // namespace

int64_t count_params(const ModelConfig& c) {
  return params_with(c, false);
}

int64_t count_active_params(const ModelConfig& c) {
  return params_with(c, true);
}

void init_params(ParamSet& params, const ModelConfig& cfg, uint64_t seed) {
  if (!(params.layout() == make_layout(cfg)))
    internal_error("init_params: layout does not match the config");
  const double std_base = 0.02;
  const double resid_scale = 1.0 / std::sqrt(2.0 * cfg.layers);
  const auto& views = params.layout().views();
  for (size_t i = 0; i < views.size(); ++i) {
    const ParamView& v = views[i];
    float* p = params.data() + v.offset;
    const size_t n = v.numel();
    if (v.name.ends_with(".bias")) {  // q/k/v biases start at 0 (PyTorch's zero-init habit)
      std::fill(p, p + n, 0.0f);
      continue;
    }
    if (v.shape.size() == 1) {  // RMSNorm gains
      std::fill(p, p + n, 1.0f);
      continue;
    }
    const bool resid = v.name.ends_with("o_proj.weight") || v.name.ends_with("down_proj.weight");
    const double sd = std_base * (resid ? resid_scale : 1.0);
    const Philox rng(seed, static_cast<uint64_t>(i) + 1);
#pragma omp parallel for schedule(static)
    for (size_t j = 0; j < n; ++j) p[j] = static_cast<float>(sd * rng.normal(j));
  }
}

double flops_per_token(const ModelConfig& c, int T) {
  // Untied: the embedding table is only looked up; lm_head is the head GEMM (in P).
  const int64_t lookup_only = c.tie_word_embeddings ? 0 : int64_t(c.vocab) * c.dim;
  return 6.0 * static_cast<double>(count_active_params(c) - lookup_only) +
         12.0 * static_cast<double>(c.layers) * c.dim * static_cast<double>(T);
}

// ---- Llama --------------------------------------------------------------------------------------

Llama::Llama(const ModelConfig& cfg) : cfg_(cfg) {
  Status st = validate(cfg);
  if (!st.ok()) internal_error("Llama: invalid config: " + st.message());
  layout_ = make_layout(cfg);
  off_embed_ = layout_.find("model.embed_tokens.weight")->offset;
  off_norm_ = layout_.find("model.norm.weight")->offset;
  off_head_ = layout_.find(head_param_name(cfg))->offset;
  kv_heads_ = num_kv_heads(cfg);
  qkv_dim_ = cfg.dim + 2 * (cfg.dim / cfg.heads) * kv_heads_;
  off_.resize(cfg.layers);
  for (int l = 0; l < cfg.layers; ++l) {
    auto at = [&](const char* s) {
      const ParamView* v = layout_.find(layer_name(l, s));
      return v ? v->offset : size_t(0);  // the mlp.* tensors are absent in MoE layers
    };
    off_[l] = {at("input_layernorm.weight"),  at("self_attn.q_proj.weight"),
               at("self_attn.o_proj.weight"), at("post_attention_layernorm.weight"),
               at("mlp.gate_proj.weight"),    at("mlp.down_proj.weight"),
               at("self_attn.q_proj.bias")};
  }
  if (cfg.moe_experts > 0) moe_ = std::make_unique<MoeBlocks>(cfg, layout_);
}

// A subnetwork view (set_subnet): the kept units of every layer and the buffers a layer that
// keeps only some of them computes with.
struct Llama::SubnetState {
  Subnet subnet;
  std::vector<std::vector<int>> units, blocks;  // (L) kept head units / FFN blocks, ascending
  std::vector<uint8_t> whole;                   // (L) 1: every unit kept, θ read in place
  int lowest = -1;                              // lowest trained layer, -1 if none
  // One partial layer at a time: its kept rows/columns of q|k|v, the q|k|v biases, o_proj,
  // gate|up and down_proj (layout of CompactLayer), and their gradients in the same layout.
  std::vector<float> w, dw;
};

namespace {

// Where a partial layer's tensors sit in SubnetState::w (and dw), in floats, for hk query
// heads, kvk KV heads and Fk FFN channels computed (D the head dim, C the width).
struct CompactLayer {
  size_t qkv = 0, qkv_bias, o, gu, down, end;
  CompactLayer(size_t C, size_t D, size_t hk, size_t kvk, size_t Fk, bool bias) {
    const size_t QKV = (hk + 2 * kvk) * D;
    qkv_bias = QKV * C;
    o = qkv_bias + (bias ? QKV : 0);
    gu = o + C * hk * D;
    down = gu + 2 * Fk * C;
    end = down + C * Fk;
  }
};

}  // namespace

Llama::~Llama() = default;
Llama::Llama(Llama&&) noexcept = default;
Llama& Llama::operator=(Llama&&) noexcept = default;

Status Llama::set_subnet(const Subnet& s) {
  ATOLL_RETURN_IF_ERROR(validate(s, cfg_));
  if (lora_)
    return InvalidArgument(
        "set_subnet: a subnetwork selects units of the full model, not LoRA adapters; use one "
        "or the other");
  auto st = std::make_unique<SubnetState>();
  st->subnet = s;
  const int L = cfg_.layers, U = head_units(cfg_), g = heads_per_unit(cfg_), G = s.ffn_blocks;
  const size_t C = cfg_.dim, D = C / cfg_.heads, Fb = cfg_.ffn_hidden / G;
  st->units.assign(L, {});
  st->blocks.assign(L, {});
  st->whole.assign(L, 0);
  size_t need = 0;
  bool trains_partial = false;
  for (int l = 0; l < L; ++l) {
    for (int j = 0; j < U; ++j)
      if (s.layers[l].heads[j]) st->units[l].push_back(j);
    for (int b = 0; b < G; ++b)
      if (s.layers[l].ffn_blocks[b]) st->blocks[l].push_back(b);
    st->whole[l] = st->units[l].size() == size_t(U) && st->blocks[l].size() == size_t(G);
    if (st->whole[l]) continue;
    const size_t kvk = st->units[l].size();
    need = std::max(
        need, CompactLayer(C, D, kvk * g, kvk, st->blocks[l].size() * Fb, cfg_.attention_bias).end);
    trains_partial |= s.layers[l].train;
  }
  st->lowest = lowest_trained_layer(s);
  st->w.resize(need);
  if (trains_partial) st->dw.resize(need);
  sub_ = std::move(st);
  fwd_flops_ = bwd_flops_ = 0;
  B_ = T_ = 0;  // the activation views depend on the kept units
  return Status::Ok();
}

void Llama::clear_subnet() {
  sub_.reset();
  fwd_flops_ = bwd_flops_ = 0;
  B_ = T_ = 0;
}

const Subnet* Llama::subnet() const {
  return sub_ ? &sub_->subnet : nullptr;
}

size_t Llama::buffer_bytes() const {
  const size_t n = acts_.size() + grads_.size() + (sub_ ? sub_->w.size() + sub_->dw.size() : 0);
  return n * sizeof(float);
}

void Llama::check_params(const ParamSet& p, const char* what) const {
  if (!(p.layout() == layout()))
    internal_error(std::string("Llama::") + what +
                   (lora_ ? ": parameter layout does not match the LoRA adapters"
                          : ": parameter layout does not match the model config"));
}

void Llama::attach_lora(const LoraConfig& lora, std::shared_ptr<const FrozenBase> base) {
  if (sub_) internal_error("Llama::attach_lora: the model is restricted to a subnetwork");
  if (!base || base->storage() != lora.base_storage)
    internal_error(std::string("Llama::attach_lora: the base is not stored as the LoRA config says (") +
                   base_storage_name(lora.base_storage) + ")");
  lora_ = std::make_unique<LoraAdapters>(lora, cfg_, std::move(base));
  B_ = T_ = 0;  // the next forward sizes the adapters' activations
  block_range_.clear();
  base_stage_.clear();
  base_embed_.clear();
  base_norm_.clear();
  base_head_.clear();
  const FrozenBase& fb = lora_->base();
  if (fb.fp32_data()) return;  // read in place
  // bf16: every block's span of the layout (its views are added back to back), the largest
  // sizing the stage; the tensors outside the blocks widened once.
  size_t widest = 0;
  for (int l = 0; l < cfg_.layers; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    size_t begin = SIZE_MAX, end = 0;
    for (const ParamView& v : layout_.views())
      if (v.name.starts_with(prefix)) {
        begin = std::min(begin, v.offset);
        end = std::max(end, v.offset + v.numel());
      }
    block_range_.push_back({begin, end});
    widest = std::max(widest, end - begin);
  }
  base_stage_.resize(widest);
  auto widen_view = [&](const std::string& name, std::vector<float>& out) {
    const ParamView* v = layout_.find(name);
    out.resize(v->numel());
    fb.widen(v->offset, out);
  };
  widen_view("model.embed_tokens.weight", base_embed_);
  widen_view("model.norm.weight", base_norm_);
  if (!cfg_.tie_word_embeddings) widen_view(head_param_name(cfg_), base_head_);
}

void Llama::attach_lora(const LoraConfig& lora, std::shared_ptr<const ParamSet> base) {
  attach_lora(lora, FrozenBase::make(lora.base_storage, std::move(base)));
}

const float* Llama::base_data(const ParamSet& params) const {
  return lora_ ? lora_->base().fp32_data() : params.data();
}

const float* Llama::outer_param(const float* P, size_t offset) const {
  if (P) return P + offset;
  if (offset == off_embed_) return base_embed_.data();
  if (offset == off_norm_) return base_norm_.data();
  if (offset == off_head_) return base_head_.data();
  internal_error("Llama::outer_param: offset " + std::to_string(offset) +
                 " is not the embedding, the final norm or the head");
}

const float* Llama::adapter_data(const ParamSet& params) const {
  return lora_ ? params.data() : nullptr;
}

GemmSite Llama::site(int l, int k) const {
  return gemm_site(cfg_.layers, gemm_.precision(), l, k);
}

MoeSites Llama::moe_sites(int l) const {
  return moe_gemm_sites(cfg_.layers, gemm_.precision(), l);
}

void Llama::ensure_shape(int B, int T, bool with_logits) {
  if (B <= 0 || T <= 0 || T > cfg_.seq_len)
    internal_error("Llama: bad batch shape B=" + std::to_string(B) + " T=" + std::to_string(T) +
                   " (seq_len " + std::to_string(cfg_.seq_len) + ")");
  const size_t N = static_cast<size_t>(B) * T, C = cfg_.dim, F = cfg_.ffn_hidden, V = cfg_.vocab,
               H = cfg_.heads, D = C / H, L = cfg_.layers;
  const bool gqa = kv_heads_ != cfg_.heads;
  if (Status s = check_batch_shape(cfg_, B, T, with_logits); !s.ok())
    internal_error("Llama: " + s.message());
  // Query heads and FFN channels layer l computes: all of them, or a subnetwork's kept units.
  // The dense FFN's gu and swi only for dense layers (MoE layers keep theirs in moe_).
  const auto heads_of = [&](size_t l) {
    return sub_ ? sub_->units[l].size() * size_t(heads_per_unit(cfg_)) : H;
  };
  const auto ffn_of = [&](size_t l) {
    if (moe_ && moe_->is_moe(int(l))) return size_t(0);
    return sub_ ? sub_->blocks[l].size() * (F / sub_->subnet.ffn_blocks) : F;
  };
  // Activations of layer l but its input x: ln1 h ln2 (N, C), rstd1 rstd2, q|k|v (N, 3hD),
  // att (B, h, T, T), atty (N, hD), gate|up and swi (N, 3Fk).
  const auto layer_size = [&](size_t l) {
    const size_t h = heads_of(l);
    return N * C * 3 + N * 2 + N * 3 * h * D + static_cast<size_t>(B) * h * T * T + N * h * D +
           N * 3 * ffn_of(l);
  };
  // Layers below a subnetwork's lowest trained layer are never revisited by backward: they share
  // one block and two ping-pong inputs, so a site that trains only the top layers keeps only
  // their activations (without a trained layer nothing is kept). The full model keeps all.
  const size_t first_kept = !sub_ ? 0 : sub_->lowest < 0 ? L : static_cast<size_t>(sub_->lowest);
  size_t shared = 0, layers_total = 0;
  for (size_t l = 0; l < L; ++l) {
    if (l < first_kept)
      shared = std::max(shared, layer_size(l));
    else
      layers_total += N * C + layer_size(l);
  }
  if (first_kept > 0) layers_total += 2 * N * C + shared;
  // The (N, V) logits only when asked for: forward_hidden never needs them.
  const size_t total = layers_total + N * C * 3 /* out lnf scratch */ + N + N +
                       (with_logits ? N * V : 0) + (gqa ? N * size_t(qkv_dim_) : 0);
  if (acts_.size() < total) acts_.resize(total);  // grows only; smaller shapes reuse it
  B_ = B;
  T_ = T;
  float* p = acts_.data();
  auto take = [&p](size_t n) {
    float* r = p;
    p += n;
    return r;
  };
  float* ping[2] = {nullptr, nullptr};
  float* shared_base = nullptr;
  if (first_kept > 0) {
    ping[0] = take(N * C);
    ping[1] = take(N * C);
    shared_base = take(shared);
  }
  la_.resize(L);
  for (size_t l = 0; l < L; ++l) {
    LayerActs& a = la_[l];
    const size_t h = heads_of(l), Fk = ffn_of(l);
    float* own = p;
    if (l < first_kept) {
      a.x = ping[l % 2];
      p = shared_base;
    } else {
      a.x = take(N * C);
    }
    a.ln1 = take(N * C);
    a.rstd1 = take(N);
    a.qkv = take(N * 3 * h * D);
    a.att = take(static_cast<size_t>(B) * h * T * T);
    a.atty = take(N * h * D);
    a.h = take(N * C);
    a.ln2 = take(N * C);
    a.rstd2 = take(N);
    a.gu = take(N * 2 * Fk);
    a.swi = take(N * Fk);
    if (l < first_kept) p = own;
  }
  out_ = take(N * C);
  lnf_ = take(N * C);
  rstdf_ = take(N);
  scratch_ = take(N * C);
  // Same offsets as always when the logits are wanted (forward()), so its bits cannot depend on
  // forward_hidden() existing.
  logits_ = with_logits ? take(N * V) : nullptr;
  losses_ = take(N);
  qkv_lin_ = gqa ? take(N * size_t(qkv_dim_)) : nullptr;
  if (lora_) lora_->ensure_rows(N);
}

void Llama::check_tokens(const int32_t* tokens, int N) const {
  const int V = cfg_.vocab;
  for (int i = 0; i < N; ++i)
    if (tokens[i] < 0 || tokens[i] >= V)
      internal_error("Llama::forward: token " + std::to_string(tokens[i]) + " at " +
                     std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(V) +
                     ")");
}

namespace {

// The shapes a subnetwork's layer is cut by: width C, head dim D, g query heads per head unit,
// KV heads, FFN hidden F in blocks of Fb, and whether q/k/v have biases.
struct UnitGeometry {
  size_t C, D, g, KV, F, Fb;
  bool bias;
};
// θ offsets of one layer's q_proj (q|k|v follow it), q/k/v biases, o_proj, gate_proj (up
// follows it) and down_proj.
struct LayerTensors {
  size_t qkv, qkv_bias, o, gu, down;
};

// Calls run(full, packed, n) for every run of n consecutive floats that a partial layer gathers
// from θ (offset `full`) into its compact copy (offset `packed`, CompactLayer layout), in packed
// order: q rows of the kept head units (gD each) | their k rows (D) | v rows (D), the same for
// the q|k|v biases, o_proj (C, C) -> (C, hk·D) column runs, gate rows | up rows (Fb each per
// kept block), down_proj (C, F) -> (C, Fk) column runs.
template <typename Run>
void for_each_kept_run(const UnitGeometry& u, const LayerTensors& at, const std::vector<int>& units,
                       const std::vector<int>& blocks, Run run) {
  const size_t C = u.C, D = u.D, gD = u.g * u.D, kvk = units.size(), Fk = blocks.size() * u.Fb;
  const CompactLayer cl(C, D, kvk * u.g, kvk, Fk, u.bias);
  // Per part q, k, v: its first row in θ and the rows one head unit owns.
  const size_t part_row[3] = {0, C, C + u.KV * D}, unit_rows[3] = {gD, D, D};
  size_t packed = cl.qkv;
  for (int part = 0; part < 3; ++part)
    for (int j : units) {
      run(at.qkv + (part_row[part] + j * unit_rows[part]) * C, packed, unit_rows[part] * C);
      packed += unit_rows[part] * C;
    }
  if (u.bias) {
    packed = cl.qkv_bias;
    for (int part = 0; part < 3; ++part)
      for (int j : units) {
        run(at.qkv_bias + part_row[part] + j * unit_rows[part], packed, unit_rows[part]);
        packed += unit_rows[part];
      }
  }
  for (size_t r = 0; r < C; ++r)
    for (size_t i = 0; i < kvk; ++i)
      run(at.o + r * C + units[i] * gD, cl.o + r * kvk * gD + i * gD, gD);
  packed = cl.gu;
  for (size_t part = 0; part < 2; ++part)
    for (int b : blocks) {
      run(at.gu + (part * u.F + b * u.Fb) * C, packed, u.Fb * C);
      packed += u.Fb * C;
    }
  for (size_t r = 0; r < C; ++r)
    for (size_t i = 0; i < blocks.size(); ++i)
      run(at.down + r * u.F + blocks[i] * u.Fb, cl.down + r * Fk + i * u.Fb, u.Fb);
}

UnitGeometry unit_geometry(const ModelConfig& c, const Subnet& s) {
  const size_t C = c.dim, F = c.ffn_hidden;
  return {.C = C,
          .D = C / c.heads,
          .g = size_t(heads_per_unit(c)),
          .KV = size_t(num_kv_heads(c)),
          .F = F,
          .Fb = F / s.ffn_blocks,
          .bias = c.attention_bias};
}

}  // namespace

Llama::LayerWeights Llama::layer_weights(const float* P, int l) {
  const LayerOffsets& o = off_[l];
  const bool bias = cfg_.attention_bias;
  if (!P) {  // a bf16-stored LoRA base (never a subnetwork): block l widened into the stage
    const auto [begin, end] = block_range_[l];
    lora_->base().widen(begin, std::span<float>(base_stage_.data(), end - begin));
    const float* S = base_stage_.data();
    return {.qkv = S + (o.qkv - begin),
            .qkv_bias = bias ? S + (o.qkv_bias - begin) : nullptr,
            .o = S + (o.o - begin),
            .gu = S + (o.gu - begin),
            .down = S + (o.down - begin),
            .ln1 = S + (o.ln1 - begin),
            .ln2 = S + (o.ln2 - begin),
            .heads = cfg_.heads,
            .kv_heads = kv_heads_,
            .ffn = cfg_.ffn_hidden};
  }
  if (!sub_ || sub_->whole[l])
    return {.qkv = P + o.qkv,
            .qkv_bias = bias ? P + o.qkv_bias : nullptr,
            .o = P + o.o,
            .gu = P + o.gu,
            .down = P + o.down,
            .ln1 = P + o.ln1,
            .ln2 = P + o.ln2,
            .heads = cfg_.heads,
            .kv_heads = kv_heads_,
            .ffn = cfg_.ffn_hidden};
  const UnitGeometry u = unit_geometry(cfg_, sub_->subnet);
  const std::vector<int>&units = sub_->units[l], &blocks = sub_->blocks[l];
  float* w = sub_->w.data();
  for_each_kept_run(u, {o.qkv, o.qkv_bias, o.o, o.gu, o.down}, units, blocks,
                    [&](size_t full, size_t packed, size_t n) {
                      std::memcpy(w + packed, P + full, n * sizeof(float));
                    });
  const int kvk = static_cast<int>(units.size()), Fk = static_cast<int>(blocks.size() * u.Fb);
  const CompactLayer cl(u.C, u.D, kvk * u.g, kvk, Fk, bias);
  return {.qkv = w + cl.qkv,
          .qkv_bias = bias ? w + cl.qkv_bias : nullptr,
          .o = w + cl.o,
          .gu = w + cl.gu,
          .down = w + cl.down,
          .ln1 = P + o.ln1,
          .ln2 = P + o.ln2,
          .heads = kvk * static_cast<int>(u.g),
          .kv_heads = kvk,
          .ffn = Fk};
}

Llama::LayerGrads Llama::layer_grads(float* G, int l) {
  const LayerOffsets& o = off_[l];
  const bool bias = cfg_.attention_bias;
  if (G == nullptr || (sub_ && !sub_->subnet.layers[l].train)) return {};  // frozen
  if (!sub_ || sub_->whole[l])
    return {.qkv = G + o.qkv,
            .qkv_bias = bias ? G + o.qkv_bias : nullptr,
            .o = G + o.o,
            .gu = G + o.gu,
            .down = G + o.down,
            .ln1 = G + o.ln1,
            .ln2 = G + o.ln2};
  // A trained partial layer: compact gradients, added into G by scatter_layer_grads.
  const UnitGeometry u = unit_geometry(cfg_, sub_->subnet);
  const size_t kvk = sub_->units[l].size();
  const CompactLayer cl(u.C, u.D, kvk * u.g, kvk, sub_->blocks[l].size() * u.Fb, bias);
  float* dw = sub_->dw.data();
  ops::zero_fill(dw, cl.end);
  return {.qkv = dw + cl.qkv,
          .qkv_bias = bias ? dw + cl.qkv_bias : nullptr,
          .o = dw + cl.o,
          .gu = dw + cl.gu,
          .down = dw + cl.down,
          .ln1 = G + o.ln1,
          .ln2 = G + o.ln2};
}

void Llama::scatter_layer_grads(float* G, int l) const {
  const LayerOffsets& o = off_[l];
  const float* dw = sub_->dw.data();
  for_each_kept_run(unit_geometry(cfg_, sub_->subnet), {o.qkv, o.qkv_bias, o.o, o.gu, o.down},
                    sub_->units[l], sub_->blocks[l], [&](size_t full, size_t packed, size_t n) {
                      for (size_t i = 0; i < n; ++i) G[full + i] += dw[packed + i];
                    });
}

void Llama::forward_attention(int l, const LayerWeights& w, const float* P, LayerActs& a) {
  const int B = B_, T = T_, N = B * T, C = cfg_.dim, D = C / cfg_.heads;
  const int h = w.heads, kv = w.kv_heads, QKV = (h + 2 * kv) * D;
  if (h == 0) {  // every head unit removed: the residual passes through
    std::memcpy(a.h, a.x, sizeof(float) * N * C);
    return;
  }
  ops::rmsnorm_forward(a.ln1, a.rstd1, a.x, w.ln1, N, C, cfg_.norm_eps);
  // (N, C) -> (N, QKV), QKV = (h + 2kv)·D (3hD without GQA, written straight into a.qkv)
  float* lin = kv != h ? qkv_lin_ : a.qkv;
  gemm_.forward(lin, a.ln1, w.qkv, N, C, QKV, site(l, 0));
  if (lora_) lora_->forward(l, 0, lora_params_, a.ln1, lin, N, QKV);
  if (w.qkv_bias) ops::bias_forward(lin, w.qkv_bias, N, QKV);
  ops::rope_forward(lin, B, T, h + kv, D, QKV, cfg_.rope_base);  // q and k in place
  if (kv != h) ops::repeat_kv_forward(a.qkv, lin, N, h, kv, D);  // -> (N, 3hD)
  ops::attention_forward(a.atty, a.att, a.qkv, B, T, h, D);      // -> (N, hD)
  gemm_.forward(scratch_, a.atty, w.o, N, h * D, C, site(l, 1));
  if (lora_) lora_->forward(l, 1, lora_params_, a.atty, scratch_, N, C);
  ops::add_forward(a.h, a.x, scratch_, static_cast<size_t>(N) * C);
  if (sub_) {
    const double n = N;
    fwd_flops_ += 2 * n * C * QKV + 2 * n * (h * D) * C + 4.0 * B * h * T * T * D;
  }
}

void Llama::forward_ffn(int l, const LayerWeights& w, const float* P, LayerActs& a, float* next) {
  const int N = B_ * T_, C = cfg_.dim, Fk = w.ffn;
  const bool moe = moe_ && moe_->is_moe(l);
  if (!moe && Fk == 0) {  // every FFN block removed
    std::memcpy(next, a.h, sizeof(float) * N * C);
    return;
  }
  ops::rmsnorm_forward(a.ln2, a.rstd2, a.h, w.ln2, N, C, cfg_.norm_eps);
  if (moe) {
    moe_->forward(l, P, a.ln2, scratch_, N, gemm_, moe_sites(l));  // experts follow the recipe
  } else {
    gemm_.forward(a.gu, a.ln2, w.gu, N, C, 2 * Fk, site(l, 2));  // (N, C) -> (N, 2Fk)
    if (lora_) lora_->forward(l, 2, lora_params_, a.ln2, a.gu, N, 2 * Fk);
    ops::swiglu_forward(a.swi, a.gu, N, Fk);  // -> (N, Fk)
    gemm_.forward(scratch_, a.swi, w.down, N, Fk, C, site(l, 3));
    if (lora_) lora_->forward(l, 3, lora_params_, a.swi, scratch_, N, C);
    if (sub_) {
      const double n = N;
      fwd_flops_ += 2 * n * C * 2 * Fk + 2 * n * Fk * C;
    }
  }
  ops::add_forward(next, a.h, scratch_, static_cast<size_t>(N) * C);
}

void Llama::forward_trunk(const float* P, const int32_t* tokens) {
  const int N = B_ * T_, C = cfg_.dim, V = cfg_.vocab;
  // x0 (N, C) = wte[tokens]
  ops::embedding_forward(la_[0].x, tokens, outer_param(P, off_embed_), N, V, C);
  for (int l = 0; l < cfg_.layers; ++l) {
    LayerActs& a = la_[l];
    const LayerWeights w = layer_weights(P, l);
    forward_attention(l, w, P, a);
    forward_ffn(l, w, P, a, (l + 1 < cfg_.layers) ? la_[l + 1].x : out_);
  }
  ops::rmsnorm_forward(lnf_, rstdf_, out_, outer_param(P, off_norm_), N, C, cfg_.norm_eps);
}

const float* Llama::forward_hidden(const ParamSet& params, const int32_t* tokens, int B, int T) {
  check_params(params, "forward_hidden");
  ensure_shape(B, T, /*with_logits=*/false);
  const int N = B * T;
  check_tokens(tokens, N);
  tokens_.assign(tokens, tokens + N);
  have_targets_ = false;
  num_targets_ = 0;
  std::fill(losses_, losses_ + N, 0.0f);
  lora_params_ = adapter_data(params);
  fwd_flops_ = bwd_flops_ = 0;
  forward_trunk(base_data(params), tokens);
  return lnf_;
}

float Llama::forward(const ParamSet& params, const int32_t* tokens, const int32_t* targets, int B,
                     int T) {
  check_params(params, "forward");
  ensure_shape(B, T, /*with_logits=*/true);
  const int N = B * T, C = cfg_.dim, V = cfg_.vocab;
  check_tokens(tokens, N);
  tokens_.assign(tokens, tokens + N);
  have_targets_ = targets != nullptr;
  num_targets_ = 0;
  if (have_targets_) {
    targets_.assign(targets, targets + N);
    for (int i = 0; i < N; ++i) {
      if (targets[i] < -1 || targets[i] >= V)
        internal_error("Llama::forward: target " + std::to_string(targets[i]) + " at " +
                       std::to_string(i) + " is outside [-1, " + std::to_string(V) + ")");
      num_targets_ += targets[i] >= 0;
    }
  }
  const float* P = base_data(params);
  lora_params_ = adapter_data(params);
  fwd_flops_ = bwd_flops_ = 0;
  forward_trunk(P, tokens);
  gemm_.forward(logits_, lnf_, outer_param(P, off_head_), N, C, V, site(cfg_.layers, 0));  // (N, C) -> (N, V)
  if (sub_) fwd_flops_ += 2.0 * N * C * V;

  std::fill(losses_, losses_ + N, 0.0f);
  if (!have_targets_) return 0.0f;
  ops::softmax_xent(losses_, static_cast<float*>(nullptr), logits_, targets, N, V, 0.0);
  // Mean in double, in index order: deterministic.
  double sum = 0.0;
  for (int i = 0; i < N; ++i)
    if (targets[i] >= 0) sum += losses_[i];
  return num_targets_ ? static_cast<float>(sum / static_cast<double>(num_targets_)) : 0.0f;
}

void Llama::ensure_grad_buffers() {
  const size_t N = static_cast<size_t>(B_) * T_, NC = N * cfg_.dim, F = cfg_.ffn_hidden;
  // Activation gradients, one allocation: dres (N,C) dln (N,C) datty (N,C) dqkv (N,3C)
  // dgu (N,2F) dswi (N,F), and with GQA dqkv_lin (N, C + 2Ckv) after them.
  const bool gqa = kv_heads_ != cfg_.heads;
  const size_t total = NC * 3 + NC * 3 + N * 3 * F + (gqa ? N * size_t(qkv_dim_) : 0);
  if (grads_.size() < total) grads_.resize(total);
  dres_ = grads_.data();
  dln_ = dres_ + NC;
  datty_ = dln_ + NC;
  dqkv_ = datty_ + NC;
  dgu_ = dqkv_ + 3 * NC;
  dswi_ = dgu_ + N * 2 * F;
  dqkv_lin_ = gqa ? dswi_ + N * F : dqkv_;
}

void Llama::backward(const ParamSet& params, ParamSet& grads) {
  check_params(params, "backward");
  check_params(grads, "backward (grads)");
  if (!have_targets_ || B_ == 0) internal_error("Llama::backward without a forward with targets");
  bwd_flops_ = 0;
  if (sub_ && sub_->lowest < 0) return;  // a subnetwork that trains nothing: no backward at all
  const int N = B_ * T_, C = cfg_.dim, V = cfg_.vocab;
  const size_t NC = static_cast<size_t>(N) * C;
  ensure_grad_buffers();

  const float* P = base_data(params);
  float* G = lora_ ? nullptr : grads.data();  // with LoRA the base is frozen: no gradients
  const float* wte = outer_param(P, off_head_);  // the head: the embedding when tied, else lm_head
  // The head's weight gradient; none when the base is frozen (LoRA) or under a subnetwork.
  float* dwte = G && !sub_ ? G + off_head_ : nullptr;

  // Loss = mean over the num_targets_ valid positions, so dloss/dlosses[i] = 1/num_targets_.
  const double dloss = num_targets_ ? 1.0 / static_cast<double>(num_targets_) : 0.0;
  ops::softmax_xent(losses_, logits_ /* dlogits, in place */, logits_, targets_.data(), N, V,
                    dloss);
  // Head: dlnf (N, C) = dlogits · wte ; dwte += dlogitsᵀ · lnf.
  ops::zero_fill(dln_, NC);
  gemm_.backward(dln_, dwte, logits_, lnf_, wte, N, C, V, site(cfg_.layers, 0));
  if (sub_) bwd_flops_ += 2.0 * N * C * V;
  backward_trunk(P, G, dln_, adapter_data(params), lora_ ? grads.data() : nullptr);
}

void Llama::backward_from_hidden(const ParamSet& params, ParamSet& grads, const float* dh) {
  check_params(params, "backward_from_hidden");
  check_params(grads, "backward_from_hidden (grads)");
  if (B_ == 0) internal_error("Llama::backward_from_hidden without a forward");
  ensure_grad_buffers();
  backward_trunk(base_data(params), lora_ ? nullptr : grads.data(), dh, adapter_data(params),
                 lora_ ? grads.data() : nullptr);
}

void Llama::backward_ffn(int l, const LayerWeights& w, const LayerGrads& g, const float* P,
                         float* G, const float* AP, float* AG) {
  const int N = B_ * T_, C = cfg_.dim, Fk = w.ffn;
  const size_t NC = static_cast<size_t>(N) * C;
  const LayerActs& a = la_[l];
  // dres_ = d(block output). out = h + ffn(ln2): both branches receive it.
  if (moe_ && moe_->is_moe(l)) {
    ops::zero_fill(dln_, NC);
    moe_->backward(l, P, G, a.ln2, dres_, dln_, gemm_, moe_sites(l));  // + router-loss grads
  } else {
    if (Fk == 0) return;  // every FFN block removed: dres_ passes through
    ops::zero_fill(dswi_, static_cast<size_t>(N) * Fk);
    gemm_.backward(dswi_, g.down, dres_, a.swi, w.down, N, Fk, C, site(l, 3));
    if (lora_) lora_->backward(l, 3, AP, AG, a.swi, dres_, dswi_, N, C);
    ops::zero_fill(dgu_, static_cast<size_t>(N) * 2 * Fk);
    ops::swiglu_backward(dgu_, dswi_, a.gu, N, Fk);
    ops::zero_fill(dln_, NC);
    gemm_.backward(dln_, g.gu, dgu_, a.ln2, w.gu, N, C, 2 * Fk, site(l, 2));
    if (lora_) lora_->backward(l, 2, AP, AG, a.ln2, dgu_, dln_, N, 2 * Fk);
    if (sub_) {
      const double n = N;
      bwd_flops_ += (g.gu ? 2.0 : 1.0) * (2 * n * Fk * C + 2 * n * C * 2 * Fk);
    }
  }
  ops::rmsnorm_backward(dres_, g.ln2, dln_, a.h, w.ln2, a.rstd2, N, C);  // dres_ = dh
}

void Llama::backward_attention(int l, const LayerWeights& w, const LayerGrads& g, const float* P,
                               const float* AP, float* AG) {
  const int B = B_, T = T_, N = B * T, C = cfg_.dim, D = C / cfg_.heads;
  const int h = w.heads, kv = w.kv_heads, QKV = (h + 2 * kv) * D;
  if (h == 0) return;  // every head unit removed: dres_ passes through
  const LayerActs& a = la_[l];
  // h = x + o_proj(atty): both branches receive dh (in dres_).
  ops::zero_fill(datty_, static_cast<size_t>(N) * h * D);
  gemm_.backward(datty_, g.o, dres_, a.atty, w.o, N, h * D, C, site(l, 1));
  if (lora_) lora_->backward(l, 1, AP, AG, a.atty, dres_, datty_, N, C);
  ops::zero_fill(dqkv_, static_cast<size_t>(N) * 3 * h * D);
  ops::attention_backward(dqkv_, datty_, a.qkv, a.att, B, T, h, D);
  float* dlin = dqkv_;  // (N, QKV)
  if (kv != h) {        // fold the repeated KV heads back: dk, dv summed over each group
    dlin = dqkv_lin_;
    ops::zero_fill(dlin, static_cast<size_t>(N) * QKV);
    ops::repeat_kv_backward(dlin, dqkv_, N, h, kv, D);
  }
  ops::rope_backward(dlin, B, T, h + kv, D, QKV, cfg_.rope_base);  // dq, dk before RoPE
  if (g.qkv_bias) ops::bias_backward(g.qkv_bias, dlin, N, QKV);
  ops::zero_fill(dln_, static_cast<size_t>(N) * C);
  gemm_.backward(dln_, g.qkv, dlin, a.ln1, w.qkv, N, C, QKV, site(l, 0));
  if (lora_) lora_->backward(l, 0, AP, AG, a.ln1, dlin, dln_, N, QKV);
  ops::rmsnorm_backward(dres_, g.ln1, dln_, a.x, w.ln1, a.rstd1, N, C);  // dres_ = dx
  if (sub_) {
    const double n = N;
    bwd_flops_ +=
        (g.qkv ? 2.0 : 1.0) * (2 * n * (h * D) * C + 2 * n * C * QKV) + 8.0 * B * h * T * T * D;
  }
}

void Llama::backward_trunk(const float* P, float* G, const float* dlnf, const float* AP,
                           float* AG) {
  const int N = B_ * T_, C = cfg_.dim, V = cfg_.vocab;
  if (sub_ && sub_->lowest < 0) return;  // nothing trained
  // Final norm: dres_ (N, C) = d(last block output). dlnf may be dln_ itself (from backward()):
  // it is read here, before dln_ is reused as scratch below. Its gain is frozen under a
  // subnetwork (and with LoRA, G null).
  ops::zero_fill(dres_, static_cast<size_t>(N) * C);
  ops::rmsnorm_backward(dres_, G && !sub_ ? G + off_norm_ : nullptr, dlnf, out_,
                        outer_param(P, off_norm_), rstdf_, N, C);
  // A subnetwork's backward stops at its lowest trained layer.
  const int lowest = sub_ ? sub_->lowest : 0;
  for (int l = cfg_.layers - 1; l >= lowest; --l) {
    const LayerWeights w = layer_weights(P, l);
    const LayerGrads g = layer_grads(G, l);
    backward_ffn(l, w, g, P, G, AP, AG);
    backward_attention(l, w, g, P, AP, AG);
    if (sub_ && g.qkv && !sub_->whole[l]) scatter_layer_grads(G, l);
  }
  if (G && !sub_) ops::embedding_backward(G + off_embed_, dres_, tokens_.data(), N, V, C);
}

StatusOr<std::vector<int32_t>> Llama::generate(const ParamSet& params,
                                               const std::vector<int32_t>& prompt, int n_new,
                                               float temperature, int top_k, uint64_t seed) {
  if (prompt.empty()) return InvalidArgument("generate: the prompt must have at least one token");
  if (n_new < 0)
    return InvalidArgument("generate: n_new must be >= 0, got " + std::to_string(n_new));
  const int V = cfg_.vocab;
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= V)
      return InvalidArgument("generate: prompt token " + std::to_string(prompt[i]) +
                             " at position " + std::to_string(i) +
                             " is outside the vocabulary [0, " + std::to_string(V) + ")");
  if (!(params.layout() == layout()))
    return InvalidArgument("generate: parameter layout does not match the model config");
  const int k = (top_k <= 0 || top_k >= V) ? V : top_k;
  // Stream id for sampling draws, distinct from the init streams (view index + 1).
  const Philox rng(seed, 0x67656e6572617465ULL /* "generate" */);

  std::vector<int32_t> ctx = prompt, out;
  out.reserve(n_new);
  std::vector<int> order(V);
  std::vector<double> prob(k);
  for (int step = 0; step < n_new; ++step) {
    const int T = static_cast<int>(std::min<size_t>(ctx.size(), cfg_.seq_len));
    forward(params, ctx.data() + (ctx.size() - T), nullptr, 1, T);
    const float* lg = logits_ + static_cast<size_t>(T - 1) * V;
    int next = 0;
    // Largest logits first; ties broken by the lower token id, so the order is total.
    std::iota(order.begin(), order.end(), 0);
    auto cmp = [lg](int a, int b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); };
    if (temperature <= 0.0f) {
      next = *std::min_element(order.begin(), order.end(), cmp);
    } else {
      std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
      const double mx = lg[order[0]];
      double z = 0.0;
      for (int i = 0; i < k; ++i) z += prob[i] = std::exp((lg[order[i]] - mx) / temperature);
      const double u = rng.uniform_double(static_cast<uint64_t>(step)) * z;
      double acc = 0.0;
      next = order[k - 1];
      for (int i = 0; i < k; ++i) {
        acc += prob[i];
        if (u < acc) {
          next = order[i];
          break;
        }
      }
    }
    ctx.push_back(next);
    out.push_back(next);
  }
  return out;
}

}  // namespace atl::algorithms
