// Co-located distillation: teacher and student in one process. One step:
//   teacher forward to its final hidden states (frozen, its own ParamSet, any size with the same
//   vocabulary) -> student forward to its final hidden states -> fused distillation loss with
//   both LM heads, tile by tile (teacher logits tiles come from the teacher's head on the fly;
//   no N×V buffer on either side) -> dh and the head's dW -> rest of the student backward ->
//   global-norm clip -> scheduled lr -> AdamW.
// Same schedule, clipping and optimizer as InnerTrainer (algorithms/optim/inner_trainer.h); with
// α = 0 the step is the InnerTrainer step up to float rounding (the fused loss sums the
// cross-entropy gradient in a different order; tests/algorithms/distill_trainer_test.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/distill/loss.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "algorithms/optim/adamw.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/status.h"

namespace atl::algorithms::distill {

// One line naming the first problem: each config on its own, the vocabularies must match, seq
// must fit the teacher's seq_len.
Status validate(const ModelConfig& student, const ModelConfig& teacher, const TrainerConfig& train,
                const LossConfig& loss);

struct DistillStepStats {
  float loss = 0;  // α·τ²·KL + (1 − α)·CE, mean over the batch's targets, before the update
  double kl = 0;   // mean KL(teacher ‖ student) at temperature τ, nats/token
  double ce = 0;   // mean cross-entropy of the student, nats/token
  double grad_norm = 0;  // global L2 norm before clipping
  double lr = 0;
  int64_t tokens = 0;  // target tokens (B·T)
};

class DistillTrainer {
 public:
  // The configs must pass validate() (aborts otherwise: validate at load time).
  DistillTrainer(const ModelConfig& student, const ModelConfig& teacher, const TrainerConfig& train,
                 const LossConfig& loss);

  // tokens (batch, seq + 1), as InnerTrainer::step. The teacher parameters are only read.
  DistillStepStats step(ParamSet& student, const ParamSet& teacher, const int32_t* tokens,
                        int64_t global_step);

  // Loss statistics over `rows` rows of (seq + 1) tokens, `batch` rows at a time; every target
  // counts equally. No update. (kl is 0 when α = 0: the teacher is not run.)
  LossStats evaluate(const ParamSet& student, const ParamSet& teacher, const int32_t* tokens,
                     int rows);

  const TrainerConfig& config() const { return tcfg_; }
  const LossConfig& loss_config() const { return loss_.config(); }
  Llama& student_model() { return student_; }
  Llama& teacher_model() { return teacher_; }
  AdamW& optimizer() { return adamw_; }
  const AdamW& optimizer() const { return adamw_; }
  // Gradients of the last step, after clipping.
  const ParamSet& grads() const { return grads_; }

 private:
  void split_rows(const int32_t* tokens, int rows);
  // Student and teacher forward to the hidden states, then the fused loss; dh_/dW when grads.
  LossStats loss_on(const ParamSet& student, const ParamSet& teacher, int rows, ParamSet* grads);

  TrainerConfig tcfg_;
  Llama student_, teacher_;
  ParamSet grads_;
  AdamW adamw_;
  FusedDistillLoss<float> loss_;
  size_t off_embed_s_ = 0, off_embed_t_ = 0;  // tied heads inside each ParamSet
  std::vector<float> dh_;                     // (B·T, C) gradient of the student's final hidden
  std::vector<int32_t> inputs_, targets_;     // (rows, seq)
};

}  // namespace atl::algorithms::distill
