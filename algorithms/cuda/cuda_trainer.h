// The inner training step of algorithms/optim/inner_trainer.h on one or several GPUs of one
// node: zero grads -> forward -> backward -> (all-reduce) -> global-norm clip -> scheduled lr ->
// AdamW, with the CPU trainer's hyperparameters (adamw_config), its learning-rate schedule
// (kernels::cpu::lr_schedule, the same function) and its AdamW grouping (weight decay on
// >= 2-D views only, AdamW::decays).
//
// Parameters, gradients and the AdamW moments live on every device as flat fp32 buffers with
// the ParamSet layout, so θ moves between host and device in one copy.
//
// Several devices (`--devices cuda:0,cuda:1`) train as one worker: the batch's rows are split
// into contiguous blocks (data::rows_for_worker, rank order), each rank differentiates
// Σ its losses / (targets of the whole batch), an NCCL all-reduce sums the gradients, and every
// rank then runs the same clip and AdamW on the same bits, so the replicas stay identical.
// The result equals one device's step on the whole batch up to summation order.
//
// Dense and MoE models (llama_cuda.h), every precision recipe (the trainer config's precision
// and precision_seed, steps keyed by global_step as InnerTrainer's). On several devices, MoE
// router losses are each rank's own, weighted by its share of the rows, and the recipes'
// per-tensor scales and stochastic rounding are each rank's over its rows (docs/cuda.md).
// Built only with the CUDA backend (target atoll_algorithms_cuda).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/cuda/llama_cuda.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/cuda/nccl_group.h"

namespace atl::algorithms::cuda {

// OK when the CUDA path can run this model and trainer config; else one line.
Status check_supported(const ModelConfig& model, const TrainerConfig& train);

class CudaTrainer {
 public:
  // devices: CUDA device ids, rank r = devices[r] (as parsed from --devices). One device uses a
  // plain Context; several an NcclGroup. Fails with one line when a device is missing, the batch
  // has fewer rows than devices, or the config is unsupported.
  static StatusOr<std::unique_ptr<CudaTrainer>> create(const ModelConfig& model,
                                                       const TrainerConfig& train,
                                                       const std::vector<int>& devices);
  ~CudaTrainer();

  // Same contract as InnerTrainer::step: params (host) are read, updated and written back.
  // Costs one H2D copy of θ to every device and one D2H copy from rank 0 besides the step.
  StatusOr<StepStats> step(ParamSet& params, const int32_t* tokens, int64_t global_step);

  // The pieces of step(), for callers that keep θ on the device across steps:
  Status load_params(const ParamSet& params);           // θ to every device
  Status store_params(ParamSet& params, int rank = 0);  // θ of `rank` to the host
  // tokens: host (batch, seq + 1) rows, as InnerTrainer::step.
  StatusOr<StepStats> step_device(const int32_t* tokens, int64_t global_step);

  // Gradients of the last step after all-reduce and clipping (rank `rank`) to the host.
  Status download_grads(ParamSet& grads, int rank = 0);
  // AdamW moments of rank 0 to the host (checkpoints, tests, a node's round snapshot).
  Status download_moments(ParamSet& m, ParamSet& v);
  // Host moments to every rank and the AdamW step count: a round snapshot put back
  // (node/round_snapshot.h), so a redone round starts from the state the first attempt did.
  Status upload_moments(const ParamSet& m, const ParamSet& v, int64_t adam_steps);

  int num_devices() const { return static_cast<int>(ranks_.size()); }
  int64_t adam_steps() const { return adam_step_; }
  const TrainerConfig& config() const { return tcfg_; }
  const ParamLayout& layout() const { return layout_; }
  // Resets the AdamW moments and step count (a fresh inner optimizer).
  Status reset_optimizer();

 private:
  struct Rank {
    kernels::cuda::Context* ctx = nullptr;
    std::unique_ptr<CudaLlama> model;
    kernels::cuda::DeviceBuffer<float> params, grads, m, v;
  };
  struct DecayGroup {
    size_t begin, end;
    bool decay;
  };
  CudaTrainer() = default;

  ModelConfig mcfg_;
  TrainerConfig tcfg_;
  ParamLayout layout_;
  std::vector<DecayGroup> groups_;
  std::unique_ptr<kernels::cuda::Context> single_;   // one device
  std::unique_ptr<kernels::cuda::NcclGroup> group_;  // several devices
  std::vector<Rank> ranks_;
  int64_t adam_step_ = 0;
  std::vector<int32_t> inputs_, targets_;  // (batch, seq)
};

}  // namespace atl::algorithms::cuda
