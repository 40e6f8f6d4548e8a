// Llama-style decoder on the CPU op table (kernels/cpu/ops.h), fp32, llm.c style: parameters in
// one flat ParamSet (Hugging Face Llama names), activations in one flat buffer carved into
// views, forward and backward written out op by op.
//
// Architecture: token embedding -> L pre-norm blocks -> final RMSNorm -> tied output head.
//   block:  h   = x + o_proj(attention(rope(q), rope(k), v)),  q|k|v = input_layernorm(x)·Wqkvᵀ
//           out = h + down_proj(silu(gate) * up),              gate|up =
//           post_attention_layernorm(h)·Wguᵀ
// RMSNorm (eps from the config, default 1e-5), RoPE on adjacent pairs (x[2i], x[2i+1]) with
// angle pos·base^(-2i/D), causal softmax attention with scale 1/sqrt(D), SwiGLU, no biases.
// The output head is the embedding matrix itself (no lm_head tensor).
// Hugging Face Llama-family variants, each only when its field is set (the defaults are the
// model above, bit for bit): grouped-query attention (kv_heads < heads; query head h reads KV
// head h / (heads / kv_heads), as HF's repeat_kv), q/k/v biases (attention_bias, Qwen2), and an
// untied output head lm_head.weight (tie_word_embeddings = false).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/model/lora.h"
#include "algorithms/model/moe_block.h"
#include "algorithms/model/param_set.h"
#include "algorithms/model/precision.h"
#include "kernels/core/status.h"

namespace atl::algorithms {

struct Subnet;  // algorithms/model/subnet.h

struct ModelConfig {
  int vocab = 256;       // V
  int dim = 256;         // C = heads * head_dim
  int layers = 4;        // L
  int heads = 4;         // H
  int ffn_hidden = 768;  // F, hidden size of the SwiGLU FFN
  int seq_len = 256;     // longest context the model is trained / sampled with
  double rope_base = 10000.0;  // HF rope_theta
  double norm_eps = 1e-5;      // HF rms_norm_eps

  // Hugging Face Llama-family fields (docs/model.md). ffn_hidden is HF intermediate_size.
  int kv_heads = 0;                 // KV heads (HF num_key_value_heads), divides heads; 0 = heads
  bool tie_word_embeddings = true;  // false: a separate output head lm_head.weight (V, C)
  bool attention_bias = false;      // q/k/v projections have biases (Qwen2; no o_proj bias)

