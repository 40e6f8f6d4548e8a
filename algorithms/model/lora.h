// LoRA adapters (Hu et al. 2021) on the linear projections of the Llama model, with Hugging Face
// PEFT's semantics: for a targeted projection y = W x,
//   y = W x + (alpha / r) · B (A x),   A (r, in), B (out, r)
// A starts as PEFT's kaiming_uniform_(a = sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in)), B at 0, so a
// fresh adapter leaves the model unchanged. No dropout. The base W is frozen: the model computes
// no gradient for it and the optimizer holds no state for it; only the adapter ParamSet trains.
//
// Adapter names are the projection's name with PEFT's suffixes, in Atoll's row layout:
//   model.layers.{l}.self_attn.q_proj.lora_A.weight   (r, C)
//   model.layers.{l}.self_attn.q_proj.lora_B.weight   (C, r)   rows in Atoll's RoPE pair order
// PEFT's file names prefix them with "base_model.model." (node/peft_export.h converts).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/model/frozen_base.h"
#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"

namespace atl::algorithms {

struct ModelConfig;

// The projections an adapter may sit on, by their PEFT target_modules short names.
inline constexpr const char* kLoraTargetNames[] = {"q", "k", "v", "o", "gate", "up", "down"};

struct LoraConfig {
  int rank = 0;         // r; 0 = no adapters (a plain model)
  double alpha = 16.0;  // the update is scaled by alpha / r (PEFT's lora_alpha)
  // Subset of kLoraTargetNames, kept in that canonical order (parse_lora_targets sorts).
  std::vector<std::string> targets;
  // How the frozen base is held (algorithms/model/frozen_base.h): bf16 halves its memory and
  // computes exactly as a base rounded to bf16 once.
  BaseStorage base_storage = BaseStorage::kFp32;
};

inline bool lora_enabled(const LoraConfig& c) {
  return c.rank > 0;
}
// alpha / r.
double lora_scale(const LoraConfig& c);

// "q,k,v,o" (any order, no duplicates) -> {"q", "k", "v", "o"} in canonical order. One line
// naming an unknown or repeated name.
StatusOr<std::vector<std::string>> parse_lora_targets(const std::string& csv);
// The targets joined by commas, canonical order ("q,k,v,o").
std::string lora_targets_csv(const LoraConfig& c);
// The Hugging Face module name of a target: "q" -> "q_proj", "gate" -> "gate_proj".
std::string lora_module_name(const std::string& target);

// OK, or one line naming the problem: rank out of [1, 4096], alpha not finite and > 0, no
// targets, an unknown target, or a model the adapters cannot sit on (MoE layers).
Status validate(const LoraConfig& lora, const ModelConfig& model);

// One adapter: where it sits and its two matrices in the adapter ParamSet.
struct LoraAdapterInfo {
  int layer = 0;
  std::string target;  // "q", ..., "down"
  int site = 0;        // the model's fused GEMM it adds to: 0 q|k|v, 1 o, 2 gate|up, 3 down
  int in = 0;          // input features of the projection
  int out = 0;         // output features
  int column = 0;      // first output column of this projection inside the fused GEMM's output
  std::string a_name, b_name;
};
// Every adapter, layer by layer, targets in canonical order (the layout's order).
std::vector<LoraAdapterInfo> lora_adapters(const LoraConfig& lora, const ModelConfig& model);

// Per layer, per adapter: lora_A.weight (r, in) then lora_B.weight (out, r).
ParamLayout make_lora_layout(const LoraConfig& lora, const ModelConfig& model);
// Trainable parameters: Σ r·(in + out) over the adapters.
int64_t count_lora_params(const LoraConfig& lora, const ModelConfig& model);

// PEFT's init, a pure function of seed: A ~ U(-1/sqrt(in), 1/sqrt(in)) with view i drawing from
// Philox stream (seed, i + 1), element j from counter j; B = 0. `adapters` has make_lora_layout.
void init_lora_params(ParamSet& adapters, const LoraConfig& lora, const ModelConfig& model,
                      uint64_t seed);

// The base with every adapter folded in: W + (alpha/r)·B·A (in double, rounded once to fp32),
// in Atoll's layout (layout make_layout(model)). Errors if a layout does not match.
StatusOr<ParamSet> merge_lora(const ParamSet& base, const ParamSet& adapters,
                              const LoraConfig& lora, const ModelConfig& model);

// The adapters' arithmetic inside the model (algorithms/model/llama.cc calls it around each
// fused GEMM). Holds the frozen base, the saved (N, r) activations A·x of the last forward and
// scratch; not thread-safe, one per Llama.
class LoraAdapters {
 public:
  // base must have make_layout(model); lora must be valid for model.
  LoraAdapters(const LoraConfig& lora, const ModelConfig& model,
               std::shared_ptr<const FrozenBase> base);

  const LoraConfig& config() const { return lora_; }
  const ParamLayout& layout() const { return layout_; }
  const FrozenBase& base() const { return *base_; }

  // Sizes the saved activations for N rows (grows only).
  void ensure_rows(size_t N);
  // out (N, width) += scale · (x (N, in) · Aᵀ) · Bᵀ into the adapter's columns, for every adapter
  // on GEMM `site` of layer l. A = the adapter ParamSet's data.
  void forward(int l, int site, const float* adapters, const float* x, float* out, int N,
               int width);
  // The backward of forward(): with dout (N, width) the gradient of the GEMM's output,
  // dx (N, in) += and dA, dB += (grads = the adapter gradients' data).
  void backward(int l, int site, const float* adapters, float* grads, const float* x,
                const float* dout, float* dx, int N, int width);

 private:
  LoraConfig lora_;
  float scale_ = 0;
  ParamLayout layout_;
  std::shared_ptr<const FrozenBase> base_;
  struct Slot {
    LoraAdapterInfo info;
    size_t off_a = 0, off_b = 0;
  };
  std::vector<Slot> slots_;
  std::vector<std::vector<int>> by_site_;  // [l·4 + site] -> indices into slots_
  size_t rows_ = 0;
  std::vector<float> u_;    // (slots, N, r) A·x of the last forward, per adapter
  std::vector<float> tmp_;  // (N, max out) scratch
  std::vector<float> du_;   // (N, r) scratch
};

}  // namespace atl::algorithms
