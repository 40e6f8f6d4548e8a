// The inner training step shared by single-site training (`atoll train`) and DiLoCo nodes:
// zero grads -> forward -> backward -> global-norm clip -> scheduled lr -> AdamW.
// The parameters live outside (the caller owns θ: a checkpoint, a DiLoCo round's copy); the
// trainer owns the model's activations, the gradient buffer and the AdamW state, which stays
// with the node across DiLoCo rounds.
#pragma once

#include <cstdint>

#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "algorithms/optim/adamw.h"
#include "kernels/core/status.h"

namespace atl::algorithms {

struct TrainerConfig {
  int batch = 8;               // B, rows per step
  int seq = 256;               // T, tokens per row (each row carries T + 1 tokens)
  double lr = 3e-4;            // peak learning rate
  double min_lr = 3e-5;        // end of the cosine decay
  int64_t warmup = 100;        // linear warmup steps (from 0)
  int64_t total_steps = 1000;  // cosine reaches min_lr here
  double weight_decay = 0.1;   // decoupled, >= 2-D views only (see adamw.h)
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // max global L2 norm; <= 0 disables clipping
  // AdamW everywhere, or Muon for the hidden matrices (adamw.h); muon_momentum is Muon's β.
  InnerOptimizer optimizer = InnerOptimizer::kAdamW;
  double muon_momentum = 0.95;
  // GEMM precision of the training steps (algorithms/model/precision.h); evaluate() always
  // runs the fp32 master weights in fp32. precision_seed keys its random streams.
  Precision precision = Precision::kFp32;
  uint64_t precision_seed = 0;
};

// One line naming the first bad field, or OK. Also checks seq against the model's seq_len.
Status validate(const TrainerConfig& t, const ModelConfig& m);

// The AdamW hyperparameters of a trainer config (shared by every trainer built on AdamW).
AdamWConfig adamw_config(const TrainerConfig& t);

struct StepStats {
  float loss = 0;        // mean cross-entropy of the batch before the update (nats/token)
  double grad_norm = 0;  // global L2 norm before clipping
  double lr = 0;         // learning rate used for this step
  int64_t tokens = 0;    // target tokens in the batch (B·T)
  // MoE models: the router's load balance L_aux and z-loss L_z, each the mean over the MoE
  // layers (unscaled; docs/moe.md): balance 1 = the tokens spread evenly over the experts, E =
  // one expert takes them all. 0 for a dense model.
  double router_balance = 0;
  double router_z = 0;
};

class InnerTrainer {
 public:
  // Both configs must be valid (aborts otherwise: validate at load time).
  InnerTrainer(const ModelConfig& model, const TrainerConfig& train);

  // tokens: (batch, seq + 1) row-major; inputs are each row's first seq tokens, targets its last
  // seq. global_step (0-based) picks the learning rate; AdamW's own step count (bias
  // correction) advances by one per call.
  StepStats step(ParamSet& params, const int32_t* tokens, int64_t global_step);

  // Mean loss over `rows` rows of (seq + 1) tokens, evaluated `batch` rows at a time (the last
  // chunk may be smaller); every target counts equally. Leaves params and optimizer untouched.
  float evaluate(const ParamSet& params, const int32_t* tokens, int rows);

  // Trains LoRA adapters over the frozen `base` from now on (Llama::attach_lora): step() and
  // evaluate() take the adapter ParamSet, and the gradients and AdamW state (reset) have the
  // adapters' layout, so the base has neither.
  void attach_lora(const LoraConfig& lora, std::shared_ptr<const ParamSet> base);
  void attach_lora(const LoraConfig& lora, std::shared_ptr<const FrozenBase> base);

  const TrainerConfig& config() const { return tcfg_; }
  Llama& model() { return model_; }
  AdamW& optimizer() { return adamw_; }
  const AdamW& optimizer() const { return adamw_; }
  // Gradients of the last step, after clipping.
  const ParamSet& grads() const { return grads_; }

 private:
  void split_rows(const int32_t* tokens, int rows);

  TrainerConfig tcfg_;
  Llama model_;
  int moe_layers_ = 0;  // layers whose FFN is an MoE layer (is_moe_layer)
  ParamSet grads_;
  AdamW adamw_;
  std::vector<int32_t> inputs_, targets_;  // (rows, seq)
};

}  // namespace atl::algorithms
