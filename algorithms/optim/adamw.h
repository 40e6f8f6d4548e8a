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

#include "algorithms/model/param_set.h"

namespace atl::algorithms {

struct AdamWConfig {
  // double like PyTorch's Python floats; the update kernel rounds derived factors to fp32 once.
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // decoupled: p -= lr * weight_decay * p (>= 2-D views only)
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
  int64_t step_ = 0;
};

}  // namespace atl::algorithms
