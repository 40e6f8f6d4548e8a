// The inner step of a Hydra site: like InnerTrainer (optim/inner_trainer.h) but on a subnetwork
// (the Llama model restricted by Llama::set_subnet, model/subnet.h) with AdamW state for the
// trained elements only (optim/masked_adamw.h).
//   zero grads (held elements) -> forward -> backward -> global-norm clip over the held
//   elements -> scheduled lr -> masked AdamW.
// The optimizer state persists across rounds while the subnetwork stays the same and is reset
// when the coordinator assigns a new one (its elements change).
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "algorithms/model/subnet.h"
#include "algorithms/optim/inner_trainer.h"
#include "algorithms/optim/masked_adamw.h"
#include "kernels/core/status.h"

namespace atl::algorithms::hydra {

class HydraTrainer {
 public:
  HydraTrainer(const ModelConfig& model, const TrainerConfig& train);

  // Sets the subnetwork; resets the optimizer unless the trained elements are the same as the
  // current ones (a change of frozen units only keeps the moments).
  Status set_subnet(const Subnet& s);
  const Subnet& subnet() const { return subnet_; }
  // Held (trained) element indices, ascending.
  const std::vector<uint32_t>& indices() const { return indices_; }
  // Counts the changes of the trained elements (the optimizer restarts at each): state kept per
  // trained element elsewhere (the node's error feedback) is stale when this moved.
  uint64_t trained_set_generation() const { return generation_; }

  // tokens: (batch, seq + 1) rows as in InnerTrainer::step.
  StepStats step(ParamSet& params, const int32_t* tokens, int64_t global_step);

  // The same step with the forward and backward computed elsewhere (the CUDA model,
  // algorithms/cuda/cuda_hydra.h): `grads` (full layout) holds the subnetwork's gradient at the
  // held elements (other elements are not read), `loss` the batch's mean loss. Then, as step():
  // the clip over the held elements, the scheduled lr and the masked AdamW.
  StepStats step_with_gradient(ParamSet& params, const ParamSet& grads, float loss,
                               int64_t global_step);

  // What the steps and set_subnet change: the subnetwork, its trained elements and their
  // masked AdamW state. Saved at the start of a DiLoCo round and put back to redo the round
  // exactly (node/round_snapshot.h); restore_state rebuilds the subnetwork model.
  struct State {
    bool have_subnet = false;
    Subnet subnet;
    std::vector<uint32_t> indices;
    MaskedAdamW opt;
    uint64_t generation = 0;
  };
  State save_state() const;
  Status restore_state(const State& s);
  // A State from its saved parts (a node's round state on disk): the subnetwork (null: none
  // set yet), the trained-set generation and the masked AdamW's step count and moments. The
  // trained elements follow from the subnetwork; InvalidArgument when the moments do not fit.
  StatusOr<State> state_from(const Subnet* subnet, uint64_t generation, int64_t steps,
                             std::vector<float> m, std::vector<float> v) const;

  // The model, restricted to the subnetwork once set_subnet was called.
  Llama& model() { return model_; }
  const TrainerConfig& config() const { return tcfg_; }
  size_t optimizer_state_bytes() const { return opt_.state_bytes(); }
  int64_t optimizer_steps() const { return opt_.step_count(); }  // since the last reset
  // FLOPs of the last step (forward + backward, as counted by the model under the subnetwork).
  double last_step_flops() const {
    return model_.last_forward_flops() + model_.last_backward_flops();
  }

 private:
  // From the gradient in grads_ (held elements): clip, lr, masked AdamW.
  StepStats finish_step(ParamSet& params, float loss, int64_t global_step);

  ModelConfig mcfg_;
  TrainerConfig tcfg_;
  Llama model_;
  Subnet subnet_;  // the model's subnetwork (before set_subnet: every unit, every layer trained)
  ParamSet grads_;
  std::vector<uint32_t> indices_;
  MaskedAdamW opt_;
  bool have_subnet_ = false;
  uint64_t generation_ = 0;
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace atl::algorithms::hydra
