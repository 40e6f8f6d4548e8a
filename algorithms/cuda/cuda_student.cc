#include "algorithms/cuda/cuda_student.h"

#include <string>

#include "algorithms/data/dataset.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/devices.h"
#include "kernels/cuda/ops.h"

namespace atl::algorithms::cuda {

namespace kc = atl::kernels::cuda;
namespace ops = atl::kernels::cpu;

CudaStudentTrainer::CudaStudentTrainer(const ModelConfig& model, const TrainerConfig& train,
                                       const distill::LossConfig& loss)
    : mcfg_(model),
      tcfg_(train),
      grads_host_(make_layout(model)),
      trunk_grads_(make_layout(model)),
      adamw_(make_layout(model), adamw_config(train)),
      loss_(loss) {}

CudaStudentTrainer::~CudaStudentTrainer() = default;

StatusOr<std::unique_ptr<CudaStudentTrainer>> CudaStudentTrainer::create(
    const ModelConfig& model, const TrainerConfig& train, const distill::LossConfig& loss,
    int device) {
  ATOLL_RETURN_IF_ERROR(distill::validate(model, model, train, loss));
  auto n = kc::device_count();
  if (!n.ok()) return Unavailable("no CUDA device: " + n.status().message());
  ATOLL_RETURN_IF_ERROR(kc::validate_devices({device}, *n));
  std::unique_ptr<CudaStudentTrainer> t(new CudaStudentTrainer(model, train, loss));
  ATOLL_ASSIGN_OR_RETURN(t->ctx_, kc::Context::create(device));
  ATOLL_RETURN_IF_ERROR(t->ctx_->make_current());
  ATOLL_ASSIGN_OR_RETURN(t->model_, CudaLlama::create(model, *t->ctx_));  // fp32: StudentTrainer's
  const size_t P = t->grads_host_.numel();
  ATOLL_ASSIGN_OR_RETURN(t->params_, kc::DeviceBuffer<float>::alloc(P));
  ATOLL_ASSIGN_OR_RETURN(t->grads_, kc::DeviceBuffer<float>::alloc(P));
  t->off_embed_ = t->grads_host_.layout().find("model.embed_tokens.weight")->offset;
  return t;
}

StatusOr<distill::DistillStepStats> CudaStudentTrainer::step(
    ParamSet& params, const int32_t* tokens, int64_t global_step,
    distill::TeacherLogits<float>* full, const distill::TopKTargets<float>* topk) {
  const int B = tcfg_.batch, T = tcfg_.seq, N = B * T, C = mcfg_.dim, V = mcfg_.vocab;
  if (!(params.layout() == grads_host_.layout()))
    return InvalidArgument("CUDA student: parameter layout does not match the model config");
  if (loss_.config().alpha > 0 && (full == nullptr) == (topk == nullptr))
    return InvalidArgument("student step: exactly one kind of teacher targets is needed");
  data::split_inputs_targets(tokens, B, T, inputs_, targets_);
  if (topk != nullptr) ATOLL_RETURN_IF_ERROR(distill::validate_topk(*topk, N, V));
  kc::Context& ctx = *ctx_;
  const size_t P = params.numel(), NC = size_t(N) * C;

  // The trunk's forward on the device; its hidden states to the host.
  ATOLL_RETURN_IF_ERROR(ctx.make_current());
  ATOLL_RETURN_IF_ERROR(h2d(ctx, params_.data(), params.data(), P * sizeof(float)));
  ATOLL_ASSIGN_OR_RETURN(const float* hs,
                         model_->forward_hidden(params_.data(), inputs_.data(), B, T));
  hs_.resize(NC);
  ATOLL_RETURN_IF_ERROR(d2h(ctx, hs_.data(), hs, NC * sizeof(float)));

  // The fused loss on the host: dh, and the head's gradient of the tied embedding.
  grads_host_.zero();
  dh_.assign(NC, 0.0f);
  float* dW = grads_host_.data() + off_embed_;
  const float* W = params.data() + off_embed_;
  StatusOr<distill::LossStats> r =
      topk != nullptr
          ? loss_.run_topk(hs_.data(), W, N, C, V, targets_.data(), *topk, dh_.data(), dW)
          : loss_.run(hs_.data(), W, N, C, V, targets_.data(), full, dh_.data(), dW);
  if (!r.ok()) return r.status();

  // The trunk's backward on the device from dh; its gradient added to the head's.
  ATOLL_RETURN_IF_ERROR(kc::zero_fill(ctx, grads_.data(), P));
  ATOLL_RETURN_IF_ERROR(model_->backward_from_hidden(params_.data(), grads_.data(), dh_.data()));
  ATOLL_RETURN_IF_ERROR(d2h(ctx, trunk_grads_.data(), grads_.data(), P * sizeof(float)));
  float* g = grads_host_.data();
  const float* tg = trunk_grads_.data();
  for (size_t i = 0; i < P; ++i) g[i] += tg[i];

  distill::DistillStepStats s;
  s.loss = static_cast<float>(r->loss);
  s.kl = r->kl;
  s.ce = r->ce;
  s.grad_norm = ops::global_norm(g, P);
  if (tcfg_.grad_clip > 0) ops::clip_by_global_norm(g, P, s.grad_norm, tcfg_.grad_clip);
  s.lr = ops::lr_schedule(global_step, tcfg_.warmup, tcfg_.total_steps, tcfg_.lr, tcfg_.min_lr);
  adamw_.step(params, grads_host_, s.lr);
  s.tokens = static_cast<int64_t>(N);
  return s;
}

}  // namespace atl::algorithms::cuda
