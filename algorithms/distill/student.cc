#include "algorithms/distill/student.h"

#include <algorithm>

#include "algorithms/data/dataset.h"
#include "kernels/core/check.h"
#include "kernels/cpu/ops.h"

namespace atl::algorithms::distill {

namespace ops = atl::kernels::cpu;

StudentTrainer::StudentTrainer(const ModelConfig& model, const TrainerConfig& train,
                               const LossConfig& loss)
    : tcfg_(train),
      model_(model),
      grads_(model_.layout()),
      adamw_(model_.layout(), adamw_config(train)),
      loss_(loss) {
  if (Status st = validate(model, model, train, loss); !st.ok())
    internal_error("StudentTrainer: " + st.message());
  off_embed_ = model_.layout().find("model.embed_tokens.weight")->offset;
}

StatusOr<DistillStepStats> StudentTrainer::step(ParamSet& params, const int32_t* tokens,
                                                int64_t global_step, TeacherLogits<float>* full,
                                                const TopKTargets<float>* topk) {
  const int B = tcfg_.batch, T = tcfg_.seq, N = B * T;
  const ModelConfig& mc = model_.config();
  if (loss_.config().alpha > 0 && (full == nullptr) == (topk == nullptr))
    return InvalidArgument("student step: exactly one kind of teacher targets is needed");
  data::split_inputs_targets(tokens, B, T, inputs_, targets_);
  if (topk != nullptr) ATOLL_RETURN_IF_ERROR(validate_topk(*topk, N, mc.vocab));
  ops::zero_fill(grads_.data(), grads_.numel());
  const float* hs = model_.forward_hidden(params, inputs_.data(), B, T);
  dh_.resize(static_cast<size_t>(N) * mc.dim);
  ops::zero_fill(dh_.data(), dh_.size());
  float* dW = grads_.data() + off_embed_;
  const float* W = params.data() + off_embed_;
  StatusOr<LossStats> r =
      topk != nullptr
          ? loss_.run_topk(hs, W, N, mc.dim, mc.vocab, targets_.data(), *topk, dh_.data(), dW)
          : loss_.run(hs, W, N, mc.dim, mc.vocab, targets_.data(), full, dh_.data(), dW);
  if (!r.ok()) return r.status();
  model_.backward_from_hidden(params, grads_, dh_.data());
  DistillStepStats s;
  s.loss = static_cast<float>(r->loss);
  s.kl = r->kl;
  s.ce = r->ce;
  s.grad_norm = ops::global_norm(grads_.data(), grads_.numel());
  if (tcfg_.grad_clip > 0)
    ops::clip_by_global_norm(grads_.data(), grads_.numel(), s.grad_norm, tcfg_.grad_clip);
  s.lr = ops::lr_schedule(global_step, tcfg_.warmup, tcfg_.total_steps, tcfg_.lr, tcfg_.min_lr);
  adamw_.step(params, grads_, s.lr);
  s.tokens = static_cast<int64_t>(N);
  return s;
}

}  // namespace atl::algorithms::distill
