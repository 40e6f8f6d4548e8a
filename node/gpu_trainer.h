// The node's device choice (`--device cpu|cuda:N`, `--devices cuda:0,cuda:1`) and its GPU inner
// trainers. Build-independent: with the CUDA backend compiled in, GpuTrainer runs
// algorithms/cuda/cuda_trainer.h, GpuHydraTrainer algorithms/cuda/cuda_hydra.h and
// GpuStudentTrainer algorithms/cuda/cuda_student.h; without it, resolve_devices refuses every GPU
// flag with one line, so `atoll node` stops before joining.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/distill/loss.h"
#include "algorithms/distill/trainer.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "algorithms/model/subnet.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/status.h"

namespace atl::node {

struct DeviceChoice {
  std::vector<int> cuda;  // CUDA device ids, rank order; empty = the CPU
  std::string name;       // "cpu", "cuda:0", "cuda:0,cuda:1" (reported to the coordinator)
  bool gpu() const { return !cuda.empty(); }
};

// Whether this build has the CUDA backend.
bool cuda_built();

// device: the --device value ("cpu" or "cuda:N"); devices: the --devices list ("" if absent).
// A non-empty devices wins over device == "cpu" (the flag's default); other combinations of
// both are refused. Checks the build has CUDA, the machine has every listed device, and NCCL for
// several. Errors are one line saying what is wrong and what to do.
StatusOr<DeviceChoice> resolve_devices(const std::string& device, const std::string& devices);

// A host copy of a GpuTrainer's AdamW state: moments m and v (numel floats each, the model's
// layout) and the step count.
struct GpuOptimizerState {
  algorithms::ParamSet m, v;
  int64_t adam_steps = 0;
};

// The inner step on the GPU(s) of a DeviceChoice, with InnerTrainer::step's contract (host θ in
// and out; AdamW state kept on the devices across calls and rounds).
class GpuTrainer {
 public:
  // Dense and MoE models alike, every precision recipe. One line when the configs are invalid,
  // the build has no CUDA backend, or a device cannot be opened.
  static StatusOr<std::unique_ptr<GpuTrainer>> create(const algorithms::ModelConfig& model,
                                                      const algorithms::TrainerConfig& train,
                                                      const DeviceChoice& devices);
  ~GpuTrainer();
  GpuTrainer(const GpuTrainer&) = delete;
  GpuTrainer& operator=(const GpuTrainer&) = delete;

  StatusOr<algorithms::StepStats> step(algorithms::ParamSet& params, const int32_t* tokens,
                                       int64_t global_step);
  // For a run of consecutive steps: load θ once, step on the device, store θ once (the host
  // copy is stale in between; nothing may read or write it until store()).
  Status load(const algorithms::ParamSet& params);
  StatusOr<algorithms::StepStats> step_device(const int32_t* tokens, int64_t global_step);
  Status store(algorithms::ParamSet& params);

  // The AdamW state copied to the host (rank 0's: the ranks hold the same bits), and put back on
  // every device: a round snapshot (node/round_snapshot.h). Two D2H copies of numel floats to
  // save, two H2D per device to restore.
  StatusOr<GpuOptimizerState> save_optimizer();
  Status restore_optimizer(const GpuOptimizerState& state);

 private:
  GpuTrainer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Hydra's subnetwork step on one GPU, with HydraTrainer's contract (algorithms/hydra/trainer.h):
// host θ in and out, the optimizer state of the trained elements kept across calls.
class GpuHydraTrainer {
 public:
  // One device only: a --devices list is refused with one line.
  static StatusOr<std::unique_ptr<GpuHydraTrainer>> create(const algorithms::ModelConfig& model,
                                                           const algorithms::TrainerConfig& train,
                                                           const DeviceChoice& devices);
  ~GpuHydraTrainer();
  GpuHydraTrainer(const GpuHydraTrainer&) = delete;
  GpuHydraTrainer& operator=(const GpuHydraTrainer&) = delete;

  Status set_subnet(const algorithms::Subnet& s);
  const std::vector<uint32_t>& indices() const;  // held elements, ascending
  uint64_t trained_set_generation() const;
  StatusOr<algorithms::StepStats> step(algorithms::ParamSet& params, const int32_t* tokens,
                                       int64_t global_step);

 private:
  GpuHydraTrainer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The distillation student's step on one GPU, with StudentTrainer's contract
// (algorithms/distill/student.h): host θ in and out, AdamW state kept across calls.
class GpuStudentTrainer {
 public:
  // One device only: a --devices list is refused with one line.
  static StatusOr<std::unique_ptr<GpuStudentTrainer>> create(
      const algorithms::ModelConfig& model, const algorithms::TrainerConfig& train,
      const algorithms::distill::LossConfig& loss, const DeviceChoice& devices);
  ~GpuStudentTrainer();
  GpuStudentTrainer(const GpuStudentTrainer&) = delete;
  GpuStudentTrainer& operator=(const GpuStudentTrainer&) = delete;

  StatusOr<algorithms::distill::DistillStepStats> step(
      algorithms::ParamSet& params, const int32_t* tokens, int64_t global_step,
      algorithms::distill::TeacherLogits<float>* full,
      const algorithms::distill::TopKTargets<float>* topk);

 private:
  GpuStudentTrainer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace atl::node