  // Mixture of experts (docs/moe.md). moe_experts = 0: every layer has the dense SwiGLU FFN.
  // Otherwise layer l's FFN is an MoE layer when (l + 1) % moe_every == 0 (1: every layer,
  // 2: layers 1, 3, ... as in Switch Transformer), the others stay dense (ffn_hidden).
  int moe_experts = 0;                // E routed experts per MoE layer
  int moe_top_k = 2;                  // K experts per token, 1 <= K <= E
  int moe_hidden = 0;                 // SwiGLU hidden size of each routed expert (>= 1 with MoE)
  int moe_every = 1;                  // MoE layer period, 1 <= moe_every <= layers
  std::string moe_score = "softmax";  // router scores: "softmax" (Mixtral) or "sigmoid" (DS-V3)
  int moe_shared_hidden = 0;          // hidden size of the always-on shared expert, 0 = none
  double moe_aux_coef = 0.01;         // weight of the load-balancing loss, per MoE layer
  double moe_z_coef = 0.001;          // weight of the router z-loss, per MoE layer
};

// KV heads of the model: kv_heads, or heads when kv_heads = 0 (plain multi-head attention).
int num_kv_heads(const ModelConfig& cfg);
// Name of the output head's weight (V, C): "lm_head.weight" when untied, else the embedding.
const char* head_param_name(const ModelConfig& cfg);

// Whether layer l's FFN is an MoE layer (see ModelConfig).
bool is_moe_layer(const ModelConfig& cfg, int l);
// "model.layers.{l}.mlp." + suffix, the prefix of every MoE tensor of layer l.
std::string moe_param_name(int l, const std::string& suffix);

// The names validate() gives the fields in its messages: Atoll's experiment-config keys by
// default, a Hugging Face config.json's keys for an imported model (hf_format.h).
struct ModelFieldNames {
  const char* vocab = "vocab";
  const char* dim = "dim";
  const char* layers = "layers";
  const char* heads = "heads";
  const char* kv_heads = "kv_heads";
  const char* ffn_hidden = "ffn_hidden";
  const char* seq_len = "seq_len";
  const char* rope_base = "rope_base";
  const char* norm_eps = "norm_eps";
};

// OK, or the first problem found, one line that names the field (as `names` calls it) and the
// value.
Status validate(const ModelConfig& cfg, const ModelFieldNames& names = {});

// Whether a forward pass over B rows of T tokens fits the op table's 32-bit indices: the
// attention scores (B, heads, T, T), q|k|v (B·T, 3C) and, with_logits, the logits (B·T, vocab)
// must each hold fewer than 2^31 elements. One line naming the shape otherwise.
Status check_batch_shape(const ModelConfig& cfg, int64_t B, int64_t T, bool with_logits = true);

// One field in which two model configs differ: its experiment-config key and both values.
struct ModelFieldDifference {
  std::string field;  // "dim", "ffn_hidden", "moe_score", ...
  std::string a, b;   // the values, as text
};
// Every field of `a` and `b` that differs, in declaration order (empty: the same model).
std::vector<ModelFieldDifference> model_differences(const ModelConfig& a, const ModelConfig& b);

// Parameter layout, Hugging Face Llama names and shapes (PyTorch order), Ckv = num_kv_heads·D
// (= C without grouped-query attention):
//   model.embed_tokens.weight                          (V, C)  also the output head when tied
//   per layer l, in this order:
//   model.layers.{l}.input_layernorm.weight            (C)
//   model.layers.{l}.self_attn.q_proj.weight           (C, C)   \  adjacent: one (C + 2Ckv, C)
//   model.layers.{l}.self_attn.k_proj.weight           (Ckv, C)  > matrix for a single fused
//   model.layers.{l}.self_attn.v_proj.weight           (Ckv, C) /  q|k|v GEMM
//   only with attention_bias (adjacent: one (C + 2Ckv) vector added after the GEMM):
//   model.layers.{l}.self_attn.q_proj.bias             (C)
//   model.layers.{l}.self_attn.k_proj.bias             (Ckv)
//   model.layers.{l}.self_attn.v_proj.bias             (Ckv)
//   model.layers.{l}.self_attn.o_proj.weight           (C, C)
//   model.layers.{l}.post_attention_layernorm.weight   (C)
//   model.layers.{l}.mlp.gate_proj.weight              (F, C) \  adjacent: one (2F, C) GEMM
//   model.layers.{l}.mlp.up_proj.weight                (F, C) /
//   model.layers.{l}.mlp.down_proj.weight              (C, F)
//   an MoE layer has instead of the three mlp.* tensors (Qwen2-MoE / Mixtral names, Fe =
//   moe_hidden, Fs = moe_shared_hidden):
//   model.layers.{l}.mlp.gate.weight                   (E, C)  router
//   per expert e = 0 .. E-1 (adjacent: expert e's block starts at e·3·Fe·C):
//   model.layers.{l}.mlp.experts.{e}.gate_proj.weight  (Fe, C)
//   model.layers.{l}.mlp.experts.{e}.up_proj.weight    (Fe, C)
//   model.layers.{l}.mlp.experts.{e}.down_proj.weight  (C, Fe)
//   and when Fs > 0:
//   model.layers.{l}.mlp.shared_expert.gate_proj.weight (Fs, C)
//   model.layers.{l}.mlp.shared_expert.up_proj.weight   (Fs, C)
//   model.layers.{l}.mlp.shared_expert.down_proj.weight (C, Fs)
//   model.norm.weight                                  (C)
//   lm_head.weight                                     (V, C)  only when tie_word_embeddings
//                                                               is false
// The q and k rows (and biases) are in Atoll's adjacent-pair RoPE order; Hugging Face's
// rotate-half order differs by a row permutation within each head (algorithms/model/hf_io.h).
ParamLayout make_layout(const ModelConfig& cfg);

// Number of parameters (= make_layout(cfg).numel()).
int64_t count_params(const ModelConfig& cfg);
// Parameters one token uses: count_params less the (E − K) routed experts it skips in every
// MoE layer (the router and the shared expert count in full). = count_params for a dense model.
int64_t count_active_params(const ModelConfig& cfg);

// Deterministic init, a pure function of `seed`: every matrix ~ N(0, 0.02) (GPT-2 / llm.c),
// o_proj and down_proj (the projections that write into the residual stream) scaled by
// 1/sqrt(2·layers) so the residual variance does not grow with depth; norm weights = 1.
// View i draws from Philox stream (seed, i + 1), element j from counter j, so the result does
// not depend on threads or on other tensors. `params` must have make_layout(cfg).
void init_params(ParamSet& params, const ModelConfig& cfg, uint64_t seed);

// Training FLOPs per token for a context of T tokens (forward + backward, multiply-add = 2):
//   6·P + 12·L·C·T,  P = count_active_params (MoE: the experts a token is routed to)
// 6·P: every (active) parameter is used in one multiply-add per token forward and two backward; the
// tied embedding is counted once, as the output head GEMM (the lookup itself is free). With an
// untied head the embedding table is left out of P (a lookup) and lm_head counts.
// 12·L·C·T: attention scores Q·Kᵀ and the weighted sum A·V, each 2·C·T per token forward,
// twice that backward (PaLM, appendix B; nanoGPT's estimate_mfu). The causal mask halves the
// useful work, but the convention counts the full T×T square, as peers report it.
double flops_per_token(const ModelConfig& cfg, int T);

// The model: forward, backward and sampling. Holds activations (not parameters), so one Llama
// serves any ParamSet with the matching layout. Not thread-safe; one per training thread.
// A subnetwork (set_subnet, Hydra) is a view of the same model: the same per-layer code runs over
// the kept units only, with their weights gathered out of θ before each GEMM.
class Llama {
 public:
  // cfg must pass validate() (aborts otherwise: a programming error, configs are validated at
  // load time).
  explicit Llama(const ModelConfig& cfg);
  ~Llama();
  Llama(Llama&&) noexcept;
  Llama& operator=(Llama&&) noexcept;

