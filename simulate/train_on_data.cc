#include "simulate/train_on_data.h"

#include <cmath>
#include <string>

namespace atl::simulate {

Status train_on_data(algorithms::InnerTrainer& trainer, algorithms::ParamSet& params,
                     const algorithms::data::TokenDataset& train,
                     const TrainOnDataOptions& options) {
  const int B = trainer.config().batch, T = trainer.config().seq;
  if (options.end_step > options.first_step)
    ATOLL_RETURN_IF_ERROR(algorithms::data::check_sampling(train, B, T));
  for (int64_t s = options.first_step; s < options.end_step; ++s) {
    const algorithms::data::GlobalBatch batch =
        algorithms::data::sample_global_batch(train, options.data_seed, s, B, T);
    const algorithms::StepStats stats = trainer.step(params, batch.tokens.data(), s);
    if (!std::isfinite(stats.loss))
      return FailedPrecondition("training diverged: the loss became " + std::to_string(stats.loss) +
                                " at step " + std::to_string(s) + "; lower the learning rate");
    if (options.after_step) ATOLL_RETURN_IF_ERROR(options.after_step({s, &stats, &batch}));
    if (options.stop && options.stop->load())
      return Unavailable("training interrupted after step " + std::to_string(s + 1));
  }
  return Status::Ok();
}

}  // namespace atl::simulate
