// The speed of one inner training step (AdamW on the CPU model) on synthetic tokens: what
// `atoll bench train` reports.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/model/llama.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/status.h"

namespace atl::measure {

struct TrainStepTiming {
  size_t params = 0;
  int threads = 0;             // kernel threads the steps ran on
  double step_ms = 0;          // median step (a burst of other work moves the mean, not it)
  double step_ms_mean = 0;
  double tokens_per_s = 0;     // batch·seq / median step
  double gflops = 0;           // flops_per_token · tokens_per_s
};

// Times `steps` steps (after 2 untimed warm-up steps) of an InnerTrainer over `model` initialized
// from `seed`, on batch × (seq + 1) tokens drawn uniformly from the vocabulary (a step's speed
// does not depend on the text), with `threads` kernel threads (0 = all cores). The trainer's
// total_steps is set to steps + 2. InvalidArgument (one line) for a config that cannot train.
StatusOr<TrainStepTiming> time_train_steps(const algorithms::ModelConfig& model,
                                           algorithms::TrainerConfig trainer, uint64_t seed,
                                           int threads, int64_t steps);

}  // namespace atl::measure
