#include "algorithms/distill/trainer.h"

#include <algorithm>
#include <string>

#include "algorithms/data/dataset.h"
#include "kernels/core/check.h"
#include "kernels/cpu/ops.h"

namespace atl::algorithms::distill {

namespace ops = atl::kernels::cpu;

Status validate(const ModelConfig& student, const ModelConfig& teacher, const TrainerConfig& train,
                const LossConfig& loss) {
  if (Status s = atl::algorithms::validate(student); !s.ok())
    return InvalidArgument("student: " + s.message());
  if (Status s = atl::algorithms::validate(teacher); !s.ok())
    return InvalidArgument("teacher: " + s.message());
  ATOLL_RETURN_IF_ERROR(atl::algorithms::validate(train, student));
  ATOLL_RETURN_IF_ERROR(validate(loss));
  // The fused loss multiplies the final hidden states by model.embed_tokens.weight.
  if (!student.tie_word_embeddings || !teacher.tie_word_embeddings)
    return InvalidArgument(std::string(!student.tie_word_embeddings ? "student" : "teacher") +
                           ": distillation needs a tied output head (tie_word_embeddings = true); "
                           "this model has a separate lm_head.weight");
  if (student.vocab != teacher.vocab)
    return InvalidArgument("teacher vocab " + std::to_string(teacher.vocab) +
                           " differs from the student's " + std::to_string(student.vocab) +
                           " (distillation needs one tokenizer)");
  if (train.seq > teacher.seq_len)
    return InvalidArgument("seq " + std::to_string(train.seq) + " is longer than the teacher's " +
                           "seq_len " + std::to_string(teacher.seq_len));
  return Status::Ok();
}

DistillTrainer::DistillTrainer(const ModelConfig& student, const ModelConfig& teacher,
                               const TrainerConfig& train, const LossConfig& loss)
    : tcfg_(train),
      student_(student),
      teacher_(teacher),
      grads_(student_.layout()),
      adamw_(student_.layout(), adamw_config(train)),
      loss_(loss) {
  if (Status st = validate(student, teacher, train, loss); !st.ok())
    internal_error("DistillTrainer: " + st.message());
  off_embed_s_ = student_.layout().find("model.embed_tokens.weight")->offset;
  off_embed_t_ = teacher_.layout().find("model.embed_tokens.weight")->offset;
}

void DistillTrainer::split_rows(const int32_t* tokens, int rows) {
  data::split_inputs_targets(tokens, rows, tcfg_.seq, inputs_, targets_);
}

LossStats DistillTrainer::loss_on(const ParamSet& student, const ParamSet& teacher, int rows,
                                  ParamSet* grads) {
  const int T = tcfg_.seq, N = rows * T;
  const ModelConfig& sc = student_.config();
  const ModelConfig& tc = teacher_.config();
  const bool use_teacher = loss_.config().alpha > 0;
  // Teacher first: its hidden states (N, Ct) stay valid in its own buffers while the student
  // runs; its logits are formed tile by tile inside the loss.
  const float* ht =
      use_teacher ? teacher_.forward_hidden(teacher, inputs_.data(), rows, T) : nullptr;
  const float* hs = student_.forward_hidden(student, inputs_.data(), rows, T);
  HeadTeacherLogits<float> head(ht, teacher.data() + off_embed_t_, tc.dim);
  float* dh = nullptr;
  float* dW = nullptr;
  if (grads != nullptr) {
    dh_.resize(static_cast<size_t>(N) * sc.dim);
    ops::zero_fill(dh_.data(), dh_.size());
    dh = dh_.data();
    dW = grads->data() + off_embed_s_;
  }
  StatusOr<LossStats> r = loss_.run(hs, student.data() + off_embed_s_, N, sc.dim, sc.vocab,
                                    targets_.data(), use_teacher ? &head : nullptr, dh, dW);
  // Shapes and targets come from validated configs and the data layer: a programming error.
  if (!r.ok()) internal_error("DistillTrainer: " + r.status().message());
  return *r;
}

DistillStepStats DistillTrainer::step(ParamSet& student, const ParamSet& teacher,
                                      const int32_t* tokens, int64_t global_step) {
  const int B = tcfg_.batch, T = tcfg_.seq;
  split_rows(tokens, B);
  ops::zero_fill(grads_.data(), grads_.numel());
  const LossStats ls = loss_on(student, teacher, B, &grads_);
  // The head's gradient is in grads_ already; now the rest of the student, from dh.
  student_.backward_from_hidden(student, grads_, dh_.data());
  DistillStepStats s;
  s.loss = static_cast<float>(ls.loss);
  s.kl = ls.kl;
  s.ce = ls.ce;
  s.grad_norm = ops::global_norm(grads_.data(), grads_.numel());
  if (tcfg_.grad_clip > 0)
    ops::clip_by_global_norm(grads_.data(), grads_.numel(), s.grad_norm, tcfg_.grad_clip);
  s.lr = ops::lr_schedule(global_step, tcfg_.warmup, tcfg_.total_steps, tcfg_.lr, tcfg_.min_lr);
  adamw_.step(student, grads_, s.lr);
  s.tokens = static_cast<int64_t>(B) * T;
  return s;
}

LossStats DistillTrainer::evaluate(const ParamSet& student, const ParamSet& teacher,
                                   const int32_t* tokens, int rows) {
  const int T = tcfg_.seq;
  LossStats total;
  double kl = 0, ce = 0;
  for (int r0 = 0; r0 < rows; r0 += tcfg_.batch) {
    const int b = std::min(tcfg_.batch, rows - r0);
    split_rows(tokens + static_cast<size_t>(r0) * (T + 1), b);
    const LossStats ls = loss_on(student, teacher, b, nullptr);
    kl += ls.kl * static_cast<double>(ls.rows);
    ce += ls.ce * static_cast<double>(ls.rows);
    total.rows += ls.rows;
  }
  if (total.rows > 0) {
    const double a = loss_.config().alpha, tau = loss_.config().tau;
    total.kl = kl / static_cast<double>(total.rows);
    total.ce = ce / static_cast<double>(total.rows);
    total.loss = a * tau * tau * total.kl + (1.0 - a) * total.ce;
  }
  return total;
}

}  // namespace atl::algorithms::distill