  const ModelConfig& config() const { return cfg_; }
  // The layout of the ParamSet that forward/backward/generate take: the model's, or with LoRA
  // attached the adapters' (make_lora_layout).
  const ParamLayout& layout() const { return lora_ ? lora_->layout() : layout_; }

  // Attaches LoRA adapters (algorithms/model/lora.h) over the frozen `base` (make_layout of the
  // config): from now on forward/backward/generate take the adapter ParamSet, backward computes
  // gradients for the adapters only (none for the base: its weight gradients are skipped), and
  // the base stays as stored: fp32 in place, or bf16 (FrozenBase) widened one transformer block
  // at a time into an fp32 stage (the embedding, final norm and head are widened once, here).
  // lora must be valid for the config (aborts otherwise).
  void attach_lora(const LoraConfig& lora, std::shared_ptr<const FrozenBase> base);
  // The same over `base` held as lora.base_storage says (fp32: shared as is; bf16: a rounded copy).
  void attach_lora(const LoraConfig& lora, std::shared_ptr<const ParamSet> base);
  // The adapters' state, or null for a plain model.
  const LoraAdapters* lora() const { return lora_.get(); }

  // Restricts the model to a subnetwork (algorithms/model/subnet.h; Hydra). From now on:
  //  - forward computes only the kept units: a removed head unit's q/k/v rows (and biases), its
  //    attention and its o_proj columns, a removed FFN block's rows and columns are not
  //    computed (a layer that keeps every unit reads θ in place, one that does not has its kept
  //    rows/columns gathered into a compact copy before each GEMM, same op table);
  //  - backward ACCUMULATES (+=) gradients at the trained elements only (trainable_mask; every
  //    other element of grads is left as is), and stops at the lowest trained layer: the
  //    embedding, the final norm and the output head are frozen;
  //  - activations of layers below the lowest trained layer are not kept for backward.
  // With every unit kept the forward is bit for bit the full model's, and so are the gradients
  // at the trained elements (grads zero there first). Refused (the model unchanged) when s
  // does not pass validate(s, config()) or LoRA adapters are attached.
  Status set_subnet(const Subnet& s);
  // Back to the full model.
  void clear_subnet();
  // The subnetwork, or null for the full model.
  const Subnet* subnet() const;
  // FLOPs executed by the last forward / backward through a subnetwork (0 without one): GEMMs
  // 2·M·N·K each, attention 4·B·h·T²·D forward and twice that backward (h = query heads
  // computed); element-wise ops not counted, as in flops_per_token.
  double last_forward_flops() const { return fwd_flops_; }
  double last_backward_flops() const { return bwd_flops_; }
  // Bytes held for activations, activation gradients and a subnetwork's gathered weights and
  // compact gradients (grows only).
  size_t buffer_bytes() const;

