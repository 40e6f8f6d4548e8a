// AdamW over a ParamSet (PyTorch torch.optim.AdamW semantics: decoupled weight decay, bias
// correction with a 1-based step count). The moments m and v are ParamSets with the
// parameters' layout, so a checkpoint saves them by name like the parameters.
//
// Weight decay applies only to views with >= 2 dimensions (matrices: embeddings and linear
// weights), never to 1-D views (RMSNorm gains, biases): decaying a gain towards 0 shrinks the
// activations it scales instead of regularizing anything (nanoGPT / llm.c convention). The
// PyTorch reference test builds its parameter groups by the same rule.
#pragma once

#include <cstdint>
#include <vector>

#include <string_view>

#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"
#include "kernels/cpu/ops.h"

namespace atl::algorithms {

// The inner optimizer: AdamW for every view, or (muon) Muon for the hidden layers' matrices and
// AdamW for the rest (kernels/cpu/ops.h, muon_update; the split of Muon's reference: 2-D
// weights of the transformer blocks by Muon, embeddings, head, gains and biases by AdamW).
// A Muon view keeps its momentum in m and leaves v at 0, so checkpoints, round state and
// resumes hold the same tensors for both.
enum class InnerOptimizer : uint8_t { kAdamW, kMuon };
// "adamw" ("" too) or "muon"; anything else is InvalidArgument.
StatusOr<InnerOptimizer> parse_inner_optimizer(std::string_view name);

struct AdamWConfig {
  // double like PyTorch's Python floats; the update kernel rounds derived factors to fp32 once.
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // decoupled: p -= lr * weight_decay * p (>= 2-D views only)
  InnerOptimizer optimizer = InnerOptimizer::kAdamW;
  double muon_momentum = 0.95;  // Muon's β (Nesterov)
};

class AdamW {
 public:
  AdamW() = default;
  AdamW(const ParamLayout& layout, const AdamWConfig& cfg);

  // One update of every parameter with learning rate lr; increments step_count() first, so the
  // first call uses bias-correction step 1. grads and params must have the moments' layout.
  void step(ParamSet& params, const ParamSet& grads, double lr);

  // True if the view gets weight decay (>= 2 dimensions).
  static bool decays(const ParamView& v) { return v.shape.size() >= 2; }
  // True if Muon updates the view when the optimizer is kMuon: a 2-D weight inside a
  // transformer block ("model.layers.*"), not the embedding or the output head.
  static bool muon_view(const ParamView& v);

  const AdamWConfig& config() const { return cfg_; }
  int64_t step_count() const { return step_; }
  // For resuming from a checkpoint (together with m() and v()).
  void set_step_count(int64_t s) { step_ = s; }
  ParamSet& m() { return m_; }
  ParamSet& v() { return v_; }
  const ParamSet& m() const { return m_; }
  const ParamSet& v() const { return v_; }
  // Zero moments and step count (e.g. a fresh inner optimizer).
  void reset();

 private:
  AdamWConfig cfg_;
  ParamSet m_, v_;
  kernels::cpu::MuonScratch muon_scratch_;  // Muon's buffers, reused across steps
  int64_t step_ = 0;
};

}  // namespace atl::algorithms
