// Training one model on one dataset for a range of steps: the loop `atoll train`-like callers
// share (the Hydra demo's base model, a single-site baseline). Step s trains on the global batch
// algorithms::data::sample_global_batch(train, data_seed, s, B, T), B and T from the trainer's
// config, with one InnerTrainer step at global step s; so steps [a, b) then [b, c) give the same
// θ, bit for bit, as [a, c) with the same trainer.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "algorithms/data/dataset.h"
#include "algorithms/model/param_set.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/status.h"

namespace atl::simulate {

// What a caller sees after each step (for progress lines, evaluations, checkpoints).
struct TrainedStep {
  int64_t step = 0;  // the 0-based global step just taken
  const algorithms::StepStats* stats = nullptr;
  const algorithms::data::GlobalBatch* batch = nullptr;  // (B, T + 1) tokens it trained on
};

struct TrainOnDataOptions {
  uint64_t data_seed = 0;  // keys the batches (sample_global_batch's seed)
  int64_t first_step = 0;  // global step to start at (a resumed run's next step)
  int64_t end_step = 0;    // one past the last step; end_step <= first_step trains nothing
  // After every step; a non-OK status stops training and is returned as is.
  std::function<Status(const TrainedStep&)> after_step;
  const std::atomic<bool>* stop = nullptr;  // checked after every step: UNAVAILABLE when set
};

// Trains `params` in place with `trainer` (its optimizer state carries over between calls).
// INVALID_ARGUMENT when `train` cannot serve (B, T + 1) windows; FAILED_PRECONDITION naming the
// step when the loss stops being finite (the learning rate is too high for this model).
Status train_on_data(algorithms::InnerTrainer& trainer, algorithms::ParamSet& params,
                     const algorithms::data::TokenDataset& train,
                     const TrainOnDataOptions& options);

}  // namespace atl::simulate