  // tokens (B, T) in [0, V); targets (B, T) in [0, V) or -1 (ignored), may be nullptr.
  // Returns the mean cross-entropy over non-ignored targets (0 if there are none, or if
  // targets is nullptr). T <= seq_len. Activation memory grows to the largest (B, T) seen and
  // is reused for any smaller shape. Aborts on out-of-range tokens (the data layer validates).
  float forward(const ParamSet& params, const int32_t* tokens, const int32_t* targets, int B,
                int T);

  // Gradient of the mean loss of the last forward (which must have had targets) with respect
  // to every parameter, ACCUMULATED (+=) into grads (layout of params; zero it first). Destroys
  // the logits (the loss gradient is written over them to save B·T·V floats).
  void backward(const ParamSet& params, ParamSet& grads);

  // Forward up to the final RMSNorm only: no LM head, no loss, and no (B, T, V) logits buffer
  // (for losses computed outside the model, such as the fused distillation loss against the
  // tied head model.embed_tokens.weight (V, C)). Returns the final hidden states (B·T, C), the
  // input the head would multiply, valid until the next forward. Same arithmetic as forward()
  // up to that point (bitwise). Aborts on out-of-range tokens, like forward().
  const float* forward_hidden(const ParamSet& params, const int32_t* tokens, int B, int T);

  // Backward of the last forward (or forward_hidden) from dh (B·T, C), the gradient of some loss
  // with respect to the final hidden states: ACCUMULATES (+=) into grads the gradients of the
  // final norm, every block and the embedding lookup. The head's own gradient (the tied
  // embedding used as W) is the caller's, added before or after (sums commute up to rounding;
  // backward() adds the head first). dh may point anywhere but into this model's buffers.
  // MoE layers also add the gradients of their router losses (aux_loss()), as in backward().
  void backward_from_hidden(const ParamSet& params, ParamSet& grads, const float* dh);

  // Training precision of the linear layers' GEMMs (algorithms/model/precision.h; default fp32).
  // The LM head is computed in bf16 by every low-precision recipe, and nvfp4 also keeps its last
  // nvfp4_bf16_tail_layers(layers) blocks in bf16. Attention's own products stay fp32.
  void set_precision(Precision p, uint64_t seed) { gemm_.configure(p, seed); }
  PrecisionGemm& gemm() { return gemm_; }

  // Logits (B, T, V) of the last forward; valid until backward() or the next forward().
  const float* logits() const { return logits_; }
  // Per-position losses (B, T) of the last forward (0 where ignored).
  const float* losses() const { return losses_; }
  // Number of non-ignored targets in the last forward.
  int64_t num_targets() const { return num_targets_; }
  // MoE router losses of the last forward (0 for a dense model): Σ over MoE layers of
  // moe_aux_coef·L_aux + moe_z_coef·L_z. The training objective is forward()'s cross-entropy
  // plus this term; forward() returns the cross-entropy alone (so loss and bpb compare with
  // dense models), backward() differentiates the sum.
  double aux_loss() const { return moe_ ? moe_->weighted_loss() : 0.0; }
  // The unscaled sums over MoE layers of L_aux and L_z of the last forward.
  double balance_loss_sum() const { return moe_ ? moe_->aux_loss_sum() : 0.0; }
  double z_loss_sum() const { return moe_ ? moe_->z_loss_sum() : 0.0; }

