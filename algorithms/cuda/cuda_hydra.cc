#include "algorithms/cuda/cuda_hydra.h"

#include <string>

#include "algorithms/data/dataset.h"
#include "kernels/cuda/devices.h"
#include "kernels/cuda/ops.h"

namespace atl::algorithms::cuda {

namespace kc = atl::kernels::cuda;

CudaHydraTrainer::~CudaHydraTrainer() = default;

StatusOr<std::unique_ptr<CudaHydraTrainer>> CudaHydraTrainer::create(const ModelConfig& model,
                                                                     const TrainerConfig& train,
                                                                     int device) {
  ATOLL_RETURN_IF_ERROR(validate(model));
  ATOLL_RETURN_IF_ERROR(validate(train, model));
  if (model.moe_experts > 0)
    return InvalidArgument(
        "Hydra trains dense models only (its units are FFN blocks): this "
        "model has " +
        std::to_string(model.moe_experts) + " experts");
  auto n = kc::device_count();
  if (!n.ok()) return Unavailable("no CUDA device: " + n.status().message());
  ATOLL_RETURN_IF_ERROR(kc::validate_devices({device}, *n));
  std::unique_ptr<CudaHydraTrainer> t(new CudaHydraTrainer());
  t->mcfg_ = model;
  t->tcfg_ = train;
  ATOLL_ASSIGN_OR_RETURN(t->ctx_, kc::Context::create(device));
  ATOLL_RETURN_IF_ERROR(t->ctx_->make_current());
  ATOLL_ASSIGN_OR_RETURN(t->model_, CudaLlama::create(model, *t->ctx_));  // fp32, as the CPU
  const ParamLayout layout = make_layout(model);
  ATOLL_ASSIGN_OR_RETURN(t->params_, kc::DeviceBuffer<float>::alloc(layout.numel()));
  ATOLL_ASSIGN_OR_RETURN(t->grads_, kc::DeviceBuffer<float>::alloc(layout.numel()));
  t->host_ = std::make_unique<hydra::HydraTrainer>(model, train);
  t->grads_host_ = ParamSet(layout);
  return t;
}

Status CudaHydraTrainer::set_subnet(const Subnet& s) {
  ATOLL_RETURN_IF_ERROR(host_->set_subnet(s));  // validates s against the model
  removed_ = hydra::removed_output_columns(s, mcfg_);
  have_subnet_ = true;
  return Status::Ok();
}

StatusOr<StepStats> CudaHydraTrainer::step(ParamSet& params, const int32_t* tokens,
                                           int64_t global_step) {
  if (!(params.layout() == grads_host_.layout()))
    return InvalidArgument("CUDA Hydra trainer: parameter layout does not match the model config");
  if (!have_subnet_) return FailedPrecondition("CUDA Hydra trainer: step before set_subnet");
  const int B = tcfg_.batch, T = tcfg_.seq;
  const size_t P = params.numel();
  data::split_inputs_targets(tokens, B, T, inputs_, targets_);
  kc::Context& ctx = *ctx_;
  ATOLL_RETURN_IF_ERROR(ctx.make_current());
  ATOLL_RETURN_IF_ERROR(h2d(ctx, params_.data(), params.data(), P * sizeof(float)));
  for (const hydra::ColumnBlock& z : removed_)
    ATOLL_RETURN_IF_ERROR(
        kc::check_cuda(cudaMemset2DAsync(params_.data() + z.offset, z.pitch * sizeof(float), 0,
                                         z.width * sizeof(float), z.rows, ctx.stream()),
                       "cudaMemset2DAsync (removed units)"));
  ATOLL_RETURN_IF_ERROR(kc::zero_fill(ctx, grads_.data(), P));
  model_->gemm().begin_step(static_cast<uint64_t>(global_step));
  ATOLL_RETURN_IF_ERROR(model_->forward(params_.data(), inputs_.data(), targets_.data(), B, T));
  ATOLL_RETURN_IF_ERROR(model_->backward(params_.data(), grads_.data()));
  ATOLL_ASSIGN_OR_RETURN(const float loss, model_->loss());
  ATOLL_RETURN_IF_ERROR(d2h(ctx, grads_host_.data(), grads_.data(), P * sizeof(float)));
  return host_->step_with_gradient(params, grads_host_, loss, global_step);
}

}  // namespace atl::algorithms::cuda
