// Hydra's subnetwork step (algorithms/hydra/trainer.h) with the forward and backward on one GPU.
//
// The CUDA model (llama_cuda.h) has no unit masks; it runs the full model on a device copy of θ
// whose removed units' output weights are zero (algorithms/hydra/removed_units.h: one strided
// memset per block), which is the subnetwork's function and, at the trained elements, its
// gradient. That gradient comes back to the host, where HydraTrainer::step_with_gradient takes
// the held elements: the clip over them, the schedule and the masked AdamW, as on the CPU.
//
// Against the CPU path: the same objective and optimizer, not the same bits (the GEMMs sum over
// all units, zeros included, in the GPU's order), and the FLOPs of the full model (removed units
// and frozen layers are computed; the CPU skips them). Per step θ goes to the device and the
// gradient comes back (one copy of each). fp32, as the CPU subnetwork (Llama::set_subnet); one
// device. Built only with the CUDA backend (target atoll_algorithms_cuda).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/cuda/llama_cuda.h"
#include "algorithms/hydra/removed_units.h"
#include "algorithms/hydra/trainer.h"
#include "algorithms/model/subnet.h"
#include "algorithms/optim/inner_trainer.h"

namespace atl::algorithms::cuda {

class CudaHydraTrainer {
 public:
  // One line when the configs are invalid, the model is MoE (Hydra's units are dense FFN
  // blocks) or the device cannot be opened.
  static StatusOr<std::unique_ptr<CudaHydraTrainer>> create(const ModelConfig& model,
                                                            const TrainerConfig& train, int device);
  ~CudaHydraTrainer();

  // As HydraTrainer::set_subnet (the optimizer restarts when the trained elements change).
  Status set_subnet(const Subnet& s);
  const std::vector<uint32_t>& indices() const { return host_->indices(); }
  uint64_t trained_set_generation() const { return host_->trained_set_generation(); }

  // HydraTrainer::step's contract: tokens (batch, seq + 1); params (host) updated in place at the
  // held elements only.
  StatusOr<StepStats> step(ParamSet& params, const int32_t* tokens, int64_t global_step);

 private:
  CudaHydraTrainer() = default;

  ModelConfig mcfg_;
  TrainerConfig tcfg_;
  std::unique_ptr<kernels::cuda::Context> ctx_;  // first: outlives the model and the buffers
  std::unique_ptr<CudaLlama> model_;
  kernels::cuda::DeviceBuffer<float> params_, grads_;
  std::unique_ptr<hydra::HydraTrainer> host_;  // subnetwork, held-element clip, masked AdamW
  std::vector<hydra::ColumnBlock> removed_;    // output weights of the removed units
  bool have_subnet_ = false;
  ParamSet grads_host_;
  std::vector<int32_t> inputs_, targets_;  // (batch, seq)
};

}  // namespace atl::algorithms::cuda
