// The distillation student's step (algorithms/distill/student.h) with the model's trunk on one
// GPU: the forward to the final hidden states and the backward from their gradient run on the
// device (CudaLlama::forward_hidden / backward_from_hidden); the fused distillation loss (the
// tied head tiled over rows and vocabulary shards, KL and CE: algorithms/distill/loss.h), the
// global-norm clip and AdamW run on the host, as StudentTrainer runs them.
//
// Per step θ goes to the device, the hidden states (B·T, C) come back, their gradient goes down
// and the trunk's gradient comes back. The head's GEMMs (N·V·C each) stay on the host: with a
// large vocabulary they dominate, and a device version of the fused loss is what would move
// them. Against StudentTrainer: the same objective and optimizer, not the same bits (the trunk
// sums in the GPU's order, and the head's and the trunk's gradients of the tied embedding are
// added in another order). fp32, as StudentTrainer; one device.
// Built only with the CUDA backend (target atoll_algorithms_cuda).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/cuda/llama_cuda.h"
#include "algorithms/distill/loss.h"
#include "algorithms/distill/trainer.h"
#include "algorithms/optim/adamw.h"
#include "algorithms/optim/inner_trainer.h"

namespace atl::algorithms::cuda {

class CudaStudentTrainer {
 public:
  // distill::validate(model, model, train, loss) must pass; one line otherwise, or when the
  // device cannot be opened.
  static StatusOr<std::unique_ptr<CudaStudentTrainer>> create(const ModelConfig& model,
                                                              const TrainerConfig& train,
                                                              const distill::LossConfig& loss,
                                                              int device);
  ~CudaStudentTrainer();

  // StudentTrainer::step's contract: tokens (batch, seq + 1); exactly one of full / topk when
  // α > 0; targets that do not fit the batch are an error and nothing is updated.
  StatusOr<distill::DistillStepStats> step(ParamSet& params, const int32_t* tokens,
                                           int64_t global_step, distill::TeacherLogits<float>* full,
                                           const distill::TopKTargets<float>* topk);

 private:
  CudaStudentTrainer(const ModelConfig& model, const TrainerConfig& train,
                     const distill::LossConfig& loss);

  ModelConfig mcfg_;
  TrainerConfig tcfg_;
  std::unique_ptr<kernels::cuda::Context> ctx_;  // first: outlives the model and the buffers
  std::unique_ptr<CudaLlama> model_;
  kernels::cuda::DeviceBuffer<float> params_, grads_;
  ParamSet grads_host_, trunk_grads_;  // the step's gradient; the trunk's part from the device
  AdamW adamw_;
  distill::FusedDistillLoss<float> loss_;
  size_t off_embed_ = 0;
  std::vector<float> hs_, dh_;             // (B·T, C) hidden states and their gradient
  std::vector<int32_t> inputs_, targets_;  // (batch, seq)
};

}  // namespace atl::algorithms::cuda
