// The Llama model restricted to a subnetwork (algorithms/model/subnet.h): removed heads and FFN
// blocks are not computed at all (their weights are gathered out before each GEMM, their
// attention is not run), frozen layers get no parameter gradients, and the backward pass stops
// at the lowest trained layer. Same op table and same arithmetic per op as Llama (llama.h); with
// every unit kept the forward loss equals Llama::forward bit for bit.
//
// Kept in its own class (not a flag inside Llama) so the full model's code path is untouched.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "algorithms/model/subnet.h"
#include "kernels/core/status.h"

namespace atl::algorithms {

class SubnetLlama {
 public:
  explicit SubnetLlama(const ModelConfig& cfg);  // cfg must pass validate()

  // Must be called before forward; validates the subnet against the config.
  Status set_subnet(const Subnet& s);
  const Subnet& subnet() const { return sub_; }
  const ModelConfig& config() const { return cfg_; }

  // tokens, targets (B, T) as in Llama::forward; returns the mean cross-entropy.
  float forward(const ParamSet& params, const int32_t* tokens, const int32_t* targets, int B,
                int T);
  // ACCUMULATES (+=) the gradient of the last forward's mean loss into grads (full layout) at
  // the trained elements only (trainable_mask); every other element of grads is left as is.
  void backward(const ParamSet& params, ParamSet& grads);

  int64_t num_targets() const { return num_targets_; }
  // FLOPs actually executed by the last forward / backward (GEMMs 2·M·N·K each, attention
  // 4·B·h·T²·D forward and twice that backward, h = heads computed; element-wise ops not counted,
  // as in flops_per_token).
  double last_forward_flops() const { return fwd_flops_; }
  double last_backward_flops() const { return bwd_flops_; }
  // Bytes held for activations, activation gradients and gathered weights (grows only).
  size_t buffer_bytes() const;

 private:
  struct Acts {  // views for one layer (shapes for the current B, T and kept units)
    float *x, *ln1, *rstd1, *qkv, *att, *atty, *h, *ln2, *rstd2, *gu, *swi;
  };
  struct Off {
    size_t ln1, qkv, o, ln2, gu, down;
  };
  void ensure_shape(int B, int T);
  // Gathers layer l's kept rows/columns into wqkv_ (3Dk, C), wo_ (C, Dk), wgu_ (2Fk, C),
  // wd_ (C, Fk).
  void gather(const float* P, int l);
  // Adds the compact gradients dwqkv_ .. dwd_ of layer l into G at their full positions.
  void scatter_add(float* G, int l) const;

  ModelConfig cfg_;
  ParamLayout layout_;
  Subnet sub_;
  std::vector<Off> off_;
  size_t off_embed_ = 0, off_norm_ = 0;
  std::vector<std::vector<int>> heads_, blocks_;  // (L) kept unit ids, ascending
  int lowest_ = -1;                               // lowest trained layer, -1 if none

  int B_ = 0, T_ = 0;
  std::vector<float> acts_, grads_buf_;
  std::vector<Acts> la_;
  float *out_ = nullptr, *lnf_ = nullptr, *rstdf_ = nullptr, *scratch_ = nullptr,
        *logits_ = nullptr, *losses_ = nullptr;
  std::vector<float> wqkv_, wo_, wgu_, wd_, dwqkv_, dwo_, dwgu_, dwd_, dnorm_;
  std::vector<int32_t> tokens_, targets_;
  int64_t num_targets_ = 0;
  double fwd_flops_ = 0, bwd_flops_ = 0;
};

}  // namespace atl::algorithms
