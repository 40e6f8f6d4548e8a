// The node's device choice (`--device cpu|cuda:N`, `--devices cuda:0,cuda:1`) and its GPU inner
// trainer. Build-independent: with the CUDA backend compiled in, GpuTrainer runs
// algorithms/cuda/cuda_trainer.h; without it, resolve_devices refuses every GPU flag with one
// line, so `atoll node` stops before joining.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
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

 private:
  GpuTrainer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace atl::node