  // Samples n_new tokens after `prompt` (non-empty, tokens in [0, V)). Each step recomputes a
  // full forward over the last seq_len tokens of the context (simple, and cheap at this scale).
  // temperature <= 0: greedy (argmax, lowest id on ties). Otherwise softmax(logits/temperature)
  // restricted to the top_k largest logits (top_k <= 0 or >= V: all), drawn with Philox
  // (seed, position): the same arguments give the same tokens. Returns only the new tokens.
  StatusOr<std::vector<int32_t>> generate(const ParamSet& params,
                                          const std::vector<int32_t>& prompt, int n_new,
                                          float temperature, int top_k, uint64_t seed);

 private:
  // Per-layer parameter offsets into the flat buffer (resolved once from the layout).
  struct LayerOffsets {
    size_t ln1, qkv, o, ln2, gu, down;
    size_t qkv_bias;  // q|k|v biases (C + 2Ckv), only with attention_bias
  };
  // Per-layer activation views into acts_ (shapes for the current B, T; N = B·T; h query
  // heads and Fk FFN channels computed: H and F for the full model).
  struct LayerActs {
    float* x;      // (N, C)  block input = previous block's output (or the embedding)
    float* ln1;    // (N, C)
    float* rstd1;  // (N)
    float* qkv;    // (N, 3hD) q and k after RoPE (with GQA: the KV heads repeated, repeat_kv)
    float* att;    // (B, h, T, T) softmax probabilities
    float* atty;   // (N, hD)  attention output before o_proj
    float* h;      // (N, C)  x + o_proj(atty)
    float* ln2;    // (N, C)
    float* rstd2;  // (N)
    float* gu;     // (N, 2Fk) gate | up
    float* swi;    // (N, Fk)  silu(gate) * up
  };
  // The weights one layer computes with: θ in place for the full model (and for a subnetwork's
  // layer that keeps every unit), else the kept units' rows/columns gathered (SubnetState).
  // hk = heads query heads, kvk = kv_heads KV heads, Fk = ffn channels; QKVk = (hk + 2kvk)·D.
  struct LayerWeights {
    const float* qkv;       // (QKVk, C) q rows | k rows | v rows
    const float* qkv_bias;  // (QKVk), null without attention_bias
    const float* o;         // (C, hk·D)
    const float* gu;        // (2Fk, C) gate rows | up rows
    const float* down;      // (C, Fk)
    const float* ln1;       // (C) input_layernorm gain
    const float* ln2;       // (C) post_attention_layernorm gain
    int heads, kv_heads, ffn;
  };
  // Where one layer's parameter gradients go (shapes as LayerWeights); null: not trained.
  struct LayerGrads {
    float *qkv, *qkv_bias, *o, *gu, *down, *ln1, *ln2;
  };
  struct SubnetState;  // llama.cc

