#include "algorithms/optim/inner_trainer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "algorithms/data/dataset.h"
#include "kernels/core/check.h"
#include "kernels/cpu/ops.h"

namespace atl::algorithms {

AdamWConfig adamw_config(const TrainerConfig& t) {
  AdamWConfig a;
  a.beta1 = t.beta1;
  a.beta2 = t.beta2;
  a.eps = t.eps;
  a.weight_decay = t.weight_decay;
  a.optimizer = t.optimizer;
  a.muon_momentum = t.muon_momentum;
  return a;
}

namespace {

Status check_real(const char* name, double v, double lo, double hi, bool lo_open) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
  if (!ok)
    return InvalidArgument(std::string(name) + " must be in " + (lo_open ? "(" : "[") +
                           std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                           std::to_string(v));
  return Status::Ok();
}

}  // namespace

Status validate(const TrainerConfig& t, const ModelConfig& m) {
  if (t.batch <= 0)
    return InvalidArgument("batch must be positive, got " + std::to_string(t.batch));
  if (t.seq <= 0) return InvalidArgument("seq must be positive, got " + std::to_string(t.seq));
  if (t.seq > m.seq_len)
    return InvalidArgument("seq " + std::to_string(t.seq) + " is longer than the model's seq_len " +
                           std::to_string(m.seq_len));
  ATOLL_RETURN_IF_ERROR(check_batch_shape(m, t.batch, t.seq));
  ATOLL_RETURN_IF_ERROR(check_real("lr", t.lr, 0.0, 1e3, false));
  ATOLL_RETURN_IF_ERROR(check_real("min_lr", t.min_lr, 0.0, 1e3, false));
  if (t.min_lr > t.lr)
    return InvalidArgument("min_lr " + std::to_string(t.min_lr) + " is larger than lr " +
                           std::to_string(t.lr));
  if (t.warmup < 0) return InvalidArgument("warmup must be >= 0, got " + std::to_string(t.warmup));
  if (t.total_steps <= 0)
    return InvalidArgument("total_steps must be positive, got " + std::to_string(t.total_steps));
  ATOLL_RETURN_IF_ERROR(check_real("weight_decay", t.weight_decay, 0.0, 1e3, false));
  ATOLL_RETURN_IF_ERROR(check_real("beta1", t.beta1, 0.0, 1.0, false));
  ATOLL_RETURN_IF_ERROR(check_real("beta2", t.beta2, 0.0, 1.0, false));
  if (t.beta1 >= 1.0 || t.beta2 >= 1.0) return InvalidArgument("beta1 and beta2 must be < 1");
  ATOLL_RETURN_IF_ERROR(check_real("eps", t.eps, 0.0, 1.0, true));
  if (!(t.muon_momentum >= 0.0 && t.muon_momentum < 1.0))
    return InvalidArgument("muon_momentum must be in [0, 1), got " + std::to_string(t.muon_momentum));
  if (!std::isfinite(t.grad_clip))
    return InvalidArgument("grad_clip must be finite (<= 0 disables clipping)");
  return Status::Ok();
}

InnerTrainer::InnerTrainer(const ModelConfig& model, const TrainerConfig& train)
    : tcfg_(train),
      model_(model),
      grads_(model_.layout()),
      adamw_(model_.layout(), adamw_config(train)) {
  Status st = validate(train, model);
  if (!st.ok()) internal_error("InnerTrainer: " + st.message());
  model_.set_precision(train.precision, train.precision_seed);
  for (int l = 0; l < model.layers; ++l) moe_layers_ += is_moe_layer(model, l);
}

void InnerTrainer::attach_lora(const LoraConfig& lora, std::shared_ptr<const ParamSet> base) {
  attach_lora(lora, FrozenBase::make(lora.base_storage, std::move(base)));
}

void InnerTrainer::attach_lora(const LoraConfig& lora, std::shared_ptr<const FrozenBase> base) {
  model_.attach_lora(lora, std::move(base));
  grads_ = ParamSet(model_.layout());
  adamw_ = AdamW(model_.layout(), adamw_config(tcfg_));
}

void InnerTrainer::split_rows(const int32_t* tokens, int rows) {
  data::split_inputs_targets(tokens, rows, tcfg_.seq, inputs_, targets_);
}

StepStats InnerTrainer::step(ParamSet& params, const int32_t* tokens, int64_t global_step) {
  namespace ops = kernels::cpu;
  const int B = tcfg_.batch, T = tcfg_.seq;
  split_rows(tokens, B);
  ops::zero_fill(grads_.data(), grads_.numel());
  StepStats s;
  model_.gemm().begin_step(static_cast<uint64_t>(global_step));
  s.loss = model_.forward(params, inputs_.data(), targets_.data(), B, T);
  if (moe_layers_ > 0) {
    s.router_balance = model_.balance_loss_sum() / moe_layers_;
    s.router_z = model_.z_loss_sum() / moe_layers_;
  }
  model_.backward(params, grads_);
  s.grad_norm = ops::global_norm(grads_.data(), grads_.numel());
  if (tcfg_.grad_clip > 0)
    ops::clip_by_global_norm(grads_.data(), grads_.numel(), s.grad_norm, tcfg_.grad_clip);
  s.lr = ops::lr_schedule(global_step, tcfg_.warmup, tcfg_.total_steps, tcfg_.lr, tcfg_.min_lr);
  adamw_.step(params, grads_, s.lr);
  s.tokens = static_cast<int64_t>(B) * T;
  return s;
}

float InnerTrainer::evaluate(const ParamSet& params, const int32_t* tokens, int rows) {
  const int T = tcfg_.seq;
  double sum = 0.0;
  int64_t count = 0;
  model_.gemm().set_enabled(false);  // the fp32 master weights, in fp32
  for (int r0 = 0; r0 < rows; r0 += tcfg_.batch) {
    const int b = std::min(tcfg_.batch, rows - r0);
    split_rows(tokens + static_cast<size_t>(r0) * (T + 1), b);
    model_.forward(params, inputs_.data(), targets_.data(), b, T);
    const float* l = model_.losses();  // (b, T), 0 where the target is ignored
    for (size_t i = 0; i < static_cast<size_t>(b) * T; ++i) sum += l[i];
    count += model_.num_targets();
  }
  model_.gemm().set_enabled(true);
  return count ? static_cast<float>(sum / static_cast<double>(count)) : 0.0f;
}

}  // namespace atl::algorithms
