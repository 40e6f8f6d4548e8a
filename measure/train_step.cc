#include "measure/train_step.h"

#include <numeric>
#include <vector>

#include "kernels/core/philox.h"
#include "kernels/cpu/ops.h"
#include "measure/timing.h"

namespace atl::measure {

StatusOr<TrainStepTiming> time_train_steps(const algorithms::ModelConfig& model,
                                           algorithms::TrainerConfig trainer, uint64_t seed,
                                           int threads, int64_t steps) {
  if (steps < 1) return InvalidArgument("the number of timed steps must be at least 1");
  ATOLL_RETURN_IF_ERROR(algorithms::validate(model));
  trainer.total_steps = steps + 2;
  ATOLL_RETURN_IF_ERROR(algorithms::validate(trainer, model));
  kernels::cpu::set_num_threads(threads);

  const int B = trainer.batch, T = trainer.seq;
  std::vector<int32_t> tokens(static_cast<size_t>(B) * (T + 1));
  Philox rng(seed, 7);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>(rng.below(i, static_cast<uint64_t>(model.vocab)));

  algorithms::InnerTrainer tr(model, trainer);
  algorithms::ParamSet params(algorithms::make_layout(model));
  algorithms::init_params(params, model, seed);
  for (int i = 0; i < 2; ++i) (void)tr.step(params, tokens.data(), i);
  std::vector<double> ms(static_cast<size_t>(steps));
  for (int64_t i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    (void)tr.step(params, tokens.data(), i + 2);
    ms[static_cast<size_t>(i)] = seconds_since(t0) * 1e3;
  }
  TrainStepTiming t;
  t.params = params.numel();
  t.threads = kernels::cpu::num_threads();
  t.step_ms_mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
  t.step_ms = median(ms);
  t.tokens_per_s = static_cast<double>(B) * T / (t.step_ms / 1e3);
  t.gflops = algorithms::flops_per_token(model, T) * t.tokens_per_s / 1e9;
  return t;
}

}  // namespace atl::measure
