// Distillation with the teacher elsewhere: the student's step with teacher targets that arrived
// from outside (shard logits as a TeacherLogits, or top-k targets). Same forward, fused loss,
// backward, clipping, schedule and AdamW as DistillTrainer, which computes its targets from a
// teacher model in the same process; given the same targets both take the same step.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/distill/loss.h"
#include "algorithms/distill/trainer.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "algorithms/optim/adamw.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/status.h"

namespace atl::algorithms::distill {

class StudentTrainer {
 public:
  // validate(model, model, train, loss) must pass (aborts otherwise: validate at load time).
  StudentTrainer(const ModelConfig& model, const TrainerConfig& train, const LossConfig& loss);

  // tokens (batch, seq + 1). Exactly one of full / topk is set when α > 0 (both may be null
  // when α = 0); their rows are the batch's B·T targets in order. Targets that do not fit the
  // batch (shapes, ids) come back as an error and nothing is updated.
  StatusOr<DistillStepStats> step(ParamSet& params, const int32_t* tokens, int64_t global_step,
                                  TeacherLogits<float>* full, const TopKTargets<float>* topk);

  Llama& model() { return model_; }
  const TrainerConfig& config() const { return tcfg_; }
  // The AdamW state (moments, step count), e.g. to save and put back around a round.
  AdamW& optimizer() { return adamw_; }
  const AdamW& optimizer() const { return adamw_; }

 private:
  TrainerConfig tcfg_;
  Llama model_;
  ParamSet grads_;
  AdamW adamw_;
  FusedDistillLoss<float> loss_;
  size_t off_embed_ = 0;
  std::vector<float> dh_;
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace atl::algorithms::distill
