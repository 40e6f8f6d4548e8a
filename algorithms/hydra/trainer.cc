#include "algorithms/hydra/trainer.h"

#include <cmath>

#include "algorithms/data/dataset.h"
#include "kernels/core/check.h"
#include "kernels/cpu/ops.h"

namespace atl::algorithms::hydra {

HydraTrainer::HydraTrainer(const ModelConfig& model, const TrainerConfig& train)
    : mcfg_(model),
      tcfg_(train),
      model_(model),
      subnet_(full_subnet(model, 1, true)),
      grads_(make_layout(model)) {
  Status st = validate(train, model);
  if (!st.ok()) internal_error("HydraTrainer: " + st.message());
}

Status HydraTrainer::set_subnet(const Subnet& s) {
  if (have_subnet_ && to_string(s) == to_string(subnet_) && s.ffn_blocks == subnet_.ffn_blocks)
    return Status::Ok();
  ATOLL_RETURN_IF_ERROR(model_.set_subnet(s));
  subnet_ = s;
  std::vector<uint32_t> idx = trainable_indices(s, mcfg_);
  // Only frozen units changed (kept or removed forward-only units): the AdamW moments belong to
  // the trained elements, which are the same, so they stay valid. A re-selection that moves a
  // small site's frozen units every round would otherwise restart its optimizer every round.
  if (have_subnet_ && idx == indices_) return Status::Ok();
  indices_ = std::move(idx);
  ++generation_;
  opt_ = MaskedAdamW(grads_.layout(), indices_, adamw_config(tcfg_));
  grads_.zero();
  have_subnet_ = true;
  return Status::Ok();
}

HydraTrainer::State HydraTrainer::save_state() const {
  State s;
  s.have_subnet = have_subnet_;
  if (have_subnet_) s.subnet = subnet_;
  s.indices = indices_;
  s.opt = opt_;
  s.generation = generation_;
  return s;
}

StatusOr<HydraTrainer::State> HydraTrainer::state_from(const Subnet* subnet, uint64_t generation,
                                                       int64_t steps, std::vector<float> m,
                                                       std::vector<float> v) const {
  State s;
  s.generation = generation;
  if (subnet) {
    s.have_subnet = true;
    s.subnet = *subnet;
    s.indices = trainable_indices(*subnet, mcfg_);
    s.opt = MaskedAdamW(grads_.layout(), s.indices, adamw_config(tcfg_));
  }
  ATOLL_RETURN_IF_ERROR(s.opt.set_moments(steps, std::move(m), std::move(v)));
  return s;
}

Status HydraTrainer::restore_state(const State& s) {
  if (s.have_subnet) {
    ATOLL_RETURN_IF_ERROR(model_.set_subnet(s.subnet));
    subnet_ = s.subnet;
  }
  have_subnet_ = s.have_subnet;
  indices_ = s.indices;
  opt_ = s.opt;
  generation_ = s.generation;
  return Status::Ok();
}

StepStats HydraTrainer::step(ParamSet& params, const int32_t* tokens, int64_t global_step) {
  if (!have_subnet_) internal_error("HydraTrainer::step before set_subnet");
  const int B = tcfg_.batch, T = tcfg_.seq;
  data::split_inputs_targets(tokens, B, T, inputs_, targets_);
  float* g = grads_.data();
  for (uint32_t i : indices_) g[i] = 0.0f;  // only held elements are ever written
  const float loss = model_.forward(params, inputs_.data(), targets_.data(), B, T);
  model_.backward(params, grads_);
  return finish_step(params, loss, global_step);
}

StepStats HydraTrainer::step_with_gradient(ParamSet& params, const ParamSet& grads, float loss,
                                           int64_t global_step) {
  if (!have_subnet_ || !(grads.layout() == grads_.layout()))
    internal_error("HydraTrainer::step_with_gradient before set_subnet or with another layout");
  float* g = grads_.data();
  for (uint32_t i : indices_) g[i] = grads.data()[i];
  return finish_step(params, loss, global_step);
}

StepStats HydraTrainer::finish_step(ParamSet& params, float loss, int64_t global_step) {
  namespace ops = kernels::cpu;
  float* g = grads_.data();
  StepStats s;
  s.loss = loss;
  double sq = 0.0;  // in index order: deterministic
  for (uint32_t i : indices_) sq += static_cast<double>(g[i]) * g[i];
  s.grad_norm = std::sqrt(sq);
  if (tcfg_.grad_clip > 0 && s.grad_norm > tcfg_.grad_clip) {
    const float scale = static_cast<float>(tcfg_.grad_clip / (s.grad_norm + 1e-6));
    for (uint32_t i : indices_) g[i] *= scale;
  }
  s.lr = ops::lr_schedule(global_step, tcfg_.warmup, tcfg_.total_steps, tcfg_.lr, tcfg_.min_lr);
  opt_.step(params, grads_, s.lr);
  s.tokens = static_cast<int64_t>(tcfg_.batch) * tcfg_.seq;
  return s;
}

}  // namespace atl::algorithms::hydra