  // Points the activation views at acts_ for (B, T); the (N, V) logits only when with_logits.
  void ensure_shape(int B, int T, bool with_logits);
  void check_tokens(const int32_t* tokens, int N) const;
  // Embedding, blocks and final norm (to lnf_) for the shape set by ensure_shape.
  void forward_trunk(const float* P, const int32_t* tokens);
  // One block's sub-blocks: a.x -> a.h (attention) and a.h -> next (FFN or MoE).
  void forward_attention(int l, const LayerWeights& w, const float* P, LayerActs& a);
  void forward_ffn(int l, const LayerWeights& w, const float* P, LayerActs& a, float* next);
  // Their backward: dres (N, C) holds d(sub-block output) and becomes d(sub-block input).
  void backward_ffn(int l, const LayerWeights& w, const LayerGrads& g, const float* P, float* G,
                    const float* AP, float* AG);
  void backward_attention(int l, const LayerWeights& w, const LayerGrads& g, const float* P,
                          const float* AP, float* AG);
  // Layer l's weights (gathering a subnetwork's kept units; P null: a bf16-stored LoRA base,
  // block l widened into base_stage_) and gradient destinations
  LayerWeights layer_weights(const float* P, int l);
  // (zeroing a trained partial layer's compact gradients), and their addition into G.
  LayerGrads layer_grads(float* G, int l);
  void scatter_layer_grads(float* G, int l) const;
  // dlnf (N, C) -> every gradient below the head (see backward_from_hidden). P and G are the
  // base parameters and gradients (G null with LoRA: the base is frozen); AP and AG the
  // adapters' (null without LoRA).
  void backward_trunk(const float* P, float* G, const float* dlnf, const float* AP, float* AG);
  // Base parameters and adapter parameters of `params` (see layout()). base_data is null for a
  // bf16-stored LoRA base: blocks are read through layer_weights, the rest through outer_param.
  const float* base_data(const ParamSet& params) const;
  // A parameter outside the transformer blocks (embedding, final norm, head) at layout offset
  // `offset`: P + offset, or its fp32 copy when P is null (bf16-stored LoRA base).
  const float* outer_param(const float* P, size_t offset) const;
  const float* adapter_data(const ParamSet& params) const;
  // Grows grads_ (activation gradients) to the current shape.
  void ensure_grad_buffers();
  void check_params(const ParamSet& p, const char* what) const;
  // GEMM k (0 qkv, 1 o, 2 gate|up, 3 down) of layer l; l = layers is the LM head.
  GemmSite site(int l, int k) const;
  // The expert GemmSites of MoE layer l (same high_precision as the layer's dense sites).
  MoeSites moe_sites(int l) const;

  ModelConfig cfg_;
  ParamLayout layout_;
  size_t off_embed_ = 0, off_norm_ = 0;
  size_t off_head_ = 0;  // the output head (V, C): off_embed_ when tied
  int kv_heads_ = 0;     // num_kv_heads(cfg_)
  int qkv_dim_ = 0;      // C + 2·Ckv, the width of the fused q|k|v GEMM
  std::vector<LayerOffsets> off_;

  int B_ = 0, T_ = 0;
  std::vector<float> acts_;   // every forward activation, one allocation
  std::vector<float> grads_;  // activation gradients for backward, one allocation
  // Views into grads_ (ensure_grad_buffers): dres dln (N, C), datty (N, C), dqkv (N, 3C),
  // dgu (N, 2F), dswi (N, F), and with GQA dqkv_lin (N, C + 2Ckv) (else = dqkv).
  float *dres_ = nullptr, *dln_ = nullptr, *datty_ = nullptr, *dqkv_ = nullptr, *dgu_ = nullptr,
        *dswi_ = nullptr, *dqkv_lin_ = nullptr;
  std::vector<LayerActs> la_;
  float* out_ = nullptr;      // (N, C) output of the last block
  float* lnf_ = nullptr;      // (N, C)
  float* rstdf_ = nullptr;    // (N)
  float* scratch_ = nullptr;  // (N, C) o_proj / down_proj output before the residual add
  float* logits_ = nullptr;   // (N, V)
  float* losses_ = nullptr;   // (N)
  float* qkv_lin_ = nullptr;  // (N, C + 2Ckv) q|k|v before repeat_kv, only with GQA (scratch)
  std::vector<int32_t> tokens_, targets_;  // (N) copies for backward
  std::unique_ptr<MoeBlocks> moe_;         // null for a dense model
  std::unique_ptr<LoraAdapters> lora_;     // null without adapters
  const float* lora_params_ = nullptr;     // the adapters of the current forward (with LoRA)
  // A bf16-stored LoRA base (FrozenBase): each block's [begin, end) in the layout, the fp32 stage
  // one block at a time is widened into, and the fp32 embedding, final norm and (untied) head.
  std::vector<std::pair<size_t, size_t>> block_range_;
  std::vector<float> base_stage_, base_embed_, base_norm_, base_head_;
  bool have_targets_ = false;
  PrecisionGemm gemm_;
  int64_t num_targets_ = 0;
  std::unique_ptr<SubnetState> sub_;  // null: the full model
  double fwd_flops_ = 0, bwd_flops_ = 0;
};

}  // namespace atl::algorithms
